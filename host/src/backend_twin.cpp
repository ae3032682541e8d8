// Twin backend: streams are twin::Stream worker queues; the platform is the twin's platform description.
#include <cmath>
#include <string>

#include "backend.h"
#include "cam/cam_platform.h"
#include "status.h"
#include "twin/runtime.h"
#include "twin/stream.h"

namespace cam::host {

tiling::PlatformInfo CurrentPlatform() {
    const twin::Platform& p = twin::ActivePlatform();
    // Tiling gets the UB and L1 a kernel may carve: the top of each is reserved (API scratch, runtime).
    return {p.aivCores, p.aicCores, p.ubBytes - p.ubReservedBytes, p.l1Bytes - p.l1ReservedBytes, p.l0aBytes,
            p.l0bBytes, p.l0cBytes};
}

namespace {

aclnnStatus StatusOfTaskCode(int code) {
    return code == twin::kTaskFault ? CAM_ERR_KERNEL_FAULT : code;
}

// Unbounded host waits are not allowed: "no limit" still means a day, long past any sane prefill.
constexpr double kUnlimitedSeconds = 86400.0;

}  // namespace

}  // namespace cam::host

using cam::host::Fail;

extern "C" aclError aclrtCreateStream(aclrtStream* stream) {
    if (!stream) return ACL_ERROR_INVALID_PARAM;
    *stream = new cam::twin::Stream();
    return ACL_SUCCESS;
}

extern "C" aclError aclrtDestroyStream(aclrtStream stream) {
    delete static_cast<cam::twin::Stream*>(stream);
    return ACL_SUCCESS;
}

extern "C" aclnnStatus camSynchronizeStream(aclrtStream stream, int32_t timeoutMs) {
    if (!stream) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camSynchronizeStream: stream is null");
    const double seconds = timeoutMs < 0 ? cam::host::kUnlimitedSeconds : timeoutMs / 1000.0;
    cam::twin::StreamError error;
    if (!static_cast<cam::twin::Stream*>(stream)->Synchronize(seconds, &error)) {
        return Fail(CAM_ERR_SYNC_TIMEOUT,
                    "stream did not finish within " + std::to_string(timeoutMs) + " ms (its work continues)");
    }
    if (error.code != 0) return Fail(cam::host::StatusOfTaskCode(error.code), error.message);
    return ACLNN_SUCCESS;
}

extern "C" aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout) {
    if (!stream) return ACL_ERROR_INVALID_PARAM;
    return camSynchronizeStream(stream, timeout) == ACLNN_SUCCESS ? ACL_SUCCESS : ACL_ERROR_FAILURE;
}

extern "C" aclError aclrtSynchronizeStream(aclrtStream stream) { return aclrtSynchronizeStreamWithTimeout(stream, -1); }

extern "C" const char* camBackendName(void) { return "twin"; }

extern "C" aclnnStatus camGetPlatform(camPlatformInfo* info) {
    if (!info) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camGetPlatform: info is null");
    const cam::twin::Platform& p = cam::twin::ActivePlatform();
    *info = {p.name, p.aivCores, p.aicCores, p.ubBytes};
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camSetTwinPlatform(const char* name) {
    if (!name || !cam::twin::SetPlatform(name))
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string("camSetTwinPlatform: unknown platform '") +
                                                 (name ? name : "(null)") + "' (twin, ascend910b, ascend910b1..ascend910b4, ascend910_93)");
    return ACLNN_SUCCESS;
}
