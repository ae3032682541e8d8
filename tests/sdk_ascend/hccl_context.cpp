// The twin's HCCL context model (kernels/twin/include/twin/hccl.h) with the real window_table kernel: a launch with
// the context bound (control), a plain launch (rule hccl-context-unbound) and a kernel asking for group 1 when only
// group 0 is bound. Prints "OK" or the twin's violation; exit 0 / 1.
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernel_operator.h"
#include "lib/hccl/hccl.h"
#include "twin/hccl.h"
#include "twin/runtime.h"
#include "window_table/window_table_tiling_data.h"

extern "C" void cam_window_table(GM_ADDR peers, GM_ADDR status, GM_ADDR initTiling,
                                 cam::kernels::WindowTableTilingData tiling);

extern "C" __global__ __aicore__ void second_group(GM_ADDR out) {
    AscendC::Hccl<AscendC::HCCL_SERVER_TYPE_AICPU> hccl;
    hccl.Init(AscendC::GetHcclContext<AscendC::HCCL_GROUP_ID_1>());  // @case:second_group
    *reinterpret_cast<uint32_t*>(out) = hccl.GetRankDim();
    hccl.Finalize();
}

// The deprecated tiling-less Init: fine on the A2 flat context, refused on the A3 description.
extern "C" __global__ __aicore__ void tiling_less(GM_ADDR out) {
    AscendC::Hccl<AscendC::HCCL_SERVER_TYPE_AICPU> hccl;
    hccl.Init(AscendC::GetHcclContext<AscendC::HCCL_GROUP_ID_0>());  // @case:tiling_less_a3
    *reinterpret_cast<uint64_t*>(out) = reinterpret_cast<uint64_t>(hccl.GetWindowsInAddr(2));
    hccl.Finalize();
}

// A window past the 32 the A2 flat layout holds.
extern "C" __global__ __aicore__ void past_flat(GM_ADDR out, GM_ADDR tiling) {
    AscendC::Hccl<AscendC::HCCL_SERVER_TYPE_AICPU> hccl;
    hccl.Init(AscendC::GetHcclContext<AscendC::HCCL_GROUP_ID_0>(), tiling);
    *reinterpret_cast<uint64_t*>(out) = reinterpret_cast<uint64_t>(hccl.GetWindowsInAddr(32));  // @case:a2_ranks
    hccl.Finalize();
}

// Init without Finalize.
extern "C" __global__ __aicore__ void no_finalize(GM_ADDR out, GM_ADDR tiling) {
    AscendC::Hccl<AscendC::HCCL_SERVER_TYPE_AICPU> hccl;
    hccl.Init(AscendC::GetHcclContext<AscendC::HCCL_GROUP_ID_0>(), tiling);  // @case:no_finalize
    *reinterpret_cast<uint32_t*>(out) = hccl.GetRankDim();
}

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    const char* c = argv[1];
    alignas(64) static int64_t peers[8];
    alignas(64) static int64_t status[8];
    alignas(64) static uint8_t windows[3][64];
    cam::twin::HcclContext ctx{};
    ctx.rankId = 1;
    ctx.rankDim = std::strcmp(c, "a2_ranks") == 0 ? 40 : 3;
    for (int r = 0; r < 3; ++r) ctx.windowsIn[r] = reinterpret_cast<uintptr_t>(windows[r]);
    cam::kernels::WindowTableTilingData tiling{3, 1, 1, 0};
    alignas(64) static cam::kernels::WindowTableInitTiling initTiling{};
    auto* p = reinterpret_cast<GM_ADDR>(peers);
    auto* s = reinterpret_cast<GM_ADDR>(status);
    auto* it = reinterpret_cast<GM_ADDR>(&initTiling);
    // bound / bound_a3: the real kernel on the A2 flat and on the A3 layout (the control of tiling_less_a3), each
    // with the init tiling its SoC gets; zeroed_a2 / a2_tiling_on_a3: a tiling whose device type selects the other
    // layout (rule hccl-init-device-type; bound and bound_a3 are their controls).
    const bool a3 = std::strcmp(c, "bound_a3") == 0 || std::strcmp(c, "tiling_less_a3") == 0 ||
                    std::strcmp(c, "a2_tiling_on_a3") == 0;
    if (a3) cam::twin::SetPlatform("ascend910_93");
    initTiling.deviceType = a3 ? cam::kernels::kHcclDeviceTypeA3 : cam::kernels::kHcclDeviceTypeA2;
    if (std::strcmp(c, "zeroed_a2") == 0) initTiling.deviceType = 0;
    if (std::strcmp(c, "a2_tiling_on_a3") == 0) initTiling.deviceType = cam::kernels::kHcclDeviceTypeA2;
    try {
        if (std::strcmp(c, "bound") == 0 || std::strcmp(c, "bound_a3") == 0 || std::strcmp(c, "zeroed_a2") == 0 ||
            std::strcmp(c, "a2_tiling_on_a3") == 0) {
            cam::twin::RunLaunch("cam_window_table", 1, [&] {
                cam::twin::HcclContextBinding binding(&ctx);
                cam_window_table(p, s, it, tiling);
            });
            for (int r = 0; r < 3; ++r)
                if (peers[r] != static_cast<int64_t>(ctx.windowsIn[r]) || status[0] != 0)
                    return std::printf("entry %d: %lld, status %lld\n", r, (long long)peers[r], (long long)status[0]), 3;
        } else if (std::strcmp(c, "tiling_less_a2") == 0 || std::strcmp(c, "tiling_less_a3") == 0) {
            cam::twin::RunLaunch("tiling_less", 1, [&] {
                cam::twin::HcclContextBinding binding(&ctx);
                tiling_less(p);
            });
            if (peers[0] != static_cast<int64_t>(ctx.windowsIn[2])) return std::printf("wrong window\n"), 3;
        } else if (std::strcmp(c, "a2_ranks") == 0) {
            cam::twin::RunLaunch("past_flat", 1, [&] {
                cam::twin::HcclContextBinding binding(&ctx);
                past_flat(p, it);
            });
        } else if (std::strcmp(c, "no_finalize") == 0) {
            cam::twin::RunLaunch("no_finalize", 1, [&] {
                cam::twin::HcclContextBinding binding(&ctx);
                no_finalize(p, it);
            });
        } else if (std::strcmp(c, "unbound") == 0) {
            cam::twin::RunLaunch("cam_window_table", 1, [&] { cam_window_table(p, s, it, tiling); });
        } else if (std::strcmp(c, "second_group") == 0) {
            cam::twin::RunLaunch("second_group", 1, [&] {
                cam::twin::HcclContextBinding binding(&ctx);
                second_group(p);
            });
        } else {
            return 2;
        }
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return 1;
    }
    std::printf("OK\n");
    return 0;
}
