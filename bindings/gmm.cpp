#include "common.h"

namespace cam::bindings {
namespace {

void Register(py::module_& m) {
    // How many executors of an op this process launched (cam.h camGetLaunchCount): tests and benchmarks count
    // grouped-matmul launches with it.
    m.def("launch_count", [](const std::string& op) { return camGetLaunchCount(op.c_str()); }, py::arg("op"));
    m.def(
        "gmm_swiglu_quant_multi_layer",
        [](const Descriptor& x, const Descriptor& xScale, const std::vector<Descriptor>& weights,
           const std::vector<Descriptor>& weightScales, const Descriptor& groupList, const Descriptor& layerIndex,
           int64_t groupListType, const Descriptor& y, const Descriptor& yScale, std::optional<double> swigluLimit,
           Stream* stream, const py::object& allocate, std::optional<double> syncTimeoutS) {
            AclTensor tx(x), txs(xScale), tgl(groupList), tli(layerIndex), ty(y), tys(yScale);
            AclTensorList tw(weights, ACL_FORMAT_FRACTAL_NZ), tws(weightScales);
            RunTwoPhase([&](uint64_t* ws, aclOpExecutor** ex) {
                return aclnnCamGmmSwigluQuantMultiLayerV2GetWorkspaceSize(
                    tx.get(), txs.get(), tw.get(), tws.get(), tgl.get(), tli.get(), groupListType,
                    swigluLimit ? &*swigluLimit : nullptr, ty.get(), tys.get(), ws, ex);
            }, aclnnCamGmmSwigluQuantMultiLayer, stream, allocate, syncTimeoutS);
        },
        py::arg("x"), py::arg("x_scale"), py::arg("weights"), py::arg("weight_scales"), py::arg("group_list"),
        py::arg("layer_index"), py::arg("group_list_type"), py::arg("y"), py::arg("y_scale"), py::arg("swiglu_limit"),
        py::arg("stream"), py::arg("allocate"), py::arg("sync_timeout_s") = py::none());
    m.def(
        "gmm_multi_layer",
        [](const Descriptor& y, const Descriptor& yScale, const std::vector<Descriptor>& weights,
           const std::vector<Descriptor>& weightScales, const Descriptor& groupList, const Descriptor& layerIndex,
           int64_t groupListType, const Descriptor& out, std::optional<double> outScale, Stream* stream,
           const py::object& allocate, std::optional<double> syncTimeoutS) {
            AclTensor ty(y), tys(yScale), tgl(groupList), tli(layerIndex), to(out);
            AclTensorList tw(weights, ACL_FORMAT_FRACTAL_NZ), tws(weightScales);
            RunTwoPhase([&](uint64_t* ws, aclOpExecutor** ex) {
                return aclnnCamGmmMultiLayerV2GetWorkspaceSize(ty.get(), tys.get(), tw.get(), tws.get(), tgl.get(),
                                                              tli.get(), groupListType,
                                                              outScale ? &*outScale : nullptr, to.get(), ws, ex);
            }, aclnnCamGmmMultiLayer, stream, allocate, syncTimeoutS);
        },
        py::arg("y"), py::arg("y_scale"), py::arg("weights"), py::arg("weight_scales"), py::arg("group_list"),
        py::arg("layer_index"), py::arg("group_list_type"), py::arg("out"), py::arg("out_scale"), py::arg("stream"),
        py::arg("allocate"), py::arg("sync_timeout_s") = py::none());
}

CAM_BINDING(Register);

}  // namespace
}  // namespace cam::bindings
