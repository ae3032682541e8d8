// The status record a kernel's pre-pass fills when a device-resident argument is bad (docs/architecture.md, "Status codes and errors"). It lives at
// the start of the op's workspace; the host zeroes it before the launch and reads it after, on the same stream
// (host/src/device_status.h), turning a non-zero code into CAM_ERR_DEVICE_ARGUMENT with a message naming the
// argument. A captured op's record is zeroed once, with the graph's pool, and read and cleared at each synchronize;
// kernels write it only while its code is clear (the first error wins, docs/graph.md). Plain C++ so host code
// shares the layout; kernels write it with WriteDeviceStatus (device_status_write.h).
#pragma once

#include <cstdint>

#ifndef __aicore__
#define __aicore__
#endif

namespace cam::kernels {

// What went wrong; the host turns each into a sentence.
enum DeviceStatusCode : int64_t {
    kDeviceStatusOk = 0,
    kDeviceStatusOutOfRange = 1,    // value outside [0, bound)
    kDeviceStatusNegative = 2,      // element `index` is negative
    kDeviceStatusDecreasing = 3,    // element `index` is below the previous one (bound)
    kDeviceStatusTotalExceeds = 4,  // running total `value` passes capacity `bound` at element `index`
    kDeviceStatusMismatch = 5,      // `value` differs from `bound`, the value it must equal
    kDeviceStatusNull = 6,          // element `index` is null
};

// Which argument; names are in host/src/device_status.cpp. New ops append, never renumber.
enum DeviceArgument : int64_t {
    kDeviceArgNone = 0,
    kDeviceArgLayerIndex = 1,
    kDeviceArgGroupList = 2,
    kDeviceArgHcclRankDim = 3,  // window_table: the HCCL context's rank count
    kDeviceArgHcclRankId = 4,   // window_table: the HCCL context's rank id
    kDeviceArgHcclWindow = 5,   // window_table: a rank's window in the HCCL context
    kDeviceArgGroupLayer = 6,   // a GMM group table's layer word of group `index`
    kDeviceArgGroupExpert = 7,  // a GMM group table's expert word of group `index`
    kDeviceArgGroupRows = 8,    // a GMM group table's rows word of group `index`
};

// One record of 8 int64 words (64 bytes: a whole GM cache line, so writing it never tears a neighbour).
struct DeviceStatusRecord {
    int64_t code;      // DeviceStatusCode; written last, so a non-zero code means the rest is valid
    int64_t argument;  // DeviceArgument
    int64_t index;     // element of the argument (e.g. expert), -1 when the argument is a scalar
    int64_t value;     // offending value
    int64_t bound;     // the limit it broke
    int64_t reserved[3];
};

constexpr uint32_t kDeviceStatusWords = 8;
constexpr uint32_t kDeviceStatusBytes = kDeviceStatusWords * 8;
static_assert(sizeof(DeviceStatusRecord) == kDeviceStatusBytes, "status record is one 64-byte line");

}  // namespace cam::kernels
