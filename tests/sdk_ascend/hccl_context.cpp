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

extern "C" void cam_window_table(GM_ADDR peers, GM_ADDR status, cam::kernels::WindowTableTilingData tiling);

extern "C" __global__ __aicore__ void second_group(GM_ADDR out) {
    AscendC::Hccl<AscendC::HCCL_SERVER_TYPE_AICPU> hccl;
    hccl.Init(AscendC::GetHcclContext<AscendC::HCCL_GROUP_ID_1>());  // @case:second_group
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
    ctx.rankDim = 3;
    for (int r = 0; r < 3; ++r) ctx.windowsIn[r] = reinterpret_cast<uintptr_t>(windows[r]);
    cam::kernels::WindowTableTilingData tiling{3, 1, 1, 0};
    auto* p = reinterpret_cast<GM_ADDR>(peers);
    auto* s = reinterpret_cast<GM_ADDR>(status);
    try {
        if (std::strcmp(c, "bound") == 0) {
            cam::twin::RunLaunch("cam_window_table", 1, [&] {
                cam::twin::HcclContextBinding binding(&ctx);
                cam_window_table(p, s, tiling);
            });
            for (int r = 0; r < 3; ++r)
                if (peers[r] != static_cast<int64_t>(ctx.windowsIn[r]) || status[0] != 0)
                    return std::printf("entry %d: %lld, status %lld\n", r, (long long)peers[r], (long long)status[0]), 3;
        } else if (std::strcmp(c, "unbound") == 0) {
            cam::twin::RunLaunch("cam_window_table", 1, [&] { cam_window_table(p, s, tiling); });
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
