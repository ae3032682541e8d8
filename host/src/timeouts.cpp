// The timeout chain's values for code that binds the library (cam/cam_timeouts.h).
#include "cam/cam_timeouts.h"

#include "status.h"

extern "C" aclnnStatus camGetTimeoutChain(camTimeoutChain* chain) {
    if (!chain) return cam::host::Fail(ACLNN_ERR_PARAM_NULLPTR, "camGetTimeoutChain: chain is null");
    *chain = {CAM_FOLLOWER_MARGIN_S, CAM_SYNC_MARGIN_S, CAM_DRAIN_S, CAM_AICORE_OP_TIMEOUT_S};
    return ACLNN_SUCCESS;
}
