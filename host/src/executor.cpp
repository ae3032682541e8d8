#include "executor.h"

#include <mutex>
#include <string>
#include <unordered_map>

#include "backend.h"
#include "graph.h"
#include "status.h"

namespace cam::host {

namespace {

struct Registry {
    std::mutex mutex;
    std::unordered_map<uintptr_t, std::unique_ptr<Executor>> live;
    uintptr_t next = 0x10000;  // handles are never reused, so a stale one cannot name a newer executor
};

Registry& Executors() {
    static Registry* const registry = new Registry();  // outlives static destruction: ops may run at exit
    return *registry;
}

// The stream this thread synchronizes right after its launches (camBeginSynchronousLaunches), or none.
thread_local bool tCallerSyncs = false;
thread_local aclrtStream tCallerSyncStream = nullptr;

}  // namespace

aclnnStatus CheckOutPointers(const char* op, const uint64_t* workspaceSize, aclOpExecutor* const* executor) {
    if (workspaceSize && executor) return ACLNN_SUCCESS;
    return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(op) + ": workspaceSize/executor out-pointer is null");
}

aclnnStatus Finish(std::unique_ptr<Executor> executor, uint64_t* workspaceSize, aclOpExecutor** handle) {
    Registry& r = Executors();
    const uint64_t bytes = executor->workspaceSize;
    std::lock_guard<std::mutex> lock(r.mutex);
    const uintptr_t id = r.next;
    r.next += 16;
    r.live.emplace(id, std::move(executor));
    *workspaceSize = bytes;
    *handle = reinterpret_cast<aclOpExecutor*>(id);
    return ACLNN_SUCCESS;
}

aclnnStatus RunExecutor(const char* api, const char* op, void* workspace, uint64_t workspaceSize,
                        aclOpExecutor* handle, aclrtStream stream) {
    if (!handle) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": executor is null");
    std::unique_ptr<Executor> owned;
    {
        Registry& r = Executors();
        std::lock_guard<std::mutex> lock(r.mutex);
        auto it = r.live.find(reinterpret_cast<uintptr_t>(handle));
        if (it == r.live.end())
            return Fail(ACLNN_ERR_PARAM_INVALID,
                        std::string(api) + ": executor is not live: it already ran (cam executors run once) or was "
                                           "not made by a cam GetWorkspaceSize");
        if (std::string(it->second->op) != op)
            return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": executor was made for " + it->second->op +
                                                     ", not " + op + " (it stays usable for its own op)");
        owned = std::move(it->second);
        r.live.erase(it);
    }
    if (!owned->launch) return ACLNN_SUCCESS;
    if (workspaceSize < owned->workspaceSize || (owned->workspaceSize > 0 && workspace == nullptr)) {
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": workspace of " + std::to_string(workspaceSize) +
                                                 " bytes, the op needs " + std::to_string(owned->workspaceSize));
    }
    return Guarded(api, [&] {
        const aclrtStream resolved = ResolveStream(stream);
        CheckCaptureWorkspace(resolved, workspace, workspaceSize, api);
        if (owned->endsOnItsOwn && tCallerSyncs && tCallerSyncStream == resolved)
            return LaunchOnCaller(resolved, [&] { return owned->launch(workspace, resolved); });
        return owned->launch(workspace, resolved);
    });
}

}  // namespace cam::host

extern "C" aclnnStatus camBeginSynchronousLaunches(aclrtStream stream) {
    return cam::host::Guarded("camBeginSynchronousLaunches", [&] {
        cam::host::tCallerSyncStream = cam::host::ResolveStream(stream);
        cam::host::tCallerSyncs = true;
        return ACLNN_SUCCESS;
    });
}

extern "C" void camEndSynchronousLaunches(void) {
    cam::host::tCallerSyncs = false;
    cam::host::tCallerSyncStream = nullptr;
}
