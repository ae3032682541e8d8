/* Stand-in for CANN's aclnn/acl_meta.h, for compile checks only (tests/test_ascend_headers.py): the torch-npu wheel
 * ships acl/ and hccl/ headers but not this one. Written from the public aclnn API reference (the "公共接口" pages:
 * aclCreateTensor, aclGetViewShape, aclGetViewStrides, aclGetViewOffset, aclGetDataType, aclGetFormat,
 * aclGetRawTensorAddr, aclGetTensorListSize, aclCreateTensorList, aclDestroyTensor, aclDestroyTensorList), only
 * the declarations cam uses. A build against a real toolkit uses the toolkit's header, never this directory. */
#ifndef CAM_CANN_SHIM_ACL_META_H
#define CAM_CANN_SHIM_ACL_META_H

#include <stdint.h>

#include "acl/acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aclOpExecutor aclOpExecutor;
typedef struct aclTensor aclTensor;
typedef struct aclTensorList aclTensorList;
typedef int32_t aclnnStatus;

aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType, const int64_t* stride,
                           int64_t offset, aclFormat format, const int64_t* storageDims, uint64_t storageDimsNum,
                           void* tensorData);
aclnnStatus aclDestroyTensor(const aclTensor* tensor);
aclTensorList* aclCreateTensorList(const aclTensor* const* value, uint64_t size);
aclnnStatus aclDestroyTensorList(const aclTensorList* array);
aclnnStatus aclGetViewShape(const aclTensor* tensor, int64_t** viewDims, uint64_t* viewDimsNum);
aclnnStatus aclGetViewStrides(const aclTensor* tensor, int64_t** stridesValue, uint64_t* stridesNum);
aclnnStatus aclGetViewOffset(const aclTensor* tensor, int64_t* offset);
aclnnStatus aclGetFormat(const aclTensor* tensor, aclFormat* format);
aclnnStatus aclGetDataType(const aclTensor* tensor, aclDataType* dataType);
aclnnStatus aclGetRawTensorAddr(const aclTensor* tensor, void** addr);
aclnnStatus aclGetTensorListSize(const aclTensorList* tensorList, uint64_t* size);

#ifdef __cplusplus
}
#endif

#endif
