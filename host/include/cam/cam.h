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

#endif
