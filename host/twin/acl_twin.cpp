// The twin's stand-ins for the ACL calls cam's C API uses (declared in cam/acl_compat.h). They are exported under
// cam-prefixed names only: the header maps the ACL names onto them, so libcam_aclnn never interposes on the real
// ACL when both are loaded in one process.
#include <cstring>
#include <new>
#include <vector>

#include "backend.h"

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

// The twin's aclTensorList: owns its descriptors, as aclDestroyTensorList destroys them.
struct aclTensorList {
    std::vector<const aclTensor*> tensors;
};

namespace {

// The getters hand out arrays the caller frees with delete[] (aclnn's contract for aclGetViewShape and friends).
aclnnStatus CopyOut(const std::vector<int64_t>& v, int64_t** out, uint64_t* n) {
    if (!out || !n) return ACLNN_ERR_PARAM_NULLPTR;
    *out = new (std::nothrow) int64_t[v.size() ? v.size() : 1];
    if (!*out) return ACLNN_ERR_INNER;
    if (!v.empty()) std::memcpy(*out, v.data(), v.size() * sizeof(int64_t));
    *n = v.size();
    return ACLNN_SUCCESS;
}

}  // namespace

extern "C" aclTensor* camTwinAclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
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

extern "C" aclnnStatus camTwinAclDestroyTensor(const aclTensor* tensor) {
    delete tensor;
    return ACLNN_SUCCESS;
}

extern "C" aclTensorList* camTwinAclCreateTensorList(const aclTensor* const* value, uint64_t size) {
    if (size > 0 && value == nullptr) return nullptr;
    for (uint64_t i = 0; i < size; ++i)
        if (value[i] == nullptr) return nullptr;
    auto* list = new (std::nothrow) aclTensorList{};
    if (!list) return nullptr;
    list->tensors.assign(value, value + size);
    return list;
}

extern "C" aclnnStatus camTwinAclDestroyTensorList(const aclTensorList* array) {
    if (array) {
        for (const aclTensor* t : array->tensors) delete t;
        delete array;
    }
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camTwinAclGetViewShape(const aclTensor* tensor, int64_t** viewDims, uint64_t* viewDimsNum) {
    if (!tensor) return ACLNN_ERR_PARAM_NULLPTR;
    return CopyOut(tensor->viewDims, viewDims, viewDimsNum);
}

extern "C" aclnnStatus camTwinAclGetViewStrides(const aclTensor* tensor, int64_t** stridesValue, uint64_t* stridesNum) {
    if (!tensor) return ACLNN_ERR_PARAM_NULLPTR;
    return CopyOut(tensor->strides, stridesValue, stridesNum);
}

extern "C" aclnnStatus camTwinAclGetViewOffset(const aclTensor* tensor, int64_t* offset) {
    if (!tensor || !offset) return ACLNN_ERR_PARAM_NULLPTR;
    *offset = tensor->offset;
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camTwinAclGetDataType(const aclTensor* tensor, aclDataType* dataType) {
    if (!tensor || !dataType) return ACLNN_ERR_PARAM_NULLPTR;
    *dataType = tensor->dtype;
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camTwinAclGetFormat(const aclTensor* tensor, aclFormat* format) {
    if (!tensor || !format) return ACLNN_ERR_PARAM_NULLPTR;
    *format = tensor->format;
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camTwinAclGetRawTensorAddr(const aclTensor* tensor, void** addr) {
    if (!tensor || !addr) return ACLNN_ERR_PARAM_NULLPTR;
    *addr = tensor->data;
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camTwinAclGetTensorListSize(const aclTensorList* tensorList, uint64_t* size) {
    if (!tensorList || !size) return ACLNN_ERR_PARAM_NULLPTR;
    *size = tensorList->tensors.size();
    return ACLNN_SUCCESS;
}

namespace cam::host {

const aclTensor* TensorListEntry(const aclTensorList* list, uint64_t i) { return list->tensors.at(i); }

}  // namespace cam::host
