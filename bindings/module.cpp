// cam._C: the C API, callable from Python without linking libtorch. The Python layer owns all memory.
#include "common.h"

#include <vector>

namespace cam::bindings {

namespace {

py::object gErrorFactory;  // cam.errors.from_status(status, message) -> exception instance

std::vector<RegisterFn>& Registrations() {
    static std::vector<RegisterFn> fns;
    return fns;
}

}  // namespace

bool AddRegistration(RegisterFn fn) {
    Registrations().push_back(fn);
    return true;
}

AclTensor::AclTensor(const Descriptor& d, aclFormat format) {
    const auto& [ptr, shape, strides, dtype] = d;
    if (shape.size() != strides.size()) throw StatusError{ACLNN_ERR_PARAM_INVALID, "descriptor rank mismatch"};
    tensor_ = aclCreateTensor(shape.data(), shape.size(), static_cast<aclDataType>(dtype), strides.data(), 0, format,
                              shape.data(), shape.size(), reinterpret_cast<void*>(ptr));
    if (!tensor_) throw StatusError{ACLNN_ERR_PARAM_INVALID, "could not describe a tensor"};
}

AclTensorList::AclTensorList(const std::vector<Descriptor>& ds, aclFormat format) {
    std::vector<aclTensor*> tensors;
    for (const Descriptor& d : ds) {
        const auto& [ptr, shape, strides, dtype] = d;
        aclTensor* t = shape.size() == strides.size()
                           ? aclCreateTensor(shape.data(), shape.size(), static_cast<aclDataType>(dtype),
                                             strides.data(), 0, format, shape.data(), shape.size(),
                                             reinterpret_cast<void*>(ptr))
                           : nullptr;
        if (!t) {
            for (aclTensor* made : tensors) aclDestroyTensor(made);
            throw StatusError{ACLNN_ERR_PARAM_INVALID, "could not describe a tensor of a list"};
        }
        tensors.push_back(t);
    }
    list_ = aclCreateTensorList(tensors.data(), tensors.size());
    if (!list_) {
        for (aclTensor* made : tensors) aclDestroyTensor(made);
        throw StatusError{ACLNN_ERR_PARAM_INVALID, "could not make a tensor list"};
    }
}

Stream::Stream() {
    if (aclrtCreateStream(&stream_) != ACL_SUCCESS) throw StatusError{ACLNN_ERR_INNER, "aclrtCreateStream failed"};
}

void Stream::Close() {
    if (stream_) {
        py::gil_scoped_release release;
        aclrtDestroyStream(stream_);
        stream_ = nullptr;
    }
}

void Stream::Synchronize(double timeoutSeconds) {
    aclnnStatus status;
    {
        py::gil_scoped_release release;
        status = camSynchronizeStream(Handle(), timeoutSeconds < 0 ? -1 : static_cast<int32_t>(timeoutSeconds * 1000));
    }
    ThrowIfFailed(status);
}

aclrtStream Stream::Handle() const {
    if (!stream_) throw StatusError{ACLNN_ERR_PARAM_INVALID, "stream is closed"};
    return stream_;
}

}  // namespace cam::bindings

PYBIND11_MODULE(_C, m) {
    using namespace cam::bindings;
    m.doc() = "cam C API bindings (backend: the twin CPU implementation unless built for Ascend)";

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

    for (RegisterFn fn : Registrations()) fn(m);
}
