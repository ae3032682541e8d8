// cam._C: the C API, callable from Python without linking libtorch. The Python layer owns all memory.
#include "common.h"

#include <chrono>
#include <iterator>
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

namespace {

// Reads a Python sequence of ints (torch.Size, a tuple) into *out.
bool Int64s(PyObject* seq, std::vector<int64_t>* out) {
    if (!seq || !PyTuple_Check(seq)) return false;
    const Py_ssize_t n = PyTuple_GET_SIZE(seq);
    out->resize(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        const long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) return false;
        (*out)[static_cast<size_t>(i)] = v;
    }
    return true;
}

int DtypeCodeOf(PyObject* dtype);  // below, with the code table

}  // namespace

bool DescribeTensor(py::handle tensor, Descriptor* d) {
    static PyObject* const kDataPtr = PyUnicode_InternFromString("data_ptr");
    static PyObject* const kShape = PyUnicode_InternFromString("shape");
    static PyObject* const kStride = PyUnicode_InternFromString("stride");
    static PyObject* const kDtype = PyUnicode_InternFromString("dtype");
    PyObject* t = tensor.ptr();
    bool ok = false;
    PyObject* ptr = PyObject_CallMethodNoArgs(t, kDataPtr);
    PyObject* shape = ptr ? PyObject_GetAttr(t, kShape) : nullptr;
    PyObject* strides = shape ? PyObject_CallMethodNoArgs(t, kStride) : nullptr;
    PyObject* dtype = strides ? PyObject_GetAttr(t, kDtype) : nullptr;
    if (dtype) {
        d->ptr = static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(ptr));
        d->dtype = DtypeCodeOf(dtype);  // -1 (no ACL code): the op refuses it naming the argument
        ok = !PyErr_Occurred() && Int64s(shape, &d->shape) && Int64s(strides, &d->strides);
    }
    Py_XDECREF(ptr);
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    Py_XDECREF(dtype);
    if (!ok) PyErr_Clear();  // not a tensor: the caller reports the argument
    return ok;
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
    if (aclnnStatus st = camStreamCreate(&stream_)) throw StatusError{st, camGetLastErrorMessage()};
    open_ = true;
}

Stream Stream::Wrap(uintptr_t handle) { return Stream(Borrowed{}, reinterpret_cast<aclrtStream>(handle)); }

Stream::Stream(Stream&& other) noexcept : stream_(other.stream_), owned_(other.owned_), open_(other.open_) {
    other.stream_ = nullptr;
    other.open_ = false;
}

void Stream::Close() {
    if (open_ && owned_ && stream_) {
        py::gil_scoped_release release;
        camStreamDestroy(stream_);
    }
    stream_ = nullptr;
    open_ = false;
}

namespace {

int32_t TimeoutMs(double seconds) { return seconds < 0 ? -1 : static_cast<int32_t>(seconds * 1000); }

}  // namespace

void Stream::Synchronize(double timeoutSeconds) {
    aclnnStatus status;
    {
        py::gil_scoped_release release;
        status = camSynchronizeStream(Handle(), TimeoutMs(timeoutSeconds));
    }
    ThrowIfFailed(status);
}

void Stream::LaunchAndSynchronize(const std::function<aclnnStatus(aclrtStream)>& launch, double timeoutSeconds) {
    const aclrtStream stream = Handle();
    const auto start = std::chrono::steady_clock::now();
    ThrowIfFailed(camBeginSynchronousLaunches(stream));
    aclnnStatus launched;
    {
        struct End {
            ~End() { camEndSynchronousLaunches(); }
        } end;
        launched = launch(stream);
    }
    ThrowIfFailed(launched);
    // The bound counts from the launch: work that ran on this thread spent part of it already.
    const double ran = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double left = timeoutSeconds < 0 ? -1.0 : std::max(0.0, timeoutSeconds - ran);
    ThrowIfFailed(camSynchronizeStream(stream, TimeoutMs(left)));
    if (timeoutSeconds >= 0 && ran > timeoutSeconds)
        throw StatusError{CAM_ERR_SYNC_TIMEOUT, "stream did not finish within " +
                                                    std::to_string(TimeoutMs(timeoutSeconds)) + " ms: the op ran " +
                                                    std::to_string(static_cast<int64_t>(ran * 1000)) +
                                                    " ms on the calling thread (its work has ended)"};
}

aclrtStream Stream::Handle() const {
    if (!open_) throw StatusError{ACLNN_ERR_PARAM_INVALID, "stream is closed"};
    return stream_;
}

}  // namespace cam::bindings

namespace cam::bindings {
namespace {

struct DtypeCode {
    const char* name;  // torch's name of the dtype (torch.<name>)
    aclDataType code;
};

constexpr DtypeCode kDtypeCodes[] = {
    {"float32", ACL_FLOAT}, {"float16", ACL_FLOAT16}, {"int8", ACL_INT8},    {"int32", ACL_INT32},
    {"uint8", ACL_UINT8},   {"int16", ACL_INT16},     {"int64", ACL_INT64},  {"float64", ACL_DOUBLE},
    {"bool", ACL_BOOL},     {"bfloat16", ACL_BF16},
};

struct StatusCode {
    const char* name;
    int code;
};

#define CAM_STATUS_ENTRY(name) {#name, name}
constexpr StatusCode kStatusCodes[] = {
    CAM_STATUS_ENTRY(ACLNN_SUCCESS),         CAM_STATUS_ENTRY(ACLNN_ERR_PARAM_NULLPTR),
    CAM_STATUS_ENTRY(ACLNN_ERR_PARAM_INVALID), CAM_STATUS_ENTRY(ACLNN_ERR_RUNTIME_ERROR),
    CAM_STATUS_ENTRY(ACLNN_ERR_INNER),       CAM_STATUS_ENTRY(CAM_ERR_DEVICE_ARGUMENT),
    CAM_STATUS_ENTRY(CAM_ERR_COMM_TIMEOUT),  CAM_STATUS_ENTRY(CAM_ERR_COMM_ABORTED),
    CAM_STATUS_ENTRY(CAM_ERR_KERNEL_FAULT),  CAM_STATUS_ENTRY(CAM_ERR_SYNC_TIMEOUT),
    CAM_STATUS_ENTRY(CAM_ERR_COMM_BUSY),     CAM_STATUS_ENTRY(CAM_ERR_COMM_PROTOCOL),
    CAM_STATUS_ENTRY(CAM_ERR_CAPTURE_INVALIDATED), CAM_STATUS_ENTRY(CAM_ERR_GRAPH_INVALID),
    CAM_STATUS_ENTRY(CAM_ERR_PARAM_DTYPE),
};
#undef CAM_STATUS_ENTRY

// torch dtype object -> ACL code, remembered by identity (torch's dtypes are singletons); -1 for a dtype cam has no
// code for. Called with the GIL held, which guards the table.
int DtypeCodeOf(PyObject* dtype) {
    static std::vector<std::pair<PyObject*, int>> seen;
    for (const auto& [object, code] : seen)
        if (object == dtype) return code;
    const std::string name = py::str(py::handle(dtype));  // "torch.bfloat16"
    int code = -1;
    for (const auto& e : kDtypeCodes)
        if (name == std::string("torch.") + e.name) code = static_cast<int>(e.code);
    Py_INCREF(dtype);  // kept: the table holds the pointer
    seen.emplace_back(dtype, code);
    return code;
}

constexpr bool DistinctCodes() {
    for (size_t i = 0; i < std::size(kStatusCodes); ++i)
        for (size_t j = i + 1; j < std::size(kStatusCodes); ++j)
            if (kStatusCodes[i].code == kStatusCodes[j].code) return false;
    return true;
}
static_assert(DistinctCodes(), "two status names share a code");

}  // namespace
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

    // The code tables Python needs, from the C headers (the one definition): torch dtype name -> aclDataType, and
    // status name -> aclnnStatus.
    m.def("acl_dtypes", [] {
        py::dict d;
        for (const auto& e : kDtypeCodes) d[e.name] = static_cast<int>(e.code);
        return d;
    });
    m.def("status_codes", [] {
        py::dict d;
        for (const auto& e : kStatusCodes) d[e.name] = e.code;
        return d;
    });
    // The timeout chain (cam/cam_timeouts.h), seconds: the Python side's bounds come from here.
    m.def("timeout_chain", [] {
        camTimeoutChain c{};
        ThrowIfFailed(camGetTimeoutChain(&c));
        py::dict d;
        d["follower_margin_s"] = c.followerMarginS;
        d["sync_margin_s"] = c.syncMarginS;
        d["drain_s"] = c.drainS;
        d["aicore_op_timeout_s"] = c.aicoreOpTimeoutS;
        return d;
    });
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
        .def_static("wrap", &Stream::Wrap, py::arg("handle"),
                    "A caller's aclrtStream by handle (e.g. torch_npu's current stream), never destroyed by cam; "
                    "0 is the default stream.")
        .def("synchronize", &Stream::Synchronize, py::arg("timeout_s"))
        .def("close", &Stream::Close);

    for (RegisterFn fn : Registrations()) fn(m);
}
