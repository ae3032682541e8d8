#include "common.h"

namespace cam::bindings {
namespace {

// W4A8's colsums arrive as one int32 [L, E, G, N] tensor; the C API takes one list entry per layer. Anything else
// goes whole, as one entry, for the C API to refuse by name.
std::vector<Descriptor> LayersOf(const Descriptor& d) {
    if (d.shape.size() != 4 || d.dtype != static_cast<int>(ACL_INT32)) return {d};
    std::vector<Descriptor> layers;
    for (int64_t l = 0; l < d.shape[0]; ++l) {
        Descriptor one;
        one.ptr = d.ptr + static_cast<uintptr_t>(l * d.strides[0] * 4);
        one.shape.assign(d.shape.begin() + 1, d.shape.end());
        one.strides.assign(d.strides.begin() + 1, d.strides.end());
        one.dtype = d.dtype;
        layers.push_back(std::move(one));
    }
    return layers;
}

void Register(py::module_& m) {
    // How many executors of an op this process launched (cam.h camGetLaunchCount): tests and benchmarks count
    // grouped-matmul launches with it.
    m.def("launch_count", [](const std::string& op) { return camGetLaunchCount(op.c_str()); }, py::arg("op"));
    m.def(
        "gmm_swiglu_quant_multi_layer",
        [](const Descriptor& x, const Descriptor& xScale, const std::vector<Descriptor>& weights,
           const std::vector<Descriptor>& weightScales, const Descriptor& groupList, const Descriptor& layerIndex,
           int64_t groupListType, const Descriptor& y, const Descriptor& yScale, std::optional<double> swigluLimit,
           const std::optional<Descriptor>& weightColsums, Stream* stream, const py::object& allocate,
           std::optional<double> syncTimeoutS) {
            AclTensor tx(x), txs(xScale), tgl(groupList), tli(layerIndex), ty(y), tys(yScale);
            // W4A8 (weight_colsums given): packed int4 weights, ND.
            AclTensorList tw(weights, weightColsums ? ACL_FORMAT_ND : ACL_FORMAT_FRACTAL_NZ), tws(weightScales);
            std::optional<AclTensorList> tcs;
            if (weightColsums) tcs.emplace(LayersOf(*weightColsums));
            RunTwoPhase([&](uint64_t* ws, aclOpExecutor** ex) {
                return aclnnCamGmmSwigluQuantMultiLayerW4A8GetWorkspaceSize(
                    tx.get(), txs.get(), tw.get(), tws.get(), tcs ? tcs->get() : nullptr, tgl.get(), tli.get(),
                    groupListType, swigluLimit ? &*swigluLimit : nullptr, ty.get(), tys.get(), ws, ex);
            }, aclnnCamGmmSwigluQuantMultiLayer, stream, allocate, syncTimeoutS);
        },
        py::arg("x"), py::arg("x_scale"), py::arg("weights"), py::arg("weight_scales"), py::arg("group_list"),
        py::arg("layer_index"), py::arg("group_list_type"), py::arg("y"), py::arg("y_scale"), py::arg("swiglu_limit"),
        py::arg("weight_colsums"), py::arg("stream"), py::arg("allocate"), py::arg("sync_timeout_s") = py::none());
    m.def(
        "gmm_multi_layer",
        [](const Descriptor& y, const Descriptor& yScale, const std::vector<Descriptor>& weights,
           const std::vector<Descriptor>& weightScales, const Descriptor& groupList, const Descriptor& layerIndex,
           int64_t groupListType, const Descriptor& out, std::optional<double> outScale,
           const std::optional<Descriptor>& weightColsums, Stream* stream, const py::object& allocate,
           std::optional<double> syncTimeoutS) {
            AclTensor ty(y), tys(yScale), tgl(groupList), tli(layerIndex), to(out);
            AclTensorList tw(weights, weightColsums ? ACL_FORMAT_ND : ACL_FORMAT_FRACTAL_NZ), tws(weightScales);
            std::optional<AclTensorList> tcs;
            if (weightColsums) tcs.emplace(LayersOf(*weightColsums));
            RunTwoPhase([&](uint64_t* ws, aclOpExecutor** ex) {
                return aclnnCamGmmMultiLayerW4A8GetWorkspaceSize(ty.get(), tys.get(), tw.get(), tws.get(),
                                                                tcs ? tcs->get() : nullptr, tgl.get(), tli.get(),
                                                                groupListType, outScale ? &*outScale : nullptr,
                                                                to.get(), ws, ex);
            }, aclnnCamGmmMultiLayer, stream, allocate, syncTimeoutS);
        },
        py::arg("y"), py::arg("y_scale"), py::arg("weights"), py::arg("weight_scales"), py::arg("group_list"),
        py::arg("layer_index"), py::arg("group_list_type"), py::arg("out"), py::arg("out_scale"),
        py::arg("weight_colsums"), py::arg("stream"), py::arg("allocate"), py::arg("sync_timeout_s") = py::none());
}

CAM_BINDING(Register);

}  // namespace
}  // namespace cam::bindings
