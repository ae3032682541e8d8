/* Data-plane op (docs/protocol.md). It runs against a camComm (cam/cam_comm.h) and may wait on the device; every
 * wait is bounded by the communicator's timeout and ends at once on abort. Errors found on the device surface on
 * camSynchronizeStream: CAM_ERR_COMM_TIMEOUT / CAM_ERR_COMM_ABORTED / CAM_ERR_COMM_PROTOCOL are fatal (the
 * communicator refuses further ops); CAM_ERR_DEVICE_ARGUMENT found in a pre-pass leaves nothing written and the
 * communicator usable. The message (camGetLastErrorMessage) names the op, the rank, the awaited peer or replica
 * and the layer. */
#ifndef ACLNN_CAM_COMBINE_SEND_H
#define ACLNN_CAM_COMBINE_SEND_H

#include "cam/cam_comm.h"
#include "cam/cam_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* combine_send (FFN rank): sends expertOut rows [0, rows) of the work item back to their source ranks and signals
 * completion to every participant of the replica (also with zero rows). An empty work item is a no-op.
 *   expertOut [N, H] camCommConfig.actDtype; workItem [work_item_words] ACL_INT64 from dispatch_recv */
CAM_API aclnnStatus aclnnCamCombineSendGetWorkspaceSize(camComm* comm, const aclTensor* expertOut,
                                                        const aclTensor* workItem, uint64_t* workspaceSize,
                                                        aclOpExecutor** executor);
/* combine_send of a dispatch_recv batch: expertOut [rowBudget, H] (rowBudget as given to the batched dispatch_recv),
 * workItems its [I, work_item_words] table. Each item goes to its own replica with its own done signal, exactly as
 * the one-item call would serve it; every item is checked before anything is written (one bad item refuses the
 * call). Launched with aclnnCamCombineSend. */
CAM_API aclnnStatus aclnnCamCombineSendBatchGetWorkspaceSize(camComm* comm, int64_t rowBudget,
                                                             const aclTensor* expertOut, const aclTensor* workItems,
                                                             uint64_t* workspaceSize, aclOpExecutor** executor);
CAM_API aclnnStatus aclnnCamCombineSend(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                        aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
