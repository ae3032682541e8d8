// The ACL entry points the NPU transport (transport_ipc.cpp) calls, as one table. Each is typed from the ACL
// prototype in scope: CANN's own (CAM_WITH_CANN with an IPC-capable header set, CAM_CANN_HAS_IPC_MEM) or cam's
// ACL-compatible declarations in cam/acl_compat.h (the twin). On Ascend the table is filled by dlopen/dlsym of the
// runtime; on the twin with cam's stand-ins (host/twin/acl_ipc_twin.cpp). The transport's logic is the same for both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dl_library.h"

#ifdef CAM_WITH_CANN
#include <acl/acl.h>
#else
#include "cam/acl_compat.h"
#endif

namespace cam::host {

// The transport's entry points, (member, symbol, twin stand-in): the one list the table's members, the Ascend
// dlsym and the twin's fill are made from (the stand-in must have the symbol's type: the fill is an assignment).
#define CAM_ACL_IPC_ENTRIES(X)                                                   \
    X(malloc, aclrtMalloc, camTwinAclrtMalloc)                                   \
    X(free, aclrtFree, camTwinAclrtFree)                                         \
    X(memcpy, aclrtMemcpy, camTwinAclrtMemcpy)                                   \
    X(memcpyAsync, aclrtMemcpyAsync, camTwinAclrtMemcpyAsync)                    \
    X(createStream, aclrtCreateStream, camTwinAclrtCreateStream)                 \
    X(syncStream, aclrtSynchronizeStreamWithTimeout, camTwinAclrtSynchronizeStreamWithTimeout) \
    X(destroyStream, aclrtDestroyStream, camTwinAclrtDestroyStream)              \
    X(getDevice, aclrtGetDevice, camTwinAclrtGetDevice)                          \
    X(bareTgid, aclrtDeviceGetBareTgid, camTwinAclrtDeviceGetBareTgid)           \
    X(canAccessPeer, aclrtDeviceCanAccessPeer, camTwinAclrtDeviceCanAccessPeer)  \
    X(exportKey, aclrtIpcMemGetExportKey, camTwinAclrtIpcMemGetExportKey)        \
    X(setImportPid, aclrtIpcMemSetImportPid, camTwinAclrtIpcMemSetImportPid)     \
    X(importByKey, aclrtIpcMemImportByKey, camTwinAclrtIpcMemImportByKey)        \
    X(close, aclrtIpcMemClose, camTwinAclrtIpcMemClose)                          \
    X(recentErrMsg, aclGetRecentErrMsg, camTwinAclGetRecentErrMsg)

// The twin's shm plane: the same transport over the stand-ins, with names of the caller's choosing
// (cam/acl_compat.h camTwinIpc*). No ACL counterpart: null on Ascend, where that plane does not exist.
struct AclIpcTwinNames {
    aclError (*nameNextExport)(const char* name) = nullptr;
    aclError (*keyOfName)(const char* name, char* key, size_t len, uint64_t* bytes, int32_t* deviceId,
                          int32_t* ownerPid) = nullptr;
    aclError (*unlinkName)(const char* key) = nullptr;
};

struct AclIpcApi {
    CAM_ACL_IPC_ENTRIES(CAM_DL_MEMBER)
    AclIpcTwinNames twinNames;
    std::string unavailable;  // why the table cannot be used; "" when it can
};

// The process's table (filled once).
const AclIpcApi& AclIpc();

}  // namespace cam::host
