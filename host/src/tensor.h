// Host view of an aclTensor and the argument checks every op shares.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "cam/acl_compat.h"

namespace cam::host {

struct TensorView {
    uint8_t* data = nullptr;  // address of element 0 (offset applied)
    aclDataType dtype = ACL_DT_UNDEFINED;
    aclFormat format = ACL_FORMAT_ND;
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;

    int64_t Dim(size_t i) const { return shape.at(i); }
    uint64_t Numel() const;
    bool Contiguous() const;
    std::string ShapeString() const;
};

const char* DtypeName(aclDataType dtype);
uint32_t DtypeBytes(aclDataType dtype);

// A dimension of ArgChecker::Tensor's expected shape that may have any extent.
inline constexpr int64_t kAnyDim = -1;

// Each returns ACLNN_SUCCESS or fails with a message that names `op` and `arg`.
class ArgChecker {
public:
    explicit ArgChecker(const char* op) : op_(op) {}

    // The check every tensor argument gets, in one call: dtype one of `dtypes`, shape `shape` (kAnyDim matches any
    // extent; a wrong rank is reported as such), row-major contiguous.
    aclnnStatus Tensor(const TensorView& v, const char* arg, std::initializer_list<aclDataType> dtypes,
                       const std::vector<int64_t>& shape) const;

    aclnnStatus View(const aclTensor* t, const char* arg, TensorView* out) const;
    // Views of every entry; an entry's checks name it as arg[i].
    aclnnStatus List(const aclTensorList* list, const char* arg, std::vector<TensorView>* out) const;
    aclnnStatus Dtype(const TensorView& v, const char* arg, std::initializer_list<aclDataType> allowed) const;
    aclnnStatus Rank(const TensorView& v, const char* arg, size_t rank) const;
    aclnnStatus Shape(const TensorView& v, const char* arg, const std::vector<int64_t>& expected) const;
    aclnnStatus Contiguous(const TensorView& v, const char* arg) const;
    aclnnStatus Invalid(const std::string& message) const;     // ACLNN_ERR_PARAM_INVALID, "<op>: <message>"
    aclnnStatus WrongDtype(const std::string& message) const;  // CAM_ERR_PARAM_DTYPE, "<op>: <message>"

private:
    const char* op_;
};

}  // namespace cam::host
