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
 *   placement  [8 + L * E * (1 + 2F)] ACL_INT64 device memory, contiguous. Word 0 is the table's epoch (0 at
 *              creation, +1 per rebalance; a rebalance writes -1, then the rows, then the new epoch), words 1..7 are
 *              0; then for expert e of layer l, at word 8 + (l * E + e) * (1 + 2F), {n, f0, j0, f1, j1, ...} = n in
 *              [1, F] replicas, replica i in local slot j_i (in [0, R)) of FFN index f_i (in [0, F)); pairs past n
 *              are not read. The row of (token t, top-k index k) of expert e goes to replica (t + k0) % n, k0 the
 *              smallest top-k index of token t whose id is e (a token's rows for one expert share a replica). Every
 *              word the kernel reads is bounded in its pre-pass before any remote write, and the epoch is read
 *              before and after the rows: a bad word, a negative epoch or an epoch that changed is
 *              CAM_ERR_DEVICE_ARGUMENT naming the placement, nothing written. Every record carries the epoch; FFN
 *              ranks serve a round only with slot weights of the same epoch (camCommSetWeightsEpoch). NULL: the
 *              contiguous placement at epoch 0, which only a topology with expert_slots 0 or E / F has; any other
 *              topology requires a table.
 * aclnnCamDispatchSendGetWorkspaceSize is this call with placement NULL. */
CAM_API aclnnStatus aclnnCamDispatchSendV2GetWorkspaceSize(camComm* comm, const aclTensor* x, const aclTensor* topkIds,
                                                           int64_t layer, const aclTensor* placement,
                                                           uint64_t* workspaceSize, aclOpExecutor** executor);
CAM_API aclnnStatus aclnnCamDispatchSend(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                         aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
