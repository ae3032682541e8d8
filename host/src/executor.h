// aclOpExecutor: what GetWorkspaceSize decided (tiling, buffers), run once by the second phase.
#pragma once

#include <cstdint>
#include <functional>

#include "cam/acl_compat.h"

struct aclOpExecutor {
    uint64_t workspaceSize = 0;
    std::function<aclnnStatus(void* workspace, aclrtStream stream)> launch;  // empty: nothing to launch
};

namespace cam::host {

// Shared second phase: checks the handles, launches, and frees the executor whatever happens.
aclnnStatus RunExecutor(const char* api, void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                        aclrtStream stream);

}  // namespace cam::host
