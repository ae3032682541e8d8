// camComm: windows, peer table and the constants of one rank of a data plane, over a Transport. Shared by the
// four data-plane ops (validation, kernel arguments, reading the status record after a launch).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cam/cam_comm.h"
#include "common/dataplane_args.h"
#include "common/window_layout.h"
#include "tensor.h"

namespace cam::host {

// Where windows live. In-process and POSIX shm on the twin map every window into the host; the NPU transport (ACL
// IPC) and the HCCL transport hold device addresses the host cannot load or store.
class Transport {
public:
    virtual ~Transport() = default;
    virtual const char* Name() const = 0;
    // The host mapping of rank's window: nullptr until mapped, and always where the host cannot address the window.
    virtual uint8_t* Window(int64_t rank) const = 0;
    // The window's device address (what the kernels' peer table holds); the host mapping where they are the same.
    virtual void* DeviceWindow(int64_t rank) const { return Window(rank); }
    virtual uint64_t WindowBytes(int64_t rank) const = 0;  // bytes really allocated/mapped

    // The host's access to words of rank's window: the control words (abort, fences, status record, identity line)
    // and the signal words a host-side count reads. Here through the host mapping, with the kernels' ordering
    // (acquire loads, release stores); a transport without one copies through its device runtime. false with *why
    // when the window cannot be reached (not mapped yet, or no host path on this transport); nothing is touched then.
    virtual bool ReadWords(int64_t rank, int64_t byteOff, int64_t* out, int64_t n, std::string* why) const;
    virtual bool WriteWords(int64_t rank, int64_t byteOff, const int64_t* in, int64_t n, std::string* why);
    // Writes `value` over a 0 and leaves any other value: the first abort or fence reason stays. Atomic through a
    // host mapping; through copies a writer racing the first may replace its reason (the word is non-zero either way).
    virtual bool SetIfZero(int64_t rank, int64_t byteOff, int64_t value, std::string* why);
};

// Role size of a rank's window (protocol §3).
int64_t RequiredWindowBytes(const CamTopology& topo, int64_t rank);

// A word of a window the host maps (the twin's transports), with the ordering the kernels' signals use. Device
// state the ops read after a launch goes through the backend seam instead (EnqueueStatusCheck).
inline int64_t Load(const uint8_t* window, int64_t byteOff) {
    return __atomic_load_n(reinterpret_cast<const int64_t*>(window + byteOff), __ATOMIC_ACQUIRE);
}
inline void Store(uint8_t* window, int64_t byteOff, int64_t value) {
    __atomic_store_n(reinterpret_cast<int64_t*>(window + byteOff), value, __ATOMIC_RELEASE);
}

}  // namespace cam::host

struct camComm {
    CamTopology topo{};
    int64_t rank = 0;
    camCommConfig config{};
    std::unique_ptr<cam::host::Transport> transport;
    std::vector<int64_t> peerTable;  // window base of every rank (host copy, camCommGetPeerTable)
    std::shared_ptr<int64_t> devicePeers;  // the same table in device memory: the kernels' `peers` argument
    bool attached = false;
    int64_t planeId = 0;  // set when attached (FinishAttach): stamped into this plane's work items
    std::mutex failureMutex;
    std::string failure;  // first fatal error reported on this rank
    std::atomic<int64_t> opsInFlight{0};  // launched and not yet past the stream (camCommDestroy refuses meanwhile)

    void* OwnDevice() const { return transport->DeviceWindow(rank); }
    uint8_t* DevicePeers() const { return reinterpret_cast<uint8_t*>(devicePeers.get()); }
    bool IsAttention() const { return rank < cam::layout::attention_ranks(topo); }
};

namespace cam::host {

// A communicator of `rank` over `transport`, not attached yet (every camCommCreate* ends here).
std::unique_ptr<camComm> NewComm(const CamTopology& topo, int64_t rank, const camCommConfig& config,
                                 std::unique_ptr<Transport> transport);

// Bytes of a window a host-side identity check reads: the line sits kIdentityOff bytes in.
inline constexpr int64_t kIdentityLineEnd = kIdentityOff + 8 * kIdentityWords;

// Reads rank's identity line through c's transport and checks it (CheckIdentity); *nonce gets its creation nonce.
// "" or the reason.
std::string ReadAndCheckIdentity(const camComm* c, int64_t rank, int64_t* nonce);

// Once every window is mapped and its identity checked, with the device peer table in place: the plane id from
// every rank's nonce, written into this rank's identity line, and the comm attached. "" or the reason.
std::string FinishAttach(camComm* c, const std::vector<int64_t>& nonces);

// The arguments every camCommCreate* takes (null pointers, topology, rank, timeouts, dtype); "api" names the call.
aclnnStatus CheckCreateArgs(const char* api, const CamTopology* topology, int64_t rank, const camCommConfig* config,
                            camComm** comm);
// The identity line (protocol §3) every rank writes into its window at creation and every peer checks (comm_api.cpp).
// WriteIdentity writes through `window` (host-addressable memory: the window, or a staging copy of its first
// kIdentityOff + 8 * kIdentityWords bytes); CheckIdentity returns "" or the reason naming `rank`.
void WriteIdentity(uint8_t* window, const CamTopology& topo, int64_t rank, uint64_t bytes, int64_t dtype);
std::string CheckIdentity(const uint8_t* window, uint64_t mappedBytes, const CamTopology& topo, int64_t rank,
                          int64_t dtype);
// The plane id: a hash of the topology, the dtype and every rank's creation nonce (rank order), so every rank
// computes the same value and no other plane instance has it.
int64_t PlaneId(const CamTopology& topo, int64_t actDtype, const std::vector<int64_t>& nonces);

// ---- status sentences (comm_status.cpp)

// The abort word as a reason: raised by a rank (1 + rank), or a rank found dead by a survivor's liveness watchdog
// (-(1 + rank), see camCommReportDeadRank).
std::string AbortReason(int64_t abortWord);

// ": twin rule <rule> in <kernel> on rank <r> block <b>/<n> at <file>:<line>" when a copy of the window's control
// area (its first kControlBytes) carries the twin's reason for the abort word (window_layout.h kAbortReasonOff),
// else "".
std::string TwinRuleSuffix(const uint8_t* control);

// Name of a topology field as layout::check_topology reports it (field::k*).
const char* FieldName(int64_t field);

// "rank <a> was created with H=65, Bmax=3; rank <b> with H=64, Bmax=2": every field where two ranks' topologies
// differ, with both values, naming neither as the wrong one ("" when they are equal).
std::string TopologyDifference(const CamTopology& a, int64_t rankA, const CamTopology& b, int64_t rankB);

// The communicator status record `st` (with the abort word) as a sentence naming op, rank, peer/replica and
// layer, and the C status it maps to.
// `args`: the status arguments line (kStatusArgsOff, kStatusArgsWords words) written with the record.
aclnnStatus Describe(const camComm* c, const int64_t st[kStatusWords], const int64_t args[kStatusArgsWords],
                     int64_t abortWord, std::string* msg);

// ---- op plumbing (comm_ops.cpp)

// Validates that `comm` can run an op of `role` now: attached, role matches, windows big enough, not aborted or
// failed. Fails with a message naming `op`.
aclnnStatus CheckComm(const char* op, camComm* comm, bool attentionOp);

// An activation tensor of a data-plane op must be in the communicator's actDtype: the window rows, the identity
// every peer checked at creation and the kernels' byte counts are all for that dtype, so another one would put
// other bytes on the wire. Fails naming `arg`; call after the tensor's own checks, before anything is launched.
aclnnStatus CheckActDtype(const ArgChecker& check, const TensorView& v, const char* arg, const camComm* comm);

// The constants every data-plane kernel gets (timeouts converted to the platform's cycle counter).
kernels::dp::CommArgs MakeCommArgs(const camComm* comm);

// Queued after each data-plane launch, in stream order: reads the status record the kernel may have written and
// turns it into a stream error naming op, rank, peer/replica and layer. Refusals are cleared so the comm stays
// usable; fatal errors are kept and make the comm refuse further ops.
void EnqueueStatusCheck(aclrtStream stream, camComm* comm);

// The launch of every data-plane op: `kernel` queues its kernel, then the status check follows in stream order, and
// the op counts as in flight on `comm` from before the kernel until the stream has passed the check.
aclnnStatus LaunchOnComm(camComm* comm, aclrtStream stream, const std::function<void()>& kernel);

// Counts an op in comm->opsInFlight from now until the stream has passed everything queued for it so far (the
// count drops when the stream releases the task queued here, whether it ran it or skipped it after an error).
// Call before launching the op's kernel; queue the end after its status check.
class OpInFlight {
public:
    explicit OpInFlight(camComm* comm);
    void EndInStreamOrder(aclrtStream stream);

private:
    std::shared_ptr<void> token_;
};

}  // namespace cam::host
