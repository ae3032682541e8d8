#include "tensor.h"

#include <memory>

#include "backend.h"
#include "executor.h"
#include "status.h"

namespace cam::host {

uint64_t TensorView::Numel() const {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
}

bool TensorView::Contiguous() const {
    if (Numel() == 0) return true;  // no element to place: torch reports any strides for empty slices
    int64_t expected = 1;
    for (size_t i = shape.size(); i-- > 0;) {
        if (shape[i] != 1 && strides[i] != expected) return false;
        expected *= shape[i];
    }
    return true;
}

std::string TensorView::ShapeString() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

const char* DtypeName(aclDataType dtype) {
    switch (dtype) {
        case ACL_FLOAT: return "float32";
        case ACL_FLOAT16: return "float16";
        case ACL_BF16: return "bfloat16";
        case ACL_INT8: return "int8";
        case ACL_INT16: return "int16";
        case ACL_INT32: return "int32";
        case ACL_INT64: return "int64";
        case ACL_UINT8: return "uint8";
        case ACL_UINT16: return "uint16";
        case ACL_UINT32: return "uint32";
        case ACL_UINT64: return "uint64";
        case ACL_DOUBLE: return "float64";
        case ACL_BOOL: return "bool";
        default: return "unknown";
    }
}

uint32_t DtypeBytes(aclDataType dtype) {
    switch (dtype) {
        case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
        case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: case ACL_UINT16: return 2;
        case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: return 4;
        case ACL_INT64: case ACL_UINT64: case ACL_DOUBLE: return 8;
        default: return 0;
    }
}

namespace {

// The shape and stride getters allocate the array they return; the caller frees it with delete[].
aclnnStatus ReadDims(aclnnStatus (*get)(const aclTensor*, int64_t**, uint64_t*), const aclTensor* t,
                     std::vector<int64_t>* out) {
    int64_t* dims = nullptr;
    uint64_t n = 0;
    const aclnnStatus st = get(t, &dims, &n);
    std::unique_ptr<int64_t[]> owned(dims);
    if (st != ACLNN_SUCCESS) return st;
    if (n > 0 && dims == nullptr) return ACLNN_ERR_INNER;
    out->assign(dims, dims + n);
    return ACLNN_SUCCESS;
}

}  // namespace

// Reads the descriptor only through aclnn's accessors: in CANN aclTensor is opaque.
aclnnStatus ArgChecker::View(const aclTensor* t, const char* arg, TensorView* out) const {
    if (t == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(op_) + ": " + arg + " is null");
    int64_t offset = 0;
    void* data = nullptr;
    if (ReadDims(&aclGetViewShape, t, &out->shape) || ReadDims(&aclGetViewStrides, t, &out->strides) ||
        aclGetViewOffset(t, &offset) || aclGetDataType(t, &out->dtype) || aclGetFormat(t, &out->format) ||
        aclGetRawTensorAddr(t, &data))
        return Invalid(std::string(arg) + " is not a readable aclTensor");
    if (out->strides.size() != out->shape.size())
        return Invalid(std::string(arg) + " has " + std::to_string(out->strides.size()) + " strides for " +
                       std::to_string(out->shape.size()) + " dimensions");
    for (int64_t d : out->shape) {
        if (d < 0) return Invalid(std::string(arg) + " has a negative dimension");
    }
    const uint32_t elem = DtypeBytes(out->dtype);
    if (elem == 0)
        return WrongDtype(std::string(arg) + " has a dtype no cam op takes (ACL code " + std::to_string(out->dtype) +
                          ")");
    // The descriptor is caller memory: an offset that points before the data, or past any address a 64-bit host or
    // device can map (57 bits: x86-64 with 5-level paging; AArch64 hosts and Ascend devices use fewer), would make
    // the kernels address memory the caller never gave them.
    constexpr int64_t kMaxByteOffset = int64_t{1} << 57;
    if (offset < 0 || offset > kMaxByteOffset / elem)
        return Invalid(std::string(arg) + " has view offset " + std::to_string(offset) + ", outside [0, " +
                       std::to_string(kMaxByteOffset / elem) + "] elements");
    if (data == nullptr) {
        out->data = nullptr;
        if (out->Numel() > 0 && !ArgumentCheckOnly())
            return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(op_) + ": " + arg + " has no data");
        return ACLNN_SUCCESS;
    }
    out->data = static_cast<uint8_t*>(data) + offset * static_cast<int64_t>(elem);
    return ACLNN_SUCCESS;
}

aclnnStatus ArgChecker::List(const aclTensorList* list, const char* arg, std::vector<TensorView>* out) const {
    if (list == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(op_) + ": " + arg + " is null");
    uint64_t size = 0;
    if (aclGetTensorListSize(list, &size)) return Invalid(std::string(arg) + " is not a readable aclTensorList");
    out->clear();
    out->resize(size);
    for (uint64_t i = 0; i < size; ++i) {
        const std::string name = std::string(arg) + "[" + std::to_string(i) + "]";
        if (aclnnStatus st = View(TensorListEntry(list, i), name.c_str(), &(*out)[i])) return st;
    }
    return ACLNN_SUCCESS;
}

aclnnStatus ArgChecker::Tensor(const TensorView& v, const char* arg, std::initializer_list<aclDataType> dtypes,
                               const std::vector<int64_t>& shape) const {
    if (aclnnStatus st = Dtype(v, arg, dtypes)) return st;
    if (aclnnStatus st = Rank(v, arg, shape.size())) return st;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] != kAnyDim && shape[i] != v.shape[i]) return Shape(v, arg, shape);
    }
    return Contiguous(v, arg);
}

aclnnStatus ArgChecker::Dtype(const TensorView& v, const char* arg, std::initializer_list<aclDataType> allowed) const {
    std::string names;
    for (aclDataType a : allowed) {
        if (v.dtype == a) return ACLNN_SUCCESS;
        names += (names.empty() ? "" : " or ") + std::string(DtypeName(a));
    }
    return WrongDtype(std::string(arg) + " must be " + names + ", got " + DtypeName(v.dtype));
}

aclnnStatus ArgChecker::Rank(const TensorView& v, const char* arg, size_t rank) const {
    if (v.shape.size() == rank) return ACLNN_SUCCESS;
    return Invalid(std::string(arg) + " must be " + std::to_string(rank) + "-D, got shape " + v.ShapeString());
}

aclnnStatus ArgChecker::Shape(const TensorView& v, const char* arg, const std::vector<int64_t>& expected) const {
    if (v.shape == expected) return ACLNN_SUCCESS;
    TensorView e;
    e.shape = expected;
    return Invalid(std::string(arg) + " must have shape " + e.ShapeString() + ", got " + v.ShapeString());
}

aclnnStatus ArgChecker::Contiguous(const TensorView& v, const char* arg) const {
    if (v.Contiguous()) return ACLNN_SUCCESS;
    return Invalid(std::string(arg) + " must be contiguous (row-major), got shape " + v.ShapeString() +
                   " with non-contiguous strides");
}

aclnnStatus ArgChecker::WrongDtype(const std::string& message) const {
    return Fail(CAM_ERR_PARAM_DTYPE, std::string(op_) + ": " + message);
}

aclnnStatus ArgChecker::Invalid(const std::string& message) const {
    return Fail(ACLNN_ERR_PARAM_INVALID, std::string(op_) + ": " + message);
}

}  // namespace cam::host
