// Error plumbing for the C API: every failing path sets a message naming the argument and returns a status.
#pragma once

#include <string>

#include "cam/cam_status.h"

namespace cam::host {

aclnnStatus Fail(aclnnStatus status, const std::string& message);
void ClearLastError();

// Runs body, turning any C++ exception into ACLNN_ERR_INNER so nothing escapes the C ABI.
template <typename F>
aclnnStatus Guarded(const char* api, F&& body) {
    try {
        return body();
    } catch (const std::exception& e) {
        return Fail(ACLNN_ERR_INNER, std::string(api) + ": internal error: " + e.what());
    } catch (...) {
        return Fail(ACLNN_ERR_INNER, std::string(api) + ": internal error");
    }
}

}  // namespace cam::host
