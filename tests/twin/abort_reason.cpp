// A twin violation in a data-plane launch (CAM_DATAPLANE_LAUNCH, kernels/common/launch.h) aborts the plane with the
// broken rule beside every rank's abort word, whichever part of the block broke it. Rank 0 runs a kernel on a twin
// stream while a thread standing for rank 1 waits (bounded, 10 s) on its own window's abort word, then reads the
// reason there (TwinAbortReason) as its host would. Cases:
//   dirty_exit  a scalar store into the own window never cleaned: dcache-dirty-at-exit, found at the block's end
//   peer_store  a scalar store into rank 1's window: peer-scalar-store, found in the kernel body
//   clean       the store cleaned (control): no violation, the abort word stays 0
// Prints "rank0: <the violation or OK>" and "rank1: abort <word> after <ms> ms: <reason>"; exit 0.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "kernel_operator.h"
#include "twin/stream.h"
#include "common/launch.h"
#include "common/window_layout.h"

using namespace AscendC;

namespace {

constexpr CamTopology kTopo{1, 1, 1, 4, 2, 64, 4, 2, 1, 2, 0, 8};  // D P F E K H Bmax L slots bytes quant cap

}  // namespace

// Stores a word at `offset` bytes into `window`, cleaned or not.
extern "C" __global__ __aicore__ void store_word(GM_ADDR window, int64_t offset, bool clean) {
    GlobalTensor<int64_t> w;
    w.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(window + offset), 8);
    w.SetValue(0, 7);
    if (clean) DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(w);
}

int main(int argc, char** argv) {
    // `format <violation message> <rank>`: the slot's text TwinReasonText makes of it, for messages no kernel here
    // produces (a short rule and kernel that leave room for the call site, a long one that leaves none).
    if (argc == 4 && std::string(argv[1]) == "format") {
        std::printf("%s\n", cam::kernels::dp::TwinReasonText(argv[2], std::atoll(argv[3])).c_str());
        return 0;
    }
    if (argc != 2) return 2;
    const std::string c = argv[1];
    if (c != "dirty_exit" && c != "peer_store" && c != "clean") return 2;
    const int64_t bytes[2] = {cam::layout::attn_window_bytes(kTopo), cam::layout::ffn_window_bytes(kTopo)};
    uint8_t* windows[2];
    for (int r = 0; r < 2; ++r) {
        windows[r] = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes[r] + 63) / 64 * 64));
        std::memset(windows[r], 0, bytes[r]);
    }
    alignas(64) int64_t peers[2] = {static_cast<int64_t>(reinterpret_cast<uintptr_t>(windows[0])),
                                    static_cast<int64_t>(reinterpret_cast<uintptr_t>(windows[1]))};
    cam::kernels::dp::CommArgs comm{};
    comm.topo = kTopo;
    comm.rank = 0;

    std::atomic<bool> done{false};
    int64_t seen = 0;
    double waitedMs = 0;
    std::thread peer([&] {
        auto* word = reinterpret_cast<int64_t*>(windows[1] + cam::kAbortOff);
        const auto t0 = std::chrono::steady_clock::now();
        const auto deadline = t0 + std::chrono::seconds(10);
        while ((seen = __atomic_load_n(word, __ATOMIC_ACQUIRE)) == 0 && !done.load() &&
               std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        waitedMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    });

    std::string rank0 = "OK";
    {
        cam::twin::Stream stream;
        GM_ADDR target = reinterpret_cast<GM_ADDR>(windows[c == "peer_store" ? 1 : 0]);
        const int64_t offset = cam::kControlBytes;  // a data word, not the control lines the reason lives in
        const bool clean = c == "clean";
        CAM_DATAPLANE_LAUNCH(comm, reinterpret_cast<const uint8_t*>(peers), store_word, 1, &stream, target, offset,
                             clean);
        cam::twin::StreamError err;
        if (!stream.Synchronize(10.0, &err)) rank0 = "synchronize timed out";
        else if (err.code != 0) rank0 = err.message;
    }
    done.store(true);
    peer.join();
    std::printf("rank0: %s\n", rank0.c_str());
    std::printf("rank1: abort %lld after %.0f ms: %s\n", static_cast<long long>(seen), waitedMs,
                cam::kernels::dp::TwinAbortReason(windows[1]).c_str());
    for (uint8_t* w : windows) std::free(w);
    return 0;
}
