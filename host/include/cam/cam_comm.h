/* The data-plane communicator: one per rank. It owns this rank's window and the mapping of every peer's window,
 * and carries the constants the data-plane ops need (topology, rank, timeouts). docs/protocol.md describes the
 * windows; this header is the C surface over them.
 *
 * Transports (how windows become peer-accessible memory):
 *   - in-process: ranks are threads of one process; windows are registered by group name.
 *   - ACL IPC (the NPU transport): each rank aclrtMalloc's its window, exports a key, imports its peers' windows.
 *   - POSIX shared memory (the twin only): the NPU transport over the twin's POSIX-shm stand-ins of the ACL calls,
 *     with segment names of the caller's choosing; the names are exchanged out of band (cam.Comm uses a
 *     torch.distributed Store), each rank imports every peer's window by name, and each name is removed as soon as
 *     every peer has imported it, so a crash leaks nothing.
 *   - (Ascend) HCCL windows: the same camComm with the window addresses taken from the HCCL communicator.
 *
 * CamTopology is the POD of cam/window_layout.h. */
#ifndef CAM_COMM_H
#define CAM_COMM_H

#include "cam/cam_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct camComm camComm;
typedef struct CamTopology CamTopology;

typedef struct {
    int64_t timeoutNs;  /* bound of every device wait inside a begun round (slot reuse, partial replica, completion) */
    int64_t idlePollNs; /* dispatch_recv returns an empty work item after this long with nothing ready */
    int64_t actDtype;   /* ACL_BF16 or ACL_FLOAT16: the activation dtype. Part of the plane identity checked at
                           creation (it changes the bytes on the wire): every rank of a plane must give the same. */
} camCommConfig;

/* Threads as ranks. Blocks until all A+F ranks of `group` joined (at most joinTimeoutMs) and fails naming the
 * ranks that did not, or the rank whose topology differs. The group name is free again once all ranks joined. */
CAM_API aclnnStatus camCommCreateInProcess(const char* group, const CamTopology* topology, int64_t rank,
                                           const camCommConfig* config, int32_t joinTimeoutMs, camComm** comm);

/* Processes as ranks on the twin, step 1: camCommCreateIpc's path without a pid allow-list (no pids are exchanged;
 * the segments' trust rule guards: this user's, mode 0600), the window's segment named exactly `segmentName` ("/name",
 * no other '/', at most CAM_SHM_NAME_MAX bytes; created exclusively). Refused on Ascend, where camCommCreateIpc is
 * the way. */
#define CAM_SHM_NAME_MAX 47 /* the twin's key holds the name, ':' and a 16-digit nonce in ACL's 65 bytes */
CAM_API aclnnStatus camCommCreateShm(const char* segmentName, const CamTopology* topology, int64_t rank,
                                     const camCommConfig* config, camComm** comm);
/* The shm plane as cam.Comm makes it: step 1 with the pid allow-list of camCommCreateIpc (peerPids, count: as there),
 * the records then exchanged and attached as on the NPU transport (camCommGetIpcRecord, camCommAttachIpc), and
 * step 3 below. Refused on Ascend. */
CAM_API aclnnStatus camCommCreateShmIpc(const char* segmentName, const CamTopology* topology, int64_t rank,
                                        const camCommConfig* config, const int32_t* peerPids, int64_t count,
                                        camComm** comm);
/* Step 2: camCommAttachIpc's path with every peer's record read from its segment by name (names[r] for
 * r = 0..count-1, count = A+F; names[rank] is ignored): imports every peer's window and checks its identity line
 * (topology fingerprint, activation dtype, rank, role, window size). */
CAM_API aclnnStatus camCommAttachShm(camComm* comm, const char* const* segmentNames, int64_t count);
/* Step 3, once every peer attached: removes this rank's segment name. Imports stay valid. */
CAM_API aclnnStatus camCommUnlinkShm(camComm* comm);

/* Processes as ranks over device memory shared by ACL IPC (the NPU transport, docs/ascend.md §5.0; on the twin the
 * same code runs over cam's POSIX-shm stand-ins of the ACL calls). The exchange between the steps is the caller's
 * (cam.Comm uses its torch.distributed Store):
 *   0. camIpcProcessId: this process's pid as ACL's allow-list wants it (aclrtDeviceGetBareTgid); published first.
 *   1. camCommCreateIpc: allocates this rank's window (aclrtMalloc, the role's size), writes its identity line,
 *      exports it (aclrtIpcMemGetExportKey) and allows every peer's pid (aclrtIpcMemSetImportPid; peerPids[r] for
 *      r = 0..count-1, count = A+F, peerPids[rank] ignored). camCommGetIpcRecord then gives the record to publish.
 *   2. camCommAttachIpc: for every peer's record checks the topology fingerprint, the window size and peer access
 *      (aclrtDeviceCanAccessPeer, peers on another device), imports its window (aclrtIpcMemImportByKey), checks its
 *      identity line, and writes the peer table into device memory (aclrtMemcpy). Failures name the rank.
 *   3. camCommDetachIpc, on every rank before any rank destroys: closes every imported window (aclrtIpcMemClose),
 *      since an owner must not free memory a peer still has imported. camCommDestroy detaches too. */
#define CAM_IPC_KEY_BYTES 128 /* ACL's export keys are 65 bytes (aclrtIpcMemGetExportKey's len) */
typedef struct {
    char key[CAM_IPC_KEY_BYTES]; /* NUL-terminated export key */
    int32_t pid;                 /* the owner's pid as aclrtDeviceGetBareTgid gives it */
    int32_t deviceId;            /* the owner's device (aclrtGetDevice) */
    uint64_t windowBytes;        /* bytes allocated for the window */
    int64_t fingerprint;         /* the topology the owner was created with */
} camIpcWindowRecord;
CAM_API aclnnStatus camIpcProcessId(int32_t* pid);
CAM_API aclnnStatus camCommCreateIpc(const CamTopology* topology, int64_t rank, const camCommConfig* config,
                                     const int32_t* peerPids, int64_t count, camComm** comm);
CAM_API aclnnStatus camCommGetIpcRecord(const camComm* comm, camIpcWindowRecord* record);
CAM_API aclnnStatus camCommAttachIpc(camComm* comm, const camIpcWindowRecord* records, int64_t count);
CAM_API aclnnStatus camCommDetachIpc(camComm* comm);

/* Raises the abort word of every rank: every device wait on every rank ends promptly with CAM_ERR_COMM_ABORTED,
 * and the communicators refuse further ops. Safe to call from any thread while ops are in flight. */
CAM_API aclnnStatus camCommAbort(camComm* comm);
/* Raises the abort word of every rank with "rank deadRank died" as the reason (unless an abort was already
 * raised): what a liveness watchdog calls when it finds a peer's process gone, so every survivor's error names the
 * dead rank. Safe from any thread while ops are in flight. */
CAM_API aclnnStatus camCommReportDeadRank(camComm* comm, int64_t deadRank);
/* Replica isolation (docs/protocol.md §9): Attention rank deadRank died, so its replica d is fenced in every FFN
 * rank's window. FFN ranks never select a round of d again (published or partial rounds are dropped), combine_send
 * of an item of d already handed out is a no-op, and the other replicas are served as before. The other
 * participants of d (which can no longer complete a round) get their abort word raised naming deadRank; nothing
 * else is aborted. A fenced replica never rejoins the plane. deadRank must be an Attention rank other than the
 * caller; an FFN rank's death aborts the plane (camCommReportDeadRank). Safe from any thread while ops run. */
CAM_API aclnnStatus camCommFenceDeadRank(camComm* comm, int64_t deadRank);
/* *deadRank = the Attention rank whose death fenced replica `replica`, or -1 if it is not fenced. */
CAM_API aclnnStatus camCommReplicaFence(camComm* comm, int64_t replica, int64_t* deadRank);
/* FFN ranks: *dropped = rounds of fenced replica `replica` that reached this FFN rank (any participant's ready
 * signal) and were never returned to it (no done signal: dropped before being handed out, or handed out and then
 * dropped by combine_send); 0 for a replica that is not fenced. Final once this rank has no op of the replica in
 * flight (e.g. between two iterations of its FFN loop). */
CAM_API aclnnStatus camCommDroppedRounds(const camComm* comm, int64_t replica, int64_t* dropped);
/* FFN ranks, expert placement (docs/protocol.md §15): the epoch of the slot weights this rank serves with, in its
 * window's weights-epoch line (0 at creation). A rebalance sets -1 before it copies new experts into the slots and
 * the new table's epoch once the copies completed. dispatch_recv holds back a round routed by a newer table (or
 * any round while the epoch is -1) and fails on an older one (CAM_ERR_COMM_PROTOCOL naming both epochs);
 * combine_send fails on a work item whose epoch it no longer is. epoch >= -1. *epoch of the getter: the line as
 * the device sees it. */
CAM_API aclnnStatus camCommSetWeightsEpoch(camComm* comm, int64_t epoch);
CAM_API aclnnStatus camCommGetWeightsEpoch(const camComm* comm, int64_t* epoch);
/* Frees the communicator. It refuses, with CAM_ERR_COMM_BUSY and nothing freed, while any op launched on it is still
 * queued or running (counted until its stream has passed it, whether the op succeeded or failed): synchronize the
 * streams first; if a synchronize timed out, camCommAbort ends the ops' device waits, then synchronize again. It
 * never waits. A null comm is a no-op. */
CAM_API aclnnStatus camCommDestroy(camComm* comm);

/* Checks a plane for Ascend before it is created (docs/ascend.md): the HCCL window (HCCL_BUFFSIZE, MiB; HCCL's
 * default is 200) holds the topology's window, and timeoutNs + idlePollNs + CAM_FOLLOWER_MARGIN_S (the longest
 * device wait of an op, cam/cam_timeouts.h) stays below the AI Core op timeout (seconds; CAM_AICORE_OP_TIMEOUT_S
 * by default). Fails with ACLNN_ERR_PARAM_INVALID and a sentence
 * naming the HCCL_BUFFSIZE needed or the timeout sum. Pure arithmetic: usable on any backend. */
CAM_API aclnnStatus camCheckAscendPlane(const CamTopology* topology, const camCommConfig* config,
                                        uint32_t hcclBufferMiB, uint32_t aicoreTimeoutS);

/* This rank's window (base address and the bytes really allocated). */
CAM_API aclnnStatus camCommGetWindow(const camComm* comm, void** base, uint64_t* bytes);
/* Bytes allocated for rank `rank`'s window (as mapped by this rank). */
CAM_API aclnnStatus camCommGetPeerWindowBytes(const camComm* comm, int64_t rank, uint64_t* bytes);
/* The status record (8 words: code, op, rank, peer, replica, layer, seq, detail) and the abort word. */
CAM_API aclnnStatus camCommGetStatus(const camComm* comm, int64_t status[8], int64_t* abortWord);
/* This plane instance's id (word 7 of this rank's identity line, docs/protocol.md §13): the same on every rank once
 * attached, 0 before. Read from the window through the transport (a device copy where the window is device memory). */
CAM_API aclnnStatus camCommGetPlaneId(const camComm* comm, int64_t* planeId);

#ifdef __cplusplus
}
#endif

#endif /* CAM_COMM_H */
