#include "status.h"

namespace cam::host {

thread_local std::string tLastError;

aclnnStatus Fail(aclnnStatus status, const std::string& message) {
    tLastError = message;
    return status;
}

void ClearLastError() { tLastError.clear(); }

}  // namespace cam::host

extern "C" const char* camGetLastErrorMessage(void) { return cam::host::tLastError.c_str(); }
