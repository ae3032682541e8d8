#include "common.h"

namespace cam::bindings {
namespace {

void Register(py::module_& m) {
    m.def(
        "dynamic_quant",
        [](const Descriptor& x, const Descriptor& q, const Descriptor& scale, Stream* stream,
           const py::object& allocate, std::optional<double> syncTimeoutS) {
            AclTensor tx(x), tq(q), ts(scale);
            RunTwoPhase([&](uint64_t* ws, aclOpExecutor** ex) {
                return aclnnCamDynamicQuantGetWorkspaceSize(tx.get(), tq.get(), ts.get(), ws, ex);
            }, aclnnCamDynamicQuant, stream, allocate, syncTimeoutS);
        },
        py::arg("x"), py::arg("q"), py::arg("scale"), py::arg("stream"), py::arg("allocate"),
        py::arg("sync_timeout_s") = py::none());
}

CAM_BINDING(Register);

}  // namespace
}  // namespace cam::bindings
