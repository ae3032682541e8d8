/* The ACL types and calls cam's C API is written against. With CANN (CAM_WITH_CANN) they come from CANN's own
 * headers; without it cam ships this minimal, ABI-compatible subset and implements it over the twin backend, so
 * one C++ source compiles against either. Values of enums follow the public ACL documentation. */
#ifndef CAM_ACL_COMPAT_H
#define CAM_ACL_COMPAT_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define CAM_API
#else
#define CAM_API __attribute__((visibility("default")))
#endif

#if defined(CAM_WITH_CANN)
#include <acl/acl.h>
#include <aclnn/acl_meta.h>
#else

#ifdef __cplusplus
extern "C" {
#endif

typedef int aclError;
typedef int32_t aclnnStatus;
typedef void* aclrtStream;
typedef struct aclTensor aclTensor;
typedef struct aclTensorList aclTensorList;
typedef struct aclOpExecutor aclOpExecutor;

typedef enum {
    ACL_DT_UNDEFINED = -1,
    ACL_FLOAT = 0,
    ACL_FLOAT16 = 1,
    ACL_INT8 = 2,
    ACL_INT32 = 3,
    ACL_UINT8 = 4,
    ACL_INT16 = 6,
    ACL_UINT16 = 7,
    ACL_UINT32 = 8,
    ACL_INT64 = 9,
    ACL_UINT64 = 10,
    ACL_DOUBLE = 11,
    ACL_BOOL = 12,
    ACL_BF16 = 27
} aclDataType;

typedef enum {
    ACL_FORMAT_UNDEFINED = -1,
    ACL_FORMAT_NCHW = 0,
    ACL_FORMAT_NHWC = 1,
    ACL_FORMAT_ND = 2,
    ACL_FORMAT_FRACTAL_NZ = 29
} aclFormat;

#define ACL_SUCCESS 0
#define ACL_ERROR_INVALID_PARAM 100000
#define ACL_ERROR_FAILURE 500000

#define ACLNN_SUCCESS 0
#define ACLNN_ERR_PARAM_NULLPTR 161001
#define ACLNN_ERR_PARAM_INVALID 161002
#define ACLNN_ERR_RUNTIME_ERROR 361001
#define ACLNN_ERR_INNER 561000

/* Tensors are descriptors over memory the caller owns; destroying one never frees the data. */
CAM_API aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                   const int64_t* stride, int64_t offset, aclFormat format,
                                   const int64_t* storageDims, uint64_t storageDimsNum, void* tensorData);
CAM_API aclnnStatus aclDestroyTensor(const aclTensor* tensor);

/* A list of tensors (e.g. one weight per layer). The list takes ownership of the descriptors: destroying the list
 * destroys them (never the data). Returns NULL when value is NULL with size > 0, or an entry is NULL. */
CAM_API aclTensorList* aclCreateTensorList(const aclTensor* const* value, uint64_t size);
CAM_API aclnnStatus aclDestroyTensorList(const aclTensorList* array);

CAM_API aclError aclrtCreateStream(aclrtStream* stream);
CAM_API aclError aclrtDestroyStream(aclrtStream stream);
CAM_API aclError aclrtSynchronizeStream(aclrtStream stream);
CAM_API aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout);

#ifdef __cplusplus
}
#endif

#endif /* CAM_WITH_CANN */
#endif /* CAM_ACL_COMPAT_H */
