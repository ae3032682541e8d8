// Test-only 1:2 mixed kernels for the cross-core rules (twin/crosscore.h): a cube core computes one 16 x 32 int32
// tile and hands it to its two vector cores `kTiles` times through a two-slot GM ring, each vector core copying its
// 8 rows of every tile to the output. Usage: crosscore <case>. Prints "OK" and exits 0 when the launch succeeds
// (and every output tile is the product), prints the twin's error and exits 1 when it fails. Lines marked
// "@case:<name>" are where each violation must be reported.
//
// A data race is seen only when it happens; the bad cases make it happen deterministically with a host-side
// atomic between the cores (test scaffolding, not a kernel idiom): the late access runs after the early one in
// real time, and only the missing cross-core flag is wrong.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernel_operator.h"
#include "twin/runtime.h"
#include "twin/timing.h"

using namespace AscendC;

namespace {

constexpr uint32_t kM = 16, kK = 64, kN = 32, kTile = kM * kN, kSlots = 2, kTiles = 4;
constexpr uint16_t kFull = 0, kFree = 1;  // flag ids: cube -> vector "tile in slot", vector -> cube "slot free"

enum class Case {
    Good, ReadBeforeFlag, SetOnWrongPipe, WriteBeforeFree, FlagIdRange, WaitUnmatched, WaitTimeout, Counter,
    GoodCounter, Mode0, NotMixed, SetNeverWaited
};
Case gCase = Case::Good;
constexpr uint32_t kAiCores = 2;  // the "twin" platform's two AI cores
// The broken cases' hand-offs outside the flags, per AI core: a cube core meets only its own vector cores (shared
// counters let one AI core's vector cores release another's cube, and the case broke another rule than its own).
std::atomic<int> gWritten[kAiCores], gRead[kAiCores];

// Waits until `done` (false: the launch was aborted, another core broke a rule first, which the launch reports),
// bounded like the twin's own waits and yielding the CPU: a broken case must end by a rule, never hang or starve
// the vector cores it waits for.
template <typename Done>
bool WaitUntil(Done done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done()) {
        if (cam::twin::LaunchAbortedNow()) return false;
        if (std::chrono::steady_clock::now() > deadline) {
            std::printf("crosscore test: a case's hand-off outside the flags never came\n");
            std::exit(3);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return true;
}

uint32_t AiCore() { return static_cast<uint32_t>(GetBlockIdx() / GetTaskRation()); }

// The cube's tile: C = A . B into L0C, once; Fixpipe writes it to a slot per hand-off.
struct CubeTile {
    TPipe pipe;
    TQue<TPosition::A1, 1> a1;
    TQue<TPosition::B1, 1> b1;
    TQue<TPosition::A2, 1> a2;
    TQue<TPosition::B2, 1> b2;
    TQue<TPosition::CO1, 1> co1;
    LocalTensor<int32_t> c;

    void Compute(GM_ADDR a, GM_ADDR b) {
        pipe.InitBuffer(a1, 1, kM * kK);
        pipe.InitBuffer(b1, 1, kK * kN);
        pipe.InitBuffer(a2, 1, kM * kK);
        pipe.InitBuffer(b2, 1, kK * kN);
        pipe.InitBuffer(co1, 1, kTile * 4);
        GlobalTensor<int8_t> ga, gb;
        ga.SetGlobalBuffer(reinterpret_cast<int8_t*>(a), kM * kK);
        gb.SetGlobalBuffer(reinterpret_cast<int8_t*>(b), kK * kN);
        LocalTensor<int8_t> ta = a1.AllocTensor<int8_t>();
        Nd2NzParams nd;
        nd.nValue = kM;
        nd.dValue = kK;
        nd.srcDValue = kK;
        nd.dstNzC0Stride = kM;
        DataCopy(ta, ga, nd);
        a1.EnQue(ta);
        LocalTensor<int8_t> tb = b1.AllocTensor<int8_t>();
        DataCopyParams burst;
        burst.blockLen = kK;
        DataCopy(tb, gb, burst);
        b1.EnQue(tb);
        ta = a1.DeQue<int8_t>();
        LocalTensor<int8_t> la = a2.AllocTensor<int8_t>();
        LoadData2DParams ld;
        ld.repeatTimes = kK / 32;
        ld.srcStride = kM / 16;
        LoadData(la, ta, ld);
        a2.EnQue(la);
        a1.FreeTensor(ta);
        tb = b1.DeQue<int8_t>();
        LocalTensor<int8_t> lb = b2.AllocTensor<int8_t>();
        LoadData2dTransposeParams lt;
        lt.repeatTimes = kK / 32;
        lt.srcStride = 1;
        lt.dstGap = kN / 16 - 1;
        LoadDataWithTranspose(lb, tb, lt);
        b2.EnQue(lb);
        b1.FreeTensor(tb);
        la = a2.DeQue<int8_t>();
        lb = b2.DeQue<int8_t>();
        c = co1.AllocTensor<int32_t>();
        MmadParams mm;
        mm.m = kM;
        mm.n = kN;
        mm.k = kK;
        mm.cmatrixInitVal = true;
        Mmad(c, la, lb, mm);
        a2.FreeTensor(la);
        b2.FreeTensor(lb);
        co1.EnQue(c);
        c = co1.DeQue<int32_t>();
    }

    void Store(const GlobalTensor<int32_t>& slot) {
        FixpipeParamsV220 fp;
        fp.nSize = kN;
        fp.mSize = kM;
        fp.srcStride = kM;
        fp.dstStride = kN;
        Fixpipe<int32_t, int32_t, CFG_ROW_MAJOR>(slot, c, fp);  // @case:write_before_free
    }

    void Release() { co1.FreeTensor(c); }
};

void Cube(GM_ADDR a, GM_ADDR b, const GlobalTensor<int32_t>& ring) {
    CubeTile tile;
    tile.Compute(a, b);
    switch (gCase) {
        case Case::FlagIdRange:
            CrossCoreSetFlag<2, PIPE_FIX>(11);  // @case:flag_id_range
            break;
        case Case::WaitUnmatched:
            break;  // sets nothing: the vector cores' wait can never pass
        case Case::WaitTimeout:
            CrossCoreWaitFlag<2, PIPE_FIX>(kFree);  // the vector cores wait for the cube first: neither moves
            break;
        case Case::Counter: case Case::GoodCounter: {
            const int sets = gCase == Case::Counter ? 17 : 16;
            for (int i = 0; i < sets; ++i) CrossCoreSetFlag<2, PIPE_FIX>(kFull);  // @case:counter
            break;
        }
        case Case::Mode0:
            CrossCoreSetFlag<0, PIPE_FIX>(kFull);  // @case:mode0
            break;
        case Case::WriteBeforeFree:
            tile.Store(ring);
            CrossCoreSetFlag<2, PIPE_FIX>(kFull);
            // Refused inside Store: the Fixpipe is the write.
            if (WaitUntil([] { return gRead[GetBlockIdx()].load() >= 2; })) tile.Store(ring);
            break;
        default:
            for (uint32_t t = 0; t < kTiles; ++t) {
                if (t >= kSlots) CrossCoreWaitFlag<2, PIPE_FIX>(kFree);  // slot t % 2 read by both vector cores
                tile.Store(ring[(t % kSlots) * kTile]);
                if (gCase == Case::ReadBeforeFlag && t == 0) {
                    gWritten[GetBlockIdx()].store(1);
                    continue;  // its set comes only with the next tile's
                }
                if (gCase == Case::SetOnWrongPipe && t == 0) {
                    CrossCoreSetFlag<2, PIPE_MTE2>(kFull);  // MTE2 does not wait for the Fixpipe write
                    gWritten[GetBlockIdx()].store(1);
                    continue;
                }
                CrossCoreSetFlag<2, PIPE_FIX>(kFull);
            }
            if (gCase == Case::ReadBeforeFlag || gCase == Case::SetOnWrongPipe) CrossCoreSetFlag<2, PIPE_FIX>(kFull);
            // The last two slots' frees: every set is waited for before the kernel ends.
            if (gCase != Case::SetNeverWaited)
                for (uint32_t t = kTiles; t < kTiles + kSlots; ++t) CrossCoreWaitFlag<2, PIPE_FIX>(kFree);
    }
    tile.Release();
}

void Vector(const GlobalTensor<int32_t>& ring, const GlobalTensor<int32_t>& out) {
    const uint32_t v = static_cast<uint32_t>(GetBlockIdx() % GetTaskRation());
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    TQue<TPosition::VECOUT, 1> o;
    pipe.InitBuffer(in, 1, kTile / 2 * 4);
    pipe.InitBuffer(o, 1, kTile / 2 * 4);
    switch (gCase) {
        case Case::FlagIdRange: case Case::Mode0: case Case::Counter:
            return;
        case Case::GoodCounter:
            for (int i = 0; i < 16; ++i) CrossCoreWaitFlag<2, PIPE_MTE2>(kFull);
            return;
        case Case::WaitUnmatched:
            CrossCoreWaitFlag<2, PIPE_MTE2>(3);  // @case:wait_unmatched
            return;
        case Case::WaitTimeout:
            CrossCoreWaitFlag<2, PIPE_MTE2>(kFull);  // @case:wait_timeout
            return;
        default:
            break;
    }
    const uint32_t tiles = gCase == Case::WriteBeforeFree ? 1 : kTiles;
    for (uint32_t t = 0; t < tiles; ++t) {
        const bool skipWait = (gCase == Case::ReadBeforeFlag || gCase == Case::SetOnWrongPipe) && t == 0;
        if (skipWait) {
            if (!WaitUntil([] { return gWritten[AiCore()].load() != 0; })) return;
        } else {
            CrossCoreWaitFlag<2, PIPE_MTE2>(kFull);
        }
        LocalTensor<int32_t> x = in.AllocTensor<int32_t>();
        DataCopy(x, ring[(t % kSlots) * kTile + v * kTile / 2], kTile / 2);  // @case:read_before_flag @case:set_on_wrong_pipe
        in.EnQue(x);
        x = in.DeQue<int32_t>();
        if (gCase == Case::WriteBeforeFree) {
            gRead[AiCore()].fetch_add(1);
        } else {
            CrossCoreSetFlag<2, PIPE_MTE2>(kFree);  // the slot's bytes are in UB: the cube may overwrite them
        }
        LocalTensor<int32_t> y = o.AllocTensor<int32_t>();
        Muls(y, x, int32_t(1), kTile / 2);
        in.FreeTensor(x);
        o.EnQue(y);
        y = o.DeQue<int32_t>();
        DataCopy(out[(GetBlockIdx() / 2 * kTiles + t) * kTile + v * kTile / 2], y, kTile / 2);
        o.FreeTensor(y);
    }
}

void Kernel(GM_ADDR a, GM_ADDR b, GM_ADDR ws, GM_ADDR out) {
    KERNEL_TASK_TYPE_DEFAULT(gCase == Case::NotMixed ? KERNEL_TYPE_AIC_ONLY : KERNEL_TYPE_MIX_AIC_1_2);
    if (gCase == Case::NotMixed) {
        CrossCoreSetFlag<2, PIPE_FIX>(kFull);  // @case:not_mixed
        return;
    }
    GlobalTensor<int32_t> ring, o;
    const uint32_t group = static_cast<uint32_t>(ASCEND_IS_AIC ? GetBlockIdx() : GetBlockIdx() / GetTaskRation());
    ring.SetGlobalBuffer(reinterpret_cast<int32_t*>(ws) + group * kSlots * kTile, kSlots * kTile);
    o.SetGlobalBuffer(reinterpret_cast<int32_t*>(out), uint64_t(GetBlockNum()) * kTiles * kTile);
    if (ASCEND_IS_AIC) {
        Cube(a, b, ring);
    } else {
        Vector(ring, o);
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: crosscore <case> [timing]\n");
        return 2;
    }
    const std::string name = argv[1];
    const struct {
        const char* name;
        Case c;
    } cases[] = {{"good_mixed", Case::Good},         {"read_before_flag", Case::ReadBeforeFlag},
                 {"set_on_wrong_pipe", Case::SetOnWrongPipe}, {"write_before_free", Case::WriteBeforeFree},
                 {"flag_id_range", Case::FlagIdRange}, {"wait_unmatched", Case::WaitUnmatched},
                 {"wait_timeout", Case::WaitTimeout},  {"counter", Case::Counter},
                 {"good_counter", Case::GoodCounter},  {"mode0", Case::Mode0},
                 {"not_mixed", Case::NotMixed}, {"set_never_waited", Case::SetNeverWaited}};
    bool found = false;
    for (const auto& c : cases)
        if (name == c.name) {
            gCase = c.c;
            found = true;
        }
    if (!found) {
        std::fprintf(stderr, "unknown case %s\n", name.c_str());
        return 2;
    }
    const bool timing = argc > 2 && std::strcmp(argv[2], "timing") == 0;
    if (timing) cam::twin::SetTimingEnabled(true);
    constexpr uint32_t kBlocks = kAiCores;
    std::vector<int8_t> a(kM * kK), b(kK * kN);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int8_t>((i * 37 + 11) % 255 - 127);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int8_t>((i * 53 + 5) % 255 - 127);
    std::vector<int32_t> ws(kBlocks * kSlots * kTile, 0), out(kBlocks * kTiles * kTile, 0);
    try {
        cam::twin::RunLaunch(name.c_str(), kBlocks, [&] {
            Kernel(reinterpret_cast<GM_ADDR>(a.data()), reinterpret_cast<GM_ADDR>(b.data()),
                   reinterpret_cast<GM_ADDR>(ws.data()), reinterpret_cast<GM_ADDR>(out.data()));
        });
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return 1;
    }
    if (gCase == Case::Good) {
        for (uint32_t g = 0; g < kBlocks; ++g)
            for (uint32_t t = 0; t < kTiles; ++t)
                for (uint32_t m = 0; m < kM; ++m)
                    for (uint32_t n = 0; n < kN; ++n) {
                        int32_t want = 0;  // B is NZ with one 32-column block: (k, n) at k * 32 + n
                        for (uint32_t k = 0; k < kK; ++k) want += int32_t(a[m * kK + k]) * int32_t(b[k * 32 + n]);
                        if (out[((g * kTiles + t) * kM + m) * kN + n] != want) {
                            std::printf("wrong tile %u of AI core %u at (%u, %u)\n", t, g, m, n);
                            return 3;
                        }
                    }
    }
    if (timing) {
        // The model's view: the vector cores' waits on the cube's flags, and the span of the cube's and vector
        // cores' busy time.
        for (const auto& c : cam::twin::TakeLaunchCosts()) {
            if (c.device != "a3" || c.l2 != "lo") continue;
            double aiv = 0, aic = 0;
            for (const auto& [what, s] : c.stalls) {
                if (what == "CrossCoreWaitFlag<AIV>") aiv = s;
                if (what == "CrossCoreWaitFlag<AIC>") aic = s;
            }
            std::printf("cores %u cube %u seconds %.9g aiv_wait %.9g aic_wait %.9g\n", c.blockDim, c.cubeBlocks,
                        c.seconds, aiv, aic);
        }
    }
    std::printf("OK\n");
    return 0;
}
