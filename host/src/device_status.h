// Host side of the device status record (kernels/common/device_status_record.h): device-resident arguments are checked
// by the kernel's pre-pass; the host zeroes the record before the kernels and inspects it after them, in stream
// order, so the failure surfaces on synchronize as CAM_ERR_DEVICE_ARGUMENT with a sentence naming the argument.
// Shared by every op whose kernels validate device-resident values (GMM, and the communication ops).
//
// Both steps go through the backend seam (backend.h): a zeroing before the kernels, a read-back after them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cam/acl_compat.h"
#include "common/device_status_record.h"

namespace cam::host {

// "gmm_multi_layer: layer_index 7 outside [0, 3)" and the like; "" for an OK record.
std::string DescribeDeviceStatus(const char* op, const kernels::DeviceStatusRecord& record);

// ACLNN_SUCCESS for an OK record, else CAM_ERR_DEVICE_ARGUMENT with *message = DescribeDeviceStatus: the one
// reading of a record, eager (after the kernels, in stream order) and after a replay (at the synchronize).
aclnnStatus CheckDeviceStatus(const char* op, const kernels::DeviceStatusRecord& record, std::string* message);

void EnqueueDeviceStatusReset(aclrtStream stream, void* record);

// `op` must outlive the stream's work (a string literal).
void EnqueueDeviceStatusCheck(aclrtStream stream, const void* record, const char* op);

// The launch of every op whose kernels validate device-resident arguments into `record`: the reset, `kernels`
// (which queue the op's kernels), then the check, in stream order.
aclnnStatus LaunchWithDeviceStatus(aclrtStream stream, void* record, const char* op,
                                   const std::function<void()>& kernels);

}  // namespace cam::host
