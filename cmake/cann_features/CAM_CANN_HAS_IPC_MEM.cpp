// Device-memory IPC (the NPU transport's route to peer windows, docs/ascend.md §5): export a key, allow the peers'
// pids, import by key with peer access, close; peer-access checks. In torch-npu 2.14.0's acl_rt.h only.
#include <acl/acl.h>

void CamProbe() {
    (void)&aclrtIpcMemGetExportKey;
    (void)&aclrtIpcMemSetImportPid;
    (void)&aclrtIpcMemImportByKey;
    (void)&aclrtIpcMemClose;
    (void)&aclrtDeviceCanAccessPeer;
    (void)&aclrtDeviceEnablePeerAccess;
    (void)&aclrtDeviceGetBareTgid;  // the importer's pid for the allow-list
    (void)static_cast<uint64_t>(ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS);
}
