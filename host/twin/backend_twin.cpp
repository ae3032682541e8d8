// Twin backend: streams are twin::Stream worker queues (null: a process-wide default stream); the platform is the
// twin's platform description.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backend.h"
#include "cam/aclnn_cam_window_table.h"
#include "graph.h"
#include "cam/cam_platform.h"
#include "status.h"
#include "twin/hccl.h"
#include "twin/launch.h"
#include "twin/runtime.h"
#include "twin/stream.h"

namespace cam::host {

tiling::PlatformInfo CurrentPlatform() {
    const twin::Platform& p = twin::ActivePlatform();
    // Tiling gets the UB and L1 a kernel may carve: the top of each is reserved (API scratch, runtime).
    return {p.aivCores, p.aicCores, p.ubBytes - p.ubReservedBytes, p.l1Bytes - p.l1ReservedBytes, p.l0aBytes,
            p.l0bBytes, p.l0cBytes, p.minBlockBytes};
}

namespace {

// Device memory is host memory on the twin, and some of it (a data-plane window) other ranks' threads write while
// the host reads: whole aligned words move with atomic accesses, as the device's DMA moves whole words, so the
// twin stays race-free C++. Anything else (unaligned ends) is copied bytewise.
void CopyWords(void* dst, const void* src, uint64_t bytes) {
    const auto s = reinterpret_cast<uintptr_t>(src), d = reinterpret_cast<uintptr_t>(dst);
    if (s % 8 == 0 && d % 8 == 0 && bytes % 8 == 0) {
        for (uint64_t i = 0; i < bytes / 8; ++i)
            static_cast<int64_t*>(dst)[i] = __atomic_load_n(static_cast<const int64_t*>(src) + i, __ATOMIC_ACQUIRE);
        return;
    }
    std::memcpy(dst, src, bytes);
}

void ZeroWords(void* dst, uint64_t bytes) {
    if (reinterpret_cast<uintptr_t>(dst) % 8 == 0 && bytes % 8 == 0) {
        for (uint64_t i = 0; i < bytes / 8; ++i) __atomic_store_n(static_cast<int64_t*>(dst) + i, 0, __ATOMIC_RELEASE);
        return;
    }
    std::memset(dst, 0, bytes);
}

aclnnStatus StatusOfTaskCode(int code) {
    return code == twin::kTaskFault ? CAM_ERR_KERNEL_FAULT : code;
}

// Unbounded host waits are not allowed: "no limit" still means a day, long past any sane prefill.
constexpr double kUnlimitedSeconds = 86400.0;

}  // namespace

aclnnStatus LaunchOnCaller(aclrtStream stream, const std::function<aclnnStatus()>& launch) {
    twin::RunHereScope here(stream);
    return launch();
}

uint64_t CallerRunTasks() { return twin::Stream::RunHereCount(); }

void EnqueueStreamTask(aclrtStream stream, std::function<aclnnStatus(std::string* message)> task) {
    RefuseInCapture(stream, "a host task on the stream");
    CountHostActivity(HostActivity::HostTask);
    twin::EnqueueHostTask(stream, [task = std::move(task)] {
        std::string message;
        const aclnnStatus status = task(&message);
        if (status != ACLNN_SUCCESS) throw twin::TaskError(status, message);
    });
}

// Device memory is host memory on the twin: the copies are plain memcpy in stream order.
void EnqueueHostToDevice(aclrtStream stream, void* dst, std::vector<uint8_t> bytes) {
    RefuseInCapture(stream, "a host-to-device copy");
    CountHostActivity(HostActivity::HostToDevice);
    twin::EnqueueHostTask(stream, [dst, bytes = std::move(bytes)] { std::memcpy(dst, bytes.data(), bytes.size()); });
}

void EnqueueZero(aclrtStream stream, void* dst, uint64_t bytes) {
    twin::EnqueueHostTask(stream, [dst, bytes] { std::memset(dst, 0, bytes); });
}

void EnqueueDeviceRead(aclrtStream stream, const void* src, uint64_t bytes,
                       std::function<aclnnStatus(const uint8_t* host, std::string* message)> check) {
    RefuseInCapture(stream, "a host read of device data");
    CountHostActivity(HostActivity::DeviceRead);
    EnqueueStreamTask(stream, [src, bytes, check = std::move(check)](std::string* message) {
        std::vector<uint8_t> host(bytes);
        // The kernels publish with release order and the stream worker ran them before this task: a plain copy
        // sees their writes (the twin's launch joins every block before the next task starts).
        CopyWords(host.data(), src, bytes);
        return check(host.data(), message);
    });
}

// A recording is the tasks the capturing stream would have run; a replay runs them in order as one task, so the
// first failing one stops the rest and becomes the stream's error, as a failing kernel of a graph does.
struct Recording {
    std::mutex mutex;
    std::vector<std::function<void()>> tasks;
};

std::shared_ptr<Recording> BeginRecording(aclrtStream stream, camCaptureMode) {
    auto recording = std::make_shared<Recording>();
    static_cast<twin::Stream*>(stream)->SetCaptureSink([r = recording.get()](std::function<void()> task) {
        std::lock_guard<std::mutex> lock(r->mutex);
        r->tasks.push_back(std::move(task));
    });
    return recording;
}

uint64_t RecordedOps(const Recording& recording) {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(recording.mutex));
    return recording.tasks.size();
}

bool EndRecording(aclrtStream stream, const std::shared_ptr<Recording>& recording, bool keep, std::string*) {
    static_cast<twin::Stream*>(stream)->SetCaptureSink({});
    if (!keep) {
        std::lock_guard<std::mutex> lock(recording->mutex);
        recording->tasks.clear();
    }
    return true;
}

void LaunchRecording(const std::shared_ptr<Recording>& recording, aclrtStream stream, std::shared_ptr<void> owner) {
    twin::EnqueueHostTask(stream, [recording, owner = std::move(owner)] {
        for (const std::function<void()>& task : recording->tasks) task();
    });
}

namespace {

// The twin runtime's own captures, begun through camTwinAclmdlRICapture* as a framework begins ACL's (torch_npu's
// NPUGraph calls aclmdlRICaptureBegin itself): cam's registry (graph.cpp) does not hear of them and must ask
// RuntimeCaptureStatus, as on Ascend. A model is the recording the capture made.
struct RuntimeCaptures {
    std::mutex mutex;
    std::map<aclrtStream, std::shared_ptr<Recording>> byStream;
};

RuntimeCaptures& TwinRuntimeCaptures() {
    static RuntimeCaptures* const table = new RuntimeCaptures();  // outlives static destruction
    return *table;
}

}  // namespace

camCaptureStatus RuntimeCaptureStatus(aclrtStream stream, uintptr_t* capture) {
    RuntimeCaptures& t = TwinRuntimeCaptures();
    std::lock_guard<std::mutex> lock(t.mutex);
    auto it = t.byStream.find(stream);
    *capture = it == t.byStream.end() ? 0 : reinterpret_cast<uintptr_t>(it->second.get());
    return it == t.byStream.end() ? CAM_CAPTURE_STATUS_NONE : CAM_CAPTURE_STATUS_ACTIVE;
}

// Device memory is host memory on the twin; 512-byte aligned like the device allocator's blocks.
void* AllocGraphMemory(uint64_t bytes) {
    const uint64_t rounded = (bytes + 511) / 512 * 512;
    void* p = std::aligned_alloc(512, rounded);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    return p;
}

void FreeGraphMemory(void* memory) { std::free(memory); }

void* PersistentDeviceCopy(const std::vector<uint8_t>& bytes) {
    void* p = AllocGraphMemory(bytes.size() ? bytes.size() : 1);
    std::memcpy(p, bytes.data(), bytes.size());
    return p;
}

void ReadDeviceNow(void* host, const void* device, uint64_t bytes) { CopyWords(host, device, bytes); }

void ZeroDeviceNow(void* device, uint64_t bytes) { ZeroWords(device, bytes); }

uint64_t SystemCycleHz() { return twin::ActivePlatform().systemCycleHz; }

aclrtStream ResolveStream(aclrtStream stream) {
    if (stream) return stream;
    // Never destroyed: its worker may still run work at exit, and joining it from a static destructor could hang.
    static twin::Stream* const defaultStream = new twin::Stream();
    return defaultStream;
}

// The twin's stand-in for the HCCL runtime setting up a group's contexts (twin/hccl.h).
const void* HcclContextFor(const char* group, int64_t rank, std::string* why) {
    const twin::HcclContext* c = rank >= 0 ? twin::FindHcclContext(group, static_cast<uint32_t>(rank)) : nullptr;
    if (c == nullptr) *why = "no HCCL context is registered for rank " + std::to_string(rank);
    return c;
}

void PublishHcclContext(const std::string& group, int64_t rank, const std::vector<uint64_t>& windows,
                        uint64_t windowBytes) {
    if (windows.size() > twin::kHcclMaxRanks)
        throw std::runtime_error("the twin's HCCL context holds " + std::to_string(twin::kHcclMaxRanks) +
                                 " ranks, the plane has " + std::to_string(windows.size()));
    twin::HcclContext c{};
    c.rankId = static_cast<uint32_t>(rank);
    c.rankDim = static_cast<uint32_t>(windows.size());
    c.winSize = windowBytes;
    for (size_t r = 0; r < windows.size(); ++r) c.windowsIn[r] = windows[r];
    twin::RegisterHcclContext(group, static_cast<uint32_t>(rank), c);
}

void WithdrawHcclContext(const std::string& group, int64_t rank) {
    twin::UnregisterHcclContext(group, static_cast<uint32_t>(rank));
}

aclrtStream CreateOwnStream() { return new twin::Stream(); }
void DestroyOwnStream(aclrtStream stream) { delete static_cast<twin::Stream*>(stream); }

}  // namespace cam::host

using cam::host::Fail;

extern "C" aclError camTwinAclrtCreateStream(aclrtStream* stream) {
    if (!stream) return ACL_ERROR_INVALID_PARAM;
    *stream = new cam::twin::Stream();
    return ACL_SUCCESS;
}

extern "C" aclError camTwinAclrtDestroyStream(aclrtStream stream) {
    if (stream) {
        static_cast<cam::twin::Stream*>(stream)->SetCaptureSink({});  // a capture dies with its stream
        cam::host::ForgetCapture(stream);
        cam::host::RuntimeCaptures& t = cam::host::TwinRuntimeCaptures();
        std::lock_guard<std::mutex> lock(t.mutex);
        t.byStream.erase(stream);
    }
    delete static_cast<cam::twin::Stream*>(stream);  // null (the default stream) is never destroyed
    return ACL_SUCCESS;
}

// The twin's model-RI capture, as the runtime offers it to a framework (acl_mdl.h's aclmdlRICaptureBegin / End,
// aclmdlRIExecuteAsync, aclmdlRIDestroy; a model is an opaque handle). cam's registry is not involved: this is the
// capture graph.cpp adopts.
extern "C" aclError camTwinAclmdlRICaptureBegin(aclrtStream stream, int32_t mode) {
    if (mode < CAM_CAPTURE_MODE_GLOBAL || mode > CAM_CAPTURE_MODE_RELAXED) return ACL_ERROR_INVALID_PARAM;
    stream = cam::host::ResolveStream(stream);
    camCaptureStatus ours = CAM_CAPTURE_STATUS_NONE;
    if (camStreamGetCaptureInfo(stream, &ours, nullptr) != ACLNN_SUCCESS || ours != CAM_CAPTURE_STATUS_NONE)
        return ACL_ERROR_FAILURE;  // one capture per stream, whoever began it
    cam::host::RuntimeCaptures& t = cam::host::TwinRuntimeCaptures();
    std::lock_guard<std::mutex> lock(t.mutex);
    if (t.byStream.count(stream)) return ACL_ERROR_FAILURE;
    t.byStream.emplace(stream, cam::host::BeginRecording(stream, static_cast<camCaptureMode>(mode)));
    return ACL_SUCCESS;
}

extern "C" aclError camTwinAclmdlRICaptureEnd(aclrtStream stream, void** model) {
    if (!model) return ACL_ERROR_INVALID_PARAM;
    stream = cam::host::ResolveStream(stream);
    std::shared_ptr<cam::host::Recording> recording;
    {
        cam::host::RuntimeCaptures& t = cam::host::TwinRuntimeCaptures();
        std::lock_guard<std::mutex> lock(t.mutex);
        auto it = t.byStream.find(stream);
        if (it == t.byStream.end()) return ACL_ERROR_FAILURE;
        recording = std::move(it->second);
        t.byStream.erase(it);
    }
    std::string why;
    cam::host::EndRecording(stream, recording, true, &why);
    *model = new std::shared_ptr<cam::host::Recording>(std::move(recording));
    return ACL_SUCCESS;
}

extern "C" aclError camTwinAclmdlRIExecuteAsync(void* model, aclrtStream stream) {
    if (!model) return ACL_ERROR_INVALID_PARAM;
    cam::host::LaunchRecording(*static_cast<std::shared_ptr<cam::host::Recording>*>(model),
                               cam::host::ResolveStream(stream), nullptr);
    return ACL_SUCCESS;
}

extern "C" aclError camTwinAclmdlRIDestroy(void* model) {
    delete static_cast<std::shared_ptr<cam::host::Recording>*>(model);  // a queued replay holds its own reference
    return ACL_SUCCESS;
}

extern "C" aclnnStatus camSynchronizeStream(aclrtStream stream, int32_t timeoutMs) {
    stream = cam::host::ResolveStream(stream);
    if (const aclnnStatus refused = cam::host::CheckSynchronizeAllowed(stream)) return refused;
    cam::host::CountHostActivity(cam::host::HostActivity::Synchronize);
    const double seconds = timeoutMs < 0 ? cam::host::kUnlimitedSeconds : timeoutMs / 1000.0;
    cam::twin::StreamError error;
    if (!static_cast<cam::twin::Stream*>(stream)->Synchronize(seconds, &error)) {
        return Fail(CAM_ERR_SYNC_TIMEOUT,
                    "stream did not finish within " + std::to_string(timeoutMs) + " ms (its work continues)");
    }
    // Status records of graphs launched since the last synchronize: read here, once, never by a host task.
    const aclnnStatus graphs = cam::host::CheckLaunchedGraphs(stream, error.code != 0);
    if (error.code != 0) return Fail(cam::host::StatusOfTaskCode(error.code), error.message);
    return graphs;
}

extern "C" aclError camTwinAclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout) {
    return camSynchronizeStream(stream, timeout) == ACLNN_SUCCESS ? ACL_SUCCESS : ACL_ERROR_FAILURE;
}

extern "C" aclError camTwinAclrtSynchronizeStream(aclrtStream stream) {
    return camTwinAclrtSynchronizeStreamWithTimeout(stream, -1);
}

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

extern "C" aclnnStatus camTwinHcclRegisterContext(const char* group, int64_t rank, int64_t rankDim,
                                                  const uint64_t* windows, int64_t count) {
    if (!group || (!windows && count > 0)) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camTwinHcclRegisterContext: null argument");
    if (rank < 0 || rankDim < 0 || count < 0 || count > static_cast<int64_t>(cam::twin::kHcclMaxRanks))
        return Fail(ACLNN_ERR_PARAM_INVALID, "camTwinHcclRegisterContext: rank, rankDim and count must be >= 0, count <= " +
                                                 std::to_string(cam::twin::kHcclMaxRanks));
    cam::twin::HcclContext c{};
    c.rankId = static_cast<uint32_t>(rank);
    c.rankDim = static_cast<uint32_t>(rankDim);
    for (int64_t r = 0; r < count; ++r) c.windowsIn[r] = windows[r];
    cam::twin::RegisterHcclContext(group, static_cast<uint32_t>(rank), c);
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camTwinHcclUnregisterContext(const char* group, int64_t rank) {
    if (!group) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camTwinHcclUnregisterContext: group is null");
    if (rank >= 0) cam::twin::UnregisterHcclContext(group, static_cast<uint32_t>(rank));
    return ACLNN_SUCCESS;
}
