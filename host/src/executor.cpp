#include "executor.h"

#include <memory>
#include <string>

#include "status.h"

namespace cam::host {

aclnnStatus RunExecutor(const char* api, void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                        aclrtStream stream) {
    std::unique_ptr<aclOpExecutor> owned(executor);
    if (!owned) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": executor is null");
    if (!owned->launch) return ACLNN_SUCCESS;
    if (stream == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": stream is null");
    if (workspaceSize < owned->workspaceSize || (owned->workspaceSize > 0 && workspace == nullptr)) {
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": workspace of " + std::to_string(workspaceSize) +
                                                 " bytes, the op needs " + std::to_string(owned->workspaceSize));
    }
    return Guarded(api, [&] { return owned->launch(workspace, stream); });
}

}  // namespace cam::host
