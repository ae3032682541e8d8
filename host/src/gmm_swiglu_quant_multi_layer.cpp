#include "cam/aclnn_cam_gmm_swiglu_quant_multi_layer.h"

#include "backend.h"
#include "cam/tiling/gmm_tiling.h"
#include "device_status.h"
#include "executor.h"
#include "gmm_common.h"
#include "gmm_swiglu_quant_multi_layer/gmm_swiglu_quant_multi_layer.h"
#include "status.h"
#include "tensor.h"

#include <cmath>
#include <limits>

using namespace cam::host;

extern "C" aclnnStatus aclnnCamGmmSwigluQuantMultiLayerGetWorkspaceSize(
    const aclTensor* x, const aclTensor* xScale, const aclTensorList* weights, const aclTensorList* weightScales,
    const aclTensor* groupList, const aclTensor* layerIndex, int64_t groupListType, aclTensor* y, aclTensor* yScale,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
    return aclnnCamGmmSwigluQuantMultiLayerV2GetWorkspaceSize(x, xScale, weights, weightScales, groupList, layerIndex,
                                                              groupListType, nullptr, y, yScale, workspaceSize,
                                                              executor);
}

extern "C" aclnnStatus aclnnCamGmmSwigluQuantMultiLayerV2GetWorkspaceSize(
    const aclTensor* x, const aclTensor* xScale, const aclTensorList* weights, const aclTensorList* weightScales,
    const aclTensor* groupList, const aclTensor* layerIndex, int64_t groupListType, const double* swigluLimit,
    aclTensor* y, aclTensor* yScale, uint64_t* workspaceSize, aclOpExecutor** executor) {
    return aclnnCamGmmSwigluQuantMultiLayerW4A8GetWorkspaceSize(x, xScale, weights, weightScales, nullptr, groupList,
                                                                layerIndex, groupListType, swigluLimit, y, yScale,
                                                                workspaceSize, executor);
}

extern "C" aclnnStatus aclnnCamGmmSwigluQuantMultiLayerW4A8GetWorkspaceSize(
    const aclTensor* x, const aclTensor* xScale, const aclTensorList* weights, const aclTensorList* weightScales,
    const aclTensorList* weightColsums, const aclTensor* groupList, const aclTensor* layerIndex, int64_t groupListType,
    const double* swigluLimit, aclTensor* y, aclTensor* yScale, uint64_t* workspaceSize, aclOpExecutor** executor) {
    return Guarded("aclnnCamGmmSwigluQuantMultiLayerGetWorkspaceSize", [&]() -> aclnnStatus {
        ArgChecker check("gmm_swiglu_quant_multi_layer");
        if (aclnnStatus st = CheckOutPointers("gmm_swiglu_quant_multi_layer", workspaceSize, executor)) return st;
        // The kernel clamps with fp32 min/max: NaN or a negative limit has no clamp it could compute.
        if (swigluLimit != nullptr && !(*swigluLimit >= 0.0))
            return check.Invalid("swiglu_limit must be >= 0 (or +inf), got " + std::to_string(*swigluLimit));
        GmmArgs a;
        aclnnStatus st;
        if ((st = CheckGmmInputs(check, "x", "x_scale", x, xScale, weights, weightScales, groupList, layerIndex,
                                 groupListType, &a, weightColsums)))
            return st;
        if (a.n % 2 != 0)
            return check.Invalid("N = " + std::to_string(a.n) +
                                 " must be even (N from weight_scales): the output splits into act | gate halves");
        TensorView yv, sv;
        if ((st = check.View(y, "y", &yv)) || (st = check.Tensor(yv, "y", {ACL_INT8}, {a.m, a.n / 2})))
            return st;
        if ((st = check.View(yScale, "y_scale", &sv)) || (st = check.Tensor(sv, "y_scale", {ACL_FLOAT}, {a.m})))
            return st;

        cam::kernels::GmmSwigluQuantMultiLayerTilingData tiling{};
        std::string why;
        const cam::tiling::GmmShape shape{static_cast<uint64_t>(a.m), static_cast<uint64_t>(a.k),
                                          static_cast<uint64_t>(a.n), static_cast<uint64_t>(a.experts),
                                          static_cast<uint64_t>(a.layers), groupListType,
                                          static_cast<uint64_t>(a.groups), static_cast<uint64_t>(a.kGroups), a.int4};
        if (!cam::tiling::TileGmmSwigluQuantMultiLayer(CurrentPlatform(), shape, &tiling, &why))
            return check.Invalid(why);
        if (swigluLimit != nullptr) {
            tiling.clamp = 1;
            // Rounded to the fp32 the kernel compares in (a limit above fp32's range is +inf: no clamp).
            tiling.limit = *swigluLimit > std::numeric_limits<float>::max() ? std::numeric_limits<float>::infinity()
                                                                             : static_cast<float>(*swigluLimit);
        }

        // One mixed kernel whose cube cores hand tiles (or units, with scale groups along K) to their vector cores
        // through a small ring per AI core (docs/gmm.md §5); W4A8 splits x into its int4 hi / lo planes first
        // (docs/gmm.md §9).
        const GmmWorkspace ws = GmmRingWorkspace(cam::kernels::GmmSwigluRingBytes(tiling.cube), a);
        auto ex = std::make_unique<Executor>("gmm_swiglu_quant_multi_layer");
        ex->endsOnItsOwn = true;  // compute only: no wait on a peer or the host
        ex->workspaceSize = ws.bytes;
        // Launched even when M = 0: the pre-pass still has to refuse a group_list that claims rows.
        ex->launch = [tiling, ws, table = ArgumentCheckOnly() ? nullptr : PersistentGmmTable(a), xd = a.x.data,
                      gl = a.groupList.data, li = a.layerIndex.data, xs = a.xScale.data, yd = yv.data,
                      ysd = sv.data](void* workspace, aclrtStream stream) {
            auto* base = static_cast<uint8_t*>(workspace);
            return LaunchWithDeviceStatus(stream, base + ws.status, "gmm_swiglu_quant_multi_layer", [&] {
                uint8_t* cubeX = LaunchGmmCubeActivations(stream, xd, gl, li, base, ws, tiling.cube, tiling.split);
                cam::kernels::LaunchGmmSwigluQuantMultiLayer(tiling.cube.blockDim, stream, cubeX, xs, gl, li, table,
                                                             base + ws.acc, yd, ysd, base + ws.status, tiling);
            });
        };
        return Finish(std::move(ex), workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamGmmSwigluQuantMultiLayer(void* workspace, uint64_t workspaceSize,
                                                        aclOpExecutor* executor, aclrtStream stream) {
    return RunExecutor("aclnnCamGmmSwigluQuantMultiLayer", "gmm_swiglu_quant_multi_layer", workspace, workspaceSize, executor, stream);
}
