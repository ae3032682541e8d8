// Test-only kernels for rule gm-unordered-access (twin/gm_race.h): one core writes a GM block (kRows rows of fp32)
// that another core of the same launch reads, with or without a synchronization between them.
// Usage: gm_race <case> <order>, order "write_first" or "read_first": a host-side atomic (test scaffolding, not a
// kernel idiom) makes the write land before the read in real time, or after it, so a case is run in both orders
// of the host threads. Prints "OK" and exits 0 when the launch succeeds and the reader saw the writer's rows
// (controls), prints the twin's error and exits 1 when it fails. "@write" / "@read" mark the two accesses.
//
// Cases (mixed: a 1:2 mixed launch of two AI cores; aiv: a vector launch of two blocks):
//   vec_race      mixed: vector core 0 writes, vector core 1 reads, nothing between (the refused race)
//   vec_syncall   mixed: the same with SyncAll<false> between
//   vec_flag      mixed: the same with a mode-1 cross-core flag (both vector cores set, then wait)
//   cube_flag     mixed: the vector cores write, set a mode-2 flag; the cube core waits for it, then reads
//   cube_flag_early  mixed: the vector cores set the flag before they write (refused)
//   aiv_word      aiv: block 0 writes, then an 8-byte ready word by MTE; block 1 polls the word, then reads
//   aiv_word_early   aiv: block 0 writes the ready word before the rows (refused)
//   aiv_scalar_word  aiv: the ready word is a scalar store + clean; block 1 loads it after an invalidate
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/common/spin.h"
#include "kernel_operator.h"
#include "twin/runtime.h"

using namespace AscendC;

namespace {

constexpr uint32_t kRows = 4, kCols = 64, kElems = kRows * kCols;  // 1 KiB of fp32
constexpr uint32_t kAiCores = 2;
constexpr float kValue = 3.5f;
constexpr int64_t kReady = 7;

enum class Case { VecRace, VecSyncAll, VecFlag, CubeFlag, CubeFlagEarly, AivWord, AivWordEarly, AivScalarWord };
Case gCase = Case::VecRace;
bool gWriteFirst = true;
// Per AI core (mixed) or for the launch (aiv): the write has run / the read has run, in real time.
std::atomic<int> gWrote[kAiCores], gRead[kAiCores];
std::atomic<int> gBad{0};

bool Mixed() { return gCase <= Case::CubeFlagEarly; }
bool Racy() { return gCase == Case::VecRace || gCase == Case::CubeFlagEarly || gCase == Case::AivWordEarly; }

// Bounded, yielding: a racy case's forced order must never hang (the other core may have been stopped by a rule).
void HostWait(std::atomic<int>& flag) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (flag.load() == 0) {
        if (cam::twin::LaunchAbortedNow()) return;
        if (std::chrono::steady_clock::now() > deadline) {
            std::printf("gm_race test: the forced order never came\n");
            std::exit(3);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
}

// The race's order in real time: in a racy case the late access first waits for the early one.
void BeforeWrite(uint32_t g) {
    if (Racy() && !gWriteFirst) HostWait(gRead[g]);
}
void AfterWrite(uint32_t g) { gWrote[g].store(1); }
void BeforeRead(uint32_t g) {
    if (Racy() && gWriteFirst) HostWait(gWrote[g]);
}
void AfterRead(uint32_t g) { gRead[g].store(1); }

void WriteRows(TPipe& pipe, const GlobalTensor<float>& buf) {
    TQue<TPosition::VECOUT, 1> o;
    pipe.InitBuffer(o, 1, kElems * sizeof(float));
    LocalTensor<float> y = o.AllocTensor<float>();
    Duplicate(y, kValue, kElems);
    o.EnQue(y);
    y = o.DeQue<float>();
    DataCopy(buf, y, kElems);  // @write
    o.FreeTensor(y);
}

void ReadRows(TPipe& pipe, const GlobalTensor<float>& buf) {
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, kElems * sizeof(float));
    LocalTensor<float> x = in.AllocTensor<float>();
    DataCopy(x, buf, kElems);  // @read
    in.EnQue(x);
    x = in.DeQue<float>();
    if (!Racy())
        for (uint32_t i = 0; i < kElems; ++i)
            if (x.GetValue(i) != kValue) gBad.store(1);
    in.FreeTensor(x);
}

// The cube core's read of the rows into L1.
void CubeReadRows(GM_ADDR rows) {
    TPipe pipe;
    TQue<TPosition::B1, 1> b1;
    pipe.InitBuffer(b1, 1, kElems * sizeof(float));
    GlobalTensor<int8_t> g;
    g.SetGlobalBuffer(reinterpret_cast<int8_t*>(rows), kElems * sizeof(float));
    LocalTensor<int8_t> t = b1.AllocTensor<int8_t>();
    DataCopyParams burst;
    burst.blockCount = kRows;
    burst.blockLen = kCols * sizeof(float) / 32;
    DataCopy(t, g, burst);  // @read
    b1.EnQue(t);
    t = b1.DeQue<int8_t>();
    b1.FreeTensor(t);
}

void MixedKernel(GM_ADDR ws) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    const uint32_t g = static_cast<uint32_t>(ASCEND_IS_AIC ? GetBlockIdx() : GetBlockIdx() / GetTaskRation());
    GM_ADDR mine = ws + g * 2 * kElems * sizeof(float);  // two row blocks per AI core (one per vector core)
    if (gCase == Case::CubeFlag || gCase == Case::CubeFlagEarly) {
        if (ASCEND_IS_AIC) {
            CrossCoreWaitFlag<2, PIPE_MTE2>(0);
            BeforeRead(g);
            CubeReadRows(mine);
            AfterRead(g);
            return;
        }
        const uint32_t v = static_cast<uint32_t>(GetBlockIdx() % GetTaskRation());
        GlobalTensor<float> rows;
        rows.SetGlobalBuffer(reinterpret_cast<float*>(mine) + v * kElems / 2, kElems / 2);
        if (gCase == Case::CubeFlagEarly) CrossCoreSetFlag<2, PIPE_MTE3>(0);
        // Each vector core writes half the rows; vector core 1's half is the one the forced order follows.
        if (v == 1) BeforeWrite(g);
        TPipe pipe;
        TQue<TPosition::VECOUT, 1> o;
        pipe.InitBuffer(o, 1, kElems / 2 * sizeof(float));
        LocalTensor<float> y = o.AllocTensor<float>();
        Duplicate(y, kValue, kElems / 2);
        o.EnQue(y);
        y = o.DeQue<float>();
        DataCopy(rows, y, kElems / 2);  // @write
        o.FreeTensor(y);
        if (v == 1) AfterWrite(g);
        if (gCase == Case::CubeFlag) CrossCoreSetFlag<2, PIPE_MTE3>(0);
        return;
    }
    if (ASCEND_IS_AIC) {
        if (gCase == Case::VecSyncAll) SyncAll<false>();
        return;
    }
    const uint32_t v = static_cast<uint32_t>(GetBlockIdx() % GetTaskRation());
    GlobalTensor<float> rows;
    rows.SetGlobalBuffer(reinterpret_cast<float*>(mine), kElems);
    TPipe pipe;
    if (v == 0) {
        BeforeWrite(g);
        WriteRows(pipe, rows);
        AfterWrite(g);
    }
    if (gCase == Case::VecSyncAll) SyncAll<false>();
    if (gCase == Case::VecFlag) {
        CrossCoreSetFlag<1, PIPE_MTE3>(0);
        CrossCoreWaitFlag<1, PIPE_MTE2>(0);
    }
    if (v == 1) {
        BeforeRead(g);
        ReadRows(pipe, rows);
        AfterRead(g);
    }
}

// The ready word by MTE, as the data plane's SignalPort moves it.
void SendWord(GM_ADDR word, LocalTensor<int64_t>& ub) {
    ub.SetValue(0, kReady);
    SetFlag<HardEvent::S_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::S_MTE3>(EVENT_ID0);
    GlobalTensor<int64_t> w;
    w.SetGlobalBuffer(reinterpret_cast<int64_t*>(word), 1);
    DataCopyPad(w, ub, {1, 8, 0, 0, 0});
}

int64_t PollWord(GM_ADDR word, LocalTensor<int64_t>& ub) {
    if (gCase == Case::AivScalarWord) {
        GlobalTensor<int64_t> w;
        w.SetGlobalBuffer(reinterpret_cast<int64_t*>(word), 1);
        DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(w);
        return w.GetValue(0);
    }
    GlobalTensor<int64_t> w;
    w.SetGlobalBuffer(reinterpret_cast<int64_t*>(word), 1);
    DataCopyPad(ub, w, {1, 8, 0, 0, 0}, {false, 0, 0, 0});
    SetFlag<HardEvent::MTE2_S>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_S>(EVENT_ID0);
    return ub.GetValue(0);
}

void AivKernel(GM_ADDR ws) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    GM_ADDR word = ws;  // a 64-byte line of its own, then the rows
    GlobalTensor<float> rows;
    rows.SetGlobalBuffer(reinterpret_cast<float*>(ws + 64), kElems);
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 32);
    LocalTensor<int64_t> ub = buf.Get<int64_t>();
    if (GetBlockIdx() == 0) {
        if (gCase == Case::AivWordEarly) SendWord(word, ub);
        BeforeWrite(0);
        WriteRows(pipe, rows);
        AfterWrite(0);
        if (gCase == Case::AivWord) {
            PipeBarrier<PIPE_ALL>();  // the rows have left before the word does
            SendWord(word, ub);
        } else if (gCase == Case::AivScalarWord) {
            PipeBarrier<PIPE_ALL>();
            GlobalTensor<int64_t> w;
            w.SetGlobalBuffer(reinterpret_cast<int64_t*>(word), 1);
            w.SetValue(0, kReady);
            DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(w);
            DataSyncBarrier<MemDsbT::ALL>();
        }
        return;
    }
    const int64_t deadline = GetSystemCycle() + 10 * int64_t(cam::twin::ActivePlatform().systemCycleHz);
    for (uint32_t i = 0;; ++i) {
        if (PollWord(word, ub) == kReady) break;
        if (GetSystemCycle() > deadline) {
            gBad.store(2);
            return;
        }
        cam::kernels::WaitPause(word, i);
    }
    PipeBarrier<PIPE_ALL>();
    BeforeRead(0);
    ReadRows(pipe, rows);
    AfterRead(0);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: gm_race <case> write_first|read_first\n");
        return 2;
    }
    const std::string name = argv[1];
    const struct {
        const char* name;
        Case c;
    } cases[] = {{"vec_race", Case::VecRace},         {"vec_syncall", Case::VecSyncAll},
                 {"vec_flag", Case::VecFlag},         {"cube_flag", Case::CubeFlag},
                 {"cube_flag_early", Case::CubeFlagEarly}, {"aiv_word", Case::AivWord},
                 {"aiv_word_early", Case::AivWordEarly},   {"aiv_scalar_word", Case::AivScalarWord}};
    bool found = false;
    for (const auto& c : cases)
        if (name == c.name) {
            gCase = c.c;
            found = true;
        }
    if (!found || (std::strcmp(argv[2], "write_first") != 0 && std::strcmp(argv[2], "read_first") != 0)) {
        std::fprintf(stderr, "unknown case or order: %s %s\n", argv[1], argv[2]);
        return 2;
    }
    gWriteFirst = std::strcmp(argv[2], "write_first") == 0;
    std::vector<float> ws((64 + 2 * kAiCores * kElems * sizeof(float)) / sizeof(float), 0.0f);
    try {
        const cam::twin::LaunchSchedule batch{.batchMode = true};
        if (Mixed()) {
            cam::twin::RunLaunch(name.c_str(), kAiCores, [&] { MixedKernel(reinterpret_cast<GM_ADDR>(ws.data())); },
                                 nullptr, batch);
        } else {
            cam::twin::RunLaunch(name.c_str(), 2, [&] { AivKernel(reinterpret_cast<GM_ADDR>(ws.data())); }, nullptr,
                                 batch);
        }
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return 1;
    }
    if (gBad.load() != 0) {
        std::printf("the reader did not see the writer's rows (%d)\n", gBad.load());
        return 3;
    }
    std::printf("OK\n");
    return 0;
}
