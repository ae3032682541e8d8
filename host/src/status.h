// Error plumbing for the C API: every failing path sets a message naming the argument and returns a status.
#pragma once

#include <stdexcept>
#include <string>

#include "cam/cam_status.h"

namespace cam::host {

aclnnStatus Fail(aclnnStatus status, const std::string& message);

// Thrown by host code that must abandon an op with a status of its own (e.g. a broken capture rule); Guarded
// turns it into that status with its message.
class StatusException : public std::runtime_error {
public:
    StatusException(aclnnStatus status, const std::string& message) : std::runtime_error(message), status(status) {}
    aclnnStatus status;
};

// Runs body, turning any C++ exception into ACLNN_ERR_INNER so nothing escapes the C ABI.
template <typename F>
aclnnStatus Guarded(const char* api, F&& body) {
    try {
        return body();
    } catch (const StatusException& e) {
        return Fail(e.status, std::string(api) + ": " + e.what());
    } catch (const std::exception& e) {
        return Fail(ACLNN_ERR_INNER, std::string(api) + ": internal error: " + e.what());
    } catch (...) {
        return Fail(ACLNN_ERR_INNER, std::string(api) + ": internal error");
    }
}

}  // namespace cam::host
