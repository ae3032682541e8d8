/* Data-plane op (docs/protocol.md). It runs against a camComm (cam/cam_comm.h) and may wait on the device; every
 * wait is bounded by the communicator's timeout and ends at once on abort. Errors found on the device surface on
 * camSynchronizeStream: CAM_ERR_COMM_TIMEOUT / CAM_ERR_COMM_ABORTED / CAM_ERR_COMM_PROTOCOL are fatal (the
 * communicator refuses further ops); CAM_ERR_DEVICE_ARGUMENT found in a pre-pass leaves nothing written and the
 * communicator usable. The message (camGetLastErrorMessage) names the op, the rank, the awaited peer or replica
 * and the layer. */
#ifndef ACLNN_CAM_DISPATCH_SEND_H
#define ACLNN_CAM_DISPATCH_SEND_H

#include "cam/cam_comm.h"
#include "cam/cam_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dispatch_send (Attention rank): publishes this rank's next round.
 *   x        [B, H] in the communicator's camCommConfig.actDtype (ACL_BF16 / ACL_FLOAT16), contiguous, 0 <= B <= Bmax
 *   topkIds  [B, K] ACL_INT32, ids in [-1, E) (-1: empty slot); checked on the device before any remote write
 *   layer    in [0, L)
 * Quantized topologies send int8 + one fp32 scale per token (shared per-token quant); else x as is. Waits
 * (bounded) until the round's slot is free (slots rounds may be in flight). */
CAM_API aclnnStatus aclnnCamDispatchSendGetWorkspaceSize(camComm* comm, const aclTensor* x, const aclTensor* topkIds,
                                                         int64_t layer, uint64_t* workspaceSize,
                                                         aclOpExecutor** executor);
CAM_API aclnnStatus aclnnCamDispatchSend(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                         aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
