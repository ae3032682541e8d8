/* A data plane over an HCCL communicator (Ascend builds only; docs/ascend.md §5). Every rank's window is its HCCL
 * window (HcclCommConfig.hcclBufferSize = the topology's window, in MiB), and the peer table comes from the
 * window_table MC2 op bound to the communicator's group. Never run on hardware.
 *
 * Rank 0 calls camHcclGetRootInfo and hands the bytes to every rank (e.g. through a torch.distributed Store);
 * every rank then calls camCommCreateHccl with them. */
#ifndef CAM_COMM_HCCL_H
#define CAM_COMM_HCCL_H

#include "cam/cam_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CAM_WITH_CANN)
/* HcclGetRootInfo into `rootInfo` (at least HCCL_ROOT_INFO_BYTES = 4108 bytes; *written is set to that size). */
CAM_API aclnnStatus camHcclGetRootInfo(void* rootInfo, uint64_t bytes, uint64_t* written);

/* Creates rank `rank` of a plane over a new HCCL communicator of world_size(topology) ranks. aicoreTimeoutS is the
 * runtime's AI Core op timeout in force (1091 s unless changed with aclrtSetOpExecuteTimeOut): the plane's waits
 * must end before it (camCheckAscendPlane). */
CAM_API aclnnStatus camCommCreateHccl(const void* rootInfo, uint64_t rootInfoBytes, const CamTopology* topology,
                                      int64_t rank, const camCommConfig* config, uint32_t aicoreTimeoutS,
                                      camComm** comm);
#endif

#ifdef __cplusplus
}
#endif

#endif
