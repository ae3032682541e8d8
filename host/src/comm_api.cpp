// The communicator's C API (cam/cam_comm.h): creation over a transport with the identity line every peer checks,
// attach, abort and the dead-rank fences, destroy and the getters.
#include <unistd.h>

#include <chrono>
#include <random>

#include "comm.h"
#include "comm_transport.h"
#include "status.h"
#include "window_table.h"

using namespace cam;

namespace cam::host {

namespace {

// Random per creation, so two planes of one topology (or one plane re-created with the same names) differ.
int64_t Nonce(const void* salt) {
    std::random_device rd;
    uint64_t h = (uint64_t(rd()) << 32) ^ rd();
    h = layout::fnv1a_word(h, static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    h = layout::fnv1a_word(h, static_cast<uint64_t>(getpid()));
    h = layout::fnv1a_word(h, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(salt)));
    return static_cast<int64_t>(h & 0x7fffffffffffffffull) | 1;  // never 0: 0 means "not written"
}

}  // namespace

void WriteIdentity(uint8_t* window, const CamTopology& topo, int64_t rank, uint64_t bytes, int64_t dtype) {
    const int64_t base = kIdentityOff;
    Store(window, base + 8 * kIdentityDtype, dtype);
    Store(window, base + 8 * kIdentityNonce, Nonce(window));
    Store(window, base + 8 * kIdentityFingerprint, layout::fingerprint(topo));
    Store(window, base + 8 * kIdentityVersion, kLayoutVersion);
    Store(window, base + 8 * kIdentityRank, rank);
    Store(window, base + 8 * kIdentityRole, rank < layout::attention_ranks(topo) ? kRoleAttention : kRoleFfn);
    Store(window, base + 8 * kIdentityWindowBytes, static_cast<int64_t>(bytes));
}

// Checks the identity line a peer wrote at creation: same topology, the rank and role expected, a window as large
// as the role needs. Returns "" or the reason.
std::string CheckIdentity(const uint8_t* window, uint64_t mappedBytes, const CamTopology& topo, int64_t rank,
                          int64_t dtype) {
    const int64_t base = kIdentityOff;
    const int64_t fp = Load(window, base + 8 * kIdentityFingerprint);
    if (fp != layout::fingerprint(topo) || Load(window, base + 8 * kIdentityVersion) != kLayoutVersion) {
        return "rank " + std::to_string(rank) + " was created with a different topology (fingerprint " +
               std::to_string(fp) + ", ours " + std::to_string(layout::fingerprint(topo)) + ")";
    }
    if (Load(window, base + 8 * kIdentityRank) != rank)
        return "the window registered for rank " + std::to_string(rank) + " belongs to rank " +
               std::to_string(Load(window, base + 8 * kIdentityRank));
    const int64_t theirs = Load(window, base + 8 * kIdentityDtype);
    if (theirs != dtype)
        return "rank " + std::to_string(rank) + " was created with activation dtype " + DtypeName(static_cast<aclDataType>(theirs)) +
               ", ours is " + DtypeName(static_cast<aclDataType>(dtype)) + " (the dtype changes the bytes on the wire)";
    const int64_t need = RequiredWindowBytes(topo, rank);
    if (static_cast<int64_t>(mappedBytes) < need)
        return "rank " + std::to_string(rank) + "'s window has " + std::to_string(mappedBytes) +
               " bytes, the topology needs " + std::to_string(need);
    return "";
}

int64_t PlaneId(const CamTopology& topo, int64_t actDtype, const std::vector<int64_t>& nonces) {
    uint64_t h = layout::fnv1a_word(14695981039346656037ull, static_cast<uint64_t>(layout::fingerprint(topo)));
    h = layout::fnv1a_word(h, static_cast<uint64_t>(actDtype));
    for (int64_t n : nonces) h = layout::fnv1a_word(h, static_cast<uint64_t>(n));
    return static_cast<int64_t>(h & 0x7fffffffffffffffull);
}

std::unique_ptr<camComm> NewComm(const CamTopology& topo, int64_t rank, const camCommConfig& config,
                                 std::unique_ptr<Transport> transport) {
    auto c = std::make_unique<camComm>();
    c->topo = topo;
    c->rank = rank;
    c->config = config;
    c->transport = std::move(transport);
    return c;
}

std::string ReadAndCheckIdentity(const camComm* c, int64_t rank, int64_t* nonce) {
    alignas(8) uint8_t line[kIdentityLineEnd] = {};
    std::string why;
    if (!c->transport->ReadWords(rank, kIdentityOff, reinterpret_cast<int64_t*>(line + kIdentityOff), kIdentityWords,
                                 &why))
        return "rank " + std::to_string(rank) + "'s identity line could not be read: " + why;
    why = CheckIdentity(line, c->transport->WindowBytes(rank), c->topo, rank, c->config.actDtype);
    if (why.empty()) *nonce = Load(line, kIdentityOff + 8 * kIdentityNonce);
    return why;
}

std::string FinishAttach(camComm* c, const std::vector<int64_t>& nonces) {
    c->planeId = PlaneId(c->topo, c->config.actDtype, nonces);
    std::string why;
    if (!c->transport->WriteWords(c->rank, kIdentityOff + 8 * kIdentityPlaneId, &c->planeId, 1, &why))
        return "the plane id could not be written: " + why;
    c->attached = true;
    return "";
}

aclnnStatus CheckCreateArgs(const char* api, const CamTopology* topology, int64_t rank, const camCommConfig* config,
                            camComm** comm) {
    if (!topology || !config || !comm) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": null argument");
    const int64_t field = layout::check_topology(*topology);
    if (field != field::kOk)
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": invalid topology field " + FieldName(field));
    if (rank < 0 || rank >= layout::world_size(*topology))
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": rank " + std::to_string(rank) + " outside [0, " +
                                                 std::to_string(layout::world_size(*topology)) + ")");
    if (config->timeoutNs <= 0 || config->idlePollNs <= 0)
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": timeoutNs and idlePollNs must be positive");
    if (config->actDtype != ACL_BF16 && config->actDtype != ACL_FLOAT16)
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": config->actDtype must be ACL_BF16 or ACL_FLOAT16, got " +
                                                 std::to_string(config->actDtype));
    return ACLNN_SUCCESS;
}

namespace {

// Every window is mapped: each identity line is checked (the in-process group's before any rank could proceed;
// checking again costs a line per rank), the peer table comes from the window_table op
// over the transport's HCCL context (window_table.h), and the plane id from every rank's nonce. Work items carry it
// (protocol §4.2): one from another plane of the same topology is refused.
aclnnStatus AttachMapped(const char* api, camComm* c) {
    const int64_t world = layout::world_size(c->topo);
    std::vector<int64_t> nonces(world);
    for (int64_t r = 0; r < world; ++r) {
        const std::string why = ReadAndCheckIdentity(c, r, &nonces[r]);
        if (!why.empty()) return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": " + why);
    }
    std::string why;
    if (aclnnStatus st = FillPeerTableFromTransport(c, &why))
        return Fail(st, std::string(api) + ": the peer table could not be built: " + why);
    why = FinishAttach(c, nonces);
    if (!why.empty()) return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(api) + ": " + why);
    return ACLNN_SUCCESS;
}

}  // namespace

}  // namespace cam::host

using namespace cam::host;

extern "C" aclnnStatus camCommCreateInProcess(const char* group, const CamTopology* topology, int64_t rank,
                                              const camCommConfig* config, int32_t joinTimeoutMs, camComm** comm) {
    return Guarded("camCommCreateInProcess", [&]() -> aclnnStatus {
        const char* api = "camCommCreateInProcess";
        if (!group) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": group is null");
        if (aclnnStatus st = CheckCreateArgs(api, topology, rank, config, comm)) return st;
        if (const std::string why = WindowTablePlaneTooLarge(api, *topology); !why.empty())
            return Fail(ACLNN_ERR_PARAM_INVALID, why);
        const CamTopology topo = *topology;
        const std::string name(group);
        const uint64_t bytes = static_cast<uint64_t>(RequiredWindowBytes(topo, rank));
        std::string why;
        auto transport = JoinInProcessGroup(
            name, topo, rank, bytes, [&](uint8_t* window) { WriteIdentity(window, topo, rank, bytes, config->actDtype); },
            joinTimeoutMs, &why);
        if (!transport) return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": group '" + name + "': " + why);
        auto c = NewComm(topo, rank, *config, std::move(transport));
        if (aclnnStatus st = AttachMapped(api, c.get())) return st;
        *comm = c.release();
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus camCommAbort(camComm* comm) {
    if (!comm) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommAbort: comm is null");
    const int64_t world = cam::layout::world_size(comm->topo);
    std::string why;  // a window not mapped yet (before attach) is skipped: nothing of ours runs there
    for (int64_t r = 0; r < world; ++r) comm->transport->SetIfZero(r, cam::kAbortOff, 1 + comm->rank, &why);
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camCommReportDeadRank(camComm* comm, int64_t deadRank) {
    if (!comm) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommReportDeadRank: comm is null");
    const int64_t world = cam::layout::world_size(comm->topo);
    if (deadRank < 0 || deadRank >= world || deadRank == comm->rank)
        return Fail(ACLNN_ERR_PARAM_INVALID, "camCommReportDeadRank: deadRank " + std::to_string(deadRank) +
                                                 " is not a peer of rank " + std::to_string(comm->rank));
    // The first reason stays: every survivor reports the same death.
    std::string why;
    for (int64_t r = 0; r < world; ++r) comm->transport->SetIfZero(r, cam::kAbortOff, -(1 + deadRank), &why);
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camCommFenceDeadRank(camComm* comm, int64_t deadRank) {
    if (!comm) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommFenceDeadRank: comm is null");
    const CamTopology& t = comm->topo;
    const int64_t A = cam::layout::attention_ranks(t), world = cam::layout::world_size(t);
    if (deadRank < 0 || deadRank >= A || deadRank == comm->rank)
        return Fail(ACLNN_ERR_PARAM_INVALID, "camCommFenceDeadRank: deadRank " + std::to_string(deadRank) +
                                                 " is not an Attention peer of rank " + std::to_string(comm->rank) +
                                                 " (an FFN rank's death aborts the plane: camCommReportDeadRank)");
    const int64_t d = cam::layout::replica_of(t, deadRank);
    // Fence first, then end the mates' waits: a mate's abort can never be seen by an FFN rank before the fence.
    // The first reason stays: every survivor names the same death.
    std::string why;
    for (int64_t r = A; r < world; ++r)
        comm->transport->SetIfZero(r, cam::layout::ffn_fence_off(t) + 8 * d, 1 + deadRank, &why);
    for (int64_t p = 0; p < t.P; ++p) {
        const int64_t r = cam::layout::attn_rank_of(t, d, p);
        if (r != deadRank) comm->transport->SetIfZero(r, cam::kAbortOff, -(1 + deadRank), &why);
    }
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camCommReplicaFence(camComm* comm, int64_t replica, int64_t* deadRank) {
    if (!comm) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommReplicaFence: comm is null");
    if (!deadRank) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommReplicaFence: deadRank is null");
    const CamTopology& t = comm->topo;
    if (replica < 0 || replica >= t.D)
        return Fail(ACLNN_ERR_PARAM_INVALID, "camCommReplicaFence: replica " + std::to_string(replica) +
                                                 " is not in [0, D = " + std::to_string(t.D) + ")");
    const int64_t A = cam::layout::attention_ranks(t);
    // An FFN rank reads its own fence; an Attention rank the first FFN rank's (every fencer writes all of them).
    int64_t v = 0;
    std::string why;
    if (!comm->transport->ReadWords(comm->rank >= A ? comm->rank : A, cam::layout::ffn_fence_off(t) + 8 * replica, &v,
                                    1, &why))
        v = 0;  // not mapped yet: no fence can have been set through it
    *deadRank = v == 0 ? -1 : v - 1;
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camCommDestroy(camComm* comm) {
    if (comm) {
        const int64_t busy = comm->opsInFlight.load();
        if (busy > 0)
            return Fail(CAM_ERR_COMM_BUSY, "camCommDestroy: " + std::to_string(busy) +
                                               " op(s) still queued or running on this communicator; synchronize "
                                               "their streams first (camCommAbort ends their waits). Nothing was "
                                               "freed; the communicator is still valid");
    }
    delete comm;
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camCommGetWindow(const camComm* comm, void** base, uint64_t* bytes) {
    if (!comm || !base || !bytes) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommGetWindow: null argument");
    *base = comm->OwnDevice();
    *bytes = comm->transport->WindowBytes(comm->rank);
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camCommGetPeerWindowBytes(const camComm* comm, int64_t rank, uint64_t* bytes) {
    if (!comm || !bytes) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommGetPeerWindowBytes: null argument");
    if (rank < 0 || rank >= cam::layout::world_size(comm->topo))
        return Fail(ACLNN_ERR_PARAM_INVALID, "camCommGetPeerWindowBytes: rank out of range");
    *bytes = comm->transport->WindowBytes(rank);
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camCommGetStatus(const camComm* comm, int64_t status[8], int64_t* abortWord) {
    if (!comm || !status || !abortWord) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommGetStatus: null argument");
    std::string why;
    if (!comm->transport->ReadWords(comm->rank, cam::kStatusOff, status, cam::kStatusWords, &why) ||
        !comm->transport->ReadWords(comm->rank, cam::kAbortOff, abortWord, 1, &why))
        return Fail(ACLNN_ERR_RUNTIME_ERROR, "camCommGetStatus: " + why);
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camCommGetPlaneId(const camComm* comm, int64_t* planeId) {
    if (!comm || !planeId) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommGetPlaneId: null argument");
    std::string why;
    if (!comm->transport->ReadWords(comm->rank, cam::kIdentityOff + 8 * cam::kIdentityPlaneId, planeId, 1, &why))
        return Fail(ACLNN_ERR_RUNTIME_ERROR, "camCommGetPlaneId: " + why);
    return ACLNN_SUCCESS;
}
