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

// (data_ptr, shape, strides, ACL dtype code), built by cam/_tensor.py.
using Descriptor = std::tuple<uintptr_t, std::vector<int64_t>, std::vector<int64_t>, int>;

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

// Runs the two aclnn phases; `allocate(nbytes) -> descriptor` hands out workspace that the caller keeps alive until
// the stream has run the op. The launch phase runs without the GIL. With syncTimeoutS, the call also synchronizes
// the stream within that bound (the eager path: one call, one GIL release); without, it only queues (capture).
template <typename GetWorkspace, typename Run>
void RunTwoPhase(GetWorkspace&& getWorkspace, Run&& run, Stream& stream, const py::function& allocate,
                 std::optional<double> syncTimeoutS) {
    uint64_t workspaceSize = 0;
    aclOpExecutor* executor = nullptr;
    ThrowIfFailed(getWorkspace(&workspaceSize, &executor));
    void* workspace = nullptr;
    if (workspaceSize > 0) {
        Descriptor ws = allocate(workspaceSize).cast<Descriptor>();
        workspace = reinterpret_cast<void*>(std::get<0>(ws));
    }
    const aclrtStream handle = stream.Handle();
    if (syncTimeoutS) {
        py::gil_scoped_release release;
        stream.LaunchAndSynchronize([&](aclrtStream h) { return run(workspace, workspaceSize, executor, h); },
                                    *syncTimeoutS);
        return;
    }
    aclnnStatus status;
    {
        py::gil_scoped_release release;
        status = run(workspace, workspaceSize, executor, handle);
    }
    ThrowIfFailed(status);
}

using RegisterFn = void (*)(py::module_&);
bool AddRegistration(RegisterFn fn);

}  // namespace cam::bindings

#define CAM_BINDING_CONCAT2(a, b) a##b
#define CAM_BINDING_CONCAT(a, b) CAM_BINDING_CONCAT2(a, b)
#define CAM_BINDING(fn) \
    static const bool CAM_BINDING_CONCAT(camBindingRegistered_, __LINE__) = ::cam::bindings::AddRegistration(fn)
