/* gmm_multi_layer (W2): layer-select grouped int8 matmul with dequant to bf16.
 *   y             [M, I]  ACL_INT8, contiguous; M is the row capacity (rows of the receive buffer)
 *   yScale        [M]     ACL_FLOAT, per-row scale
 *   weights       L tensors, one per layer: ACL_INT8 [E, ceil(H/32), ceil(I/16), 16, 32], the FRACTAL_NZ prepack of
 *                 an ND [E, I, H] weight (torch_npu's int8 NZ layout; cam.ops.prepack_weights produces it)
 *   weightScales  L tensors: ACL_FLOAT [E, H], per output channel, or [E, G, H]: per group of I / G rows of I
 *                 (a multiple of 32), each group's int32 partial scaled and the groups summed in fp32 in order
 *   groupList     [E]     ACL_INT64 on the device: counts (groupListType 1) or cumsum (0) of each expert's rows
 *   layerIndex    [1]     ACL_INT64 on the device: which layer's weights to use
 *   out           [M, H]  ACL_BF16 (out): out[m] = bf16((float(y[m] . W[l][e]) * yScale[m]) * weightScales[l][e])
 * Rows past the last group are not written. layerIndex outside [0, L) or a bad groupList (negative count,
 * decreasing cumsum, total > M) is detected by the kernels before they write anything and reported as
 * CAM_ERR_DEVICE_ARGUMENT by camSynchronizeStream. The weight tensors must stay alive and unmoved until the
 * stream has run the op; their addresses go to the device in the op's workspace.
 * V2 adds outScale: nullptr is the call above (V1); a finite value s (rounded to fp32) gives
 * out[m] = bf16(((float(acc) * yScale[m]) * weightScales[l][e]) * s), e.g. routed_scaling_factor applied on the
 * FFN side. NaN, inf or a value beyond fp32's range is ACLNN_ERR_PARAM_INVALID naming out_scale. */
#ifndef ACLNN_CAM_GMM_MULTI_LAYER_H
#define ACLNN_CAM_GMM_MULTI_LAYER_H

#include "cam/cam_status.h"

#ifdef __cplusplus
extern "C" {
#endif

CAM_API aclnnStatus aclnnCamGmmMultiLayerGetWorkspaceSize(const aclTensor* y, const aclTensor* yScale,
                                                          const aclTensorList* weights,
                                                          const aclTensorList* weightScales,
                                                          const aclTensor* groupList, const aclTensor* layerIndex,
                                                          int64_t groupListType, aclTensor* out,
                                                          uint64_t* workspaceSize, aclOpExecutor** executor);
CAM_API aclnnStatus aclnnCamGmmMultiLayerV2GetWorkspaceSize(const aclTensor* y, const aclTensor* yScale,
                                                            const aclTensorList* weights,
                                                            const aclTensorList* weightScales,
                                                            const aclTensor* groupList, const aclTensor* layerIndex,
                                                            int64_t groupListType, const double* outScale,
                                                            aclTensor* out, uint64_t* workspaceSize,
                                                            aclOpExecutor** executor);
// W4A8 (docs/gmm.md §9): weights are packed int4, uint8 [E_local, ceil(K/64), ceil(N/16), 16, 32] per layer
// (cam.LayerWeights(format="int4")), weightColsums int32 [E_local, G, N] per layer (Σ_k w over each of the G K groups
// of weightScales; G = 1 per channel); null weightColsums is the int8 form (V2). Execute with aclnnCamGmmMultiLayer.
CAM_API aclnnStatus aclnnCamGmmMultiLayerW4A8GetWorkspaceSize(
    const aclTensor* y, const aclTensor* yScale, const aclTensorList* weights, const aclTensorList* weightScales,
    const aclTensorList* weightColsums, const aclTensor* groupList, const aclTensor* layerIndex, int64_t groupListType,
    const double* outScale, aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor);
CAM_API aclnnStatus aclnnCamGmmMultiLayer(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                          aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
