/* The ACL types and calls cam's C API is written against. With CANN (CAM_WITH_CANN) they come from CANN's own
 * headers; without it cam declares the subset it uses, with the values of CANN's headers (checked against the
 * headers torch-npu ships by tests/test_ascend_headers.py), and implements the calls over the twin.
 *
 * On the twin, the ACL calls below are static inline forwarders to cam-prefixed exports (camTwinAcl*): SDK code
 * keeps calling the ACL names, while libcam_aclnn exports no ACL name, so it can share a process with the real
 * ACL (torch_npu) without either library's calls binding to the other's. */
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
/* Types, data types, formats and ACL error codes: all cam's public headers need (acl/acl_rt.h is not C). */
#include <acl/acl_base.h>
#ifdef __cplusplus
#include <aclnn/acl_meta.h>
#else
/* CANN's aclnn/acl_meta.h is C++ only: C callers get the same opaque types and status type it declares. */
typedef struct aclOpExecutor aclOpExecutor;
typedef struct aclTensor aclTensor;
typedef struct aclTensorList aclTensorList;
typedef int32_t aclnnStatus;
#endif
#else

#ifdef __cplusplus
extern "C" {
#endif

typedef int aclError;
typedef int32_t aclnnStatus;
typedef void* aclrtStream;
typedef struct aclTensor aclTensor;
typedef struct aclTensorList aclTensorList;
typedef struct aclOpExecutor aclOpExecutor; /* opaque: cam never defines it (CANN has a type of that name) */

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
#define ACL_ERROR_INTERNAL_ERROR 500000
#define ACL_ERROR_FAILURE 500001

/* The twin's implementations (twin build only). Call them through the ACL names below. */
CAM_API aclTensor* camTwinAclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                          const int64_t* stride, int64_t offset, aclFormat format,
                                          const int64_t* storageDims, uint64_t storageDimsNum, void* tensorData);
CAM_API aclnnStatus camTwinAclDestroyTensor(const aclTensor* tensor);
CAM_API aclTensorList* camTwinAclCreateTensorList(const aclTensor* const* value, uint64_t size);
CAM_API aclnnStatus camTwinAclDestroyTensorList(const aclTensorList* array);
CAM_API aclnnStatus camTwinAclGetViewShape(const aclTensor* tensor, int64_t** viewDims, uint64_t* viewDimsNum);
CAM_API aclnnStatus camTwinAclGetViewStrides(const aclTensor* tensor, int64_t** stridesValue, uint64_t* stridesNum);
CAM_API aclnnStatus camTwinAclGetViewOffset(const aclTensor* tensor, int64_t* offset);
CAM_API aclnnStatus camTwinAclGetDataType(const aclTensor* tensor, aclDataType* dataType);
CAM_API aclnnStatus camTwinAclGetFormat(const aclTensor* tensor, aclFormat* format);
CAM_API aclnnStatus camTwinAclGetRawTensorAddr(const aclTensor* tensor, void** addr);
CAM_API aclnnStatus camTwinAclGetTensorListSize(const aclTensorList* tensorList, uint64_t* size);
CAM_API aclError camTwinAclrtCreateStream(aclrtStream* stream);
CAM_API aclError camTwinAclrtDestroyStream(aclrtStream stream);
CAM_API aclError camTwinAclrtSynchronizeStream(aclrtStream stream);
CAM_API aclError camTwinAclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout);

/* Tensors are descriptors over memory the caller owns; destroying one never frees the data. */
static inline aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                                         const int64_t* stride, int64_t offset, aclFormat format,
                                         const int64_t* storageDims, uint64_t storageDimsNum, void* tensorData) {
    return camTwinAclCreateTensor(viewDims, viewDimsNum, dataType, stride, offset, format, storageDims,
                                  storageDimsNum, tensorData);
}
static inline aclnnStatus aclDestroyTensor(const aclTensor* tensor) { return camTwinAclDestroyTensor(tensor); }

/* A list of tensors (e.g. one weight per layer). The list takes ownership of the descriptors: destroying the list
 * destroys them (never the data). Returns NULL when value is NULL with size > 0, or an entry is NULL. */
static inline aclTensorList* aclCreateTensorList(const aclTensor* const* value, uint64_t size) {
    return camTwinAclCreateTensorList(value, size);
}
static inline aclnnStatus aclDestroyTensorList(const aclTensorList* array) {
    return camTwinAclDestroyTensorList(array);
}

/* Accessors as in aclnn's acl_meta.h: the arrays returned by the shape/stride getters are allocated by the call
 * and freed by the caller with delete[] (C++). */
static inline aclnnStatus aclGetViewShape(const aclTensor* tensor, int64_t** viewDims, uint64_t* viewDimsNum) {
    return camTwinAclGetViewShape(tensor, viewDims, viewDimsNum);
}
static inline aclnnStatus aclGetViewStrides(const aclTensor* tensor, int64_t** stridesValue, uint64_t* stridesNum) {
    return camTwinAclGetViewStrides(tensor, stridesValue, stridesNum);
}
static inline aclnnStatus aclGetViewOffset(const aclTensor* tensor, int64_t* offset) {
    return camTwinAclGetViewOffset(tensor, offset);
}
static inline aclnnStatus aclGetDataType(const aclTensor* tensor, aclDataType* dataType) {
    return camTwinAclGetDataType(tensor, dataType);
}
static inline aclnnStatus aclGetFormat(const aclTensor* tensor, aclFormat* format) {
    return camTwinAclGetFormat(tensor, format);
}
static inline aclnnStatus aclGetRawTensorAddr(const aclTensor* tensor, void** addr) {
    return camTwinAclGetRawTensorAddr(tensor, addr);
}
static inline aclnnStatus aclGetTensorListSize(const aclTensorList* tensorList, uint64_t* size) {
    return camTwinAclGetTensorListSize(tensorList, size);
}

/* A null stream is the default stream, as in ACL (the twin keeps one per process). */
static inline aclError aclrtCreateStream(aclrtStream* stream) { return camTwinAclrtCreateStream(stream); }
static inline aclError aclrtDestroyStream(aclrtStream stream) { return camTwinAclrtDestroyStream(stream); }
static inline aclError aclrtSynchronizeStream(aclrtStream stream) { return camTwinAclrtSynchronizeStream(stream); }
static inline aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout) {
    return camTwinAclrtSynchronizeStreamWithTimeout(stream, timeout);
}

/* Device memory and its IPC export/import: the calls the NPU transport (host/src/transport_ipc.cpp) takes through its
 * table. Prototypes and enum values as in CANN's acl/acl_rt.h (torch-npu 2.14.0's header set, docs/ascend.md §5.0).
 * The twin's "device memory" is a POSIX shared-memory segment (host/twin/acl_ipc_twin.cpp), so an imported window
 * is host-addressable there. */
typedef enum { ACL_MEM_MALLOC_HUGE_FIRST = 0 } aclrtMemMallocPolicy;
typedef enum {
    ACL_MEMCPY_HOST_TO_HOST = 0,
    ACL_MEMCPY_HOST_TO_DEVICE = 1,
    ACL_MEMCPY_DEVICE_TO_HOST = 2,
    ACL_MEMCPY_DEVICE_TO_DEVICE = 3
} aclrtMemcpyKind;
#define ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT 0x0UL
#define ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION 0x1UL
#define ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT 0x0UL
#define ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS 0x1UL

CAM_API aclError camTwinAclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy);
CAM_API aclError camTwinAclrtFree(void* devPtr);
CAM_API aclError camTwinAclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind);
CAM_API aclError camTwinAclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count,
                                         aclrtMemcpyKind kind, aclrtStream stream);
CAM_API aclError camTwinAclrtGetDevice(int32_t* deviceId);
CAM_API aclError camTwinAclrtDeviceGetBareTgid(int32_t* pid);
CAM_API aclError camTwinAclrtDeviceCanAccessPeer(int32_t* canAccessPeer, int32_t deviceId, int32_t peerDeviceId);
CAM_API aclError camTwinAclrtIpcMemGetExportKey(void* devPtr, size_t size, char* key, size_t len, uint64_t flags);
CAM_API aclError camTwinAclrtIpcMemSetImportPid(const char* key, int32_t* pid, size_t num);
CAM_API aclError camTwinAclrtIpcMemImportByKey(void** devPtr, const char* key, uint64_t flags);
CAM_API aclError camTwinAclrtIpcMemClose(const char* key);
CAM_API const char* camTwinAclGetRecentErrMsg(void);

static inline aclError aclrtMalloc(void** devPtr, size_t size, aclrtMemMallocPolicy policy) {
    return camTwinAclrtMalloc(devPtr, size, policy);
}
static inline aclError aclrtFree(void* devPtr) { return camTwinAclrtFree(devPtr); }
static inline aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count, aclrtMemcpyKind kind) {
    return camTwinAclrtMemcpy(dst, destMax, src, count, kind);
}
static inline aclError aclrtMemcpyAsync(void* dst, size_t destMax, const void* src, size_t count,
                                        aclrtMemcpyKind kind, aclrtStream stream) {
    return camTwinAclrtMemcpyAsync(dst, destMax, src, count, kind, stream);
}
static inline aclError aclrtGetDevice(int32_t* deviceId) { return camTwinAclrtGetDevice(deviceId); }
static inline aclError aclrtDeviceGetBareTgid(int32_t* pid) { return camTwinAclrtDeviceGetBareTgid(pid); }
static inline aclError aclrtDeviceCanAccessPeer(int32_t* canAccessPeer, int32_t deviceId, int32_t peerDeviceId) {
    return camTwinAclrtDeviceCanAccessPeer(canAccessPeer, deviceId, peerDeviceId);
}
static inline aclError aclrtIpcMemGetExportKey(void* devPtr, size_t size, char* key, size_t len, uint64_t flags) {
    return camTwinAclrtIpcMemGetExportKey(devPtr, size, key, len, flags);
}
static inline aclError aclrtIpcMemSetImportPid(const char* key, int32_t* pid, size_t num) {
    return camTwinAclrtIpcMemSetImportPid(key, pid, num);
}
static inline aclError aclrtIpcMemImportByKey(void** devPtr, const char* key, uint64_t flags) {
    return camTwinAclrtIpcMemImportByKey(devPtr, key, flags);
}
static inline aclError aclrtIpcMemClose(const char* key) { return camTwinAclrtIpcMemClose(key); }
static inline const char* aclGetRecentErrMsg(void) { return camTwinAclGetRecentErrMsg(); }

/* Debug surface of the twin's IPC stand-ins (tests only): every stand-in call of this process in order, as
 * "name;name;..." (NUL-terminated, cut at bytes), then cleared when reset != 0; and the imports still open. */
CAM_API aclError camTwinIpcCallLog(char* out, size_t bytes, int32_t reset);
CAM_API int64_t camTwinIpcOpenImports(void);

/* The twin's shm plane (camCommCreateShm/AttachShm/UnlinkShm: the NPU transport over these stand-ins, with segment
 * names chosen by the caller so a supervisor can find and remove a crashed plane's by prefix). Not ACL calls: no
 * Ascend counterpart, and the transport takes them from its table only where they exist (the twin).
 *   camTwinIpcNameNextExport: the next aclrtIpcMemGetExportKey of this thread names its memory exactly `name`
 *     ("/x", no other '/'); the export fails if that name exists.
 *   camTwinIpcKeyOfName: the current export key of the memory named `name` (after the plane's segment trust
 *     rule), its bytes, and its owner's twin device and pid (what the owner's window record would carry).
 *   camTwinIpcUnlinkName: removes the name of memory this process exported under `key`; mappings and imports stay
 *     valid, no new import can find it. */
CAM_API aclError camTwinIpcNameNextExport(const char* name);
CAM_API aclError camTwinIpcKeyOfName(const char* name, char* key, size_t len, uint64_t* bytes, int32_t* deviceId,
                                     int32_t* ownerPid);
CAM_API aclError camTwinIpcUnlinkName(const char* key);

#ifdef __cplusplus
}
#endif

#endif /* CAM_WITH_CANN */

/* aclnn status codes (CANN: opdev/op_errno.h, which is not a public header; values from the aclnn API reference's
 * table of return codes). Defined in both modes; identical redefinitions are harmless if CANN's also appear. */
#ifndef ACLNN_SUCCESS
#define ACLNN_SUCCESS 0
#endif
#ifndef ACLNN_ERR_PARAM_NULLPTR
#define ACLNN_ERR_PARAM_NULLPTR 161001
#endif
#ifndef ACLNN_ERR_PARAM_INVALID
#define ACLNN_ERR_PARAM_INVALID 161002
#endif
#ifndef ACLNN_ERR_RUNTIME_ERROR
#define ACLNN_ERR_RUNTIME_ERROR 361001
#endif
#ifndef ACLNN_ERR_INNER
#define ACLNN_ERR_INNER 561000
#endif

#endif /* CAM_ACL_COMPAT_H */
