// The device backend seam: everything the host ops need from the device runtime besides kernel launches. One
// implementation per backend: backend_twin.cpp (+ acl_twin.cpp) on the twin, backend_ascend.cpp on Ascend. Every
// "Enqueue" call is ordered on `stream` with the launches around it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cam/acl_compat.h"
#include "cam/tiling/platform_info.h"

namespace cam::host {

tiling::PlatformInfo CurrentPlatform();

// The stream an op is queued on: a null stream is the default stream, as in ACL (on Ascend null is passed on).
aclrtStream ResolveStream(aclrtStream stream);

// Entry i < aclGetTensorListSize of a tensor list. aclnn has no C accessor for it: on Ascend it is the
// aclTensorList class of CANN's opdev headers, on the twin the twin's list.
const aclTensor* TensorListEntry(const aclTensorList* list, uint64_t i);

// Host work in stream order: `task` returns ACLNN_SUCCESS or a status; a failing status (with *message) becomes
// the stream's error, reported by the next camSynchronizeStream. Twin: a task on the stream's worker. Ascend: a
// host callback (aclrtLaunchCallback).
void EnqueueStreamTask(aclrtStream stream, std::function<aclnnStatus(std::string* message)> task);

// Copies `bytes` host bytes to device memory `dst` (Ascend: aclrtMemcpyAsync from a buffer kept until the copy ran).
void EnqueueHostToDevice(aclrtStream stream, void* dst, std::vector<uint8_t> bytes);

// Zeroes `bytes` bytes of device memory (Ascend: aclrtMemsetAsync).
void EnqueueZero(aclrtStream stream, void* dst, uint64_t bytes);

// Reads `bytes` bytes of device memory `src` once the work queued before it ran, and hands them to `check`
// (Ascend: aclrtMemcpyAsync device-to-host, then a host callback), whose status becomes the stream's error.
void EnqueueDeviceRead(aclrtStream stream, const void* src, uint64_t bytes,
                       std::function<aclnnStatus(const uint8_t* host, std::string* message)> check);

// Frequency of the device's system cycle counter (kernels measure their timeouts in it).
uint64_t SystemCycleHz();

}  // namespace cam::host
