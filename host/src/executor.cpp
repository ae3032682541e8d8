#include "executor.h"

#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backend.h"
#include "cam/cam.h"
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
thread_local bool tArgumentCheck = false;

}  // namespace

bool ArgumentCheckOnly() { return tArgumentCheck; }

aclnnStatus CheckOutPointers(const char* op, const uint64_t* workspaceSize, aclOpExecutor* const* executor) {
    if (workspaceSize && executor) return ACLNN_SUCCESS;
    return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(op) + ": workspaceSize/executor out-pointer is null");
}

aclnnStatus Finish(std::unique_ptr<Executor> executor, uint64_t* workspaceSize, aclOpExecutor** handle) {
    const uint64_t bytes = executor->workspaceSize;
    if (tArgumentCheck) {
        *workspaceSize = bytes;
        *handle = nullptr;
        return ACLNN_SUCCESS;
    }
    Registry& r = Executors();
    std::lock_guard<std::mutex> lock(r.mutex);
    const uintptr_t id = r.next;
    r.next += 16;
    r.live.emplace(id, std::move(executor));
    *workspaceSize = bytes;
    *handle = reinterpret_cast<aclOpExecutor*>(id);
    return ACLNN_SUCCESS;
}

namespace {

struct LaunchCounts {
    std::mutex mutex;
    std::map<std::string, uint64_t> byOp;
};
LaunchCounts& Launches() {
    static auto* counts = new LaunchCounts();  // never destroyed: launches may run during static destruction
    return *counts;
}
void CountLaunch(const char* op) {
    LaunchCounts& c = Launches();
    std::lock_guard<std::mutex> lock(c.mutex);
    ++c.byOp[op];
}

}  // namespace

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
                        std::string(api) + ": executor is not live: it already ran (cam executors run once), was "
                                           "destroyed, or was not made by a cam GetWorkspaceSize");
        const Executor& e = *it->second;
        if (std::string(e.op) != op)
            return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": executor was made for " + e.op + ", not " +
                                                     op + " (it stays usable for its own op)");
        // Refused before launching: the executor stays live, for a call with a proper workspace or camDestroyExecutor.
        if (e.launch && (workspaceSize < e.workspaceSize || (e.workspaceSize > 0 && workspace == nullptr)))
            return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": workspace of " + std::to_string(workspaceSize) +
                                                     " bytes" + (workspace ? "" : " at a null address") +
                                                     ", the op needs " + std::to_string(e.workspaceSize) +
                                                     " (the executor stays usable)");
        owned = std::move(it->second);
        r.live.erase(it);
    }
    if (!owned->launch) return ACLNN_SUCCESS;
    CountLaunch(owned->op);
    return Guarded(api, [&] {
        const aclrtStream resolved = ResolveStream(stream);
        CheckCaptureWorkspace(resolved, workspace, workspaceSize, api);
        if (owned->endsOnItsOwn && tCallerSyncs && tCallerSyncStream == resolved)
            return LaunchOnCaller(resolved, [&] { return owned->launch(workspace, resolved); });
        return owned->launch(workspace, resolved);
    });
}

}  // namespace cam::host

extern "C" aclnnStatus camDestroyExecutor(aclOpExecutor* executor) {
    if (!executor) return ACLNN_SUCCESS;
    std::unique_ptr<cam::host::Executor> owned;  // destroyed outside the lock: its launch may hold captures
    {
        cam::host::Registry& r = cam::host::Executors();
        std::lock_guard<std::mutex> lock(r.mutex);
        auto it = r.live.find(reinterpret_cast<uintptr_t>(executor));
        if (it == r.live.end())
            return cam::host::Fail(ACLNN_ERR_PARAM_INVALID,
                                   "camDestroyExecutor: executor is not live: it already ran, was destroyed, or was "
                                   "not made by a cam GetWorkspaceSize");
        owned = std::move(it->second);
        r.live.erase(it);
    }
    return ACLNN_SUCCESS;
}

extern "C" void camBeginArgumentCheck(void) { cam::host::tArgumentCheck = true; }
extern "C" void camEndArgumentCheck(void) { cam::host::tArgumentCheck = false; }

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

extern "C" uint64_t camGetLaunchCount(const char* op) {
    if (!op) return 0;
    cam::host::LaunchCounts& c = cam::host::Launches();
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.byOp.find(op);
    return it == c.byOp.end() ? 0 : it->second;
}
