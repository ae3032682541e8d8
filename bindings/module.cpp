// cam._C: the C API, callable from Python without linking libtorch. Tensors cross as plain descriptors
// (data_ptr, shape, strides, ACL dtype code) built by cam/_tensor.py; the Python layer owns all memory.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "cam/cam.h"

namespace py = pybind11;

namespace {

struct StatusError {
    aclnnStatus status;
    std::string message;
};

py::object gErrorFactory;  // cam.errors.from_status(status, message) -> exception instance

void ThrowIfFailed(aclnnStatus status) {
    if (status != ACLNN_SUCCESS) throw StatusError{status, camGetLastErrorMessage()};
}

using Descriptor = std::tuple<uintptr_t, std::vector<int64_t>, std::vector<int64_t>, int>;

// Owns the aclTensor made from a descriptor for the duration of one call.
class AclTensor {
public:
    explicit AclTensor(const Descriptor& d) {
        const auto& [ptr, shape, strides, dtype] = d;
        if (shape.size() != strides.size()) throw StatusError{ACLNN_ERR_PARAM_INVALID, "descriptor rank mismatch"};
        tensor_ = aclCreateTensor(shape.data(), shape.size(), static_cast<aclDataType>(dtype), strides.data(), 0,
                                  ACL_FORMAT_ND, shape.data(), shape.size(), reinterpret_cast<void*>(ptr));
        if (!tensor_) throw StatusError{ACLNN_ERR_PARAM_INVALID, "could not describe a tensor"};
    }
    ~AclTensor() { aclDestroyTensor(tensor_); }
    AclTensor(const AclTensor&) = delete;
    aclTensor* get() const { return tensor_; }

private:
    aclTensor* tensor_ = nullptr;
};

class Stream {
public:
    Stream() {
        if (aclrtCreateStream(&stream_) != ACL_SUCCESS) throw StatusError{ACLNN_ERR_INNER, "aclrtCreateStream failed"};
    }
    ~Stream() { Close(); }
    void Close() {
        if (stream_) {
            py::gil_scoped_release release;
            aclrtDestroyStream(stream_);
            stream_ = nullptr;
        }
    }
    void Synchronize(double timeoutSeconds) {
        aclnnStatus status;
        {
            py::gil_scoped_release release;
            status = camSynchronizeStream(Handle(), timeoutSeconds < 0 ? -1 : static_cast<int32_t>(timeoutSeconds * 1000));
        }
        ThrowIfFailed(status);
    }
    aclrtStream Handle() const {
        if (!stream_) throw StatusError{ACLNN_ERR_PARAM_INVALID, "stream is closed"};
        return stream_;
    }

private:
    aclrtStream stream_ = nullptr;
};

// Runs the two aclnn phases. `allocate(nbytes) -> descriptor` gives workspace the caller keeps alive until the
// stream has run the op.
template <typename GetWorkspace, typename Run>
void RunTwoPhase(GetWorkspace&& getWorkspace, Run&& run, Stream& stream, const py::function& allocate) {
    uint64_t workspaceSize = 0;
    aclOpExecutor* executor = nullptr;
    ThrowIfFailed(getWorkspace(&workspaceSize, &executor));
    void* workspace = nullptr;
    if (workspaceSize > 0) {
        Descriptor ws = allocate(workspaceSize).cast<Descriptor>();
        workspace = reinterpret_cast<void*>(std::get<0>(ws));
    }
    aclnnStatus status;
    {
        py::gil_scoped_release release;
        status = run(workspace, workspaceSize, executor, stream.Handle());
    }
    ThrowIfFailed(status);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
    m.doc() = "cam C API bindings (backend: twin CPU implementation unless built for Ascend)";

    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const StatusError& e) {
            if (gErrorFactory) {
                py::object exc = gErrorFactory(e.status, e.message);
                PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
            } else {
                PyErr_SetString(PyExc_RuntimeError, e.message.c_str());
            }
        }
    });
    m.def("_set_error_factory", [](py::object f) { gErrorFactory = std::move(f); });
    m.add_object("_cleanup", py::capsule([] { gErrorFactory = py::object(); }));

    m.def("backend", [] { return std::string(camBackendName()); });
    m.def("platform", [] {
        camPlatformInfo p{};
        ThrowIfFailed(camGetPlatform(&p));
        py::dict d;
        d["name"] = p.name;
        d["aiv_cores"] = p.aivCores;
        d["aic_cores"] = p.aicCores;
        d["ub_bytes"] = p.ubBytes;
        return d;
    });
    m.def("set_twin_platform", [](const std::string& name) { ThrowIfFailed(camSetTwinPlatform(name.c_str())); });

    py::class_<Stream>(m, "Stream")
        .def(py::init<>())
        .def("synchronize", &Stream::Synchronize, py::arg("timeout_s"))
        .def("close", &Stream::Close);

    m.def(
        "dynamic_quant",
        [](const Descriptor& x, const Descriptor& q, const Descriptor& scale, Stream& stream,
           const py::function& allocate) {
            AclTensor tx(x), tq(q), ts(scale);
            RunTwoPhase([&](uint64_t* ws, aclOpExecutor** ex) {
                return aclnnCamDynamicQuantGetWorkspaceSize(tx.get(), tq.get(), ts.get(), ws, ex);
            }, aclnnCamDynamicQuant, stream, allocate);
        },
        py::arg("x"), py::arg("q"), py::arg("scale"), py::arg("stream"), py::arg("allocate"));
}
