// Host-side entry of the twin: queue a kernel launch on a twin stream (aclrtStream is a twin::Stream*).
#pragma once

#include <cstdint>
#include <functional>

namespace cam::twin {

void EnqueueLaunch(void* stream, const char* kernelName, uint32_t blockDim, std::function<void()> kernel);

}  // namespace cam::twin
