#include "tensor.h"

#include <new>

#include "status.h"

// The twin's aclTensor: a descriptor over caller memory (layout per aclCreateTensor's documented arguments).
struct aclTensor {
    std::vector<int64_t> viewDims;
    std::vector<int64_t> strides;
    std::vector<int64_t> storageDims;
    aclDataType dtype;
    aclFormat format;
    int64_t offset;  // elements
    void* data;
};

extern "C" aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                      const int64_t* stride, int64_t offset, aclFormat format,
                                      const int64_t* storageDims, uint64_t storageDimsNum, void* tensorData) {
    if ((viewDimsNum > 0 && viewDims == nullptr) || viewDimsNum > 16) return nullptr;
    auto* t = new (std::nothrow) aclTensor{};
    if (!t) return nullptr;
    t->viewDims.assign(viewDims, viewDims + viewDimsNum);
    if (stride) {
        t->strides.assign(stride, stride + viewDimsNum);
    } else {  // no strides given: row-major contiguous
        t->strides.assign(viewDimsNum, 1);
        for (int64_t i = static_cast<int64_t>(viewDimsNum) - 2; i >= 0; --i)
            t->strides[i] = t->strides[i + 1] * t->viewDims[i + 1];
    }
    if (storageDims) t->storageDims.assign(storageDims, storageDims + storageDimsNum);
    t->dtype = dataType;
    t->format = format;
    t->offset = offset;
    t->data = tensorData;
    return t;
}

extern "C" aclnnStatus aclDestroyTensor(const aclTensor* tensor) {
    delete tensor;
    return ACLNN_SUCCESS;
}

// The twin's aclTensorList: owns its descriptors, as aclDestroyTensorList destroys them.
struct aclTensorList {
    std::vector<const aclTensor*> tensors;
};

extern "C" aclTensorList* aclCreateTensorList(const aclTensor* const* value, uint64_t size) {
    if (size > 0 && value == nullptr) return nullptr;
    for (uint64_t i = 0; i < size; ++i)
        if (value[i] == nullptr) return nullptr;
    auto* list = new (std::nothrow) aclTensorList{};
    if (!list) return nullptr;
    list->tensors.assign(value, value + size);
    return list;
}

extern "C" aclnnStatus aclDestroyTensorList(const aclTensorList* array) {
    if (array) {
        for (const aclTensor* t : array->tensors) delete t;
        delete array;
    }
    return ACLNN_SUCCESS;
}

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

aclnnStatus ArgChecker::View(const aclTensor* t, const char* arg, TensorView* out) const {
    if (t == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(op_) + ": " + arg + " is null");
    for (int64_t d : t->viewDims) {
        if (d < 0) return Invalid(std::string(arg) + " has a negative dimension");
    }
    const uint32_t elem = DtypeBytes(t->dtype);
    if (elem == 0) return Invalid(std::string(arg) + " has an unsupported dtype code " + std::to_string(t->dtype));
    out->data = static_cast<uint8_t*>(t->data) + t->offset * static_cast<int64_t>(elem);
    out->dtype = t->dtype;
    out->format = t->format;
    out->shape = t->viewDims;
    out->strides = t->strides;
    if (t->data == nullptr && out->Numel() > 0)
        return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(op_) + ": " + arg + " has no data");
    return ACLNN_SUCCESS;
}

aclnnStatus ArgChecker::List(const aclTensorList* list, const char* arg, std::vector<TensorView>* out) const {
    if (list == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(op_) + ": " + arg + " is null");
    out->clear();
    out->resize(list->tensors.size());
    for (size_t i = 0; i < list->tensors.size(); ++i) {
        const std::string name = std::string(arg) + "[" + std::to_string(i) + "]";
        if (aclnnStatus st = View(list->tensors[i], name.c_str(), &(*out)[i])) return st;
    }
    return ACLNN_SUCCESS;
}

aclnnStatus ArgChecker::Dtype(const TensorView& v, const char* arg, std::initializer_list<aclDataType> allowed) const {
    std::string names;
    for (aclDataType a : allowed) {
        if (v.dtype == a) return ACLNN_SUCCESS;
        names += (names.empty() ? "" : " or ") + std::string(DtypeName(a));
    }
    return Invalid(std::string(arg) + " must be " + names + ", got " + DtypeName(v.dtype));
}

aclnnStatus ArgChecker::Rank(const TensorView& v, const char* arg, size_t rank) const {
    if (v.shape.size() == rank) return ACLNN_SUCCESS;
    return Invalid(std::string(arg) + " must have " + std::to_string(rank) + " dimensions, got shape " +
                   v.ShapeString());
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

aclnnStatus ArgChecker::Invalid(const std::string& message) const {
    return Fail(ACLNN_ERR_PARAM_INVALID, std::string(op_) + ": " + message);
}

}  // namespace cam::host
