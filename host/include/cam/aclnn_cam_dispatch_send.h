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
/* dispatch_send with a placement table (docs/protocol.md §15): as above, and
 *   placement  [L, E, 1 + 2F] ACL_INT64 device memory, contiguous: for expert e of layer l, {n, f0, j0, f1, j1, ...}
 *              = n in [1, F] replicas, replica i in local slot j_i (in [0, R)) of FFN index f_i (in [0, F)); pairs
 *              past n are not read. The row of (token t, top-k index k) of expert e goes to replica (t + k) % n.
 *              Every word the kernel reads is bounded in its pre-pass before any remote write (a bad one is
 *              CAM_ERR_DEVICE_ARGUMENT naming the placement, nothing written). NULL: the contiguous placement,
 *              which only a topology with expert_slots 0 or E / F has; any other topology requires a table.
 * aclnnCamDispatchSendGetWorkspaceSize is this call with placement NULL. The table must stay unchanged from the
 * launch until the op completed on its stream. */
CAM_API aclnnStatus aclnnCamDispatchSendV2GetWorkspaceSize(camComm* comm, const aclTensor* x, const aclTensor* topkIds,
                                                           int64_t layer, const aclTensor* placement,
                                                           uint64_t* workspaceSize, aclOpExecutor** executor);
CAM_API aclnnStatus aclnnCamDispatchSend(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                         aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
