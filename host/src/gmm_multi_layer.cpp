#include "cam/aclnn_cam_gmm_multi_layer.h"

#include "backend.h"
#include "cam/tiling/gmm_tiling.h"
#include "device_status.h"
#include "executor.h"
#include "gmm_common.h"
#include "gmm_multi_layer/gmm_multi_layer.h"
#include "status.h"
#include "tensor.h"

#include <cmath>
#include <string>

using namespace cam::host;

extern "C" aclnnStatus aclnnCamGmmMultiLayerGetWorkspaceSize(const aclTensor* y, const aclTensor* yScale,
                                                             const aclTensorList* weights,
                                                             const aclTensorList* weightScales,
                                                             const aclTensor* groupList, const aclTensor* layerIndex,
                                                             int64_t groupListType, aclTensor* out,
                                                             uint64_t* workspaceSize, aclOpExecutor** executor) {
    return aclnnCamGmmMultiLayerV2GetWorkspaceSize(y, yScale, weights, weightScales, groupList, layerIndex,
                                                   groupListType, nullptr, out, workspaceSize, executor);
}

extern "C" aclnnStatus aclnnCamGmmMultiLayerV2GetWorkspaceSize(const aclTensor* y, const aclTensor* yScale,
                                                               const aclTensorList* weights,
                                                               const aclTensorList* weightScales,
                                                               const aclTensor* groupList, const aclTensor* layerIndex,
                                                               int64_t groupListType, const double* outScale,
                                                               aclTensor* out, uint64_t* workspaceSize,
                                                               aclOpExecutor** executor) {
    return aclnnCamGmmMultiLayerW4A8GetWorkspaceSize(y, yScale, weights, weightScales, nullptr, groupList, layerIndex,
                                                     groupListType, outScale, out, workspaceSize, executor);
}

extern "C" aclnnStatus aclnnCamGmmMultiLayerW4A8GetWorkspaceSize(
    const aclTensor* y, const aclTensor* yScale, const aclTensorList* weights, const aclTensorList* weightScales,
    const aclTensorList* weightColsums, const aclTensor* groupList, const aclTensor* layerIndex, int64_t groupListType,
    const double* outScale, aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
    return Guarded("aclnnCamGmmMultiLayerV2GetWorkspaceSize", [&]() -> aclnnStatus {
        ArgChecker check("gmm_multi_layer");
        if (aclnnStatus st = CheckOutPointers("gmm_multi_layer", workspaceSize, executor)) return st;
        // The kernel multiplies in fp32: the value must stay finite once rounded to it.
        if (outScale != nullptr && !std::isfinite(static_cast<float>(*outScale)))
            return check.Invalid("out_scale must be finite in fp32, got " + std::to_string(*outScale));
        GmmArgs a;
        aclnnStatus st;
        if ((st = CheckGmmInputs(check, "y", "y_scale", y, yScale, weights, weightScales, groupList, layerIndex,
                                 groupListType, &a, weightColsums)))
            return st;
        TensorView ov;
        if ((st = check.View(out, "out", &ov)) || (st = check.Tensor(ov, "out", {ACL_BF16}, {a.m, a.n})))
            return st;

        cam::kernels::GmmMultiLayerTilingData tiling{};
        std::string why;
        const cam::tiling::GmmShape shape{static_cast<uint64_t>(a.m), static_cast<uint64_t>(a.k),
                                          static_cast<uint64_t>(a.n), static_cast<uint64_t>(a.experts),
                                          static_cast<uint64_t>(a.layers), groupListType,
                                          static_cast<uint64_t>(a.groups), static_cast<uint64_t>(a.kGroups), a.int4};
        if (!cam::tiling::TileGmmMultiLayer(CurrentPlatform(), shape, &tiling, &why)) return check.Invalid(why);
        tiling.outScaled = outScale != nullptr ? 1 : 0;
        tiling.outScale = outScale != nullptr ? static_cast<float>(*outScale) : 1.0f;

        // One mixed kernel whose cube cores hand units to their vector cores through a ring per AI core
        // (docs/gmm.md §5); W4A8 splits y into its int4 hi / lo planes first (docs/gmm.md §9).
        const GmmWorkspace ws =
            GmmRingWorkspace(uint64_t(tiling.cube.blockDim) * cam::kernels::kGmmRingSlots *
                                 cam::kernels::GmmMultiLayerSlotBytes(tiling.cube),
                             a);
        auto ex = std::make_unique<Executor>("gmm_multi_layer");
        ex->endsOnItsOwn = true;  // compute only: no wait on a peer or the host
        ex->workspaceSize = ws.bytes;
        // Launched even when M = 0: the pre-pass still has to refuse a group_list that claims rows.
        ex->launch = [tiling, ws, table = ArgumentCheckOnly() ? nullptr : PersistentGmmTable(a), y = a.x.data,
                      gl = a.groupList.data, li = a.layerIndex.data, ys = a.xScale.data,
                      o = ov.data](void* workspace, aclrtStream stream) {
            auto* base = static_cast<uint8_t*>(workspace);
            return LaunchWithDeviceStatus(stream, base + ws.status, "gmm_multi_layer", [&] {
                uint8_t* cubeX = LaunchGmmCubeActivations(stream, y, gl, li, base, ws, tiling.cube, tiling.split);
                cam::kernels::LaunchGmmMultiLayer(tiling.cube.blockDim, stream, cubeX, ys, gl, li, table,
                                                  base + ws.acc, o, base + ws.status, tiling);
            });
        };
        return Finish(std::move(ex), workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamGmmMultiLayer(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                             aclrtStream stream) {
    return RunExecutor("aclnnCamGmmMultiLayer", "gmm_multi_layer", workspace, workspaceSize, executor, stream);
}
