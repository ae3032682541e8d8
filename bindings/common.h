// Plumbing shared by every binding file: tensor descriptors, streams, status -> Python exception, the two aclnn
// phases. An op family registers its functions with CAM_BINDING(register_fn) from its own .cpp.
#pragma once

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cam/cam.h"

namespace cam::bindings {

namespace py = pybind11;

struct StatusError {
    aclnnStatus status;
    std::string message;
};

inline void ThrowIfFailed(aclnnStatus status) {
    if (status != ACLNN_SUCCESS) throw StatusError{status, camGetLastErrorMessage()};
}

// What an aclTensor is made from: (data_ptr, shape, strides, ACL dtype code). From Python it is either a
// torch.Tensor, read through its Python attributes here (no libtorch link; one C call instead of a Python helper
// per tensor per call), or the tuple cam/_tensor.py's desc() and the workspace allocators build.
struct Descriptor {
    uintptr_t ptr = 0;
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;
    int dtype = 0;
};

// Fills *d from a torch.Tensor-like object; false (no Python error set) when it is not one.
bool DescribeTensor(py::handle tensor, Descriptor* d);

// Owns the aclTensor made from a descriptor for the duration of one call.
class AclTensor {
public:
    explicit AclTensor(const Descriptor& d, aclFormat format = ACL_FORMAT_ND);
    ~AclTensor() { aclDestroyTensor(tensor_); }
    AclTensor(const AclTensor&) = delete;
    AclTensor& operator=(const AclTensor&) = delete;
    aclTensor* get() const { return tensor_; }

private:
    aclTensor* tensor_ = nullptr;
};

// Owns an aclTensorList (and through it the descriptors) made from a list of descriptors, for one call.
class AclTensorList {
public:
    explicit AclTensorList(const std::vector<Descriptor>& ds, aclFormat format = ACL_FORMAT_ND);
    ~AclTensorList() { aclDestroyTensorList(list_); }
    AclTensorList(const AclTensorList&) = delete;
    AclTensorList& operator=(const AclTensorList&) = delete;
    aclTensorList* get() const { return list_; }

private:
    aclTensorList* list_ = nullptr;
};

// A stream cam created (owned, destroyed by Close), or a caller's stream wrapped by handle (torch_npu's current
// stream; never destroyed here). Handle 0 is the default stream.
class Stream {
public:
    Stream();
    static Stream Wrap(uintptr_t handle);
    Stream(Stream&& other) noexcept;
    ~Stream() { Close(); }
    void Close();
    void Synchronize(double timeoutSeconds);
    // launch() (an op's second phase), then a synchronize bounded by timeoutSeconds counted from the launch, as
    // one step for a caller that waits at once: ops whose work ends on its own may run it on this thread
    // (camBeginSynchronousLaunches). Call without the GIL; throws StatusError.
    void LaunchAndSynchronize(const std::function<aclnnStatus(aclrtStream)>& launch, double timeoutSeconds);
    aclrtStream Handle() const;

private:
    struct Borrowed {};
    Stream(Borrowed, aclrtStream stream) : stream_(stream), owned_(false), open_(true) {}
    aclrtStream stream_ = nullptr;
    bool owned_ = true;
    bool open_ = false;
};

// Ends an argument check (camBeginArgumentCheck) however the scope is left.
struct ArgumentCheckScope {
    ArgumentCheckScope() { camBeginArgumentCheck(); }
    ~ArgumentCheckScope() { camEndArgumentCheck(); }
};

// Runs the two aclnn phases; `allocate(nbytes) -> descriptor` hands out workspace that the caller keeps alive until
// the stream has run the op. The launch phase runs without the GIL. With syncTimeoutS, the call also synchronizes
// the stream within that bound (the eager path: one call, one GIL release); without, it only queues (capture).
// Without a stream (None from Python) only the first phase runs, as an argument check (cam/cam_status.h
// camBeginArgumentCheck): the descriptors may have no data, nothing is allocated or launched.
template <typename GetWorkspace, typename Run>
void RunTwoPhase(GetWorkspace&& getWorkspace, Run&& run, Stream* stream, const py::object& allocate,
                 std::optional<double> syncTimeoutS) {
    uint64_t workspaceSize = 0;
    aclOpExecutor* executor = nullptr;
    if (stream == nullptr) {
        ArgumentCheckScope check;
        ThrowIfFailed(getWorkspace(&workspaceSize, &executor));
        return;
    }
    ThrowIfFailed(getWorkspace(&workspaceSize, &executor));
    // A second phase refused before launching leaves its executor live (cam_status.h): release it, keeping the
    // refusal's message (StatusError holds a copy).
    try {
        void* workspace = nullptr;
        if (workspaceSize > 0) {
            Descriptor ws = allocate(workspaceSize).cast<Descriptor>();
            workspace = reinterpret_cast<void*>(ws.ptr);
        }
        const aclrtStream handle = stream->Handle();
        if (syncTimeoutS) {
            py::gil_scoped_release release;
            stream->LaunchAndSynchronize([&](aclrtStream h) { return run(workspace, workspaceSize, executor, h); },
                                         *syncTimeoutS);
            return;
        }
        aclnnStatus status;
        {
            py::gil_scoped_release release;
            status = run(workspace, workspaceSize, executor, handle);
        }
        ThrowIfFailed(status);
    } catch (...) {
        camDestroyExecutor(executor);  // a no-op refusal when the launch consumed it
        throw;
    }
}

using RegisterFn = void (*)(py::module_&);
bool AddRegistration(RegisterFn fn);

}  // namespace cam::bindings

namespace pybind11::detail {

template <>
struct type_caster<cam::bindings::Descriptor> {
    PYBIND11_TYPE_CASTER(cam::bindings::Descriptor, const_name("Descriptor"));

    bool load(handle src, bool) {
        if (!PyTuple_Check(src.ptr())) return cam::bindings::DescribeTensor(src, &value);
        const auto t = reinterpret_borrow<tuple>(src);
        if (t.size() != 4) return false;
        try {
            value.ptr = t[0].cast<uintptr_t>();
            value.shape = t[1].cast<std::vector<int64_t>>();
            value.strides = t[2].cast<std::vector<int64_t>>();
            value.dtype = t[3].cast<int>();
        } catch (const cast_error&) {
            return false;
        }
        return true;
    }

    static handle cast(const cam::bindings::Descriptor& d, return_value_policy, handle) {
        return pybind11::make_tuple(d.ptr, d.shape, d.strides, d.dtype).release();
    }
};

}  // namespace pybind11::detail

#define CAM_BINDING_CONCAT2(a, b) a##b
#define CAM_BINDING_CONCAT(a, b) CAM_BINDING_CONCAT2(a, b)
#define CAM_BINDING(fn) \
    static const bool CAM_BINDING_CONCAT(camBindingRegistered_, __LINE__) = ::cam::bindings::AddRegistration(fn)
