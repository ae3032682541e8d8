// Stream capture, backend-neutral part (graph.cpp): which streams capture, the rules a capture enforces, the pool a
// graph owns, the device status records of captured ops. What records and replays is the backend's (backend.h,
// "Capture seam"). docs/graph.md explains the rules.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cam/acl_compat.h"
#include "cam/cam_graph.h"

namespace cam::host {

// Stream-ordered host work (a host-sourced copy, a host read of device data, a host task) asked of `stream`: when
// it captures, the capture is invalidated and StatusException(CAM_ERR_CAPTURE_INVALIDATED) is thrown.
void RefuseInCapture(aclrtStream stream, const char* what);

// A synchronize of `stream` by this thread. Refused (and the capture invalidated) when `stream` captures; it also
// breaks every GLOBAL capture and this thread's THREAD_LOCAL captures, as ACL's capture modes say. Returns
// ACLNN_SUCCESS when the synchronize may go ahead, else the failing status (message set).
aclnnStatus CheckSynchronizeAllowed(aclrtStream stream);

// An op's workspace on a capturing stream must come from the capture's pool (camStreamCaptureAllocWorkspace).
void CheckCaptureWorkspace(aclrtStream stream, const void* workspace, uint64_t bytes, const char* api);

// During a capture an op's status is not reset per launch nor read back by a host task (device_status.cpp: the
// record lives in the graph's zeroed pool; the data-plane ops' communicator status, in the communicator's
// window): `check` reads it and turns it into a status; it runs after the synchronize that follows a launch of the
// graph, once per synchronize however many replays ran. `hold` lives as long as the graph (the communicator's
// in-flight token, so the communicator is not freed under a graph that reads it). Returns true when `stream`
// captures (the caller queues nothing).
bool CaptureStatusCheck(aclrtStream stream, std::function<aclnnStatus(std::string*)> check, std::shared_ptr<void> hold);

// After a synchronize of `stream` that succeeded: reads the status records of the graphs launched on it since the
// previous synchronize; the first bad one becomes the status (CAM_ERR_DEVICE_ARGUMENT, the eager sentence) and
// reported records are cleared (`streamFailed`: the stream's own error is reported instead).
aclnnStatus CheckLaunchedGraphs(aclrtStream stream, bool streamFailed);

// Counters behind camGetHostActivity, bumped by the backends.
// In camHostActivity's field order (graph.cpp static_asserts the count).
enum class HostActivity { Synchronize, DeviceRead, HostToDevice, HostTask, GraphLaunch, kCount };
void CountHostActivity(HostActivity what);

// The stream is being destroyed: its capture (if any) is dropped.
void ForgetCapture(aclrtStream stream);

}  // namespace cam::host
