/* dynamic_quant: per-token symmetric int8 quantization.
 *   x      [M, H] ACL_BF16 or ACL_FLOAT16, contiguous
 *   q      [M, H] ACL_INT8 (out)     q = clamp(rint(x * (127 / amax)), -127, 127), amax = max|x[m, :]|
 *   scale  [M]    ACL_FLOAT (out)    amax / 127; 0 for a zero (or subnormal) row
 * A row holding inf or NaN gives q = 0 and a non-finite scale. M may be 0; H >= 1. */
#ifndef ACLNN_CAM_DYNAMIC_QUANT_H
#define ACLNN_CAM_DYNAMIC_QUANT_H

#include "cam/cam_status.h"

#ifdef __cplusplus
extern "C" {
#endif

CAM_API aclnnStatus aclnnCamDynamicQuantGetWorkspaceSize(const aclTensor* x, aclTensor* q, aclTensor* scale,
                                                         uint64_t* workspaceSize, aclOpExecutor** executor);
CAM_API aclnnStatus aclnnCamDynamicQuant(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                         aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
