// The cube kernel of the layer-select grouped matmuls when the epilogue is a launch of its own (W2, and W1 with
// int4 weights): every unit's int32 accumulator goes to the [M, N] workspace the epilogue kernel reads next on the
// same stream. The cube loop itself is common/gmm_cube.h.
#include "kernel_operator.h"

#include "common/kernel_frame.h"

#include "common/gmm_cube.h"
#include "gmm_int8_cube/gmm_int8_cube.h"


extern "C" __global__ __aicore__ void cam_gmm_int8_cube(GM_ADDR x, GM_ADDR groupList, GM_ADDR layerIndex,
                                                        GM_ADDR table, GM_ADDR acc, GM_ADDR status,
                                                        cam::kernels::GmmCubeTilingData tiling) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    cam::kernels::GmmInt8Cube op;
    static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
    op.Init(x, groupList, layerIndex, table, acc, status, tiling);
    op.Process();
}

#include "common/launch.h"

void cam::kernels::LaunchGmmInt8Cube(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* groupList,
                                     uint8_t* layerIndex, uint8_t* table, uint8_t* acc, uint8_t* status,
                                     const GmmCubeTilingData& tiling) {
    CAM_KERNEL_LAUNCH(cam_gmm_int8_cube, blockDim, stream, x, groupList, layerIndex, table, acc, status, tiling);
}
