// The real window_table kernel over the twin's A2 flat HCCL context, for the mutation suite (tests/test_mutants.py):
//   bound    a world of 3, tiling as the host gives it: prints "OK" when every peer entry is its window
//   world40  a context and tiling of 40 ranks (more than the flat layout's 32 windows, as a tiling without its bound
//            would pass): the kernel must refuse it in its status record before reading a window; prints
//            "REFUSED code argument value bound" with the peer table untouched
// A twin violation prints its message; exit 0 when the case behaved, 1 on a violation, 3 on a wrong result.
#include <cstdio>
#include <cstring>

#include "kernel_operator.h"
#include "twin/hccl.h"
#include "twin/runtime.h"
#include "common/device_status_record.h"
#include "window_table/window_table_tiling_data.h"

extern "C" void cam_window_table(GM_ADDR peers, GM_ADDR status, GM_ADDR initTiling,
                                 cam::kernels::WindowTableTilingData tiling);

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    const bool world40 = std::strcmp(argv[1], "world40") == 0;
    if (!world40 && std::strcmp(argv[1], "bound") != 0) return 2;
    constexpr uint32_t kRanks = 40;
    alignas(64) static int64_t peers[kRanks];
    alignas(64) static int64_t status[cam::kernels::kDeviceStatusWords];
    alignas(64) static uint8_t windows[kRanks][64];
    alignas(64) static cam::kernels::WindowTableInitTiling initTiling{};
    initTiling.deviceType = cam::kernels::kHcclDeviceTypeA2;  // the A2 flat context below
    static cam::twin::HcclContext ctx{};  // static: its window arrays are 16 KiB
    const uint32_t world = world40 ? kRanks : 3;
    ctx.rankId = 1;
    ctx.rankDim = world;
    for (uint32_t r = 0; r < world; ++r) ctx.windowsIn[r] = reinterpret_cast<uintptr_t>(windows[r]);
    const cam::kernels::WindowTableTilingData tiling{world, 1, 1, 0};
    try {
        cam::twin::RunLaunch("cam_window_table", 1, [&] {
            cam::twin::HcclContextBinding binding(&ctx);
            cam_window_table(reinterpret_cast<GM_ADDR>(peers), reinterpret_cast<GM_ADDR>(status),
                             reinterpret_cast<GM_ADDR>(&initTiling), tiling);
        });
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return 1;
    }
    if (world40) {
        for (uint32_t r = 0; r < kRanks; ++r)
            if (peers[r] != 0) return std::printf("entry %u written on a refused context\n", r), 3;
        std::printf("REFUSED %lld %lld %lld %lld\n", (long long)status[0], (long long)status[1], (long long)status[3],
                    (long long)status[4]);
        return 0;
    }
    for (uint32_t r = 0; r < world; ++r)
        if (peers[r] != static_cast<int64_t>(ctx.windowsIn[r]) || status[0] != 0)
            return std::printf("entry %u: %lld, status %lld\n", r, (long long)peers[r], (long long)status[0]), 3;
    std::printf("OK\n");
    return 0;
}
