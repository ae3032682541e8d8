// Ascend backend (CAM_ASCEND=ON, CAM_WITH_CANN): the seam of backend.h over the ACL runtime.
//
// The runtime is resolved with dlopen, so libcam_aclnn loads (and reports why it cannot run) on a machine without
// CANN; every entry point's type is taken from CANN's own prototype (decltype(&aclrtMemcpyAsync) ...), so a
// signature change in CANN is a compile error in the header check (tests/test_ascend_headers.py).
//
// Streams are the caller's aclrtStreams (torch_npu's current stream when called from torch); null is ACL's
// default stream. Host bytes that go to the device (address tables) and device bytes the host inspects (status
// records) move with aclrtMemcpyAsync in stream order through page-locked buffers; the host-side checks run in
// camSynchronizeStream after the stream finished, in the order they were queued, and only then are the buffers
// freed. A synchronize that times out frees nothing: the device may still use those buffers.
//
// CANN's API differs between the header sets cam compiles against (docs/ascend.md §2): what these headers declare
// comes from cam_cann_features.h (cmake/CamCannFeatures.cmake), and each absent feature has its fallback here.
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "acl/acl.h"
#include "backend.h"
#include "cam_cann_features.h"
#include "common/launch_descriptor.h"
#include "dl_library.h"
#include "graph.h"
#include "cam/cam_platform.h"
#include "cam/cam_status.h"
#include "status.h"

namespace cam::host {

namespace {

// The runtime's entry points the backend calls, (member, symbol); graph capture (graph.cpp) and the memory graphs
// own are among them.
#define CAM_ACL_BACKEND_ENTRIES(X) \
    X(memcpyAsync, aclrtMemcpyAsync) X(memsetAsync, aclrtMemsetAsync) \
    X(synchronizeStreamWithTimeout, aclrtSynchronizeStreamWithTimeout) X(mallocHost, aclrtMallocHost) \
    X(freeHost, aclrtFreeHost) X(getDevice, aclrtGetDevice) X(getDeviceCapability, aclGetDeviceCapability) \
    X(getSocName, aclrtGetSocName) X(captureBegin, aclmdlRICaptureBegin) X(captureEnd, aclmdlRICaptureEnd) \
    X(captureGetInfo, aclmdlRICaptureGetInfo) \
    X(executeAsync, aclmdlRIExecuteAsync) X(destroyModel, aclmdlRIDestroy) X(malloc, aclrtMalloc) \
    X(free, aclrtFree) X(memcpy, aclrtMemcpy) X(memset, aclrtMemset) X(createStream, aclrtCreateStream) \
    X(destroyStream, aclrtDestroyStream)

struct Acl {
    CAM_ACL_BACKEND_ENTRIES(CAM_DL_MEMBER)
    std::string unavailable;  // why the runtime cannot be used; "" when it can
};

const Acl& Runtime() {
    // If torch_npu already loaded the runtime, this opens that same library.
    static const Acl acl = CAM_DL_LOAD_TABLE(Acl, CAM_ACL_BACKEND_ENTRIES, "libascendcl.so", "the Ascend runtime");
    return acl;
}

// Thrown inside an op's Guarded body; reported as ACLNN_ERR_INNER with this sentence.
const Acl& Live() {
    const Acl& a = Runtime();
    if (!a.unavailable.empty()) throw std::runtime_error(a.unavailable);
    return a;
}

void Check(aclError rc, const char* call) {
    if (rc != ACL_SUCCESS) throw std::runtime_error(std::string(call) + " failed with ACL error " + std::to_string(rc));
}

// Page-locked host memory for one async copy, kept until the stream has passed the copy.
struct HostBuffer {
    void* ptr = nullptr;
};

HostBuffer AllocHost(uint64_t bytes) {
    HostBuffer b;
    Check(Live().mallocHost(&b.ptr, bytes ? bytes : 1), "aclrtMallocHost");
    return b;
}

// Work the host does for a stream once the stream has finished: checks on copied-back bytes, releases.
struct Pending {
    HostBuffer buffer;
    std::function<aclnnStatus(std::string* message)> check;  // may be empty (a buffer to free only)
};

struct PendingTable {
    std::mutex mutex;
    std::unordered_map<aclrtStream, std::deque<Pending>> byStream;
};

PendingTable& Pendings() {
    static PendingTable* const table = new PendingTable();  // outlives static destruction
    return *table;
}

void Defer(aclrtStream stream, Pending p) {
    PendingTable& t = Pendings();
    std::lock_guard<std::mutex> lock(t.mutex);
    t.byStream[stream].push_back(std::move(p));
}

struct SocMemory {
    const char* prefix;
    uint32_t ubBytes, l1Bytes, l0aBytes, l0bBytes, l0cBytes;
};

// Per-core buffer sizes of the SoCs in scope (Atlas A2 = Ascend910B*, A3 = Ascend910_93*, both dav-2201), the same
// values as the twin's ascend910b / ascend910_93 platforms. Core counts come from the runtime.
constexpr SocMemory kSocs[] = {
    {"Ascend910B", 196608, 524288, 65536, 65536, 131072},
    {"Ascend910_93", 196608, 524288, 65536, 65536, 131072},
};

const SocMemory* SocOf(const char* name) {
    if (name == nullptr) return nullptr;
    for (const SocMemory& s : kSocs)
        if (std::string(name).rfind(s.prefix, 0) == 0) return &s;
    return nullptr;
}

struct DeviceCores {
    uint32_t aiv = 0, aic = 0;
    const char* soc = nullptr;
};

DeviceCores QueryCores() {
    const Acl& a = Live();
    DeviceCores d;
    d.soc = a.getSocName();
    int32_t device = 0;
    Check(a.getDevice(&device), "aclrtGetDevice (set a device first, e.g. torch.npu.set_device)");
    int64_t aic = 0, aiv = 0;
    Check(a.getDeviceCapability(static_cast<uint32_t>(device), ACL_DEVICE_INFO_AI_CORE_NUM, &aic),
          "aclGetDeviceCapability(AI_CORE_NUM)");
    Check(a.getDeviceCapability(static_cast<uint32_t>(device), ACL_DEVICE_INFO_VECTOR_CORE_NUM, &aiv),
          "aclGetDeviceCapability(VECTOR_CORE_NUM)");
    d.aic = static_cast<uint32_t>(aic);
    d.aiv = static_cast<uint32_t>(aiv);
    return d;
}

// Unbounded host waits are not allowed: "no limit" still means a day, as on the twin.
constexpr int32_t kUnlimitedMs = 86'400'000;

// What aclrtSynchronizeStreamWithTimeout returns when the stream is still running at the deadline. Headers that
// do not name it (torch-npu 2.8.0's rt_error_codes.h) get the value the runtime returns, 507046 in every header set
// that names it (torch-npu 2.6.0.post5 and 2.14.0, acl/error_codes/rt_error_codes.h).
#if CAM_CANN_HAS_STREAM_SYNC_TIMEOUT_CODE
constexpr aclError kStreamSyncTimeout = ACL_ERROR_RT_STREAM_SYNC_TIMEOUT;
static_assert(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT == 507046, "the fallback below assumes this value");
#else
constexpr aclError kStreamSyncTimeout = 507046;
#endif

}  // namespace

tiling::PlatformInfo CurrentPlatform() {
    // blockDim comes from the runtime's core count: tiling never launches more blocks than the device has cores,
    // which kernels that use SyncAll require (all blocks resident at once).
    const DeviceCores d = QueryCores();
    const SocMemory* m = SocOf(d.soc);
    if (m == nullptr)
        throw std::runtime_error(std::string("SoC ") + (d.soc ? d.soc : "(unknown)") +
                                 " is not supported by cam (Atlas A2 Ascend910B*, A3 Ascend910_93*)");
    // No byte floor per block on the chip: every block is a core of its own (the row floor alone decides).
    return {d.aiv, d.aic, m->ubBytes, m->l1Bytes, m->l0aBytes, m->l0bBytes, m->l0cBytes, 0};
}

}  // namespace cam::host

namespace cam::kernels {

// Kernels that use SyncAll need every block resident at once. Batch scheduling (schemMode 1) starts a kernel only
// when all the cores it needs are free; normal mode (0) starts it as soon as one is, and with other streams holding
// cores the started blocks wait in SyncAll for blocks that cannot start (hicann/runtime
// docs/api_docs/aclrtLaunchKernelAttrValue.md; docs/ascend.md §6). A <<<>>> launch carries no attribute, so the
// launch wrappers of every kernel with a hard SyncAll come here (kernels/common/launch.h CAM_DATAPLANE_LAUNCH,
// CAM_BATCH_KERNEL_LAUNCH): the kernel's symbol
// becomes a function handle (aclrtGetFuncBySymbol, for kernels bisheng compiled host and device together, which
// cam's are) and aclrtLaunchKernelV2 launches it with the descriptor's schedule mode. Both are resolved with dlopen
// on first use, so a runtime without them still runs every <<<>>> launch; aclrtLaunchKernelV2 is typed from its
// prototype where the headers declare it (2.14.0's only), and where they do not every such launch is refused.
#if CAM_CANN_HAS_LAUNCH_KERNEL_V2
namespace {

template <typename Fn>
Fn ResolveRuntime(const char* symbol) {
    Fn f = nullptr;
    std::string why;
    void* lib = host::OpenCannLibrary("libascendcl.so", "the Ascend runtime", &why);
    if (lib == nullptr || !host::ResolveSymbol(lib, "libascendcl.so", "the Ascend runtime", symbol, &f, &why))
        throw std::runtime_error(why);
    return f;
}

decltype(&aclrtLaunchKernelV2) LaunchKernelV2() {
    static const auto fn = ResolveRuntime<decltype(&aclrtLaunchKernelV2)>("aclrtLaunchKernelV2");
    return fn;
}

decltype(&aclrtGetFuncBySymbol) GetFuncBySymbol() {
    static const auto fn = ResolveRuntime<decltype(&aclrtGetFuncBySymbol)>("aclrtGetFuncBySymbol");
    return fn;
}

}  // namespace

void LaunchConfigured(const void* kernelSymbol, const char* kernelName, uint32_t blockDim, void* stream,
                      const void* args, size_t argsBytes, const LaunchDescriptor& launch) {
    (void)host::Live();
    // A handle is valid on the device it was taken on only: it is looked up on every launch, not kept.
    aclrtFuncHandle handle = nullptr;
    host::Check(GetFuncBySymbol()(kernelSymbol, &handle), kernelName);
    aclrtLaunchKernelAttr attr{};
    attr.id = ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE;
    attr.value.schemMode = static_cast<uint8_t>(launch.scheduleMode);
    aclrtLaunchKernelCfg cfg{&attr, 1};
    host::Check(LaunchKernelV2()(handle, blockDim, args, argsBytes, &cfg, static_cast<aclrtStream>(stream)),
                kernelName);
}
#else
void LaunchConfigured(const void*, const char* kernelName, uint32_t, void*, const void*, size_t,
                      const LaunchDescriptor&) {
    throw std::runtime_error(std::string(kernelName) +
                             ": a kernel that calls a hard SyncAll needs batch scheduling mode, which only the "
                             "configured launch (aclrtLaunchKernelV2) carries; this build's CANN headers do not "
                             "declare it (docs/ascend.md section 6)");
}
#endif

}  // namespace cam::kernels

namespace cam::host {

aclrtStream ResolveStream(aclrtStream stream) { return stream; }  // ACL itself takes null as the default stream

void EnqueueStreamTask(aclrtStream stream, std::function<aclnnStatus(std::string* message)> task) {
    RefuseInCapture(stream, "a host task on the stream");
    CountHostActivity(HostActivity::HostTask);
    Defer(stream, Pending{HostBuffer{}, std::move(task)});
}

void EnqueueHostToDevice(aclrtStream stream, void* dst, std::vector<uint8_t> bytes) {
    RefuseInCapture(stream, "a host-to-device copy");
    CountHostActivity(HostActivity::HostToDevice);
    HostBuffer b = AllocHost(bytes.size());
    std::memcpy(b.ptr, bytes.data(), bytes.size());
    const aclError rc = Live().memcpyAsync(dst, bytes.size(), b.ptr, bytes.size(), ACL_MEMCPY_HOST_TO_DEVICE, stream);
    if (rc != ACL_SUCCESS) {
        Live().freeHost(b.ptr);  // nothing was queued
        Check(rc, "aclrtMemcpyAsync(host to device)");
    }
    Defer(stream, Pending{b, nullptr});
}

void EnqueueZero(aclrtStream stream, void* dst, uint64_t bytes) {
    Check(Live().memsetAsync(dst, bytes, 0, bytes, stream), "aclrtMemsetAsync");
}

void EnqueueDeviceRead(aclrtStream stream, const void* src, uint64_t bytes,
                       std::function<aclnnStatus(const uint8_t* host, std::string* message)> check) {
    RefuseInCapture(stream, "a host read of device data");
    CountHostActivity(HostActivity::DeviceRead);
    HostBuffer b = AllocHost(bytes);
    const aclError rc = Live().memcpyAsync(b.ptr, bytes, src, bytes, ACL_MEMCPY_DEVICE_TO_HOST, stream);
    if (rc != ACL_SUCCESS) {
        Live().freeHost(b.ptr);
        Check(rc, "aclrtMemcpyAsync(device to host)");
    }
    const uint8_t* host = static_cast<const uint8_t*>(b.ptr);
    Defer(stream, Pending{b, [host, check = std::move(check)](std::string* message) { return check(host, message); }});
}

// cam's capture modes are ACL's (cam/cam_graph.h promises the same values).
static_assert(static_cast<int>(CAM_CAPTURE_MODE_GLOBAL) == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL &&
              static_cast<int>(CAM_CAPTURE_MODE_THREAD_LOCAL) == ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL &&
              static_cast<int>(CAM_CAPTURE_MODE_RELAXED) == ACL_MODEL_RI_CAPTURE_MODE_RELAXED &&
              static_cast<int>(CAM_CAPTURE_STATUS_NONE) == ACL_MODEL_RI_CAPTURE_STATUS_NONE &&
              static_cast<int>(CAM_CAPTURE_STATUS_ACTIVE) == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE &&
              static_cast<int>(CAM_CAPTURE_STATUS_INVALIDATED) == ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED,
              "camCaptureMode / camCaptureStatus differ from acl_mdl.h");

// A recording is the model runtime instance ACL's capture builds; the runtime records what the stream is given.
struct Recording {
    aclmdlRI model = nullptr;
    ~Recording() {
        if (model) Runtime().destroyModel(model);
    }
};

std::shared_ptr<Recording> BeginRecording(aclrtStream stream, camCaptureMode mode) {
    Check(Live().captureBegin(stream, static_cast<aclmdlRICaptureMode>(mode)), "aclmdlRICaptureBegin");
    return std::make_shared<Recording>();
}

uint64_t RecordedOps(const Recording&) { return 0; }  // ACL does not say; the twin counts its tasks

bool EndRecording(aclrtStream stream, const std::shared_ptr<Recording>& recording, bool keep, std::string* why) {
    aclmdlRI model = nullptr;
    const aclError rc = Live().captureEnd(stream, &model);
    if (rc != ACL_SUCCESS) {
        *why = "aclmdlRICaptureEnd failed with ACL error " + std::to_string(rc);
        return false;
    }
    if (keep) {
        recording->model = model;
    } else if (model) {
        Live().destroyModel(model);  // an invalidated capture leaves no graph
    }
    return true;
}

void LaunchRecording(const std::shared_ptr<Recording>& recording, aclrtStream stream, std::shared_ptr<void> owner) {
    Check(Live().executeAsync(recording->model, stream), "aclmdlRIExecuteAsync");
    // The model and the graph's memory stay alive until a synchronize has seen the stream pass this launch.
    Defer(stream, Pending{HostBuffer{}, [recording, owner = std::move(owner)](std::string*) { return ACLNN_SUCCESS; }});
}

// aclmdlRICaptureGetInfo is declared next to aclmdlRICaptureBegin, with one prototype, in every header set of the
// matrix (torch-npu 2.6.0.post5 and 2.8.0: acl_mdl.h; 2.14.0: acl_rt.h), so it is a required entry like the other
// capture calls: a runtime without it has no capture for a framework to begin either.
camCaptureStatus RuntimeCaptureStatus(aclrtStream stream, uintptr_t* capture) {
    aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
    aclmdlRI model = nullptr;
    Check(Live().captureGetInfo(stream, &status, &model), "aclmdlRICaptureGetInfo");
    *capture = reinterpret_cast<uintptr_t>(model);
    return static_cast<camCaptureStatus>(status);
}

void* AllocGraphMemory(uint64_t bytes) {
    void* p = nullptr;
    Check(Live().malloc(&p, bytes, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc");
    Check(Live().memset(p, bytes, 0, bytes), "aclrtMemset");
    return p;
}

void FreeGraphMemory(void* memory) { Runtime().free(memory); }

void* PersistentDeviceCopy(const std::vector<uint8_t>& bytes) {
    void* p = AllocGraphMemory(bytes.size() ? bytes.size() : 1);
    Check(Live().memcpy(p, bytes.size(), bytes.data(), bytes.size(), ACL_MEMCPY_HOST_TO_DEVICE), "aclrtMemcpy");
    return p;
}

void ReadDeviceNow(void* host, const void* device, uint64_t bytes) {
    Check(Live().memcpy(host, bytes, device, bytes, ACL_MEMCPY_DEVICE_TO_HOST), "aclrtMemcpy(device to host)");
}

void ZeroDeviceNow(void* device, uint64_t bytes) { Check(Live().memset(device, bytes, 0, bytes), "aclrtMemset"); }

// The platforms in scope count GetSystemCycle at 50 MHz (docs/ascend.md).
uint64_t SystemCycleHz() { return 50'000'000; }

// The device runs the work; the caller's synchronize waits for it as always.
aclnnStatus LaunchOnCaller(aclrtStream, const std::function<aclnnStatus()>& launch) { return launch(); }

uint64_t CallerRunTasks() { return 0; }

// An MC2 op's HCCL context is bound to its launch by the op framework from the op's group (HcclGroup in the op
// definition); the host never holds it. cam's window_table kernel is launched with <<<>>>, which binds nothing, so
// on Ascend it needs the op package that registers it as an MC2 op (docs/ascend.md §5; not built).
const void* HcclContextFor(const char* group, int64_t, std::string* why) {
    *why = std::string("window_table on Ascend runs as a registered MC2 op bound to group '") + group +
           "'; that op package is not built yet (docs/ascend.md section 5)";
    return nullptr;
}

void PublishHcclContext(const std::string&, int64_t, const std::vector<uint64_t>&, uint64_t) {
    throw std::runtime_error("the in-process and shared-memory transports are twin-only; on Ascend the windows and "
                             "their HCCL contexts come from an HcclComm (transport_hccl.cpp)");
}

void WithdrawHcclContext(const std::string&, int64_t) {}

aclrtStream CreateOwnStream() {
    aclrtStream s = nullptr;
    Check(Live().createStream(&s), "aclrtCreateStream");
    return s;
}

void DestroyOwnStream(aclrtStream stream) {
    if (stream) Runtime().destroyStream(stream);
}

}  // namespace cam::host

using cam::host::Fail;

extern "C" aclnnStatus camSynchronizeStream(aclrtStream stream, int32_t timeoutMs) {
    using namespace cam::host;
    const Acl& a = Runtime();
    if (!a.unavailable.empty()) return Fail(ACLNN_ERR_RUNTIME_ERROR, "camSynchronizeStream: " + a.unavailable);
    if (const aclnnStatus refused = CheckSynchronizeAllowed(stream)) return refused;
    CountHostActivity(HostActivity::Synchronize);
    PendingTable& t = Pendings();
    size_t covered = 0;  // host work queued before this synchronize: the stream has passed its copies afterwards
    {
        std::lock_guard<std::mutex> lock(t.mutex);
        covered = t.byStream[stream].size();
    }
    const aclError rc = a.synchronizeStreamWithTimeout(stream, timeoutMs < 0 ? kUnlimitedMs : timeoutMs);
    if (rc == kStreamSyncTimeout)  // the work continues: every buffer stays
        return Fail(CAM_ERR_SYNC_TIMEOUT,
                    "stream did not finish within " + std::to_string(timeoutMs) + " ms (its work continues)");
    std::deque<Pending> done;
    {
        std::lock_guard<std::mutex> lock(t.mutex);
        std::deque<Pending>& q = t.byStream[stream];
        for (size_t i = 0; i < covered && !q.empty(); ++i) {
            done.push_back(std::move(q.front()));
            q.pop_front();
        }
        if (q.empty()) t.byStream.erase(stream);
    }
    aclnnStatus first = ACLNN_SUCCESS;
    std::string firstMessage;
    for (Pending& p : done) {
        // A failed stream ran none of its later work: its copied-back bytes are not the kernels' answer.
        if (p.check && rc == ACL_SUCCESS && first == ACLNN_SUCCESS) {
            std::string message;
            const aclnnStatus st = p.check(&message);
            if (st != ACLNN_SUCCESS) {
                first = st;
                firstMessage = message;
            }
        }
        if (p.buffer.ptr) a.freeHost(p.buffer.ptr);
    }
    // Status records of graphs launched since the last synchronize: read here, once (graph.cpp).
    const aclnnStatus graphs = Guarded("camSynchronizeStream", [&] {
        return CheckLaunchedGraphs(stream, rc != ACL_SUCCESS || first != ACLNN_SUCCESS);
    });
    if (rc != ACL_SUCCESS)
        return Fail(CAM_ERR_KERNEL_FAULT, "the stream failed with ACL error " + std::to_string(rc) +
                                              " (aclrtSynchronizeStreamWithTimeout)");
    if (first != ACLNN_SUCCESS) return Fail(first, firstMessage);
    return graphs;
}

extern "C" const char* camBackendName(void) { return "ascend"; }

extern "C" aclnnStatus camGetPlatform(camPlatformInfo* info) {
    if (!info) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camGetPlatform: info is null");
    return cam::host::Guarded("camGetPlatform", [&] {
        const cam::tiling::PlatformInfo p = cam::host::CurrentPlatform();
        *info = {cam::host::Runtime().getSocName(), p.aivCores, p.aicCores, p.ubBytes};
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus camSetTwinPlatform(const char* name) {
    return Fail(ACLNN_ERR_PARAM_INVALID, std::string("camSetTwinPlatform('") + (name ? name : "(null)") +
                                             "'): the twin's platform cannot be set; this library runs on Ascend");
}
