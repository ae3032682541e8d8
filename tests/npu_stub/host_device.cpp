// A PrivateUse1 ("npu") device backed by host memory, for tests only: the allocator and the handful of aten kernels
// the tests use (creation, views, copies to and from the CPU, fill), so a tensor of device type "npu" is a real
// PrivateUse1 tensor whose data pointer the twin's kernels can read and write. Loaded by the torch_npu stub of
// tests/test_ascend_npu.py through torch.ops.load_library; the Python side (device module, hooks, device guard)
// comes from torch.utils.backend_registration.
#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <c10/core/Allocator.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>

namespace {

void Free(void* p) { std::free(p); }

struct HostAllocator final : c10::Allocator {
    c10::DataPtr allocate(size_t n) override {
        // 64-byte aligned like torch's CPU allocator: the kernels assume what a CPU tensor gives them.
        void* p = n ? std::aligned_alloc(64, (n + 63) / 64 * 64) : nullptr;
        if (n && !p) throw std::bad_alloc();
        return {p, p, &Free, c10::Device(c10::DeviceType::PrivateUse1, 0)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &Free; }
    void copy_data(void* dst, const void* src, std::size_t n) const override { std::memcpy(dst, src, n); }
};

HostAllocator gAllocator;
constexpr c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

// The same memory seen as a CPU tensor, so the CPU kernels do the element work.
at::Tensor OnCpu(const at::Tensor& t) {
    if (t.is_cpu()) return t;
    return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

at::Tensor Empty(c10::IntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                 std::optional<at::Device>, std::optional<bool>, std::optional<at::MemoryFormat> format) {
    return at::detail::empty_generic(size, &gAllocator, kKeys, c10::dtype_or_default(dtype), format);
}

at::Tensor EmptyStrided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                        std::optional<at::Layout>, std::optional<at::Device>, std::optional<bool>) {
    return at::detail::empty_strided_generic(size, stride, &gAllocator, kKeys, c10::dtype_or_default(dtype));
}

at::Tensor CopyFrom(const at::Tensor& self, const at::Tensor& dst, bool) {
    OnCpu(dst).copy_(OnCpu(self));
    return dst;
}

at::Tensor CopyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
    TORCH_CHECK(dst.sizes() == self.sizes(), "npu stub: _copy_from_and_resize needs equal sizes");
    return CopyFrom(self, dst, false);
}

at::Tensor& Fill(at::Tensor& self, const at::Scalar& value) {
    OnCpu(self).fill_(value);
    return self;
}

at::Tensor& Zero(at::Tensor& self) {
    OnCpu(self).zero_();
    return self;
}

at::Tensor LocalScalarDense(const at::Tensor& self) { return OnCpu(self).clone(); }

}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &gAllocator);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("empty.memory_format", Empty);
    m.impl("empty_strided", EmptyStrided);
    m.impl("as_strided", at::native::as_strided_tensorimpl);
    m.impl("view", at::native::view);
    m.impl("_reshape_alias", at::native::_reshape_alias);
    m.impl("_copy_from", CopyFrom);
    m.impl("_copy_from_and_resize", CopyFromAndResize);
    m.impl("fill_.Scalar", Fill);
    m.impl("zero_", Zero);
}
