/* Umbrella header of the cam C++ SDK. */
#ifndef CAM_H
#define CAM_H

#include "cam/acl_compat.h"
#include "cam/cam_status.h"
#include "cam/cam_platform.h"
#include "cam/aclnn_cam_dynamic_quant.h"
#include "cam/cam_comm.h"
#include "cam/aclnn_cam_dispatch_send.h"
#include "cam/aclnn_cam_dispatch_recv.h"
#include "cam/aclnn_cam_combine_send.h"
#include "cam/aclnn_cam_combine_recv.h"
#include "cam/aclnn_cam_window_table.h"
#include "cam/aclnn_cam_gmm_multi_layer.h"
#include "cam/aclnn_cam_gmm_swiglu_quant_multi_layer.h"
#include "cam/cam_graph.h"
#include "cam/cam_timeouts.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Executors of op `op` ("gmm_multi_layer", "dispatch_recv", ...) this process has launched onto a stream (eagerly
 * or into a capture; a graph replay launches nothing new). What it counts is the second phase of an op that got as
 * far as its launch, so a benchmark or test can count, e.g., grouped-matmul launches per served token. */
CAM_API uint64_t camGetLaunchCount(const char* op);

#ifdef __cplusplus
}
#endif

#endif
