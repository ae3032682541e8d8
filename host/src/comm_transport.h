// The twin's in-process transport: ranks are threads of one process, windows are host memory registered by group
// name. Processes as ranks run the NPU transport (transport_ipc.cpp) on both backends: on the twin over its POSIX-shm
// stand-ins of the ACL calls, which is what the twin's shm plane is.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm.h"

namespace cam::host {

// Joins rank `rank` of the in-process group `name`: allocates its zeroed window of `bytes`, lets `init` write it
// (the identity line) before any peer can see it, and waits up to joinTimeoutMs for the whole world. On failure
// returns nullptr with *why (the group is poisoned, so the ranks still waiting fail at once with the same reason).
std::unique_ptr<Transport> JoinInProcessGroup(const std::string& name, const CamTopology& topo, int64_t rank,
                                              uint64_t bytes, const std::function<void(uint8_t*)>& init,
                                              int32_t joinTimeoutMs, std::string* why);

}  // namespace cam::host
