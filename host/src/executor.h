// What GetWorkspaceSize decided (tiling, buffers) for one op, run once by the second phase. The caller holds it
// as an opaque aclOpExecutor* handle: cam never defines aclOpExecutor (CANN has a class of that name), and a
// handle is a number from a registry, never reused, so a stale or foreign handle is refused instead of
// dereferenced.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "cam/acl_compat.h"

namespace cam::host {

struct Executor {
    explicit Executor(const char* op) : op(op) {}
    const char* op;  // the op it was made for ("dynamic_quant"), a string literal
    uint64_t workspaceSize = 0;
    std::function<aclnnStatus(void* workspace, aclrtStream stream)> launch;  // empty: nothing to launch
    // Its kernels wait on nothing outside their own launch (no peer flag, no host event), so their run ends on its
    // own: a caller that synchronizes at once may run them itself (camBeginSynchronousLaunches).
    bool endsOnItsOwn = false;
};

// The first check of every GetWorkspaceSize: both out-pointers given.
aclnnStatus CheckOutPointers(const char* op, const uint64_t* workspaceSize, aclOpExecutor* const* executor);

// Whether this thread is between camBeginArgumentCheck and camEndArgumentCheck: tensors may have no data, and
// GetWorkspaceSize checks its arguments without making an executor (nothing may be built from the data addresses).
bool ArgumentCheckOnly();

// The last step of every GetWorkspaceSize: registers the executor and hands its handle and workspace size out (in
// an argument check, hands out the workspace size and a null handle, and drops the executor).
aclnnStatus Finish(std::unique_ptr<Executor> executor, uint64_t* workspaceSize, aclOpExecutor** handle);

// The second phase of every op. Refused before launching (a handle made for another op, a missing or too small
// workspace), the executor stays live for a corrected call or camDestroyExecutor; once it launches it is consumed,
// so running it again is refused (cam executors are not repeatable). A null stream is the default stream.
aclnnStatus RunExecutor(const char* api, const char* op, void* workspace, uint64_t workspaceSize,
                        aclOpExecutor* handle, aclrtStream stream);

}  // namespace cam::host
