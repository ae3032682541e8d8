#include "device_status.h"

#include <cstring>

#include "backend.h"
#include "graph.h"
#include "cam/cam_status.h"

namespace cam::host {

namespace {

const char* ArgumentName(int64_t argument) {
    switch (argument) {
        case kernels::kDeviceArgLayerIndex: return "layer_index";
        case kernels::kDeviceArgGroupList: return "group_list";
        case kernels::kDeviceArgHcclRankId: return "the HCCL context's rank id";
        case kernels::kDeviceArgHcclRankDim: return "the HCCL context's rank count";
        case kernels::kDeviceArgHcclWindow: return "the HCCL context's window of rank";
        case kernels::kDeviceArgGroupLayer: return "group_table layer of group";
        case kernels::kDeviceArgGroupExpert: return "group_table expert of group";
        case kernels::kDeviceArgGroupRows: return "group_table rows of group";
        default: return "argument";
    }
}

}  // namespace

std::string DescribeDeviceStatus(const char* op, const kernels::DeviceStatusRecord& r) {
    using namespace kernels;
    if (r.code == kDeviceStatusOk) return "";
    std::string arg = ArgumentName(r.argument);
    const std::string at = r.index >= 0 ? arg + "[" + std::to_string(r.index) + "]" : arg;
    std::string what;
    switch (r.code) {
        case kDeviceStatusOutOfRange:
            what = at + " " + std::to_string(r.value) + " outside [0, " + std::to_string(r.bound) + ")";
            break;
        case kDeviceStatusNegative:
            what = at + " = " + std::to_string(r.value) + ": negative";
            break;
        case kDeviceStatusDecreasing:
            what = at + " = " + std::to_string(r.value) + ": cumsum decreases (previous end " +
                   std::to_string(r.bound) + ")";
            break;
        case kDeviceStatusTotalExceeds:
            what = arg + " total " + std::to_string(r.value) + " exceeds M = " + std::to_string(r.bound) +
                   (r.index >= 0 ? " (at expert " + std::to_string(r.index) + ")" : "");
            break;
        case kDeviceStatusMismatch:
            what = at + " is " + std::to_string(r.value) + ", expected " + std::to_string(r.bound);
            break;
        case kDeviceStatusNull:
            what = at + " is null";
            break;
        default:
            what = "device status code " + std::to_string(r.code) + " for " + at;
    }
    return std::string(op) + ": " + what + " (detected on the device; nothing was written)";
}

aclnnStatus CheckDeviceStatus(const char* op, const kernels::DeviceStatusRecord& record, std::string* message) {
    if (record.code == kernels::kDeviceStatusOk) return ACLNN_SUCCESS;
    *message = DescribeDeviceStatus(op, record);
    return CAM_ERR_DEVICE_ARGUMENT;
}

void EnqueueDeviceStatusReset(aclrtStream stream, void* record) {
    // In a capture the record is in the graph's zeroed pool and stays sticky across replays (docs/graph.md).
    if (CaptureStatusCheck(stream, nullptr, nullptr)) return;
    EnqueueZero(stream, record, kernels::kDeviceStatusBytes);
}

void EnqueueDeviceStatusCheck(aclrtStream stream, const void* record, const char* op) {
    // In a capture: read after the synchronize that follows a launch of the graph (the stream is idle then), once
    // per synchronize however many replays ran; a reported record is cleared, so the next synchronize speaks only of
    // replays after this one (nothing resets it on the device: it is sticky across replays).
    auto afterReplay = [record, op](std::string* message) -> aclnnStatus {
        kernels::DeviceStatusRecord r{};
        ReadDeviceNow(&r, record, sizeof(r));
        const aclnnStatus st = CheckDeviceStatus(op, r, message);
        if (st != ACLNN_SUCCESS) ZeroDeviceNow(const_cast<void*>(record), sizeof(r));
        return st;
    };
    if (CaptureStatusCheck(stream, afterReplay, nullptr)) return;
    // `host` is a copy of the record taken after the kernels finished.
    EnqueueDeviceRead(stream, record, kernels::kDeviceStatusBytes, [op](const uint8_t* host, std::string* message) {
        kernels::DeviceStatusRecord r;
        std::memcpy(&r, host, sizeof(r));
        return CheckDeviceStatus(op, r, message);
    });
}

aclnnStatus LaunchWithDeviceStatus(aclrtStream stream, void* record, const char* op,
                                   const std::function<void()>& kernels) {
    EnqueueDeviceStatusReset(stream, record);
    kernels();
    EnqueueDeviceStatusCheck(stream, record, op);
    return ACLNN_SUCCESS;
}

}  // namespace cam::host
