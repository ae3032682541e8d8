// Stream capture and graphs (cam/cam_graph.h) for cam.Graph; a graph travels as its integer handle.
#include "common.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace cam::bindings {
namespace {

camGraph* AsGraph(uintptr_t handle) { return reinterpret_cast<camGraph*>(handle); }

// The capture code tables Python needs, from cam/cam_graph.h (the one definition); names as cam.Graph takes them.
constexpr std::pair<const char*, camCaptureMode> kCaptureModes[] = {
    {"global", CAM_CAPTURE_MODE_GLOBAL}, {"thread_local", CAM_CAPTURE_MODE_THREAD_LOCAL},
    {"relaxed", CAM_CAPTURE_MODE_RELAXED}};
constexpr std::pair<camCaptureStatus, const char*> kCaptureStatuses[] = {
    {CAM_CAPTURE_STATUS_NONE, "none"}, {CAM_CAPTURE_STATUS_ACTIVE, "active"},
    {CAM_CAPTURE_STATUS_INVALIDATED, "invalidated"}};
// Entry i names enumerator i, and there is one per enumerator (the enums are dense from 0; their values are ACL's,
// static_asserted in the Ascend backend).
constexpr bool NamedInOrder() {
    for (size_t i = 0; i < std::size(kCaptureModes); ++i)
        if (static_cast<size_t>(kCaptureModes[i].second) != i) return false;
    for (size_t i = 0; i < std::size(kCaptureStatuses); ++i)
        if (static_cast<size_t>(kCaptureStatuses[i].first) != i) return false;
    return true;
}
static_assert(NamedInOrder(), "capture code tables out of order");
static_assert(std::size(kCaptureModes) == CAM_CAPTURE_MODE_RELAXED + 1, "a capture mode without a name");
static_assert(std::size(kCaptureStatuses) == CAM_CAPTURE_STATUS_INVALIDATED + 1, "a capture status without a name");

void Register(py::module_& m) {
    m.def("capture_modes", [] {
        py::dict d;
        for (const auto& [name, mode] : kCaptureModes) d[name] = static_cast<int>(mode);
        return d;
    });
    m.def("capture_statuses", [] {
        py::dict d;
        for (const auto& [status, name] : kCaptureStatuses) d[py::int_(static_cast<int>(status))] = name;
        return d;
    });
    m.def("capture_begin", [](Stream& stream, int mode) {
        ThrowIfFailed(camStreamBeginCapture(stream.Handle(), static_cast<camCaptureMode>(mode)));
    }, py::arg("stream"), py::arg("mode"));
    m.def("capture_info", [](Stream& stream) {
        camCaptureStatus status = CAM_CAPTURE_STATUS_NONE;
        uint64_t ops = 0;
        ThrowIfFailed(camStreamGetCaptureInfo(stream.Handle(), &status, &ops));
        return py::make_tuple(static_cast<int>(status), ops);
    }, py::arg("stream"));
    m.def("capture_release_adopted", [](Stream& stream) {
        ThrowIfFailed(camStreamReleaseAdoptedCaptures(stream.Handle()));
    }, py::arg("stream"));
    m.def("capture_alloc", [](Stream& stream, uint64_t nbytes) {
        void* p = nullptr;
        ThrowIfFailed(camStreamCaptureAllocWorkspace(stream.Handle(), nbytes, &p));
        return reinterpret_cast<uintptr_t>(p);
    }, py::arg("stream"), py::arg("nbytes"));
    m.def("capture_end", [](Stream& stream) {
        camGraph* graph = nullptr;
        ThrowIfFailed(camStreamEndCapture(stream.Handle(), &graph));
        return reinterpret_cast<uintptr_t>(graph);
    }, py::arg("stream"));
    m.def("graph_launch", [](uintptr_t graph, Stream& stream) {
        aclnnStatus status;
        {
            py::gil_scoped_release release;
            status = camGraphLaunch(AsGraph(graph), stream.Handle());
        }
        ThrowIfFailed(status);
    }, py::arg("graph"), py::arg("stream"));
    m.def("graph_launch_bounded", [](uintptr_t graph, Stream& stream, uint32_t max_queued, double timeout_s) {
        aclnnStatus status;
        const int32_t ms = timeout_s < 0 ? -1 : static_cast<int32_t>(std::min(timeout_s * 1000.0, 2147483647.0));
        {
            py::gil_scoped_release release;  // the back-pressure wait must not hold the GIL
            status = camGraphLaunchBounded(AsGraph(graph), stream.Handle(), max_queued, ms);
        }
        ThrowIfFailed(status);
    }, py::arg("graph"), py::arg("stream"), py::arg("max_queued"), py::arg("timeout_s"));
    m.def("graph_queued", [](uintptr_t graph) {
        uint64_t queued = 0;
        ThrowIfFailed(camGraphQueuedReplays(AsGraph(graph), &queued));
        return queued;
    }, py::arg("graph"));
    m.def("graph_invalidate", [](uintptr_t graph, const std::string& reason) {
        ThrowIfFailed(camGraphInvalidate(AsGraph(graph), reason.c_str()));
    }, py::arg("graph"), py::arg("reason"));
    m.def("host_activity", [] {
        camHostActivity a{};
        ThrowIfFailed(camGetHostActivity(&a));
        py::dict d;
        d["synchronizes"] = a.synchronizes;
        d["device_reads"] = a.deviceReads;
        d["host_to_device_copies"] = a.hostToDeviceCopies;
        d["host_tasks"] = a.hostTasks;
        d["graph_launches"] = a.graphLaunches;
        d["caller_run_tasks"] = a.callerRunTasks;
        return d;
    });
    m.def("graph_destroy", [](uintptr_t graph) { ThrowIfFailed(camGraphDestroy(AsGraph(graph))); },
          py::arg("graph"));
}

CAM_BINDING(Register);

}  // namespace
}  // namespace cam::bindings
