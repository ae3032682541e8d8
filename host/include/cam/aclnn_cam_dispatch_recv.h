/* Data-plane op (docs/protocol.md). It runs against a camComm (cam/cam_comm.h) and may wait on the device; every
 * wait is bounded by the communicator's timeout and ends at once on abort. Errors found on the device surface on
 * camSynchronizeStream: CAM_ERR_COMM_TIMEOUT / CAM_ERR_COMM_ABORTED / CAM_ERR_COMM_PROTOCOL are fatal (the
 * communicator refuses further ops); CAM_ERR_DEVICE_ARGUMENT found in a pre-pass leaves nothing written and the
 * communicator usable. The message (camGetLastErrorMessage) names the op, the rank, the awaited peer or replica
 * and the layer. */
#ifndef ACLNN_CAM_DISPATCH_RECV_H
#define ACLNN_CAM_DISPATCH_RECV_H

#include "cam/cam_comm.h"
#include "cam/cam_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dispatch_recv (FFN rank): takes the next ready replica round robin, or returns an empty work item after the
 * idle bound. Outputs have static shapes (N = min(capacity, P*Ts*K) with Ts = min(Bmax, window_tokens), window_tokens
 * 0 meaning Bmax; R = local expert slots: expert_slots or E/F):
 *   expandX       [N, H] ACL_INT8 (quantized) or camCommConfig.actDtype; rows past work_item rows are not written
 *   scales        [N] ACL_FLOAT (quantized) or [1] (unused)
 *   expertCounts  [R] ACL_INT64: rows per local expert (a group_list of type 1 = counts)
 *   workItem      [work_item_words] ACL_INT64 (protocol §4.2); word 2 is the layer (0 when empty) */
CAM_API aclnnStatus aclnnCamDispatchRecvGetWorkspaceSize(camComm* comm, aclTensor* expandX, aclTensor* scales,
                                                         aclTensor* expertCounts, aclTensor* workItem,
                                                         uint64_t* workspaceSize, aclOpExecutor** executor);
/* dispatch_recv, batched (same op, one executor type): at scan time takes every replica that is ready, round robin
 * from the fairness pointer, one chunk each, while the chunks fit rowBudget rows and at most
 * I = min(D, 64) work items; never waits for a replica that is not ready, and waits boundedly as above when none
 * is. rowBudget must hold one whole chunk (>= N above), else ACLNN_ERR_PARAM_INVALID naming row_budget. Outputs:
 *   expandX     [rowBudget, H], scales [rowBudget] (or [1]): the items' rows, item after item, each as above
 *   groupTable  [I*R, 3] ACL_INT64: group i*R + j = {layer of item i, local expert j, rows}; groups of unused
 *               item slots are {0, j, 0} (docs/gmm.md "Group table": W1/W2 take it as is)
 *   origin      [rowBudget, 3] ACL_INT64: per written row {replica, participant, t*K + k}
 *   workItems   [I, work_item_words] ACL_INT64: item i as one-item mode writes it; unused slots are empty items */
CAM_API aclnnStatus aclnnCamDispatchRecvBatchGetWorkspaceSize(camComm* comm, int64_t rowBudget, aclTensor* expandX,
                                                              aclTensor* scales, aclTensor* groupTable,
                                                              aclTensor* origin, aclTensor* workItems,
                                                              uint64_t* workspaceSize, aclOpExecutor** executor);
/* The batched mode's row-budget rule for a topology, without a communicator (a serving policy checks it once,
 * before it allocates): ACLNN_ERR_PARAM_INVALID naming row_budget, as the batched GetWorkspaceSize refuses a budget
 * below one chunk (N above). *largestBatchRows (may be NULL) receives min(I * N, 2^31 - 1), the most rows one batch
 * can ever take on this topology. */
CAM_API aclnnStatus aclnnCamDispatchRecvCheckRowBudget(const CamTopology* topology, int64_t rowBudget,
                                                       int64_t* largestBatchRows);
CAM_API aclnnStatus aclnnCamDispatchRecv(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                         aclrtStream stream);

/* Stopping a receive loop (docs/graph.md, "Stopping a captured loop"). Each FFN rank's window holds one stop word
 * (int32, cam::layout::ffn_stop_off). A dispatch_recv given it (the V2 calls below, stopWord non-NULL) reads it at
 * every poll: while it is non-zero the receive takes no work item and writes an empty one at once, without waiting
 * its idle bound, so a captured loop of receives idles through its replays quickly. Only zero / non-zero matters.
 * aclnnCamDispatchRecvStopWord gives the word's device address (what the V2 calls accept; any other address, inside
 * the window or not, is ACLNN_ERR_PARAM_INVALID naming stop_word, before anything is launched).
 * aclnnCamDispatchRecvSetStop(comm, 1, &was) sets it (a no-op when it is set already: *was says so), (comm, 0, &was)
 * clears it. Both write through the communicator's transport (the host mapping, or a device copy). */
CAM_API aclnnStatus aclnnCamDispatchRecvStopWord(camComm* comm, void** stopWord);
CAM_API aclnnStatus aclnnCamDispatchRecvSetStop(camComm* comm, int32_t stop, int32_t* wasStopped);
CAM_API aclnnStatus aclnnCamDispatchRecvV2GetWorkspaceSize(camComm* comm, aclTensor* expandX, aclTensor* scales,
                                                           aclTensor* expertCounts, aclTensor* workItem,
                                                           const void* stopWord, uint64_t* workspaceSize,
                                                           aclOpExecutor** executor);
CAM_API aclnnStatus aclnnCamDispatchRecvBatchV2GetWorkspaceSize(camComm* comm, int64_t rowBudget, aclTensor* expandX,
                                                                aclTensor* scales, aclTensor* groupTable,
                                                                aclTensor* origin, aclTensor* workItems,
                                                                const void* stopWord, uint64_t* workspaceSize,
                                                                aclOpExecutor** executor);

#ifdef __cplusplus
}
#endif

#endif
