#include "status.h"

#include "backend.h"

namespace cam::host {

thread_local std::string tLastError;

aclnnStatus Fail(aclnnStatus status, const std::string& message) {
    tLastError = message;
    return status;
}

}  // namespace cam::host

extern "C" const char* camGetLastErrorMessage(void) { return cam::host::tLastError.c_str(); }

extern "C" aclnnStatus camStreamCreate(aclrtStream* stream) {
    return cam::host::Guarded("camStreamCreate", [&]() -> aclnnStatus {
        if (!stream) return cam::host::Fail(ACLNN_ERR_PARAM_NULLPTR, "camStreamCreate: stream is null");
        *stream = cam::host::CreateOwnStream();
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus camStreamDestroy(aclrtStream stream) {
    return cam::host::Guarded("camStreamDestroy", [&]() -> aclnnStatus {
        cam::host::DestroyOwnStream(stream);
        return ACLNN_SUCCESS;
    });
}
