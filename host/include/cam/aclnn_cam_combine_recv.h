/* Data-plane op (docs/protocol.md). It runs against a camComm (cam/cam_comm.h) and may wait on the device; every
 * wait is bounded by the communicator's timeout and ends at once on abort. Errors found on the device surface on
 * camSynchronizeStream: CAM_ERR_COMM_TIMEOUT / CAM_ERR_COMM_ABORTED / CAM_ERR_COMM_PROTOCOL are fatal (the
 * communicator refuses further ops); CAM_ERR_DEVICE_ARGUMENT found in a pre-pass leaves nothing written and the
 * communicator usable. The message (camGetLastErrorMessage) names the op, the rank, the awaited peer or replica
 * and the layer. */
#ifndef ACLNN_CAM_COMBINE_RECV_H
#define ACLNN_CAM_COMBINE_RECV_H

#include "cam/cam_comm.h"
#include "cam/cam_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* combine_recv (Attention rank): waits until every FFN rank completed this rank's oldest round in flight, then
 *   out[t] = round(sum_k w[t,k] * row(t,k)) in fp32, slot order, empty slots skipped.
 *   topkIds [B, K] ACL_INT32 (the ids dispatched in that round), topkWeights [B, K] ACL_FLOAT,
 *   out [B, H] in camCommConfig.actDtype */
CAM_API aclnnStatus aclnnCamCombineRecvGetWorkspaceSize(camComm* comm, const aclTensor* topkIds,
                                                        const aclTensor* topkWeights, aclTensor* out,
                                                        uint64_t* workspaceSize, aclOpExecutor** executor);
CAM_API aclnnStatus aclnnCamCombineRecv(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                        aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
