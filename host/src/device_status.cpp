#include "device_status.h"

#include <atomic>
#include <cstring>

#include "cam/cam_status.h"
#include "twin/launch.h"
#include "twin/stream.h"

namespace cam::host {

namespace {

const char* ArgumentName(int64_t argument) {
    switch (argument) {
        case kernels::kDeviceArgLayerIndex: return "layer_index";
        case kernels::kDeviceArgGroupList: return "group_list";
        default: return "argument";
    }
}

kernels::DeviceStatusRecord Load(const void* record) {
    // The kernels wrote the record with release order, code last; read the code first with acquire.
    const auto* words = static_cast<const int64_t*>(record);
    kernels::DeviceStatusRecord r{};
    r.code = __atomic_load_n(&words[0], __ATOMIC_ACQUIRE);
    r.argument = words[1];
    r.index = words[2];
    r.value = words[3];
    r.bound = words[4];
    return r;
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
        default:
            what = "device status code " + std::to_string(r.code) + " for " + at;
    }
    return std::string(op) + ": " + what + " (detected on the device; nothing was written)";
}

void EnqueueDeviceStatusReset(aclrtStream stream, void* record) {
    twin::EnqueueHostTask(stream, [record] { std::memset(record, 0, kernels::kDeviceStatusBytes); });
}

void EnqueueDeviceStatusCheck(aclrtStream stream, const void* record, const char* op) {
    twin::EnqueueHostTask(stream, [record, op] {
        const kernels::DeviceStatusRecord r = Load(record);
        if (r.code != kernels::kDeviceStatusOk) throw twin::TaskError(CAM_ERR_DEVICE_ARGUMENT, DescribeDeviceStatus(op, r));
    });
}

void EnqueueHostToDevice(aclrtStream stream, void* dst, std::vector<uint8_t> bytes) {
    twin::EnqueueHostTask(stream, [dst, bytes = std::move(bytes)] { std::memcpy(dst, bytes.data(), bytes.size()); });
}

}  // namespace cam::host
