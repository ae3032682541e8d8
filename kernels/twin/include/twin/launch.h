// Host-side entry of the twin: queue a kernel launch on a twin stream (aclrtStream is a twin::Stream*).
#pragma once

#include <cstdint>
#include <functional>

namespace cam::twin {

void EnqueueLaunch(void* stream, const char* kernelName, uint32_t blockDim, std::function<void()> kernel);

// Queue host work in stream order (e.g. reading a kernel's status word after it ran). Throwing
// cam::twin::TaskError from `task` reports its code on the next synchronize. On Ascend this is a host callback
// on the stream (aclrtLaunchCallback) or a check after synchronize.
void EnqueueHostTask(void* stream, std::function<void()> task);

}  // namespace cam::twin
