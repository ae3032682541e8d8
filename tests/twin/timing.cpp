// The timing model's closed-form checks (docs/twin.md, "Timing model"). Usage: timing <case>; prints "OK" and exits 0
// when the model's prediction equals the closed-form answer computed here from the constants table (or, for the
// comparisons, when the order holds), prints both numbers and exits 1 otherwise.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "kernel_operator.h"
#include "kernels/common/spin.h"
#include "twin/launch.h"
#include "twin/runtime.h"
#include "twin/timing.h"

using namespace AscendC;
using cam::twin::TimingConstant;

namespace {

const char* gDevice = "a3";
double K(const char* name) { return TimingConstant(name, gDevice); }

// Runs the kernel as one launch with timing on; returns the A3 (L2 low end) prediction in cycles, launch cost
// excluded, and the whole cost in *out.
template <typename F>
double Cycles(uint32_t blockDim, F kernel, cam::twin::LaunchCost* out = nullptr,
              const cam::twin::LaunchWindows* windows = nullptr) {
    cam::twin::SetTimingEnabled(true);
    cam::twin::TakeLaunchCosts();
    cam::twin::RunLaunch("timing_case", blockDim, kernel, windows, {.batchMode = true});  // cases meet at SyncAll
    for (const auto& c : cam::twin::TakeLaunchCosts()) {
        if (c.device == gDevice && c.l2 == "lo") {
            if (out) *out = c;
            return (c.seconds - K("launch_seconds")) * K("core_clock_hz");
        }
    }
    std::printf("no cost recorded\n");
    std::exit(1);
}

int Check(double got, double want, double rel) {
    if (std::fabs(got - want) <= rel * want) {
        std::printf("OK\n");
        return 0;
    }
    std::printf("predicted %.3f cycles, closed form %.3f\n", got, want);
    return 1;
}

std::vector<uint8_t> gGm(64u << 20);

// n copies GM -> UB of `bytes` each from consecutive addresses: issue, then n * (latency + bytes / bandwidth).
int Mte2Stream(uint64_t bytes, int n) {
    const double got = Cycles(1, [&] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf;
        pipe.InitBuffer(buf, uint32_t(bytes));
        LocalTensor<uint8_t> t = buf.Get<uint8_t>();
        GlobalTensor<uint8_t> g;
        g.SetGlobalBuffer(gGm.data(), gGm.size());
        for (int i = 0; i < n; ++i) DataCopy(t, g[uint64_t(i) * bytes], uint32_t(bytes));
    });
    const double each = K("mte_latency_cycles") + double(bytes) / K("mte2_bytes_per_cycle");
    return Check(got, K("scalar_issue_cycles") + n * each, 1e-9);
}

// n Adds over `elems` floats: issue, then n * (startup + repeats).
int VectorLoop(uint32_t elems, int n) {
    const double got = Cycles(1, [&] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf;
        pipe.InitBuffer(buf, elems * 4);
        LocalTensor<float> t = buf.Get<float>();
        for (int i = 0; i < n; ++i) Adds(t, t, 1.0f, elems);
    });
    const double repeats = std::ceil(elems * 4.0 / K("vector_bytes_per_repeat"));
    const double each = K("vector_startup_cycles") + repeats * K("vector_cycles_per_repeat");
    return Check(got, K("scalar_issue_cycles") + n * each, 1e-9);
}

// n int8 Mmads of m x n x k: issue, then n * (startup + m n k / MACs per cycle).
int CubeLoop(int count) {
    constexpr uint16_t M = 128, N = 128, KK = 128;
    const double got = Cycles(1, [&] {
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
        TPipe pipe;
        TQue<TPosition::A2, 1> a2;
        TQue<TPosition::B2, 1> b2;
        TQue<TPosition::CO1, 1> co1;
        pipe.InitBuffer(a2, 1, M * KK);
        pipe.InitBuffer(b2, 1, KK * N);
        pipe.InitBuffer(co1, 1, M * N * 4);
        LocalTensor<int8_t> la = a2.AllocTensor<int8_t>();
        LocalTensor<int8_t> lb = b2.AllocTensor<int8_t>();
        LocalTensor<int32_t> lc = co1.AllocTensor<int32_t>();
        MmadParams mm;
        mm.m = M;
        mm.n = N;
        mm.k = KK;
        for (int i = 0; i < count; ++i) Mmad(lc, la, lb, mm);
        a2.FreeTensor(la);
        b2.FreeTensor(lb);
        co1.FreeTensor(lc);
    });
    const double each = K("cube_startup_cycles") + double(M) * N * KK / K("cube_int8_macs_per_cycle");
    return Check(got, K("scalar_issue_cycles") + count * each, 1e-9);
}

// The same loop with int4 x int4 Mmads: charged at the int4 rate, half the cycles of int8's for the same m, n, k.
int CubeLoopInt4(int count) {
    constexpr uint16_t M = 128, N = 128, KK = 128;
    const double got = Cycles(1, [&] {
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
        TPipe pipe;
        TQue<TPosition::A2, 1> a2;
        TQue<TPosition::B2, 1> b2;
        TQue<TPosition::CO1, 1> co1;
        pipe.InitBuffer(a2, 1, M * KK / 2);
        pipe.InitBuffer(b2, 1, KK * N / 2);
        pipe.InitBuffer(co1, 1, M * N * 4);
        LocalTensor<int4b_t> la = a2.AllocTensor<int4b_t>();
        LocalTensor<int4b_t> lb = b2.AllocTensor<int4b_t>();
        LocalTensor<int32_t> lc = co1.AllocTensor<int32_t>();
        MmadParams mm;
        mm.m = M;
        mm.n = N;
        mm.k = KK;
        for (int i = 0; i < count; ++i) Mmad(lc, la, lb, mm);
        a2.FreeTensor(la);
        b2.FreeTensor(lb);
        co1.FreeTensor(lc);
    });
    const double each = K("cube_startup_cycles") + double(M) * N * KK / K("cube_int4_macs_per_cycle");
    if (!(K("cube_int4_macs_per_cycle") == 2 * K("cube_int8_macs_per_cycle")))
        return std::printf("int4 rate is not twice int8's\n"), 1;
    return Check(got, K("scalar_issue_cycles") + count * each, 1e-9);
}

// A VECIN queue of `buffers` buffers: copy in, hand to V, one Adds, free. With two buffers the copy of tile i+1
// runs under the Adds of tile i; with one, AllocTensor waits for the Adds' FreeTensor.
double QueueLoop(int buffers, uint32_t bytes, int n, int vectorOps) {
    return Cycles(1, [&] {
        TPipe pipe;
        TQue<TPosition::VECIN, 2> in;
        pipe.InitBuffer(in, buffers, bytes);
        GlobalTensor<float> g;
        g.SetGlobalBuffer(reinterpret_cast<float*>(gGm.data()), gGm.size() / 4);
        for (int i = 0; i < n; ++i) {
            LocalTensor<float> t = in.AllocTensor<float>();
            DataCopy(t, g[uint64_t(i) * bytes / 4], bytes / 4);
            in.EnQue(t);
            t = in.DeQue<float>();
            for (int v = 0; v < vectorOps; ++v) Adds(t, t, 1.0f, bytes / 4);
            in.FreeTensor(t);
        }
    });
}

int QueueCase(int buffers) {
    constexpr uint32_t kBytes = 16384;
    constexpr int kN = 32, kOps = 4;
    const double got = QueueLoop(buffers, kBytes, kN, kOps);
    const double mte = K("mte_latency_cycles") + kBytes / K("mte2_bytes_per_cycle");
    const double v = kOps * (K("vector_startup_cycles") +
                             std::ceil(kBytes / K("vector_bytes_per_repeat")) * K("vector_cycles_per_repeat"));
    const double issue = K("scalar_issue_cycles");
    // Depth 1: every tile's copy waits for the previous tile's Adds: n (mte + v). Two buffers: the copies run back
    // to back while the Adds follow, the slower pipe sets the pace: mte + n max(mte, v) + ... exactly, with the
    // first copy issued one issue slot in and each Adds after its copy.
    const double want = buffers == 1 ? issue + kN * (mte + v)
                                     : issue + (v > mte ? mte + kN * v : kN * mte + v);
    return Check(got, want, 0.01);
}

// Two pipes, MTE2 and V, over two UB tiles: `overlap` gives each tile its own event id so the copy of the next
// tile waits only for the Adds that used the same tile; otherwise one tile, so each copy waits for the last Adds.
double FlagPair(bool overlap) {
    return Cycles(1, [&] {
        constexpr uint32_t kBytes = 16384;
        constexpr int kN = 32;
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf;
        pipe.InitBuffer(buf, 2 * kBytes);
        LocalTensor<float> all = buf.Get<float>();
        GlobalTensor<float> g;
        g.SetGlobalBuffer(reinterpret_cast<float*>(gGm.data()), gGm.size() / 4);
        const int tiles = overlap ? 2 : 1;
        for (int i = 0; i < kN; ++i) {
            const int s = i % tiles;
            LocalTensor<float> t = all[s * kBytes / 4];
            if (i >= tiles) WaitFlag<HardEvent::V_MTE2>(s);
            DataCopy(t, g[uint64_t(i) * kBytes / 4], kBytes / 4);
            SetFlag<HardEvent::MTE2_V>(s);
            WaitFlag<HardEvent::MTE2_V>(s);
            for (int v = 0; v < 4; ++v) Adds(t, t, 1.0f, kBytes / 4);
            SetFlag<HardEvent::V_MTE2>(s);
        }
        for (int s = 0; s < tiles; ++s) WaitFlag<HardEvent::V_MTE2>(s);
    });
}

// Block 1 does `extra` more Adds before a SyncAll; both then do one: the launch ends at the later block's arrival
// plus the SyncAll plus one Adds.
int SyncAllJoin() {
    constexpr uint32_t kElems = 4096;
    constexpr int kExtra = 50;
    cam::twin::LaunchCost cost;
    const double got = Cycles(2, [&] {
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf;
        pipe.InitBuffer(buf, kElems * 4);
        LocalTensor<float> t = buf.Get<float>();
        Adds(t, t, 1.0f, kElems);
        if (GetBlockIdx() == 1)
            for (int i = 0; i < kExtra; ++i) Adds(t, t, 1.0f, kElems);
        SyncAll();
        Adds(t, t, 1.0f, kElems);
    }, &cost);
    const double add = K("vector_startup_cycles") + kElems * 4 / K("vector_bytes_per_repeat");
    const double issue = K("scalar_issue_cycles");
    const double want = issue + (1 + kExtra) * add + K("syncall_cycles") + issue + add;
    if (cost.stalls.count("SyncAll") == 0) {
        std::printf("no SyncAll stall recorded for the early block\n");
        return 1;
    }
    return Check(got, want, 1e-9);
}

// Block 0 polls a GM word that block 1 sets `delayMs` of host time after block 0's first poll failed (a bounded
// wait's shape: clean, load, pause). How often the twin's thread re-polled depends on the host's CPUs, not on the
// device: the prediction must be the same whatever the delay, and the wait counted.
double PollCase(int delayMs, uint64_t* waits) {
    alignas(64) static int64_t word[8];
    static std::atomic<bool> firstPollFailed;
    word[0] = 0;
    firstPollFailed = false;
    cam::twin::LaunchCost cost;
    const double cycles = Cycles(2, [&] {
        GlobalTensor<int64_t> g;
        g.SetGlobalBuffer(word, 8);
        if (GetBlockIdx() == 1) {
            while (!firstPollFailed.load()) std::this_thread::yield();
            std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
            g.SetValue(0, 1);
            DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(g);
            return;
        }
        for (uint32_t i = 0;; ++i) {
            DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(g);
            if (g.GetValue(0) != 0) break;
            firstPollFailed = true;
            cam::kernels::WaitPause(word, 8, i);
        }
    }, &cost);
    *waits = cost.peerWaits;
    return cycles;
}

int PollRepeats() {
    uint64_t waitsShort = 0, waitsLong = 0;
    const double late = PollCase(40, &waitsLong);
    const double early = PollCase(1, &waitsShort);
    if (waitsLong != 1 || waitsShort != 1) {
        std::printf("waits counted: %llu and %llu, want 1 each\n", (unsigned long long)waitsLong,
                    (unsigned long long)waitsShort);
        return 1;
    }
    return Check(late, early, 1e-12);
}

// 8 blocks each copy 32 tiles of 32 KiB out of UB into a window: into a peer's, the rank's link carries all of it
// (8 MiB over link_bytes_per_s_rank, longer than any core's copies); into its own, each core's MTE3 sets the pace
// (the die's HBM would take less).
int PeerCopy(bool peer) {
    constexpr uint32_t kTile = 32768, kTiles = 32, kBlocks = 8;
    static std::vector<uint8_t> own(kBlocks * kTiles * kTile), other(kBlocks * kTiles * kTile);
    cam::twin::LaunchWindows w;
    w.windows = {{reinterpret_cast<uintptr_t>(own.data()), own.size()},
                 {reinterpret_cast<uintptr_t>(other.data()), other.size()}};
    w.own = 0;
    uint8_t* dst = peer ? other.data() : own.data();
    const double got = Cycles(kBlocks, [&] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf;
        pipe.InitBuffer(buf, kTile);
        LocalTensor<uint8_t> t = buf.Get<uint8_t>();
        GlobalTensor<uint8_t> g;
        g.SetGlobalBuffer(dst + uint64_t(GetBlockIdx()) * kTiles * kTile, uint64_t(kTiles) * kTile);
        for (uint32_t i = 0; i < kTiles; ++i) DataCopy(g[uint64_t(i) * kTile], t, kTile);
    }, nullptr, &w);
    const double bytes = double(kBlocks) * kTiles * kTile;
    const double core = K("scalar_issue_cycles") + kTiles * (K("mte_latency_cycles") + kTile / K("mte3_bytes_per_cycle"));
    const double link = bytes / K("link_bytes_per_s_rank") * K("core_clock_hz");
    if (!(link > core && bytes / K("hbm_bytes_per_s_die") * K("core_clock_hz") < core)) {
        std::printf("case no longer separates link, HBM and core (link %.0f, core %.0f cycles)\n", link, core);
        return 1;
    }
    // Into a peer: the link starts carrying with the first copy (issued after one scalar issue) and is busy from
    // then on.
    return Check(got, peer ? K("scalar_issue_cycles") + link : core, 1e-9);
}

// Time through GM words: block 1 runs n Adds, lets the scalar unit wait for them and publishes a signal word by an
// 8-byte MTE3 copy (the data plane's SignalPort shape); block 0 polls the word by MTE2 until it is set. The poll
// that saw the value completes at the write's landing (the copy's end) plus the poll latency, then the scalar unit
// reads the UB word: the launch ends there, whatever block 0's own polls cost and however the host scheduled them.
int PollWaitsOnLaterWrite() {
    constexpr uint32_t kElems = 4096;
    constexpr int kAdds = 200;
    alignas(64) static int64_t word[8];
    word[0] = 0;
    const double got = Cycles(2, [&] {
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf, sig;
        pipe.InitBuffer(buf, kElems * 4);
        pipe.InitBuffer(sig, 32);
        LocalTensor<int64_t> w = sig.Get<int64_t>();
        GlobalTensor<int64_t> g;
        g.SetGlobalBuffer(word, 8);
        if (GetBlockIdx() == 1) {
            LocalTensor<float> t = buf.Get<float>();
            for (int i = 0; i < kAdds; ++i) Adds(t, t, 1.0f, kElems);
            SetFlag<HardEvent::V_S>(0);
            WaitFlag<HardEvent::V_S>(0);
            w.SetValue(0, 1);
            SetFlag<HardEvent::S_MTE3>(0);
            WaitFlag<HardEvent::S_MTE3>(0);
            DataCopyPad(g, w, DataCopyExtParams{1, 8, 0, 0, 0});
            return;
        }
        for (uint32_t i = 0;; ++i) {
            DataCopyPad(w, g, DataCopyExtParams{1, 8, 0, 0, 0}, DataCopyPadExtParams<int64_t>{false, 0, 0, 0});
            SetFlag<HardEvent::MTE2_S>(0);
            WaitFlag<HardEvent::MTE2_S>(0);
            if (w.GetValue(0) != 0) break;
            cam::kernels::WaitPause(word, 8, i);
        }
    });
    const double add = K("vector_startup_cycles") + kElems * 4 / K("vector_bytes_per_repeat");
    const double issue = K("scalar_issue_cycles");
    const double vectorEnd = issue + kAdds * add;
    const double landing = vectorEnd + K("scalar_ub_access_cycles") + issue + K("mte_latency_cycles") +
                           8 / K("mte3_bytes_per_cycle");
    return Check(got, landing + K("poll_latency_cycles") + K("scalar_ub_access_cycles"), 1e-9);
}

// Two ranks' launches, running at the same time, each copy 8 MiB into a third rank's window: the receiver's
// ingress carries both, so the later one ends when 16 MiB have crossed it (one sender alone: peer_copy_link).
int IngressShared() {
    constexpr uint32_t kTile = 32768, kTiles = 32, kBlocks = 8;
    static std::vector<uint8_t> recv(2 * kBlocks * kTiles * kTile), s1(kTile), s2(kTile);
    static std::atomic<int> started{0};
    started = 0;
    cam::twin::SetTimingEnabled(true);
    cam::twin::TakeLaunchCosts();
    auto sender = [&](int own) {
        cam::twin::LaunchWindows w;
        w.windows = {{reinterpret_cast<uintptr_t>(recv.data()), recv.size()},
                     {reinterpret_cast<uintptr_t>(s1.data()), s1.size()},
                     {reinterpret_cast<uintptr_t>(s2.data()), s2.size()}};
        w.own = own;
        cam::twin::RunLaunch("timing_sender", kBlocks, [&] {
            // Both launches run at once on the host (one group in the model's virtual time).
            if (GetBlockIdx() == 0) {
                started.fetch_add(1);
                while (started.load() < 2) std::this_thread::yield();
            }
            TPipe pipe;
            TBuf<TPosition::VECCALC> buf;
            pipe.InitBuffer(buf, kTile);
            LocalTensor<uint8_t> t = buf.Get<uint8_t>();
            GlobalTensor<uint8_t> g;
            g.SetGlobalBuffer(recv.data() + (uint64_t(own - 1) * kBlocks + GetBlockIdx()) * kTiles * kTile,
                              uint64_t(kTiles) * kTile);
            for (uint32_t i = 0; i < kTiles; ++i) DataCopy(g[uint64_t(i) * kTile], t, kTile);
        }, &w);
    };
    std::thread a(sender, 1), b(sender, 2);
    a.join();
    b.join();
    std::vector<double> ends;
    for (const auto& c : cam::twin::TakeLaunchCosts())
        if (c.device == gDevice && c.l2 == "lo") ends.push_back((c.seconds - K("launch_seconds")) * K("core_clock_hz"));
    if (ends.size() != 2) {
        std::printf("%zu sender launches costed, want 2\n", ends.size());
        return 1;
    }
    const double one = double(kBlocks) * kTiles * kTile / K("link_bytes_per_s_rank") * K("core_clock_hz");
    const double first = std::min(ends[0], ends[1]), last = std::max(ends[0], ends[1]);
    if (first < 1.5 * one) {  // the two share the ingress: neither gets it alone for long
        std::printf("the earlier sender ended at %.0f cycles, one sender alone needs %.0f\n", first, one);
        return 1;
    }
    return Check(last, K("scalar_issue_cycles") + 2 * one, 1e-9);
}

// A plane group costed on the four devices, with the sharing between them checked against costing each device
// afresh (SetTimingSelfCheck): a sender copies 1 MiB into the receiver's window (the link floor binds, at another
// cycle on A2 than on A3, so its SyncAll ends later: costed again) and its block 0 then publishes a signal word there; the receiver polls it while its
// other block re-reads one tile (an L2 floor that differs between the L2 ends without binding: taken from the other
// end's costing). Every cost must equal the unshared one, and some must have been shared.
int VariantsShared() {
    constexpr uint32_t kTile = 32768, kTiles = 8, kBlocks = 4;
    static std::vector<uint8_t> recv(kBlocks * kTiles * kTile + 64), send(kTile), src(kTile);
    static std::atomic<int> started{0};
    started = 0;
    int64_t* word = reinterpret_cast<int64_t*>(recv.data() + kBlocks * kTiles * kTile);
    word[0] = 0;
    cam::twin::SetTimingEnabled(true);
    cam::twin::SetTimingSelfCheck(true);
    cam::twin::TakeLaunchCosts();
    cam::twin::TakeTimingSharing();
    cam::twin::LaunchWindows w;
    w.windows = {{reinterpret_cast<uintptr_t>(recv.data()), recv.size()},
                 {reinterpret_cast<uintptr_t>(send.data()), send.size()}};
    auto startTogether = [] {
        if (GetBlockIdx() == 0) {
            started.fetch_add(1);
            while (started.load() < 2) std::this_thread::yield();
        }
    };
    std::thread sender([&] {
        cam::twin::LaunchWindows ws = w;
        ws.own = 1;
        cam::twin::RunLaunch("timing_sender", kBlocks, [&] {
            KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
            startTogether();
            TPipe pipe;
            TBuf<TPosition::VECCALC> buf, sig;
            pipe.InitBuffer(buf, kTile);
            pipe.InitBuffer(sig, 32);
            LocalTensor<uint8_t> t = buf.Get<uint8_t>();
            GlobalTensor<uint8_t> g;
            g.SetGlobalBuffer(recv.data() + uint64_t(GetBlockIdx()) * kTiles * kTile, uint64_t(kTiles) * kTile);
            for (uint32_t i = 0; i < kTiles; ++i) DataCopy(g[uint64_t(i) * kTile], t, kTile);
            SyncAll();
            if (GetBlockIdx() != 0) return;
            LocalTensor<int64_t> s = sig.Get<int64_t>();
            s.SetValue(0, 1);
            SetFlag<HardEvent::S_MTE3>(0);
            WaitFlag<HardEvent::S_MTE3>(0);
            GlobalTensor<int64_t> gw;
            gw.SetGlobalBuffer(word, 8);
            DataCopyPad(gw, s, DataCopyExtParams{1, 8, 0, 0, 0});
        }, &ws, {.batchMode = true});  // its SyncAll
    });
    std::thread receiver([&] {
        cam::twin::LaunchWindows wr = w;
        wr.own = 0;
        cam::twin::RunLaunch("timing_receiver", 2, [&] {
            KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
            startTogether();
            TPipe pipe;
            TBuf<TPosition::VECCALC> buf, sig;
            pipe.InitBuffer(buf, kTile);
            pipe.InitBuffer(sig, 32);
            if (GetBlockIdx() == 1) {
                LocalTensor<uint8_t> t = buf.Get<uint8_t>();
                GlobalTensor<uint8_t> g;
                g.SetGlobalBuffer(src.data(), src.size());
                for (int i = 0; i < 4; ++i) DataCopy(t, g, kTile);
                return;
            }
            LocalTensor<int64_t> s = sig.Get<int64_t>();
            GlobalTensor<int64_t> gw;
            gw.SetGlobalBuffer(word, 8);
            for (uint32_t i = 0;; ++i) {
                DataCopyPad(s, gw, DataCopyExtParams{1, 8, 0, 0, 0}, DataCopyPadExtParams<int64_t>{false, 0, 0, 0});
                SetFlag<HardEvent::MTE2_S>(0);
                WaitFlag<HardEvent::MTE2_S>(0);
                if (s.GetValue(0) != 0) break;
                cam::kernels::WaitPause(word, 8, i);
            }
        }, &wr);
    });
    sender.join();
    receiver.join();
    cam::twin::SetTimingSelfCheck(false);
    const auto costs = cam::twin::TakeLaunchCosts();
    const cam::twin::TimingSharing sharing = cam::twin::TakeTimingSharing();
    if (costs.size() != 8) {
        std::printf("%zu costs, want 2 launches x 4 devices\n", costs.size());
        return 1;
    }
    double floorLo = -1, floorHi = -1;
    for (const auto& c : costs)
        if (c.kernel == "timing_receiver" && c.device == "a2") (c.l2 == "lo" ? floorLo : floorHi) = c.bandwidthFloorSeconds;
    if (!(floorLo > floorHi && floorHi > 0)) {  // the case must give the two L2 ends different floors
        std::printf("receiver's floors %.3g (lo) and %.3g (hi): the case no longer separates the L2 ends\n", floorLo,
                    floorHi);
        return 1;
    }
    if (sharing.mismatches != 0 || sharing.derived == 0) {
        std::printf("shared costings %llu, costs that differ from the unshared costing %llu\n",
                    (unsigned long long)sharing.derived, (unsigned long long)sharing.mismatches);
        return 1;
    }
    std::printf("OK\n");
    return 0;
}

// CAM_TWIN_TIMING_TRACE: the launch's instructions as Perfetto slices, one per instruction on its core's pipe track.
int TraceCase(const char* path) {
    setenv("CAM_TWIN_TIMING_TRACE", path, 1);
    Cycles(2, [&] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf;
        pipe.InitBuffer(buf, 4096);
        LocalTensor<float> t = buf.Get<float>();
        for (int i = 0; i < 10; ++i) Adds(t, t, 1.0f, 1024);
        GlobalTensor<float> g;
        g.SetGlobalBuffer(reinterpret_cast<float*>(gGm.data()) + GetBlockIdx() * 1024, 1024);
        SetFlag<HardEvent::V_MTE3>(0);
        WaitFlag<HardEvent::V_MTE3>(0);
        DataCopy(g, t, 1024);
    });
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    size_t slices = 0, vector = 0, mte3 = 0;
    for (size_t at = text.find("\"ph\":\"X\""); at != std::string::npos; at = text.find("\"ph\":\"X\"", at + 1)) {
        ++slices;
        const size_t end = text.find('}', at);
        const std::string ev = text.substr(at, end - at);
        if (ev.find("\"name\":\"Vector\"") != std::string::npos && ev.find("\"tid\":1,") != std::string::npos) ++vector;
        if (ev.find("\"name\":\"DataCopy\"") != std::string::npos && ev.find("\"tid\":5,") != std::string::npos) ++mte3;
    }
    if (slices != 22 || vector != 20 || mte3 != 2 || text.find("\"name\":\"core 1\"") == std::string::npos) {
        std::printf("trace has %zu slices (%zu vector on V, %zu copies on MTE3), want 22 (20, 2)\n", slices, vector, mte3);
        return 1;
    }
    std::printf("OK\n");
    return 0;
}

// One block reads the same 4 KiB tile 100 times and another tile once: 101 copies, 2 distinct, so the re-reads'
// share of the bytes (99 of 101) hit L2.
int L2Reread() {
    cam::twin::LaunchCost cost;
    Cycles(1, [&] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf;
        pipe.InitBuffer(buf, 4096);
        LocalTensor<uint8_t> t = buf.Get<uint8_t>();
        GlobalTensor<uint8_t> g;
        g.SetGlobalBuffer(gGm.data(), gGm.size());
        for (int i = 0; i < 100; ++i) DataCopy(t, g, 4096);
        DataCopy(t, g[8192], 4096);
    }, &cost);
    return Check(cost.l2HitFraction, 99.0 / 101.0, 1e-12);
}

// ---- the L2 policy: LRU by stack distance over the reads in the order they start ----
// The streams below read more distinct bytes than l2_bytes: 64 KiB tiles of an address range mapped without backing
// (the twin copies zero pages), so no test holds hundreds of MiB.
constexpr uint64_t kL2Tile = 64 << 10;

uint8_t* BigGm(uint64_t tiles) {
    void* p = mmap(nullptr, tiles * kL2Tile, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        std::printf("mmap of %llu tiles failed\n", (unsigned long long)tiles);
        std::exit(1);
    }
    return static_cast<uint8_t*>(p);
}

// l2_bytes in tiles, checked whole (the cases count tiles).
uint64_t L2Tiles() {
    const double tiles = K("l2_bytes") / double(kL2Tile);
    if (tiles != std::floor(tiles)) {
        std::printf("l2_bytes is not a whole number of 64 KiB tiles\n");
        std::exit(1);
    }
    return uint64_t(tiles);
}

// Reads tiles [first, first + n) of `gm` into the UB tile `t`, in order.
void ReadTiles(const LocalTensor<uint8_t>& t, uint8_t* gm, uint64_t first, uint64_t n) {
    GlobalTensor<uint8_t> g;
    g.SetGlobalBuffer(gm + first * kL2Tile, n * kL2Tile);
    for (uint64_t i = 0; i < n; ++i) DataCopy(t, g[i * kL2Tile], uint32_t(kL2Tile));
}

// The hit fraction and the memory floor a launch must show, the floor from the closed form: misses at HBM, hits at
// the L2 bandwidth (the A3 low end).
int CheckL2(const cam::twin::LaunchCost& cost, double hitFraction) {
    const double rd = cost.gmReadBytes;
    const double floor = rd * (1 - hitFraction) / K("hbm_bytes_per_s_die") + rd * hitFraction / K("l2_bytes_per_s_die_lo");
    if (cost.l2HitFraction != hitFraction || std::fabs(cost.bandwidthFloorSeconds - floor) > 1e-12 * floor) {
        std::printf("hit fraction %.9g, floor %.9g s; want %.9g, %.9g s\n", cost.l2HitFraction,
                    cost.bandwidthFloorSeconds, hitFraction, floor);
        return 1;
    }
    std::printf("OK\n");
    return 0;
}

// Negative: one block reads a set A of 1024 tiles, then l2_bytes of other tiles, then A again in the same order.
// Each re-read of A comes after more than l2_bytes of other distinct copies (the rest of A, the stream, the part of
// A re-read before it), so every one misses: LRU's looping pattern. The launch's footprint is 4/3 of L2, so a rule
// from the footprint alone would hit a share of the re-reads (l2_bytes / footprint of them).
int L2LruEvicted() {
    const uint64_t a = 1024, stream = L2Tiles();
    uint8_t* gm = BigGm(a + stream);
    cam::twin::LaunchCost cost;
    Cycles(1, [&] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf;
        pipe.InitBuffer(buf, uint32_t(kL2Tile));
        const LocalTensor<uint8_t> t = buf.Get<uint8_t>();
        ReadTiles(t, gm, 0, a);
        ReadTiles(t, gm, a, stream);
        ReadTiles(t, gm, 0, a);
    }, &cost);
    return CheckL2(cost, 0.0);
}

// The capacity's edge: a re-read hits when its own bytes and the distinct bytes read since its first read make at
// most l2_bytes. One block reads `n` distinct tiles then the first again: with n tiles filling L2 exactly the re-read
// hits (1 read of n + 1); with one tile more it misses.
int L2LruCapacity() {
    const uint64_t c = L2Tiles();
    uint8_t* gm = BigGm(c + 1);
    for (const uint64_t n : {c, c + 1}) {
        cam::twin::LaunchCost cost;
        Cycles(1, [&] {
            TPipe pipe;
            TBuf<TPosition::VECCALC> buf;
            pipe.InitBuffer(buf, uint32_t(kL2Tile));
            const LocalTensor<uint8_t> t = buf.Get<uint8_t>();
            ReadTiles(t, gm, 0, n);
            ReadTiles(t, gm, 0, 1);
        }, &cost);
        const double want = n == c ? 1.0 / double(n + 1) : 0.0;
        if (std::fabs(cost.l2HitFraction - want) > 1e-12) {
            std::printf("%llu tiles then the first again: hit fraction %.9g, want %.9g\n", (unsigned long long)n,
                        cost.l2HitFraction, want);
            return 1;
        }
    }
    std::printf("OK\n");
    return 0;
}

// Control: one block reads each of 4/3 l2_bytes of tiles twice in a row: each re-read comes right after its first
// read and hits, though the launch's footprint exceeds L2.
int L2LruNearReuse() {
    const uint64_t n = L2Tiles() / 3 * 4;
    uint8_t* gm = BigGm(n);
    cam::twin::LaunchCost cost;
    Cycles(1, [&] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf;
        pipe.InitBuffer(buf, uint32_t(kL2Tile));
        const LocalTensor<uint8_t> t = buf.Get<uint8_t>();
        for (uint64_t i = 0; i < n; ++i) {
            ReadTiles(t, gm, i, 1);
            ReadTiles(t, gm, i, 1);
        }
    }, &cost);
    return CheckL2(cost, 0.5);
}

// Control across cores: two blocks stream the same 4/3 l2_bytes of tiles; block 1 starts one Adds later, so each of
// its reads starts just after block 0's read of the same tile and hits. In the order of the records (block 0's
// whole stream before block 1's) each of block 1's reads would come after l2_bytes of others and miss: the policy
// orders reads by when they start on their cores.
int L2LruIssueOrder() {
    const uint64_t n = L2Tiles() / 3 * 4;
    uint8_t* gm = BigGm(n);
    cam::twin::LaunchCost cost;
    Cycles(2, [&] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf, v;
        pipe.InitBuffer(buf, uint32_t(kL2Tile));
        pipe.InitBuffer(v, 256);
        if (GetBlockIdx() == 1) {
            LocalTensor<float> f = v.Get<float>();
            Adds(f, f, 1.0f, 64);
            SetFlag<HardEvent::V_MTE2>(0);
            WaitFlag<HardEvent::V_MTE2>(0);
        }
        ReadTiles(buf.Get<uint8_t>(), gm, 0, n);
    }, &cost);
    return CheckL2(cost, 0.5);
}

// Hits belong to the stretch they happen in: 20 blocks each read 16 tiles of their own (every read a miss), SyncAll,
// then read them again (every read a hit). The misses' HBM floor binds the first stretch; the second, all hits, runs
// at the cores' pace (its L2 floor is shorter). A hit fraction averaged over the launch (half) would put both
// stretches under one floor between the two and predict another time.
int L2LruPerStretch() {
    constexpr uint32_t kBlocks = 20;
    constexpr uint64_t kTiles = 16;
    uint8_t* gm = BigGm(kBlocks * kTiles);
    cam::twin::LaunchCost cost;
    const double got = Cycles(kBlocks, [&] {
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
        TPipe pipe;
        TBuf<TPosition::VECCALC> buf;
        pipe.InitBuffer(buf, uint32_t(kL2Tile));
        const LocalTensor<uint8_t> t = buf.Get<uint8_t>();
        ReadTiles(t, gm, GetBlockIdx() * kTiles, kTiles);
        SyncAll();
        ReadTiles(t, gm, GetBlockIdx() * kTiles, kTiles);
    }, &cost);
    const double clk = K("core_clock_hz"), stretch = double(kBlocks * kTiles * kL2Tile);
    const double core = K("scalar_issue_cycles") + kTiles * (K("mte_latency_cycles") + kL2Tile / K("mte2_bytes_per_cycle"));
    const double missFloor = stretch / K("hbm_bytes_per_s_die") * clk, hitFloor = stretch / K("l2_bytes_per_s_die_lo") * clk;
    if (!(missFloor > core && hitFloor < core)) {
        std::printf("the case no longer separates the stretches: core %.0f, miss floor %.0f, hit floor %.0f cycles\n",
                    core, missFloor, hitFloor);
        return 1;
    }
    if (cost.l2HitFraction != 0.5) {
        std::printf("hit fraction %.9g, want 0.5\n", cost.l2HitFraction);
        return 1;
    }
    return Check(got, missFloor + K("syncall_cycles") + core, 1e-9);
}

// One tile through the whole cube path (as tests/twin/violations.cpp's GoodCube): ND->NZ copy of A and a burst copy
// of B into L1 (MTE2), LoadData and LoadDataWithTranspose into L0 (MTE1), Mmad (M), Fixpipe to GM (FIX). Each pipe's
// busy time is the closed form of its instructions.
int CubePath() {
    constexpr uint32_t kM = 16, kK = 64, kN = 32;
    static std::vector<int8_t> a(kM * kK, 1), b(kK * kN, 1);
    static std::vector<int32_t> c(kM * kN);
    cam::twin::LaunchCost cost;
    Cycles(1, [&] {
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
        TPipe pipe;
        TQue<TPosition::A1, 1> a1;
        TQue<TPosition::B1, 1> b1;
        TQue<TPosition::A2, 1> a2;
        TQue<TPosition::B2, 1> b2;
        TQue<TPosition::CO1, 1> co1;
        pipe.InitBuffer(a1, 1, kM * kK);
        pipe.InitBuffer(b1, 1, kK * kN);
        pipe.InitBuffer(a2, 1, kM * kK);
        pipe.InitBuffer(b2, 1, kK * kN);
        pipe.InitBuffer(co1, 1, kM * kN * 4);
        GlobalTensor<int8_t> ga, gb;
        GlobalTensor<int32_t> gc;
        ga.SetGlobalBuffer(a.data(), kM * kK);
        gb.SetGlobalBuffer(b.data(), kK * kN);
        gc.SetGlobalBuffer(c.data(), kM * kN);
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
        LocalTensor<int32_t> lc = co1.AllocTensor<int32_t>();
        MmadParams mm;
        mm.m = kM;
        mm.n = kN;
        mm.k = kK;
        Mmad(lc, la, lb, mm);
        a2.FreeTensor(la);
        b2.FreeTensor(lb);
        co1.EnQue(lc);
        lc = co1.DeQue<int32_t>();
        FixpipeParamsV220 fp;
        fp.nSize = kN;
        fp.mSize = kM;
        fp.srcStride = kM;
        fp.dstStride = kN;
        Fixpipe<int32_t, int32_t, CFG_ROW_MAJOR>(gc, lc, fp);
        co1.FreeTensor(lc);
    }, &cost);
    const double clk = K("core_clock_hz"), lat = K("mte_latency_cycles"), bur = K("mte_burst_cycles");
    const double mte2 = (lat + (kM - 1) * bur + kM * kK / K("mte2_bytes_per_cycle")) +  // ND->NZ: a burst per row
                        (lat + kK * kN / K("mte2_bytes_per_cycle"));                     // B: one burst
    const double mte1 = (K("cube_startup_cycles") + 2 * 512 / K("mte1_bytes_per_cycle")) +
                        (K("cube_startup_cycles") + 2 * 2 * 512 / K("mte1_bytes_per_cycle"));
    const double m = K("cube_startup_cycles") + double(kM) * kN * kK / K("cube_int8_macs_per_cycle");
    const double fix = lat + (kM - 1) * bur + kM * kN * 4 / K("fixpipe_bytes_per_cycle");
    const double got[] = {cost.busy[int(cam::twin::Pipe::MTE2)] * clk, cost.busy[int(cam::twin::Pipe::MTE1)] * clk,
                          cost.busy[int(cam::twin::Pipe::M)] * clk, cost.busy[int(cam::twin::Pipe::FIX)] * clk};
    const double want[] = {mte2, mte1, m, fix};
    const char* names[] = {"MTE2", "MTE1", "M", "FIX"};
    for (int i = 0; i < 4; ++i) {
        if (std::fabs(got[i] - want[i]) > 1e-6 * want[i]) {
            std::printf("%s busy %.3f cycles, closed form %.3f\n", names[i], got[i], want[i]);
            return 1;
        }
    }
    std::printf("OK\n");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 3 && std::strcmp(argv[1], "trace") == 0) {
        cam::twin::SetPlatform("ascend910_93");
        return TraceCase(argv[2]);
    }
    if (argc != 2) {
        std::fprintf(stderr, "usage: timing <case>\n");
        return 2;
    }
    cam::twin::SetPlatform("ascend910_93");
    const std::string c = argv[1];
    if (c == "mte2_512") return Mte2Stream(512, 64);
    if (c == "mte2_4k") return Mte2Stream(4096, 64);
    if (c == "mte2_32k") return Mte2Stream(32768, 64);
    if (c == "vector_loop") return VectorLoop(2048, 100);
    if (c == "cube_loop") return CubeLoop(40);
    if (c == "cube_loop_int4") return CubeLoopInt4(40);
    if (c == "cube_path") return CubePath();
    if (c == "queue_depth1") return QueueCase(1);
    if (c == "queue_pingpong") return QueueCase(2);
    if (c == "syncall_join") return SyncAllJoin();
    if (c == "l2_reread") return L2Reread();
    if (c == "l2_lru_evicted") return L2LruEvicted();
    if (c == "l2_lru_near_reuse") return L2LruNearReuse();
    if (c == "l2_lru_capacity") return L2LruCapacity();
    if (c == "l2_lru_per_stretch") return L2LruPerStretch();
    if (c == "l2_lru_issue_order") return L2LruIssueOrder();
    if (c == "peer_copy_link") return PeerCopy(true);
    if (c == "own_copy_core") return PeerCopy(false);
    if (c == "poll_repeats_not_costed") return PollRepeats();
    if (c == "poll_waits_on_later_write") return PollWaitsOnLaterWrite();
    if (c == "ingress_shared") return IngressShared();
    if (c == "variants_shared") return VariantsShared();
    if (c == "serialised_slower") {
        const double serial = FlagPair(false), overlap = FlagPair(true);
        if (serial > overlap * 1.3) {
            std::printf("OK\n");
            return 0;
        }
        std::printf("serialised %.1f cycles, overlapped %.1f\n", serial, overlap);
        return 1;
    }
    if (c == "off_records_nothing") {
        cam::twin::SetTimingEnabled(false);
        cam::twin::TakeLaunchCosts();
        cam::twin::RunLaunch("timing_off", 1, [] {
            TPipe pipe;
            TBuf<TPosition::VECCALC> buf;
            pipe.InitBuffer(buf, 1024);
            LocalTensor<float> t = buf.Get<float>();
            Adds(t, t, 1.0f, 256);
        });
        if (!cam::twin::TakeLaunchCosts().empty()) {
            std::printf("a launch with timing off was costed\n");
            return 1;
        }
        std::printf("OK\n");
        return 0;
    }
    std::fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
