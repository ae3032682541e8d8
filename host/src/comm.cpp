// The communicator and its two twin transports (in-process registry, POSIX shared memory).
#include "comm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>

#include "backend.h"
#include "graph.h"
#include "status.h"
#include "dataplane_backend.h"
#include "window_table.h"

using namespace cam;

namespace cam::host {

namespace {

int64_t Load(const uint8_t* window, int64_t byteOff) {
    return __atomic_load_n(reinterpret_cast<const int64_t*>(window + byteOff), __ATOMIC_ACQUIRE);
}
void Store(uint8_t* window, int64_t byteOff, int64_t value) {
    __atomic_store_n(reinterpret_cast<int64_t*>(window + byteOff), value, __ATOMIC_RELEASE);
}

}  // namespace

// The abort word as a reason: raised by a rank (1 + rank), or a rank found dead by a survivor's liveness watchdog
// (-(1 + rank), see camCommReportDeadRank).
std::string AbortReason(int64_t abortWord) {
    if (abortWord < 0)
        return "the communicator was aborted because rank " + std::to_string(-abortWord - 1) +
               " died (its process is gone; found by the plane's liveness watchdog)";
    return "the communicator was aborted by rank " + std::to_string(abortWord - 1);
}

namespace {

const char* FieldName(int64_t field) {
    static const char* names[] = {"ok", "D", "P", "F", "E", "K", "H", "Bmax", "L", "slots", "act_dtype_bytes",
                                  "quantized", "capacity", "window_tokens", "window size"};
    return field >= 0 && field <= field::kWindow ? names[field] : "?";
}

// Random per creation, so two planes of one topology (or one plane re-created with the same names) differ.
int64_t Nonce(const void* salt) {
    std::random_device rd;
    uint64_t h = (uint64_t(rd()) << 32) ^ rd();
    h = layout::fnv1a_word(h, static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    h = layout::fnv1a_word(h, static_cast<uint64_t>(getpid()));
    h = layout::fnv1a_word(h, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(salt)));
    return static_cast<int64_t>(h & 0x7fffffffffffffffull) | 1;  // never 0: 0 means "not written"
}

const char* DtypeName(int64_t dtype) {
    return dtype == ACL_BF16 ? "bfloat16" : dtype == ACL_FLOAT16 ? "float16" : "?";
}

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
        return "rank " + std::to_string(rank) + " was created with activation dtype " + DtypeName(theirs) +
               ", ours is " + DtypeName(dtype) + " (the dtype changes the bytes on the wire)";
    const int64_t need = RequiredWindowBytes(topo, rank);
    if (static_cast<int64_t>(mappedBytes) < need)
        return "rank " + std::to_string(rank) + "'s window has " + std::to_string(mappedBytes) +
               " bytes, the topology needs " + std::to_string(need);
    return "";
}

// ---------------------------------------------------------------- in-process transport

struct Block {
    uint8_t* base = nullptr;
    uint64_t bytes = 0;
    explicit Block(uint64_t n) : bytes(n) {
        base = static_cast<uint8_t*>(std::aligned_alloc(kLine, layout::align_up(static_cast<int64_t>(n), kLine)));
        if (base) std::memset(base, 0, bytes);
    }
    ~Block() { std::free(base); }
};

struct Group {
    std::mutex mutex;
    std::condition_variable cv;
    int64_t world = 0;
    int64_t fingerprint = 0;
    std::vector<std::shared_ptr<Block>> windows;
    int64_t joined = 0;
    bool complete = false;
    std::string error;
};

std::mutex gRegistryMutex;
std::map<std::string, std::shared_ptr<Group>> gGroups;

void Unregister(const std::string& name, const std::shared_ptr<Group>& group) {
    std::lock_guard<std::mutex> lock(gRegistryMutex);
    auto it = gGroups.find(name);
    if (it != gGroups.end() && it->second == group) gGroups.erase(it);
}

class InProcessTransport : public Transport {
public:
    explicit InProcessTransport(std::shared_ptr<Group> group) : group_(std::move(group)) {}
    const char* Name() const override { return "in-process"; }
    uint8_t* Window(int64_t rank) const override { return group_->windows[rank]->base; }
    uint64_t WindowBytes(int64_t rank) const override { return group_->windows[rank]->bytes; }

private:
    std::shared_ptr<Group> group_;  // keeps every rank's window alive while this rank may still touch it
};

// ---------------------------------------------------------------- POSIX shm transport

class ShmTransport : public Transport {
public:
    ShmTransport(std::string name, int64_t rank, int64_t world) : name_(std::move(name)), rank_(rank),
                                                                   maps_(world) {}
    ~ShmTransport() override {
        for (auto& m : maps_)
            if (m.base) munmap(m.base, m.bytes);
        if (!unlinked_) shm_unlink(name_.c_str());
    }
    const char* Name() const override { return "posix-shm"; }
    uint8_t* Window(int64_t rank) const override { return maps_[rank].base; }
    uint64_t WindowBytes(int64_t rank) const override { return maps_[rank].bytes; }

    std::string Create(uint64_t bytes) {
        const int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0) return "shm_open(" + name_ + ") failed: " + std::strerror(errno);
        created_ = true;
        std::string err;
        if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
            err = "ftruncate(" + name_ + ", " + std::to_string(bytes) + ") failed: " + std::strerror(errno);
        } else {
            void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (p == MAP_FAILED) {
                err = "mmap(" + name_ + ") failed: " + std::strerror(errno);
            } else {
                maps_[rank_] = {static_cast<uint8_t*>(p), bytes};
            }
        }
        close(fd);
        return err;
    }

    std::string Map(int64_t rank, const std::string& name) {
        const int fd = shm_open(name.c_str(), O_RDWR, 0600);
        if (fd < 0) return "cannot open rank " + std::to_string(rank) + "'s segment " + name + ": " + std::strerror(errno);
        struct stat st {};
        std::string err;
        if (fstat(fd, &st) != 0) {
            err = "fstat(" + name + ") failed: " + std::strerror(errno);
        } else {
            const uint64_t bytes = static_cast<uint64_t>(st.st_size);
            void* p = bytes ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
            if (p == MAP_FAILED) {
                err = "mmap of rank " + std::to_string(rank) + "'s segment " + name + " failed";
            } else {
                maps_[rank] = {static_cast<uint8_t*>(p), bytes};
            }
        }
        close(fd);
        return err;
    }

    void Unlink() {
        if (!unlinked_ && created_) shm_unlink(name_.c_str());
        unlinked_ = true;
    }

private:
    struct Mapping {
        uint8_t* base = nullptr;
        uint64_t bytes = 0;
    };
    std::string name_;
    int64_t rank_;
    std::vector<Mapping> maps_;
    bool created_ = false;
    bool unlinked_ = false;
};

}  // namespace

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

// Once every window is mapped and its identity checked: the plane id is a hash of the topology, the dtype and
// every rank's creation nonce, so every rank computes the same value and no other plane instance has it. Work items
// carry it (protocol §4.2): one from another plane of the same topology is refused.
// The peer table itself comes from the window_table op over the transport's HCCL context (window_table.h).
aclnnStatus BuildPeerTable(const char* api, camComm* c) {
    const int64_t world = layout::world_size(c->topo);
    std::string why;
    if (aclnnStatus st = FillPeerTableFromTransport(c, &why))
        return Fail(st, std::string(api) + ": the peer table could not be built: " + why);
    uint64_t h = layout::fnv1a_word(14695981039346656037ull, static_cast<uint64_t>(layout::fingerprint(c->topo)));
    h = layout::fnv1a_word(h, static_cast<uint64_t>(c->config.actDtype));
    for (int64_t r = 0; r < world; ++r)
        h = layout::fnv1a_word(h, static_cast<uint64_t>(Load(c->transport->Window(r), kIdentityOff + 8 * kIdentityNonce)));
    c->planeId = static_cast<int64_t>(h & 0x7fffffffffffffffull);
    Store(c->Own(), kIdentityOff + 8 * kIdentityPlaneId, c->planeId);
    c->attached = true;
    return ACLNN_SUCCESS;
}

const char* OpName(int64_t op) {
    switch (op) {
        case op::kDispatchSend: return "dispatch_send";
        case op::kDispatchRecv: return "dispatch_recv";
        case op::kCombineSend: return "combine_send";
        case op::kCombineRecv: return "combine_recv";
        default: return "data-plane op";
    }
}

std::string Seconds(int64_t ns) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3g s", static_cast<double>(ns) / 1e9);
    return buf;
}

// The status record as a sentence, and the C status it maps to.
aclnnStatus Describe(const camComm* c, const int64_t st[kStatusWords], int64_t abortWord, std::string* msg) {
    const int64_t code = st[kStatusCode], peer = st[kStatusPeer], replica = st[kStatusReplica];
    const int64_t layer = st[kStatusLayer], seq = st[kStatusSeq], det = st[kStatusDetail];
    const CamTopology& t = c->topo;
    std::string m = std::string(OpName(st[kStatusOp])) + " on rank " + std::to_string(st[kStatusRank]);
    const std::string round = "round seq " + std::to_string(seq) + (replica >= 0 ? " of replica " + std::to_string(replica) : "") +
                              (layer >= 0 ? " (layer " + std::to_string(layer) + ")" : "");
    aclnnStatus status = CAM_ERR_COMM_PROTOCOL;
    switch (code) {
        case status::kTimeout:
            status = CAM_ERR_COMM_TIMEOUT;
            m += ": timed out after " + Seconds(c->config.timeoutNs) + " ";
            if (det == detail::kAwaitReplica) {
                m += "waiting for replica " + std::to_string(replica) + " to publish " + round +
                     ": participant rank " + std::to_string(peer) + " has not published it";
            } else if (det == detail::kAwaitReplicaMate) {
                m += "waiting for the FFN ranks to complete " + round + ": participant rank " +
                     std::to_string(peer) + " of this replica has not published it, so no FFN rank can serve it";
            } else if (det == detail::kAwaitCompletion) {
                m += "waiting for FFN rank " + std::to_string(peer) + " to complete " + round;
            } else {
                m += "waiting for the slot of " + round + " to be free: " +
                     (peer == st[kStatusRank] ? std::string("this rank's combine_recv of round seq ") +
                                                    std::to_string(seq - t.slots) + " has not run"
                                              : "FFN rank " + std::to_string(peer) + " has not completed round seq " +
                                                    std::to_string(seq - t.slots));
            }
            break;
        case status::kAborted:
            status = CAM_ERR_COMM_ABORTED;
            m += ": " + AbortReason(det);
            if (seq > 0) m += " while in " + round;
            break;
        case status::kCapacity:
            status = CAM_ERR_DEVICE_ARGUMENT;
            if (st[kStatusOp] == op::kDispatchSend) {  // the window bound; more rows than capacity are chunked
                m += ": " + std::to_string(det) + " distinct tokens for FFN rank " + std::to_string(peer) + " in " +
                     round + " exceed window_tokens = " + std::to_string(layout::window_token_slots(t));
            } else {
                m += ": " + std::to_string(det) + " rows " +
                     (peer >= 0 ? "for FFN rank " + std::to_string(peer) : "for this FFN rank") + " in " + round +
                     " exceed the region of " + std::to_string(layout::region_index_entries(t)) + " rows";
            }
            break;
        case status::kBadInput:
            status = CAM_ERR_DEVICE_ARGUMENT;
            if (det == detail::kArgTopkIds) {
                m += ": topk_ids holds an id outside [-1, E=" + std::to_string(t.E) + ")";
            } else if (det == detail::kArgLayer) {
                m += ": rank " + std::to_string(peer) + " published layer outside [0, L=" + std::to_string(t.L) + ")";
            } else if (det == detail::kArgTokens) {
                m += ": the token count (topk_ids rows) differs from the one dispatched in " + round;
            } else if (det == detail::kArgIdsDiffer) {
                m += ": topk_ids differ from the ids dispatched in " + round +
                     " (combine_recv must get the ids of the round it receives)";
            } else {
                m += ": work_item is not a work item dispatch_recv produced on this rank of this plane (a word was "
                     "changed, or it comes from another rank or plane)";
            }
            m += " (device pre-pass, nothing written)";
            break;
        case status::kTopologyMismatch:
            m += ": rank " + std::to_string(peer) + " published a record with topology fingerprint " +
                 std::to_string(det) + ", ours is " + std::to_string(layout::fingerprint(t));
            break;
        default: {
            static const char* why[] = {"?", "a signal is ahead of the round it should announce",
                                        "a record's seq differs from its ready signal",
                                        "participants published different layers for one round",
                                        "per-expert counts do not sum to the rows",
                                        "the work item was already combined or is out of order",
                                        "no dispatch_send round is in flight",
                                        "a dispatch record or index entry points outside its round"};
            m += std::string(": protocol violation: ") + (det >= 1 && det <= 7 ? why[det] : "?") +
                 (peer >= 0 ? " (peer rank " + std::to_string(peer) + ")" : "") + " in " + round;
            break;
        }
    }
    if (abortWord == 0) {
        m += "; refused before the round began, the communicator stays usable";
    } else if (code != status::kAborted) {
        m += "; the communicator is aborted (create a new one)";
    }
    *msg = m;
    return status;
}

}  // namespace

int64_t RequiredWindowBytes(const CamTopology& topo, int64_t rank) {
    return rank < layout::attention_ranks(topo) ? layout::attn_window_bytes(topo) : layout::ffn_window_bytes(topo);
}

aclnnStatus CheckComm(const char* op, camComm* comm, bool attentionOp) {
    if (!comm) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(op) + ": comm is null");
    if (!comm->attached)
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string(op) + ": comm has not mapped its peers' windows yet");
    if (comm->IsAttention() != attentionOp)
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string(op) + ": rank " + std::to_string(comm->rank) + " is " +
                                                 (comm->IsAttention() ? "an Attention" : "an FFN") + " rank; " + op +
                                                 " runs on " + (attentionOp ? "Attention" : "FFN") + " ranks");
    {
        std::lock_guard<std::mutex> lock(comm->failureMutex);
        if (!comm->failure.empty())
            return Fail(CAM_ERR_COMM_ABORTED, std::string(op) + ": the communicator failed earlier (" + comm->failure +
                                                  "); create a new one");
    }
    const int64_t abortWord = Load(comm->Own(), kAbortOff);
    if (abortWord != 0)
        return Fail(CAM_ERR_COMM_ABORTED, std::string(op) + " on rank " + std::to_string(comm->rank) +
                                              ": " + AbortReason(abortWord));
    const int64_t world = layout::world_size(comm->topo);
    for (int64_t r = 0; r < world; ++r) {
        const uint64_t have = comm->transport->WindowBytes(r);
        const int64_t need = RequiredWindowBytes(comm->topo, r);
        if (static_cast<int64_t>(have) < need)
            return Fail(ACLNN_ERR_PARAM_INVALID, std::string(op) + ": rank " + std::to_string(r) + "'s window has " +
                                                     std::to_string(have) + " bytes, the topology needs " +
                                                     std::to_string(need));
    }
    return ACLNN_SUCCESS;
}

kernels::dp::CommArgs MakeCommArgs(const camComm* comm) {
    const uint64_t hz = SystemCycleHz();
    auto cycles = [hz](int64_t ns) {
        return static_cast<int64_t>(static_cast<long double>(ns) * static_cast<long double>(hz) / 1e9L) + 1;
    };
    kernels::dp::CommArgs a{};
    a.topo = comm->topo;
    a.rank = comm->rank;
    a.timeoutCycles = cycles(comm->config.timeoutNs);
    a.idleCycles = cycles(comm->config.idlePollNs);
    // Block 0 decides within timeout + idle plus its own bookkeeping; 60 s covers a heavily loaded host.
    a.followerCycles = a.timeoutCycles + a.idleCycles + cycles(60'000'000'000LL);
    a.planeId = comm->planeId;
    return a;
}

void EnqueueStatusCheck(aclrtStream stream, camComm* comm) {
    auto check = [comm](std::string* message) -> aclnnStatus {
        uint8_t* own = comm->Own();
        int64_t st[kStatusWords];
        for (int64_t i = 0; i < kStatusWords; ++i) st[i] = Load(own, kStatusOff + 8 * i);
        if (st[kStatusCode] == status::kOk) return ACLNN_SUCCESS;
        const int64_t abortWord = Load(own, kAbortOff);
        const aclnnStatus status = Describe(comm, st, abortWord, message);
        if (abortWord == 0) {
            for (int64_t i = kStatusWords; i-- > 0;) Store(own, kStatusOff + 8 * i, 0);
        } else {
            std::lock_guard<std::mutex> lock(comm->failureMutex);
            if (comm->failure.empty()) comm->failure = *message;
        }
        return status;
    };
    // In a capture the status is read after the synchronize that follows a launch of the graph (graph.h).
    if (CaptureStatusCheck(stream, check, nullptr)) return;
    EnqueueStreamTask(stream, std::move(check));
}

OpInFlight::OpInFlight(camComm* comm) {
    comm->opsInFlight.fetch_add(1);
    token_ = std::shared_ptr<void>(comm, [](void* c) { static_cast<camComm*>(c)->opsInFlight.fetch_sub(1); });
}

void OpInFlight::EndInStreamOrder(aclrtStream stream) {
    // A captured op is in flight as long as its graph lives: camCommDestroy refuses until the graph is destroyed.
    if (CaptureStatusCheck(stream, nullptr, token_)) {
        token_.reset();
        return;
    }
    EnqueueStreamTask(stream, [token = std::move(token_)](std::string*) { return ACLNN_SUCCESS; });
}

}  // namespace cam::host

using namespace cam::host;

extern "C" aclnnStatus camCommCreateInProcess(const char* group, const CamTopology* topology, int64_t rank,
                                              const camCommConfig* config, int32_t joinTimeoutMs, camComm** comm) {
    return Guarded("camCommCreateInProcess", [&]() -> aclnnStatus {
        const char* api = "camCommCreateInProcess";
        if (!group) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": group is null");
        if (aclnnStatus st = CheckCreateArgs(api, topology, rank, config, comm)) return st;
        const CamTopology topo = *topology;
        const int64_t world = cam::layout::world_size(topo);
        const int64_t fp = cam::layout::fingerprint(topo);
        const std::string name(group);
        std::shared_ptr<Group> g;
        {
            std::lock_guard<std::mutex> lock(gRegistryMutex);
            auto& slot = gGroups[name];
            if (!slot) {
                slot = std::make_shared<Group>();
                slot->world = world;
                slot->fingerprint = fp;
                slot->windows.resize(world);
            }
            g = slot;
        }
        std::unique_lock<std::mutex> lock(g->mutex);
        auto fail = [&](const std::string& why) {
            if (g->error.empty()) g->error = why;
            g->cv.notify_all();
            lock.unlock();
            Unregister(name, g);
            return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": group '" + name + "': " + why);
        };
        if (!g->error.empty()) return fail(g->error);
        if (g->fingerprint != fp || g->world != world)
            return fail("rank " + std::to_string(rank) + " joined with a different topology (fingerprint " +
                        std::to_string(fp) + ", the group's is " + std::to_string(g->fingerprint) + ")");
        if (g->windows[rank]) return fail("rank " + std::to_string(rank) + " joined twice");
        const uint64_t bytes = static_cast<uint64_t>(RequiredWindowBytes(topo, rank));
        auto block = std::make_shared<Block>(bytes);
        if (!block->base) return fail("cannot allocate a window of " + std::to_string(bytes) + " bytes");
        WriteIdentity(block->base, topo, rank, bytes, config->actDtype);
        g->windows[rank] = block;
        if (++g->joined == world) {
            g->complete = true;
            g->cv.notify_all();
            lock.unlock();
            Unregister(name, g);
            lock.lock();
        } else {
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(joinTimeoutMs);
            g->cv.wait_until(lock, deadline, [&] { return g->complete || !g->error.empty(); });
            if (!g->complete) {
                if (!g->error.empty()) return fail(g->error);
                std::string missing;
                for (int64_t r = 0; r < world; ++r)
                    if (!g->windows[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
                return fail("timed out after " + std::to_string(joinTimeoutMs) + " ms; ranks not joined: " + missing);
            }
        }
        lock.unlock();
        auto c = std::make_unique<camComm>();
        c->topo = topo;
        c->rank = rank;
        c->config = *config;
        c->transport = std::make_unique<InProcessTransport>(g);
        for (int64_t r = 0; r < world; ++r) {
            const std::string why =
                CheckIdentity(c->transport->Window(r), c->transport->WindowBytes(r), topo, r, config->actDtype);
            if (!why.empty()) return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": " + why);
        }
        if (aclnnStatus st = BuildPeerTable(api, c.get())) return st;
        *comm = c.release();
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus camCommCreateShm(const char* segmentName, const CamTopology* topology, int64_t rank,
                                        const camCommConfig* config, camComm** comm) {
    return Guarded("camCommCreateShm", [&]() -> aclnnStatus {
        const char* api = "camCommCreateShm";
        if (!segmentName) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": segmentName is null");
        if (aclnnStatus st = CheckCreateArgs(api, topology, rank, config, comm)) return st;
        const CamTopology topo = *topology;
        auto transport = std::make_unique<ShmTransport>(segmentName, rank, cam::layout::world_size(topo));
        const uint64_t bytes = static_cast<uint64_t>(RequiredWindowBytes(topo, rank));
        const std::string err = transport->Create(bytes);
        if (!err.empty()) return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(api) + ": " + err);
        WriteIdentity(transport->Window(rank), topo, rank, bytes, config->actDtype);
        auto c = std::make_unique<camComm>();
        c->topo = topo;
        c->rank = rank;
        c->config = *config;
        c->transport = std::move(transport);
        *comm = c.release();
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus camCommAttachShm(camComm* comm, const char* const* segmentNames, int64_t count) {
    return Guarded("camCommAttachShm", [&]() -> aclnnStatus {
        const char* api = "camCommAttachShm";
        if (!comm || !segmentNames) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": null argument");
        auto* shm = dynamic_cast<ShmTransport*>(comm->transport.get());
        if (!shm) return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": not a shared-memory communicator");
        const int64_t world = cam::layout::world_size(comm->topo);
        if (count != world)
            return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": " + std::to_string(count) +
                                                     " segment names for a world of " + std::to_string(world));
        if (comm->attached) return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": already attached");
        for (int64_t r = 0; r < world; ++r) {
            if (r == comm->rank) continue;
            if (!segmentNames[r]) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": segment name is null");
            std::string why = shm->Map(r, segmentNames[r]);
            if (why.empty())
                why = CheckIdentity(shm->Window(r), shm->WindowBytes(r), comm->topo, r, comm->config.actDtype);
            if (!why.empty()) return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": " + why);
        }
        return BuildPeerTable(api, comm);
    });
}

extern "C" aclnnStatus camCommUnlinkShm(camComm* comm) {
    if (!comm) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommUnlinkShm: comm is null");
    auto* shm = dynamic_cast<ShmTransport*>(comm->transport.get());
    if (!shm) return Fail(ACLNN_ERR_PARAM_INVALID, "camCommUnlinkShm: not a shared-memory communicator");
    shm->Unlink();
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camCommAbort(camComm* comm) {
    if (!comm) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommAbort: comm is null");
    const int64_t world = cam::layout::world_size(comm->topo);
    for (int64_t r = 0; r < world; ++r) {
        uint8_t* w = comm->transport->Window(r);
        if (!w) continue;  // not mapped yet (shm before attach): nothing of ours runs there
        int64_t expected = 0;
        __atomic_compare_exchange_n(reinterpret_cast<int64_t*>(w + cam::kAbortOff), &expected, 1 + comm->rank, false,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus camCommReportDeadRank(camComm* comm, int64_t deadRank) {
    if (!comm) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommReportDeadRank: comm is null");
    const int64_t world = cam::layout::world_size(comm->topo);
    if (deadRank < 0 || deadRank >= world || deadRank == comm->rank)
        return Fail(ACLNN_ERR_PARAM_INVALID, "camCommReportDeadRank: deadRank " + std::to_string(deadRank) +
                                                 " is not a peer of rank " + std::to_string(comm->rank));
    for (int64_t r = 0; r < world; ++r) {
        uint8_t* w = comm->transport->Window(r);
        if (!w) continue;
        int64_t expected = 0;  // the first reason stays: every survivor reports the same death
        __atomic_compare_exchange_n(reinterpret_cast<int64_t*>(w + cam::kAbortOff), &expected, -(1 + deadRank), false,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
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
    for (int64_t r = A; r < world; ++r) {
        uint8_t* w = comm->transport->Window(r);
        if (!w) continue;
        int64_t expected = 0;  // the first reason stays: every survivor names the same death
        __atomic_compare_exchange_n(reinterpret_cast<int64_t*>(w + cam::layout::ffn_fence_off(t) + 8 * d), &expected,
                                    1 + deadRank, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    for (int64_t p = 0; p < t.P; ++p) {
        const int64_t r = cam::layout::attn_rank_of(t, d, p);
        uint8_t* w = r == deadRank ? nullptr : comm->transport->Window(r);
        if (!w) continue;
        int64_t expected = 0;
        __atomic_compare_exchange_n(reinterpret_cast<int64_t*>(w + cam::kAbortOff), &expected, -(1 + deadRank), false,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
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
    uint8_t* w = comm->transport->Window(comm->rank >= A ? comm->rank : A);
    const int64_t v = w ? Load(w, cam::layout::ffn_fence_off(t) + 8 * replica) : 0;
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
    *base = comm->Own();
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
    for (int64_t i = 0; i < cam::kStatusWords; ++i) status[i] = Load(comm->Own(), cam::kStatusOff + 8 * i);
    *abortWord = Load(comm->Own(), cam::kAbortOff);
    return ACLNN_SUCCESS;
}
