// Stream capture and graphs (cam/cam_graph.h) for cam.Graph; a graph travels as its integer handle.
#include "common.h"

namespace cam::bindings {
namespace {

camGraph* AsGraph(uintptr_t handle) { return reinterpret_cast<camGraph*>(handle); }

void Register(py::module_& m) {
    m.def("capture_begin", [](Stream& stream, int mode) {
        ThrowIfFailed(camStreamBeginCapture(stream.Handle(), static_cast<camCaptureMode>(mode)));
    }, py::arg("stream"), py::arg("mode"));
    m.def("capture_info", [](Stream& stream) {
        camCaptureStatus status = CAM_CAPTURE_STATUS_NONE;
        uint64_t ops = 0;
        ThrowIfFailed(camStreamGetCaptureInfo(stream.Handle(), &status, &ops));
        return py::make_tuple(static_cast<int>(status), ops);
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
        return d;
    });
    m.def("graph_destroy", [](uintptr_t graph) { ThrowIfFailed(camGraphDestroy(AsGraph(graph))); },
          py::arg("graph"));
}

CAM_BINDING(Register);

}  // namespace
}  // namespace cam::bindings
