// Stream capture and graphs, backend-neutral: the capture registry, the rules (docs/graph.md), the graph-owned
// pool and the status records read after a launch. The recording itself is the backend's (backend.h).
#include "graph.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend.h"
#include "status.h"

namespace cam::host {

namespace {

// What a graph owns; shared with every replay in flight, so it is freed only after the last one ran.
struct GraphData {
    struct Block {
        void* base;
        uint64_t bytes;
    };
    std::vector<Block> pool;
    std::vector<std::function<aclnnStatus(std::string*)>> checks;  // CaptureStatusCheck
    std::vector<std::shared_ptr<void>> holds;
    // Launches queued and not yet run (camGraphLaunchBounded's back-pressure); a QueuedReplay per launch.
    std::mutex queueMutex;
    std::condition_variable queueDone;
    uint64_t queued = 0;
    ~GraphData() {
        for (const Block& b : pool) FreeGraphMemory(b.base);
    }
};

// The owner of one queued launch: counts it while it is queued, and keeps the graph's data alive until it ran.
struct QueuedReplay {
    std::shared_ptr<GraphData> data;
    explicit QueuedReplay(std::shared_ptr<GraphData> d) : data(std::move(d)) {
        std::lock_guard<std::mutex> lock(data->queueMutex);
        ++data->queued;
    }
    ~QueuedReplay() {
        {
            std::lock_guard<std::mutex> lock(data->queueMutex);
            --data->queued;
        }
        data->queueDone.notify_all();
    }
};

struct Capture {
    camCaptureMode mode;
    std::thread::id thread;
    camCaptureStatus status = CAM_CAPTURE_STATUS_ACTIVE;
    std::string broken;  // the first rule broken
    std::shared_ptr<Recording> recording;
    std::shared_ptr<GraphData> data = std::make_shared<GraphData>();
};

struct Graph {
    std::shared_ptr<Recording> recording;
    std::shared_ptr<GraphData> data;
    std::string invalid;  // non-empty: why it may not launch any more
};

// A capture the runtime reports and cam did not begin (a framework's graph, docs/graph.md "Inside a framework's
// graph"), adopted when cam first meets it. cam never hears of its end nor of its graph's destruction, so its data
// (the pool above all) is never freed: the registry keeps it for the life of the process.
struct Adopted {
    uintptr_t capture;  // the runtime's name for it (RuntimeCaptureStatus)
    std::shared_ptr<GraphData> data;
};

struct Registry {
    std::mutex mutex;
    std::map<aclrtStream, Capture> captures;
    // Per stream, every capture adopted there and not yet released (camStreamReleaseAdoptedCaptures), oldest
    // first; their status checks run at every synchronize of the stream, since the framework's replays are not
    // camGraphLaunches.
    std::map<aclrtStream, std::vector<Adopted>> adopted;
    std::vector<std::shared_ptr<GraphData>> released;  // released adoptions: their pools stay
    std::unordered_map<uintptr_t, std::shared_ptr<Graph>> graphs;
    uintptr_t next = 0x20000;  // handles are never reused, so a destroyed one cannot name a newer graph
    std::map<aclrtStream, std::vector<std::shared_ptr<GraphData>>> launched;  // since the last synchronize
};

Registry& Graphs() {
    static Registry* const registry = new Registry();  // outlives static destruction, as the executor registry
    return *registry;
}

const char* ModeName(camCaptureMode mode) {
    switch (mode) {
        case CAM_CAPTURE_MODE_GLOBAL: return "GLOBAL";
        case CAM_CAPTURE_MODE_THREAD_LOCAL: return "THREAD_LOCAL";
        default: return "RELAXED";
    }
}

// Registry lock held.
void Invalidate(Capture& c, const std::string& what) {
    if (c.status == CAM_CAPTURE_STATUS_ACTIVE) {
        c.status = CAM_CAPTURE_STATUS_INVALIDATED;
        c.broken = what;
    }
}

std::string Broken(const std::string& what) {
    return what + " is not allowed while the stream captures; the capture is invalidated "
                  "(camStreamEndCapture will fail)";
}

// Registry lock held. When cam's registry has no capture on `stream` but the runtime reports one: its data, adopted
// on first sight (*status: the runtime's status). nullptr when the runtime says the stream does not capture.
GraphData* AdoptedCapture(Registry& r, aclrtStream stream, camCaptureStatus* status) {
    uintptr_t capture = 0;
    *status = RuntimeCaptureStatus(stream, &capture);
    if (*status == CAM_CAPTURE_STATUS_NONE) return nullptr;
    std::vector<Adopted>& list = r.adopted[stream];
    if (list.empty() || list.back().capture != capture) list.push_back({capture, std::make_shared<GraphData>()});
    return list.back().data.get();
}

// cam cannot invalidate a capture it did not begin: it refuses its own part and leaves the capture to its owner.
std::string BrokenAdopted(const std::string& what) {
    return what + " is not allowed while the stream captures (a capture the runtime reports that cam did not "
                  "begin, such as a framework's graph); nothing was queued";
}

// Registry lock held: stops reading an adopted capture's status records and lets go of what it held (the
// communicators' in-flight tokens); the pool stays.
void ReleaseAdopted(Registry& r, aclrtStream stream) {
    auto it = r.adopted.find(stream);
    if (it == r.adopted.end()) return;
    for (Adopted& a : it->second) {
        a.data->checks.clear();
        a.data->holds.clear();
        r.released.push_back(std::move(a.data));
    }
    r.adopted.erase(it);
}

std::shared_ptr<Graph> FindGraph(Registry& r, camGraph* handle) {
    auto it = r.graphs.find(reinterpret_cast<uintptr_t>(handle));
    return it == r.graphs.end() ? nullptr : it->second;
}

}  // namespace

void RefuseInCapture(aclrtStream stream, const char* what) {
    Registry& r = Graphs();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.captures.find(stream);
    if (it == r.captures.end()) {
        camCaptureStatus status;
        if (AdoptedCapture(r, stream, &status) == nullptr) return;
        throw StatusException(CAM_ERR_CAPTURE_INVALIDATED, BrokenAdopted(what));
    }
    Invalidate(it->second, what);
    throw StatusException(CAM_ERR_CAPTURE_INVALIDATED, Broken(what));
}

aclnnStatus CheckSynchronizeAllowed(aclrtStream stream) {
    Registry& r = Graphs();
    std::lock_guard<std::mutex> lock(r.mutex);
    std::string refused;
    for (auto& [s, c] : r.captures) {
        const bool hit = s == stream || c.mode == CAM_CAPTURE_MODE_GLOBAL ||
                         (c.mode == CAM_CAPTURE_MODE_THREAD_LOCAL && c.thread == std::this_thread::get_id());
        if (!hit) continue;
        const std::string what = s == stream ? std::string("a synchronize of the capturing stream")
                                             : std::string("a synchronize of another stream during a ") +
                                                   ModeName(c.mode) + " capture";
        Invalidate(c, what);
        if (refused.empty()) refused = what;
    }
    if (refused.empty() && !r.captures.count(stream)) {
        // The runtime's mode of an adopted capture is not known to cam: only its own stream is refused here.
        camCaptureStatus status;
        GraphData* adopted = nullptr;
        try {  // the synchronize entry points are not Guarded: a failing runtime query is their status
            adopted = AdoptedCapture(r, stream, &status);
        } catch (const std::exception& e) {
            return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string("camSynchronizeStream: ") + e.what());
        }
        if (adopted != nullptr)
            return Fail(CAM_ERR_CAPTURE_INVALIDATED,
                        "camSynchronizeStream: " + BrokenAdopted("a synchronize of the capturing stream"));
    }
    if (refused.empty()) return ACLNN_SUCCESS;
    return Fail(CAM_ERR_CAPTURE_INVALIDATED, "camSynchronizeStream: " + Broken(refused));
}

void CheckCaptureWorkspace(aclrtStream stream, const void* workspace, uint64_t bytes, const char* api) {
    if (bytes == 0) return;
    Registry& r = Graphs();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.captures.find(stream);
    camCaptureStatus status;
    GraphData* data = it != r.captures.end() ? it->second.data.get() : AdoptedCapture(r, stream, &status);
    if (data == nullptr) return;
    const auto* p = static_cast<const uint8_t*>(workspace);
    for (const GraphData::Block& b : data->pool) {
        const auto* base = static_cast<const uint8_t*>(b.base);
        if (p >= base && p <= base + b.bytes && bytes <= static_cast<uint64_t>(base + b.bytes - p)) return;
    }
    const std::string what = std::string(api) +
                             " with a workspace that is not graph-owned (take it from camStreamCaptureAllocWorkspace)";
    if (it == r.captures.end()) throw StatusException(CAM_ERR_CAPTURE_INVALIDATED, BrokenAdopted(what));
    Invalidate(it->second, what);
    throw StatusException(CAM_ERR_CAPTURE_INVALIDATED, Broken(what));
}

bool CaptureStatusCheck(aclrtStream stream, std::function<aclnnStatus(std::string*)> check,
                        std::shared_ptr<void> hold) {
    Registry& r = Graphs();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.captures.find(stream);
    camCaptureStatus status;
    GraphData* data = it != r.captures.end() ? it->second.data.get() : AdoptedCapture(r, stream, &status);
    if (data == nullptr) return false;
    if (check) data->checks.push_back(std::move(check));
    if (hold) data->holds.push_back(std::move(hold));
    return true;
}

aclnnStatus CheckLaunchedGraphs(aclrtStream stream, bool streamFailed) {
    std::vector<std::shared_ptr<GraphData>> launched;
    // An adopted capture's graph is replayed by its framework, unseen: its records are read at every synchronize
    // of the stream it was captured on (copied under the lock: a capture in progress may still add checks).
    std::vector<std::function<aclnnStatus(std::string*)>> adoptedChecks;
    {
        Registry& r = Graphs();
        std::lock_guard<std::mutex> lock(r.mutex);
        auto it = r.launched.find(stream);
        if (it != r.launched.end()) {
            launched.swap(it->second);
            r.launched.erase(it);
        }
        auto a = r.adopted.find(stream);
        if (a != r.adopted.end())
            for (const Adopted& adopted : a->second)
                adoptedChecks.insert(adoptedChecks.end(), adopted.data->checks.begin(), adopted.data->checks.end());
    }
    if (launched.empty() && adoptedChecks.empty()) return ACLNN_SUCCESS;
    // One read per record per synchronize, however many replays ran: this is not a per-item read. A record the
    // kernels set stays set across replays (nothing resets it on the device) until this read reports it; then it
    // is cleared, so the next synchronize speaks only of replays after this one. The stream is idle here.
    aclnnStatus status = ACLNN_SUCCESS;
    // Every check runs (each clears what it reported); the first failure is the one reported.
    auto run = [&](const std::function<aclnnStatus(std::string*)>& check) {
        std::string message;
        CountHostActivity(HostActivity::DeviceRead);
        const aclnnStatus st = check(&message);
        if (st != ACLNN_SUCCESS && status == ACLNN_SUCCESS && !streamFailed) status = Fail(st, message);
    };
    for (const auto& data : launched)
        for (const auto& check : data->checks) run(check);
    for (const auto& check : adoptedChecks) run(check);
    return status;
}

namespace {
std::atomic<uint64_t> gActivity[static_cast<int>(HostActivity::kCount)];
// + callerRunTasks, which the backend counts (CallerRunTasks).
static_assert(sizeof(camHostActivity) == sizeof(uint64_t) * (static_cast<int>(HostActivity::kCount) + 1),
              "one camHostActivity field per HostActivity counter, then callerRunTasks");
}

void CountHostActivity(HostActivity what) { gActivity[static_cast<int>(what)].fetch_add(1, std::memory_order_relaxed); }

void ForgetCapture(aclrtStream stream) {
    Registry& r = Graphs();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.captures.erase(stream);
    r.launched.erase(stream);
    ReleaseAdopted(r, stream);  // no synchronize of this stream will read them any more
}

}  // namespace cam::host

using namespace cam::host;

extern "C" aclnnStatus camStreamBeginCapture(aclrtStream stream, camCaptureMode mode) {
    return Guarded("camStreamBeginCapture", [&]() -> aclnnStatus {
        if (mode != CAM_CAPTURE_MODE_GLOBAL && mode != CAM_CAPTURE_MODE_THREAD_LOCAL &&
            mode != CAM_CAPTURE_MODE_RELAXED)
            return Fail(ACLNN_ERR_PARAM_INVALID, "camStreamBeginCapture: mode " + std::to_string(int(mode)) +
                                                     " is not GLOBAL (0), THREAD_LOCAL (1) or RELAXED (2)");
        stream = ResolveStream(stream);
        Registry& r = Graphs();
        std::lock_guard<std::mutex> lock(r.mutex);
        if (r.captures.count(stream))
            return Fail(ACLNN_ERR_PARAM_INVALID, "camStreamBeginCapture: stream already captures");
        camCaptureStatus runtime;
        if (AdoptedCapture(r, stream, &runtime) != nullptr)
            return Fail(ACLNN_ERR_PARAM_INVALID, "camStreamBeginCapture: stream already captures (a capture the "
                                                 "runtime reports that cam did not begin)");
        Capture c;
        c.mode = mode;
        c.thread = std::this_thread::get_id();
        c.recording = BeginRecording(stream, mode);
        r.captures.emplace(stream, std::move(c));
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus camStreamGetCaptureInfo(aclrtStream stream, camCaptureStatus* status, uint64_t* ops) {
    return Guarded("camStreamGetCaptureInfo", [&]() -> aclnnStatus {
        if (!status) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camStreamGetCaptureInfo: status is null");
        stream = ResolveStream(stream);
        Registry& r = Graphs();
        std::lock_guard<std::mutex> lock(r.mutex);
        auto it = r.captures.find(stream);
        if (ops) *ops = it == r.captures.end() ? 0 : RecordedOps(*it->second.recording);
        if (it != r.captures.end())
            *status = it->second.status;
        else
            AdoptedCapture(r, stream, status);  // the runtime's status; adopted if it captures
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus camStreamCaptureAllocWorkspace(aclrtStream stream, uint64_t bytes, void** workspace) {
    return Guarded("camStreamCaptureAllocWorkspace", [&]() -> aclnnStatus {
        if (!workspace) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camStreamCaptureAllocWorkspace: workspace is null");
        *workspace = nullptr;
        stream = ResolveStream(stream);
        Registry& r = Graphs();
        std::lock_guard<std::mutex> lock(r.mutex);
        auto it = r.captures.find(stream);
        camCaptureStatus status = CAM_CAPTURE_STATUS_ACTIVE;
        GraphData* data = it != r.captures.end() ? it->second.data.get() : AdoptedCapture(r, stream, &status);
        if (data == nullptr)
            return Fail(ACLNN_ERR_PARAM_INVALID, "camStreamCaptureAllocWorkspace: stream does not capture");
        if (status != CAM_CAPTURE_STATUS_ACTIVE)
            return Fail(CAM_ERR_CAPTURE_INVALIDATED, "camStreamCaptureAllocWorkspace: the runtime reports the "
                                                     "stream's capture (begun outside cam) invalidated");
        // Zeroed: the status records at its start begin clean, and are never reset per replay (sticky). An adopted
        // capture's pool is never freed (Adopted): one block per op launch recorded into it.
        void* base = AllocGraphMemory(bytes ? bytes : 1);
        data->pool.push_back({base, bytes});
        *workspace = base;
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus camStreamEndCapture(aclrtStream stream, camGraph** graph) {
    return Guarded("camStreamEndCapture", [&]() -> aclnnStatus {
        if (!graph) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camStreamEndCapture: graph is null");
        *graph = nullptr;
        stream = ResolveStream(stream);
        Registry& r = Graphs();
        Capture c;
        {
            std::lock_guard<std::mutex> lock(r.mutex);
            auto it = r.captures.find(stream);
            if (it == r.captures.end())
                return Fail(ACLNN_ERR_PARAM_INVALID, "camStreamEndCapture: stream does not capture");
            c = std::move(it->second);
            r.captures.erase(it);
        }
        const bool keep = c.status == CAM_CAPTURE_STATUS_ACTIVE;
        std::string why;
        if (!EndRecording(stream, c.recording, keep, &why))
            return Fail(CAM_ERR_CAPTURE_INVALIDATED, "camStreamEndCapture: " + why);
        // Nothing recorded ever ran, so dropping the recording and its pool here is safe.
        if (!keep)
            return Fail(CAM_ERR_CAPTURE_INVALIDATED,
                        "camStreamEndCapture: the capture was invalidated by " + c.broken + "; no graph was made");
        auto g = std::make_shared<Graph>();
        g->recording = std::move(c.recording);
        g->data = std::move(c.data);
        std::lock_guard<std::mutex> lock(r.mutex);
        const uintptr_t id = r.next;
        r.next += 16;
        r.graphs.emplace(id, std::move(g));
        *graph = reinterpret_cast<camGraph*>(id);
        return ACLNN_SUCCESS;
    });
}

namespace {

// camGraphLaunch and camGraphLaunchBounded. maxQueued 0: no bound.
aclnnStatus LaunchGraph(const char* api, camGraph* graph, aclrtStream stream, uint32_t maxQueued, int32_t timeoutMs) {
    stream = ResolveStream(stream);
    Registry& r = Graphs();
    std::shared_ptr<Graph> g;
    {
        std::lock_guard<std::mutex> lock(r.mutex);
        g = FindGraph(r, graph);
        if (!g)
            return Fail(CAM_ERR_GRAPH_INVALID, std::string(api) +
                                                   ": graph is not live (destroyed, or not made by camStreamEndCapture)");
        if (!g->invalid.empty()) return Fail(CAM_ERR_GRAPH_INVALID, std::string(api) + ": " + g->invalid);
        if (r.captures.count(stream))
            return Fail(ACLNN_ERR_PARAM_INVALID,
                        std::string(api) + ": the stream captures (graphs are not nested)");
    }
    if (maxQueued > 0) {
        // Back-pressure: the caller waits for an earlier replay to finish, as a producer waits for a free slot, so
        // the work a later synchronize must outlast is at most maxQueued replays, never everything ever queued.
        GraphData& d = *g->data;
        std::unique_lock<std::mutex> lock(d.queueMutex);
        auto room = [&] { return d.queued < maxQueued; };
        if (timeoutMs < 0) {
            d.queueDone.wait(lock, room);
        } else if (!d.queueDone.wait_for(lock, std::chrono::milliseconds(timeoutMs), room)) {
            return Fail(CAM_ERR_SYNC_TIMEOUT, std::string(api) + ": " + std::to_string(d.queued) +
                                                  " replays of the graph were still queued after " +
                                                  std::to_string(timeoutMs) +
                                                  " ms (their work continues); nothing was launched");
        }
    }
    {
        std::lock_guard<std::mutex> lock(r.mutex);
        auto& launched = r.launched[stream];
        if (std::find(launched.begin(), launched.end(), g->data) == launched.end()) launched.push_back(g->data);
    }
    LaunchRecording(g->recording, stream, std::make_shared<QueuedReplay>(g->data));
    CountHostActivity(HostActivity::GraphLaunch);
    return ACLNN_SUCCESS;
}

}  // namespace

extern "C" aclnnStatus camGraphLaunch(camGraph* graph, aclrtStream stream) {
    return Guarded("camGraphLaunch", [&]() -> aclnnStatus { return LaunchGraph("camGraphLaunch", graph, stream, 0, -1); });
}

extern "C" aclnnStatus camGraphLaunchBounded(camGraph* graph, aclrtStream stream, uint32_t maxQueued,
                                             int32_t timeoutMs) {
    return Guarded("camGraphLaunchBounded", [&]() -> aclnnStatus {
        if (maxQueued == 0)
            return Fail(ACLNN_ERR_PARAM_INVALID, "camGraphLaunchBounded: maxQueued must be >= 1 (camGraphLaunch "
                                                 "queues without a bound)");
        return LaunchGraph("camGraphLaunchBounded", graph, stream, maxQueued, timeoutMs);
    });
}

extern "C" aclnnStatus camGraphQueuedReplays(camGraph* graph, uint64_t* queued) {
    return Guarded("camGraphQueuedReplays", [&]() -> aclnnStatus {
        if (!queued) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camGraphQueuedReplays: queued is null");
        std::shared_ptr<Graph> g;
        {
            Registry& r = Graphs();
            std::lock_guard<std::mutex> lock(r.mutex);
            g = FindGraph(r, graph);
        }
        if (!g) return Fail(CAM_ERR_GRAPH_INVALID, "camGraphQueuedReplays: graph is not live");
        std::lock_guard<std::mutex> lock(g->data->queueMutex);
        *queued = g->data->queued;
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus camGraphInvalidate(camGraph* graph, const char* reason) {
    return Guarded("camGraphInvalidate", [&]() -> aclnnStatus {
        Registry& r = Graphs();
        std::lock_guard<std::mutex> lock(r.mutex);
        std::shared_ptr<Graph> g = FindGraph(r, graph);
        if (!g) return Fail(CAM_ERR_GRAPH_INVALID, "camGraphInvalidate: graph is not live");
        if (g->invalid.empty()) g->invalid = reason && *reason ? reason : "the graph was invalidated";
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus camGraphDestroy(camGraph* graph) {
    return Guarded("camGraphDestroy", [&]() -> aclnnStatus {
        std::shared_ptr<Graph> g;
        {
            Registry& r = Graphs();
            std::lock_guard<std::mutex> lock(r.mutex);
            auto it = r.graphs.find(reinterpret_cast<uintptr_t>(graph));
            if (it == r.graphs.end())
                return Fail(CAM_ERR_GRAPH_INVALID, "camGraphDestroy: graph is not live (already destroyed?)");
            g = std::move(it->second);
            r.graphs.erase(it);
        }
        // Replays still queued hold the graph's data (LaunchRecording's owner): the pool is freed after the last
        // of them ran, never under it, so destroy does not wait.
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus camStreamReleaseAdoptedCaptures(aclrtStream stream) {
    return Guarded("camStreamReleaseAdoptedCaptures", [&]() -> aclnnStatus {
        stream = ResolveStream(stream);
        Registry& r = Graphs();
        std::lock_guard<std::mutex> lock(r.mutex);
        camCaptureStatus status;
        if (r.captures.count(stream) || AdoptedCapture(r, stream, &status) != nullptr)
            return Fail(ACLNN_ERR_PARAM_INVALID, "camStreamReleaseAdoptedCaptures: the stream still captures; end "
                                                 "the capture and destroy its graph first");
        ReleaseAdopted(r, stream);
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus camGetHostActivity(camHostActivity* activity) {
    if (!activity) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camGetHostActivity: activity is null");
    auto get = [](HostActivity w) { return gActivity[static_cast<int>(w)].load(std::memory_order_relaxed); };
    *activity = {get(HostActivity::Synchronize), get(HostActivity::DeviceRead), get(HostActivity::HostToDevice),
                 get(HostActivity::HostTask), get(HostActivity::GraphLaunch), CallerRunTasks()};
    return ACLNN_SUCCESS;
}
