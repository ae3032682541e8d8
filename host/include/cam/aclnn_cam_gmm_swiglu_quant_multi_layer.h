/* gmm_swiglu_quant_multi_layer (W1): layer-select grouped int8 matmul, dequant, SwiGLU, per-row int8 quant.
 *   x             [M, K]  ACL_INT8, contiguous; M is the row capacity (rows of the receive buffer)
 *   xScale        [M]     ACL_FLOAT, per-row scale
 *   weights       L tensors, one per layer: ACL_INT8 [E, ceil(N/32), ceil(K/16), 16, 32], the FRACTAL_NZ prepack of
 *                 an ND [E, K, N] weight; N even, columns [0, N/2) are act, [N/2, N) gate
 *   weightScales  L tensors: ACL_FLOAT [E, N], or [E, G, N] per group of K / G rows of K (a multiple of 32): each
 *                 group's int32 partial scaled, the groups summed in fp32 in order, then the SwiGLU below
 *   groupList     [E]     ACL_INT64 on the device: counts (groupListType 1) or cumsum (0)
 *   layerIndex    [1]     ACL_INT64 on the device
 *   y             [M, N/2] ACL_INT8 (out), yScale [M] ACL_FLOAT (out):
 *                 c = (float(x[m] . W[l][e]) * xScale[m]) * weightScales[l][e]; s = act / (1 + exp(-act)) * gate;
 *                 y[m] = clamp(rint(s * (127 / max|s|)), -127, 127), yScale[m] = max|s| / 127 (0 for a zero row)
 * Rows past the last group are not written; device-detected argument errors as for aclnnCamGmmMultiLayer.
 * V2 adds swigluLimit: nullptr is the plain SwiGLU above (the V1 call); a value L (>= 0, or +inf; NaN and negative
 * values are refused) is DeepSeek-V4's clamped SwiGLU, in fp32 with L rounded to fp32, before the SiLU:
 *   act = min(act, L), gate = max(min(gate, L), -L). The executor runs with aclnnCamGmmSwigluQuantMultiLayer. */
#ifndef ACLNN_CAM_GMM_SWIGLU_QUANT_MULTI_LAYER_H
#define ACLNN_CAM_GMM_SWIGLU_QUANT_MULTI_LAYER_H

#include "cam/cam_status.h"

#ifdef __cplusplus
extern "C" {
#endif

CAM_API aclnnStatus aclnnCamGmmSwigluQuantMultiLayerGetWorkspaceSize(
    const aclTensor* x, const aclTensor* xScale, const aclTensorList* weights, const aclTensorList* weightScales,
    const aclTensor* groupList, const aclTensor* layerIndex, int64_t groupListType, aclTensor* y, aclTensor* yScale,
    uint64_t* workspaceSize, aclOpExecutor** executor);
CAM_API aclnnStatus aclnnCamGmmSwigluQuantMultiLayerV2GetWorkspaceSize(
    const aclTensor* x, const aclTensor* xScale, const aclTensorList* weights, const aclTensorList* weightScales,
    const aclTensor* groupList, const aclTensor* layerIndex, int64_t groupListType, const double* swigluLimit,
    aclTensor* y, aclTensor* yScale, uint64_t* workspaceSize, aclOpExecutor** executor);
// W4A8 (docs/gmm.md §9): weights are packed int4, uint8 [E_local, ceil(K/64), ceil(N/16), 16, 32] per layer
// (cam.LayerWeights(format="int4")), weightColsums int32 [E_local, G, N] per layer (Σ_k w over each of the G K groups
// of weightScales; G = 1 per channel); null weightColsums is the int8 form (V2). Execute with
// aclnnCamGmmSwigluQuantMultiLayer.
CAM_API aclnnStatus aclnnCamGmmSwigluQuantMultiLayerW4A8GetWorkspaceSize(
    const aclTensor* x, const aclTensor* xScale, const aclTensorList* weights, const aclTensorList* weightScales,
    const aclTensorList* weightColsums, const aclTensor* groupList, const aclTensor* layerIndex, int64_t groupListType,
    const double* swigluLimit, aclTensor* y, aclTensor* yScale, uint64_t* workspaceSize, aclOpExecutor** executor);
CAM_API aclnnStatus aclnnCamGmmSwigluQuantMultiLayer(void* workspace, uint64_t workspaceSize,
                                                     aclOpExecutor* executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
