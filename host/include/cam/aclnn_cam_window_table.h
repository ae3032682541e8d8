/* window_table: cam's one MC2 op (docs/ascend.md §5). Reads the HCCL context of `group` for rank `rank` and writes
 * every rank's window base into `peers`, the peer table the four data-plane ops read.
 *   topology  the plane's topology (its world size is the rank count the context must have)
 *   rank      this rank in the plane (the context's rank id must equal it)
 *   group     the HCCL group of the plane. Ascend: HcclGetCommName of the plane's HcclComm; the op framework binds
 *             the group's context to the launch. Twin: a group a twin transport registered.
 *   peers     [world size] ACL_INT64 (out), device memory
 * A Comm runs it itself when it is created; calling it directly is for tests and for transports of one's own.
 * A context whose rank count or rank id differs, or that lacks a rank's window, is refused by camSynchronizeStream
 * with CAM_ERR_DEVICE_ARGUMENT naming it, and `peers` is left as it was. */
#ifndef ACLNN_CAM_WINDOW_TABLE_H
#define ACLNN_CAM_WINDOW_TABLE_H

#include "cam/cam_comm.h"
#include "cam/cam_status.h"

#ifdef __cplusplus
extern "C" {
#endif

CAM_API aclnnStatus aclnnCamWindowTableGetWorkspaceSize(const CamTopology* topology, int64_t rank, const char* group,
                                                        aclTensor* peers, uint64_t* workspaceSize,
                                                        aclOpExecutor** executor);
CAM_API aclnnStatus aclnnCamWindowTable(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                        aclrtStream stream);

/* The peer table a Comm's window_table op wrote when the Comm was created: `count` (= the world size) entries. */
CAM_API aclnnStatus camCommGetPeerTable(const camComm* comm, int64_t* peers, int64_t count);

#if !defined(CAM_WITH_CANN)
/* Twin only: registers the HCCL context rank `rank` of `group` gets, where the HCCL runtime would set it up:
 * rank id `rank`, rank count `rankDim`, windows[0 .. count) as windowsIn (0 = no window), count <= 1024. The twin's
 * transports register theirs themselves; tests register contexts that are wrong on purpose. */
CAM_API aclnnStatus camTwinHcclRegisterContext(const char* group, int64_t rank, int64_t rankDim,
                                               const uint64_t* windows, int64_t count);
CAM_API aclnnStatus camTwinHcclUnregisterContext(const char* group, int64_t rank);
#endif

#ifdef __cplusplus
}
#endif

#endif
