// The NPU transport: a plane's windows are device memory of cam's own, shared between the ranks' processes by ACL
// IPC (docs/ascend.md §5.0): aclrtMalloc, export a key, allow the peers' pids, import the peers' windows by key,
// close every import before the owner frees. One code path: the entry points come from a table (transport_ipc.h),
// filled from the runtime by dlopen on Ascend and with cam's POSIX-shm stand-ins on the twin (host/twin/acl_ipc_twin.cpp).
// Host code never loads or stores a window directly here: every word it touches goes through aclrtMemcpy.
#ifdef CAM_WITH_CANN
#include "cam_cann_features.h"
#define CAM_IPC_TRANSPORT CAM_CANN_HAS_IPC_MEM
#else
#define CAM_IPC_TRANSPORT 1
#endif

#include <memory>
#include <string>
#include <vector>

#include "cam/cam_comm.h"
#include "comm.h"
#include "status.h"

#if CAM_IPC_TRANSPORT
#include <algorithm>
#include <cstring>
#include <mutex>

#include "transport_ipc.h"

namespace cam::host {

const AclIpcApi& AclIpc() {
#ifdef CAM_WITH_CANN
    static const AclIpcApi api =
        CAM_DL_LOAD_TABLE(AclIpcApi, CAM_ACL_IPC_ENTRIES, "libascendcl.so", "the Ascend runtime");
#else
    static const AclIpcApi api = [] {
        AclIpcApi a;
#define CAM_TWIN_FILL(member, symbol, twin) a.member = &twin;
        CAM_ACL_IPC_ENTRIES(CAM_TWIN_FILL)
#undef CAM_TWIN_FILL
        a.twinNames = {&camTwinIpcNameNextExport, &camTwinIpcKeyOfName, &camTwinIpcUnlinkName};
        return a;
    }();
#endif
    return api;
}

namespace {

// aclrtIpcMemGetExportKey's key length (CANN's API reference: len is 65).
constexpr size_t kAclKeyLen = 65;
static_assert(kAclKeyLen <= CAM_IPC_KEY_BYTES, "a record holds an ACL key");
// Own device memory a peer's words pass through on their way to or from the host (the limit below); the largest
// host-side access is the identity line.
constexpr uint64_t kStagingBytes = 8 * kIdentityWords;
// A copy of a few words that has not finished in this long will not: the device or the peer is gone.
constexpr int32_t kPeerCopyTimeoutMs = 10000;

// The runtime's own sentence for the failure just seen on this thread, when it has one.
std::string AclFailed(const char* call, aclError rc) {
    const char* said = AclIpc().recentErrMsg ? AclIpc().recentErrMsg() : nullptr;
    return std::string(call) + " failed with ACL error " + std::to_string(static_cast<int>(rc)) +
           (said && *said ? std::string(" (") + said + ")" : "");
}

// The host never loads or stores a window here: every word it reads or writes is an aclrtMemcpy. A peer's window is
// memory imported from another device, which CANN's aclrtIpcMemGetExportKey page says cannot be copied to or from
// the host directly (hicann/runtime docs/api_docs: aclrtIpcMemGetExportKey), so a peer's words go device-to-device
// through kStagingBytes of this rank's own device memory, asynchronously on a stream of cam's own (the twin's
// stand-ins refuse the direct copy and the synchronous one).
class IpcTransport : public Transport {
public:
    IpcTransport(const AclIpcApi& acl, int64_t rank, int64_t world)
        : acl_(acl), rank_(rank), windows_(world, nullptr), bytes_(world, 0), imported_(world) {}
    ~IpcTransport() override {
        Detach();
        if (!ownKey_.empty()) acl_.close(ownKey_.c_str());  // the export is withdrawn: nothing imports it later
        if (stream_ && !stagingLost_) acl_.destroyStream(stream_);
        if (deviceTable_ && !stagingLost_) acl_.free(deviceTable_);  // else kept: a late copy may still land in it
        if (windows_[rank_]) acl_.free(windows_[rank_]);
    }
    const char* Name() const override { return "acl-ipc"; }
    uint8_t* Window(int64_t) const override { return nullptr; }
    void* DeviceWindow(int64_t rank) const override { return windows_[rank]; }
    uint64_t WindowBytes(int64_t rank) const override { return bytes_[rank]; }

    bool ReadWords(int64_t rank, int64_t byteOff, int64_t* out, int64_t n, std::string* why) const override {
        const auto bytes = static_cast<uint64_t>(8 * n);
        // One staging area, and a watchdog thread writes peers' words while the caller's thread reads: serialized,
        // with the closing of imports (Detach).
        std::lock_guard<std::mutex> lock(stagingMutex_);
        uint8_t* at = Words(rank, byteOff, n, why);
        if (!at) return false;
        if (rank == rank_) return Copy(out, bytes, at, bytes, ACL_MEMCPY_DEVICE_TO_HOST, "reading", why);
        for (uint64_t done = 0; done < bytes; done += kStagingBytes) {
            const uint64_t k = std::min(kStagingBytes, bytes - done);
            if (!PeerCopy(staging_, at + done, k, "reading", why) ||
                !Copy(reinterpret_cast<uint8_t*>(out) + done, k, staging_, k, ACL_MEMCPY_DEVICE_TO_HOST, "reading", why))
                return false;
        }
        return true;
    }
    bool WriteWords(int64_t rank, int64_t byteOff, const int64_t* in, int64_t n, std::string* why) override {
        const auto bytes = static_cast<uint64_t>(8 * n);
        std::lock_guard<std::mutex> lock(stagingMutex_);
        uint8_t* at = Words(rank, byteOff, n, why);
        if (!at) return false;
        if (rank == rank_) return Copy(at, bytes, in, bytes, ACL_MEMCPY_HOST_TO_DEVICE, "writing", why);
        for (uint64_t done = 0; done < bytes; done += kStagingBytes) {
            const uint64_t k = std::min(kStagingBytes, bytes - done);
            if (!Copy(staging_, kStagingBytes, reinterpret_cast<const uint8_t*>(in) + done, k, ACL_MEMCPY_HOST_TO_DEVICE,
                      "writing", why) ||
                !PeerCopy(at + done, staging_, k, "writing", why))
                return false;
        }
        return true;
    }
    bool SetIfZero(int64_t rank, int64_t byteOff, int64_t value, std::string* why) override {
        int64_t now = 0;
        if (!ReadWords(rank, byteOff, &now, 1, why)) return false;
        return now != 0 || WriteWords(rank, byteOff, &value, 1, why);
    }

    const AclIpcApi& acl_;
    int64_t rank_;
    int32_t device_ = 0;
    std::string ownKey_;
    std::vector<void*> windows_;  // device addresses: own allocation, then the imports
    std::vector<uint64_t> bytes_;
    std::vector<int32_t> pids_;          // the pids this rank's window allows (create's peerPids); empty: none
                                         // (the twin's shm plane: no pid check, the segment trust rule guards)
    bool shmNamed_ = false;              // its segment named by camCommCreateShm(Ipc) (the twin's shm plane)
    bool unlinked_ = false;              // camCommUnlinkShm removed the window's name
    std::vector<std::string> imported_;  // key of every open import ("" when none)
    void* deviceTable_ = nullptr;        // own device memory: the peer table, then the staging words
    uint8_t* staging_ = nullptr;
    aclrtStream stream_ = nullptr;      // cam's own, for the copies of peers' words
    mutable bool stagingLost_ = false;  // a peer copy timed out: it may still write the staging area
    mutable std::mutex stagingMutex_;
    bool detached_ = false;

    void Detach() {
        std::lock_guard<std::mutex> lock(stagingMutex_);
        for (size_t r = 0; r < imported_.size(); ++r) {
            if (imported_[r].empty()) continue;
            acl_.close(imported_[r].c_str());
            imported_[r].clear();
            windows_[r] = nullptr;
        }
        detached_ = true;
    }

private:
    // The device address of words [byteOff, byteOff + 8n) of rank's window, or nullptr with *why.
    uint8_t* Words(int64_t rank, int64_t byteOff, int64_t n, std::string* why) const {
        auto* w = static_cast<uint8_t*>(windows_[rank]);
        if (!w || (rank != rank_ && !staging_)) {
            *why = "rank " + std::to_string(rank) + "'s window is not imported";
            return nullptr;
        }
        if (byteOff < 0 || n < 0 || byteOff % 8 != 0 || static_cast<uint64_t>(byteOff + 8 * n) > bytes_[rank]) {
            *why = "words [" + std::to_string(byteOff) + ", +" + std::to_string(8 * n) + ") lie outside rank " +
                   std::to_string(rank) + "'s window of " + std::to_string(bytes_[rank]) + " bytes";
            return nullptr;
        }
        return w + byteOff;
    }
    // Device to device between own memory and a peer's: only asynchronous copies may touch memory imported from
    // another device (§5.0), so on cam's own stream, then a bounded synchronize. After a timeout the copy may still
    // run: the staging area is never freed (nor reused) from then on.
    bool PeerCopy(void* dst, const void* src, uint64_t n, const char* what, std::string* why) const {
        if (stagingLost_) {
            *why = "an earlier copy of window words did not finish; this rank no longer copies peers' words";
            return false;
        }
        if (aclError rc = acl_.memcpyAsync(dst, n, src, n, ACL_MEMCPY_DEVICE_TO_DEVICE, stream_)) {
            *why = AclFailed("aclrtMemcpyAsync", rc) + " " + what + " a peer's window words";
            return false;
        }
        if (aclError rc = acl_.syncStream(stream_, kPeerCopyTimeoutMs)) {
            stagingLost_ = true;
            *why = AclFailed("aclrtSynchronizeStreamWithTimeout", rc) + " " + what + " a peer's window words (" +
                   std::to_string(kPeerCopyTimeoutMs) + " ms)";
            return false;
        }
        return true;
    }
    bool Copy(void* dst, uint64_t max, const void* src, uint64_t n, aclrtMemcpyKind kind, const char* what,
              std::string* why) const {
        if (aclError rc = acl_.memcpy(dst, max, src, n, kind)) {
            *why = AclFailed("aclrtMemcpy", rc) + " " + what + " window words";
            return false;
        }
        return true;
    }
};

IpcTransport* AsIpc(camComm* comm) { return dynamic_cast<IpcTransport*>(comm->transport.get()); }

}  // namespace

}  // namespace cam::host

using namespace cam;
using namespace cam::host;

extern "C" aclnnStatus camIpcProcessId(int32_t* pid) {
    return Guarded("camIpcProcessId", [&]() -> aclnnStatus {
        if (!pid) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camIpcProcessId: pid is null");
        const AclIpcApi& acl = AclIpc();
        if (!acl.unavailable.empty()) return Fail(ACLNN_ERR_RUNTIME_ERROR, "camIpcProcessId: " + acl.unavailable);
        if (aclError rc = acl.bareTgid(pid))
            return Fail(ACLNN_ERR_RUNTIME_ERROR, "camIpcProcessId: " + AclFailed("aclrtDeviceGetBareTgid", rc));
        return ACLNN_SUCCESS;
    });
}

namespace cam::host {
namespace {

// The one create path. peerPids (world entries, the own ignored) become the window's allow-list; null exports
// without one (camCommCreateShm, which exchanges no pids: any process of this user may import, as any could open a
// segment of it, and the segment trust rule is the guard). exportName: the twin's shm plane names the window's
// segment (null: the runtime's own key).
aclnnStatus CreateWindow(const char* api, const CamTopology& topo, int64_t rank, const camCommConfig& config,
                         const int32_t* peerPids, const char* exportName, camComm** comm) {
    const int64_t world = cam::layout::world_size(topo);
    const AclIpcApi& acl = AclIpc();
    if (!acl.unavailable.empty()) return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(api) + ": " + acl.unavailable);
    auto t = std::make_unique<IpcTransport>(acl, rank, world);
    if (peerPids) t->pids_.assign(peerPids, peerPids + world);
    t->shmNamed_ = exportName != nullptr;
    auto fail = [&](const std::string& why) { return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(api) + ": " + why); };
    if (aclError rc = acl.getDevice(&t->device_)) return fail(AclFailed("aclrtGetDevice", rc));
    const uint64_t bytes = static_cast<uint64_t>(RequiredWindowBytes(topo, rank));
    void* window = nullptr;
    if (aclError rc = acl.malloc(&window, bytes, ACL_MEM_MALLOC_HUGE_FIRST))
        return fail(AclFailed("aclrtMalloc", rc) + " for a window of " + std::to_string(bytes) + " bytes");
    t->windows_[rank] = window;
    t->bytes_[rank] = bytes;
    // aclrtMalloc does not zero device memory: the protocol's words start at 0 (the twin's segment is zeroed,
    // the copy keeps one path). One chunk at a time so a large window costs no equally large host buffer.
    const std::vector<uint8_t> zeros(std::min<uint64_t>(bytes, 1u << 20), 0);
    for (uint64_t off = 0; off < bytes; off += zeros.size()) {
        const uint64_t n = std::min<uint64_t>(zeros.size(), bytes - off);
        if (aclError rc = acl.memcpy(static_cast<uint8_t*>(window) + off, bytes - off, zeros.data(), n,
                                     ACL_MEMCPY_HOST_TO_DEVICE))
            return fail(AclFailed("aclrtMemcpy", rc) + " (zeroing the window)");
    }
    std::vector<uint8_t> line(kIdentityLineEnd, 0);
    WriteIdentity(line.data(), topo, rank, bytes, config.actDtype);
    if (aclError rc = acl.memcpy(static_cast<uint8_t*>(window) + kIdentityOff, bytes - kIdentityOff,
                                 line.data() + kIdentityOff, 8 * kIdentityWords, ACL_MEMCPY_HOST_TO_DEVICE))
        return fail(AclFailed("aclrtMemcpy", rc) + " (the identity line)");
    if (exportName)
        if (aclError rc = acl.twinNames.nameNextExport(exportName))
            return fail(AclFailed("camTwinIpcNameNextExport", rc) + " for the segment name " + exportName);
    char key[CAM_IPC_KEY_BYTES] = {};
    const uint64_t flags =
        peerPids ? ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT : ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION;
    if (aclError rc = acl.exportKey(window, bytes, key, kAclKeyLen, flags))
        return fail(AclFailed("aclrtIpcMemGetExportKey", rc));
    t->ownKey_ = key;
    std::vector<int32_t> pids;
    for (int64_t r = 0; peerPids && r < world; ++r)
        if (r != rank) pids.push_back(peerPids[r]);
    if (!pids.empty())
        if (aclError rc = acl.setImportPid(key, pids.data(), pids.size()))
            return fail(AclFailed("aclrtIpcMemSetImportPid", rc));
    *comm = NewComm(topo, rank, config, std::move(t)).release();
    return ACLNN_SUCCESS;
}

// peerPids: one process id per rank of the topology (the own entry is not read). After CheckCreateArgs.
aclnnStatus CheckPeerPids(const char* api, const CamTopology& topo, int64_t rank, const int32_t* peerPids,
                          int64_t count) {
    const int64_t world = cam::layout::world_size(topo);
    if (!peerPids) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": peerPids is null");
    if (count != world)
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": " + std::to_string(count) +
                                                 " peer pids for a world of " + std::to_string(world));
    for (int64_t r = 0; r < world; ++r)
        if (r != rank && peerPids[r] <= 0)
            return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": peerPids[" + std::to_string(r) + "] is " +
                                                     std::to_string(peerPids[r]) + ", not a process id");
    return ACLNN_SUCCESS;
}

}  // namespace
}  // namespace cam::host

extern "C" aclnnStatus camCommCreateIpc(const CamTopology* topology, int64_t rank, const camCommConfig* config,
                                        const int32_t* peerPids, int64_t count, camComm** comm) {
    return Guarded("camCommCreateIpc", [&]() -> aclnnStatus {
        const char* api = "camCommCreateIpc";
        if (aclnnStatus st = CheckCreateArgs(api, topology, rank, config, comm)) return st;
        if (aclnnStatus st = CheckPeerPids(api, *topology, rank, peerPids, count)) return st;
        return CreateWindow(api, *topology, rank, *config, peerPids, nullptr, comm);
    });
}

extern "C" aclnnStatus camCommGetIpcRecord(const camComm* comm, camIpcWindowRecord* record) {
    if (!comm || !record) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommGetIpcRecord: null argument");
    const auto* t = dynamic_cast<const IpcTransport*>(comm->transport.get());
    if (!t) return Fail(ACLNN_ERR_PARAM_INVALID, "camCommGetIpcRecord: not an ACL IPC communicator");
    *record = camIpcWindowRecord{};
    std::strncpy(record->key, t->ownKey_.c_str(), CAM_IPC_KEY_BYTES - 1);
    int32_t pid = 0;
    if (aclError rc = t->acl_.bareTgid(&pid))
        return Fail(ACLNN_ERR_RUNTIME_ERROR, "camCommGetIpcRecord: " + AclFailed("aclrtDeviceGetBareTgid", rc));
    record->pid = pid;
    record->deviceId = t->device_;
    record->windowBytes = t->bytes_[comm->rank];
    record->fingerprint = cam::layout::fingerprint(comm->topo);
    return ACLNN_SUCCESS;
}

namespace cam::host {
namespace {

// The one attach path: every peer's record checked, its window imported and its identity line checked, the peer
// table written into device memory, the plane id. `records[rank]` is not read.
aclnnStatus AttachRecords(const char* api, camComm* comm, IpcTransport* t, const camIpcWindowRecord* records) {
    const CamTopology& topo = comm->topo;
    const int64_t world = cam::layout::world_size(topo);
    const AclIpcApi& acl = t->acl_;
    auto invalid = [&](const std::string& why) { return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": " + why); };
    // Own device memory first: the peer table, then the staging words every peer's identity line passes through.
    if (!t->deviceTable_) {
        void* device = nullptr;
        if (aclError rc = acl.malloc(&device, 8 * world + kStagingBytes, ACL_MEM_MALLOC_HUGE_FIRST))
            return Fail(ACLNN_ERR_RUNTIME_ERROR,
                        std::string(api) + ": " + AclFailed("aclrtMalloc", rc) + " (peer table and staging)");
        t->deviceTable_ = device;
        t->staging_ = static_cast<uint8_t*>(device) + 8 * world;
    }
    if (!t->stream_)
        if (aclError rc = acl.createStream(&t->stream_))
            return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(api) + ": " + AclFailed("aclrtCreateStream", rc) +
                                                     " (for copies of peers' window words)");
    std::vector<int64_t> nonces(world);
    for (int64_t r = 0; r < world; ++r) {
        const std::string who = "rank " + std::to_string(r);
        if (r != comm->rank) {
            const camIpcWindowRecord& rec = records[r];
            if (std::memchr(rec.key, '\0', CAM_IPC_KEY_BYTES) == nullptr)
                return invalid(who + " published a key that is not NUL-terminated");
            // The record must come from the process this rank's allow-list admitted for that rank: another
            // process publishing for it would hold this rank's window while the real rank is watched.
            if (!t->pids_.empty() && rec.pid != t->pids_[r])
                return invalid(who + "'s record comes from pid " + std::to_string(rec.pid) +
                               ", the pid it published (and this rank allowed) is " + std::to_string(t->pids_[r]));
            if (rec.fingerprint != cam::layout::fingerprint(topo))
                return invalid(who + " published topology fingerprint " + std::to_string(rec.fingerprint) +
                               ", ours is " + std::to_string(cam::layout::fingerprint(topo)));
            const auto need = static_cast<uint64_t>(RequiredWindowBytes(topo, r));
            if (rec.windowBytes != need)
                return invalid(who + " published a window of " + std::to_string(rec.windowBytes) +
                               " bytes, the topology gives that rank " + std::to_string(need));
            if (rec.deviceId != t->device_) {
                int32_t can = 0;
                if (aclError rc = acl.canAccessPeer(&can, t->device_, rec.deviceId))
                    return invalid(who + ": " + AclFailed("aclrtDeviceCanAccessPeer", rc) + " for devices " +
                                   std::to_string(t->device_) + " and " + std::to_string(rec.deviceId));
                if (!can)
                    return invalid(who + "'s device " + std::to_string(rec.deviceId) + " cannot be reached from "
                                   "this rank's device " + std::to_string(t->device_));
            }
            void* peer = nullptr;
            if (aclError rc = acl.importByKey(&peer, rec.key, ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS))
                return invalid("cannot import " + who + "'s window: " + AclFailed("aclrtIpcMemImportByKey", rc) +
                               " (a stale or altered key, or this process's pid is not on its allow-list)");
            t->imported_[r] = rec.key;
            t->windows_[r] = peer;
            t->bytes_[r] = rec.windowBytes;
        }
        const std::string why = ReadAndCheckIdentity(comm, r, &nonces[r]);
        if (!why.empty()) return invalid(why);
    }
    std::vector<int64_t> table(world);
    for (int64_t r = 0; r < world; ++r) table[r] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(t->windows_[r]));
    if (aclError rc = acl.memcpy(t->deviceTable_, 8 * world, table.data(), 8 * world, ACL_MEMCPY_HOST_TO_DEVICE))
        return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(api) + ": " + AclFailed("aclrtMemcpy", rc) + " (peer table)");
    comm->peerTable = table;
    // The kernels read the device table; the transport frees it after the last import is closed.
    comm->devicePeers = std::shared_ptr<int64_t>(static_cast<int64_t*>(t->deviceTable_), [](int64_t*) {});
    const std::string why = FinishAttach(comm, nonces);
    if (!why.empty()) return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(api) + ": " + why);
    return ACLNN_SUCCESS;
}

// The arguments both attach calls check: a communicator of this transport made by the matching create call, not
// attached yet, one entry per rank.
aclnnStatus CheckAttach(const char* api, camComm* comm, const void* entries, int64_t count, bool shm,
                        IpcTransport** t) {
    if (!comm || !entries) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": null argument");
    *t = AsIpc(comm);
    if (!*t || (shm && !(*t)->shmNamed_))
        return Fail(ACLNN_ERR_PARAM_INVALID,
                    std::string(api) + (shm ? ": not a shared-memory communicator (camCommCreateShm)"
                                            : ": not an ACL IPC communicator (camCommCreateIpc)"));
    const int64_t world = cam::layout::world_size(comm->topo);
    if (count != world)
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": " + std::to_string(count) +
                                                 (shm ? " segment names" : " records") + " for a world of " +
                                                 std::to_string(world));
    if (comm->attached || (*t)->detached_)
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": already attached");
    return ACLNN_SUCCESS;
}

}  // namespace
}  // namespace cam::host

extern "C" aclnnStatus camCommAttachIpc(camComm* comm, const camIpcWindowRecord* records, int64_t count) {
    return Guarded("camCommAttachIpc", [&]() -> aclnnStatus {
        const char* api = "camCommAttachIpc";
        IpcTransport* t = nullptr;
        if (aclnnStatus st = CheckAttach(api, comm, records, count, false, &t)) return st;
        return AttachRecords(api, comm, t, records);
    });
}

extern "C" aclnnStatus camCommDetachIpc(camComm* comm) {
    if (!comm) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommDetachIpc: comm is null");
    IpcTransport* t = AsIpc(comm);
    if (!t) return Fail(ACLNN_ERR_PARAM_INVALID, "camCommDetachIpc: not an ACL IPC communicator");
    const int64_t busy = comm->opsInFlight.load();
    if (busy > 0)
        return Fail(CAM_ERR_COMM_BUSY, "camCommDetachIpc: " + std::to_string(busy) +
                                           " op(s) still queued or running; synchronize their streams first");
    t->Detach();
    comm->attached = false;  // no op runs on a plane whose peer windows are closed
    return ACLNN_SUCCESS;
}

// ---- The twin's shm plane: this transport over the twin's stand-ins, the windows' segments named by the caller
// ("/prefix-r<rank>", so a supervisor finds a crashed plane's by prefix). camCommCreateShmIpc allows the peers' pids
// as camCommCreateIpc does (cam.Comm's shm plane: the same handshake); camCommCreateShm, for C callers without a
// store exchange of pids, exports without an allow-list (the segment trust rule is the guard, as for any segment of
// this user) and camCommAttachShm looks each peer's current key up by its segment name. Unlink removes the name
// once every peer imported the window.

namespace {

// The twin's key is the name, ':' and up to 16 hex digits of nonce, in ACL's 65 bytes.
constexpr size_t kMaxShmName = kAclKeyLen - 18;
static_assert(kMaxShmName == CAM_SHM_NAME_MAX, "cam_comm.h states the limit");

const char kShmIsTwin[] =
    ": the shm plane is the twin's (the NPU transport over its POSIX-shm stand-ins of the ACL calls); on Ascend a "
    "plane of processes is made with camCommCreateIpc";

// A name the twin's stand-ins can give a window's segment and fit, with a nonce, into its key; "" or the refusal.
std::string RefuseShmName(const char* name) {
    const size_t n = std::strlen(name);
    if (name[0] == '/' && n >= 2 && !std::strchr(name + 1, '/') && n <= kMaxShmName) return "";
    return std::string("segmentName '") + name + "' must be '/' and a name without another '/', at most " +
           std::to_string(kMaxShmName) + " bytes in all (the window's key holds it with a nonce in " +
           std::to_string(kAclKeyLen) + " bytes)";
}

// camCommCreateShm (peerPids null) and camCommCreateShmIpc.
aclnnStatus CreateShm(const char* api, const char* segmentName, const CamTopology* topology, int64_t rank,
                      const camCommConfig* config, const int32_t* peerPids, int64_t count, camComm** comm) {
    if (!segmentName) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": segmentName is null");
    if (aclnnStatus st = CheckCreateArgs(api, topology, rank, config, comm)) return st;
    if (peerPids || count != 0)
        if (aclnnStatus st = CheckPeerPids(api, *topology, rank, peerPids, count)) return st;
    const std::string bad = RefuseShmName(segmentName);
    if (!bad.empty()) return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": " + bad);
    if (!AclIpc().twinNames.nameNextExport) return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(api) + kShmIsTwin);
    return CreateWindow(api, *topology, rank, *config, peerPids, segmentName, comm);
}

}  // namespace

extern "C" aclnnStatus camCommCreateShm(const char* segmentName, const CamTopology* topology, int64_t rank,
                                        const camCommConfig* config, camComm** comm) {
    return Guarded("camCommCreateShm", [&]() -> aclnnStatus {
        return CreateShm("camCommCreateShm", segmentName, topology, rank, config, nullptr, 0, comm);
    });
}

extern "C" aclnnStatus camCommCreateShmIpc(const char* segmentName, const CamTopology* topology, int64_t rank,
                                           const camCommConfig* config, const int32_t* peerPids, int64_t count,
                                           camComm** comm) {
    return Guarded("camCommCreateShmIpc", [&]() -> aclnnStatus {
        return CreateShm("camCommCreateShmIpc", segmentName, topology, rank, config, peerPids, count, comm);
    });
}

extern "C" aclnnStatus camCommAttachShm(camComm* comm, const char* const* segmentNames, int64_t count) {
    return Guarded("camCommAttachShm", [&]() -> aclnnStatus {
        const char* api = "camCommAttachShm";
        IpcTransport* t = nullptr;
        if (aclnnStatus st = CheckAttach(api, comm, segmentNames, count, true, &t)) return st;
        const int64_t world = count;
        std::vector<camIpcWindowRecord> records(world);
        for (int64_t r = 0; r < world; ++r) {
            if (r == comm->rank) continue;
            if (!segmentNames[r]) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": segment name is null");
            // The record a peer of the NPU plane publishes, read from its segment: key, the window's size, its
            // owner's device and pid (checked only where this rank allowed pids: camCommCreateShmIpc), the topology
            // left to its identity line.
            camIpcWindowRecord& rec = records[r];
            if (aclError rc = t->acl_.twinNames.keyOfName(segmentNames[r], rec.key, kAclKeyLen, &rec.windowBytes,
                                                          &rec.deviceId, &rec.pid))
                return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": rank " + std::to_string(r) + "'s segment " +
                                                         segmentNames[r] + ": " + AclFailed("camTwinIpcKeyOfName", rc));
            rec.fingerprint = cam::layout::fingerprint(comm->topo);
        }
        return AttachRecords(api, comm, t, records.data());
    });
}

extern "C" aclnnStatus camCommUnlinkShm(camComm* comm) {
    if (!comm) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommUnlinkShm: comm is null");
    IpcTransport* t = AsIpc(comm);
    if (!t || !t->shmNamed_)
        return Fail(ACLNN_ERR_PARAM_INVALID, "camCommUnlinkShm: not a shared-memory communicator (camCommCreateShm)");
    if (t->unlinked_) return ACLNN_SUCCESS;
    if (aclError rc = t->acl_.twinNames.unlinkName(t->ownKey_.c_str()))
        return Fail(ACLNN_ERR_RUNTIME_ERROR, "camCommUnlinkShm: " + AclFailed("camTwinIpcUnlinkName", rc));
    t->unlinked_ = true;
    return ACLNN_SUCCESS;
}

#else  // CANN headers without device-memory IPC

namespace {
const char kNoIpc[] =
    ": the NPU transport is off in this build: its CANN headers declare no device-memory IPC "
    "(aclrtIpcMemGetExportKey ..., CAM_CANN_HAS_IPC_MEM; docs/ascend.md section 2)";
}

extern "C" aclnnStatus camIpcProcessId(int32_t*) {
    return cam::host::Fail(ACLNN_ERR_RUNTIME_ERROR, std::string("camIpcProcessId") + kNoIpc);
}
extern "C" aclnnStatus camCommCreateIpc(const CamTopology*, int64_t, const camCommConfig*, const int32_t*, int64_t,
                                        camComm**) {
    return cam::host::Fail(ACLNN_ERR_RUNTIME_ERROR, std::string("camCommCreateIpc") + kNoIpc);
}
extern "C" aclnnStatus camCommGetIpcRecord(const camComm*, camIpcWindowRecord*) {
    return cam::host::Fail(ACLNN_ERR_RUNTIME_ERROR, std::string("camCommGetIpcRecord") + kNoIpc);
}
extern "C" aclnnStatus camCommAttachIpc(camComm*, const camIpcWindowRecord*, int64_t) {
    return cam::host::Fail(ACLNN_ERR_RUNTIME_ERROR, std::string("camCommAttachIpc") + kNoIpc);
}
extern "C" aclnnStatus camCommDetachIpc(camComm*) {
    return cam::host::Fail(ACLNN_ERR_RUNTIME_ERROR, std::string("camCommDetachIpc") + kNoIpc);
}
extern "C" aclnnStatus camCommCreateShm(const char*, const CamTopology*, int64_t, const camCommConfig*, camComm**) {
    return cam::host::Fail(ACLNN_ERR_RUNTIME_ERROR, std::string("camCommCreateShm") + kNoIpc);
}
extern "C" aclnnStatus camCommCreateShmIpc(const char*, const CamTopology*, int64_t, const camCommConfig*,
                                           const int32_t*, int64_t, camComm**) {
    return cam::host::Fail(ACLNN_ERR_RUNTIME_ERROR, std::string("camCommCreateShmIpc") + kNoIpc);
}
extern "C" aclnnStatus camCommAttachShm(camComm*, const char* const*, int64_t) {
    return cam::host::Fail(ACLNN_ERR_RUNTIME_ERROR, std::string("camCommAttachShm") + kNoIpc);
}
extern "C" aclnnStatus camCommUnlinkShm(camComm*) {
    return cam::host::Fail(ACLNN_ERR_RUNTIME_ERROR, std::string("camCommUnlinkShm") + kNoIpc);
}

#endif  // CAM_IPC_TRANSPORT
