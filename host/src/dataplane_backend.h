// What the data plane needs from the backend beyond launches: host work in stream order (twin: a task on the stream
// worker; Ascend: a host callback on the stream, aclrtLaunchCallback) and the frequency of the device's system cycle
// counter (kernels measure their timeouts in it).
#pragma once

#include <functional>
#include <cstdint>
#include <string>

#include "cam/cam_status.h"

namespace cam::host {

// `task` returns ACLNN_SUCCESS or a status; a failing status (with *message) becomes the stream's error, reported
// by the next camSynchronizeStream.
void EnqueueStreamTask(aclrtStream stream, std::function<aclnnStatus(std::string* message)> task);

uint64_t SystemCycleHz();

}  // namespace cam::host
