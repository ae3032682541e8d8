// What the four data-plane ops share around their kernels: the communicator checks, the kernels' constants, the
// status check queued after a launch, and the in-flight count that keeps camCommDestroy from freeing a busy plane.
#include <cstring>

#include "backend.h"
#include "cam/cam_timeouts.h"
#include "comm.h"
#include "graph.h"
#include "status.h"

namespace cam::host {

int64_t RequiredWindowBytes(const CamTopology& topo, int64_t rank) {
    return rank < layout::attention_ranks(topo) ? layout::attn_window_bytes(topo) : layout::ffn_window_bytes(topo);
}

namespace {

// The host mapping of words [byteOff, byteOff + 8n) of rank's window, or nullptr with *why.
uint8_t* MappedWords(const Transport& t, int64_t rank, int64_t byteOff, int64_t n, std::string* why) {
    uint8_t* w = t.Window(rank);
    if (!w) {
        *why = "rank " + std::to_string(rank) + "'s window is not mapped into this process (" + t.Name() + ")";
        return nullptr;
    }
    if (byteOff < 0 || n < 0 || byteOff % 8 != 0 || static_cast<uint64_t>(byteOff + 8 * n) > t.WindowBytes(rank)) {
        *why = "words [" + std::to_string(byteOff) + ", +" + std::to_string(8 * n) + ") lie outside rank " +
               std::to_string(rank) + "'s window of " + std::to_string(t.WindowBytes(rank)) + " bytes";
        return nullptr;
    }
    return w;
}

}  // namespace

bool Transport::ReadWords(int64_t rank, int64_t byteOff, int64_t* out, int64_t n, std::string* why) const {
    const uint8_t* w = MappedWords(*this, rank, byteOff, n, why);
    if (!w) return false;
    for (int64_t i = 0; i < n; ++i) out[i] = Load(w, byteOff + 8 * i);
    return true;
}

bool Transport::WriteWords(int64_t rank, int64_t byteOff, const int64_t* in, int64_t n, std::string* why) {
    uint8_t* w = MappedWords(*this, rank, byteOff, n, why);
    if (!w) return false;
    for (int64_t i = 0; i < n; ++i) Store(w, byteOff + 8 * i, in[i]);
    return true;
}

bool Transport::SetIfZero(int64_t rank, int64_t byteOff, int64_t value, std::string* why) {
    uint8_t* w = MappedWords(*this, rank, byteOff, 1, why);
    if (!w) return false;
    int64_t expected = 0;
    __atomic_compare_exchange_n(reinterpret_cast<int64_t*>(w + byteOff), &expected, value, false, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
    return true;
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
    // The abort word and the twin's reason for it in one read of the control area (window_layout.h).
    // A snapshot on the host thread, not ordered with the ops already queued on the stream, on purpose: a launch is
    // refused at once when the plane is known to be aborted, and the word only ever goes from 0 to a reason, so a
    // stale read can only let a launch through, whose kernel then sees the word on the device and ends (the status
    // check queued after it, EnqueueStatusCheck, is the stream-ordered read). On the npu transport the read is a
    // synchronous aclrtMemcpy of own device memory, which copies at once without an implicit device or stream
    // synchronization (CANN's aclrtMemcpy page, "约束说明"), so it neither waits for the queued ops nor sees less
    // than the twin's host load does.
    int64_t control[kControlBytes / 8] = {};
    std::string why;
    if (!comm->transport->ReadWords(comm->rank, 0, control, kControlBytes / 8, &why))
        return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(op) + ": the abort word could not be read: " + why);
    const int64_t abortWord = control[kAbortOff / 8];
    if (abortWord != 0)
        return Fail(CAM_ERR_COMM_ABORTED, std::string(op) + " on rank " + std::to_string(comm->rank) + ": " +
                                              AbortReason(abortWord) +
                                              TwinRuleSuffix(reinterpret_cast<const uint8_t*>(control)));
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

aclnnStatus CheckActDtype(const ArgChecker& check, const TensorView& v, const char* arg, const camComm* comm) {
    const auto want = static_cast<aclDataType>(comm->config.actDtype);
    if (v.dtype == want) return ACLNN_SUCCESS;
    return check.WrongDtype(std::string(arg) + " is " + DtypeName(v.dtype) + ", but the communicator was created for " +
                            DtypeName(want) + " activations (camCommConfig.actDtype)");
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
    // Block 0 decides within timeout + idle plus its own bookkeeping; the follower margin covers a heavily loaded host.
    a.followerCycles = a.timeoutCycles + a.idleCycles + cycles(CAM_FOLLOWER_MARGIN_S * 1'000'000'000LL);
    a.planeId = comm->planeId;
    return a;
}

namespace {

// The window's control words the check needs, read as one device read of the control area: the abort word
// (line 0), the status record (line 1) and the status arguments (line 3) (window_layout.h).
constexpr uint64_t kControlReadBytes = kControlBytes;
static_assert(kAbortOff == 0 && kAbortReasonOff + kAbortReasonBytes <= kControlBytes &&
                  kStatusOff + 8 * kStatusWords <= kControlBytes &&
                  kStatusArgsOff + 8 * kStatusArgsWords <= kControlBytes,
              "the abort word, its reason, the status record and its arguments lie inside the control read");

// `control` is a host copy of the window's first kControlReadBytes, taken after the op's kernels ran. A refusal
// (abort word clear) is cleared on the device so the comm stays usable; a fatal error is kept as comm->failure.
aclnnStatus ReportCommStatus(camComm* comm, const uint8_t* control, std::string* message) {
    int64_t st[kStatusWords];
    int64_t args[kStatusArgsWords];
    int64_t abortWord;
    std::memcpy(st, control + kStatusOff, sizeof(st));
    std::memcpy(args, control + kStatusArgsOff, sizeof(args));
    std::memcpy(&abortWord, control + kAbortOff, sizeof(abortWord));
    if (st[kStatusCode] == status::kOk) return ACLNN_SUCCESS;
    const aclnnStatus status = Describe(comm, st, args, abortWord, message);
    if (abortWord != 0) *message += TwinRuleSuffix(control);
    if (abortWord == 0) {
        // the arguments first: a record the next op writes finds both lines clear, and a refusal leaves the
        // window as it found it
        ZeroDeviceNow(static_cast<uint8_t*>(comm->OwnDevice()) + kStatusArgsOff, 8 * kStatusArgsWords);
        ZeroDeviceNow(static_cast<uint8_t*>(comm->OwnDevice()) + kStatusOff, 8 * kStatusWords);
    } else {
        std::lock_guard<std::mutex> lock(comm->failureMutex);
        if (comm->failure.empty()) comm->failure = *message;
    }
    return status;
}

}  // namespace

void EnqueueStatusCheck(aclrtStream stream, camComm* comm) {
    // In a capture the status is read after the synchronize that follows a launch of the graph (graph.h): the
    // stream is idle then, so a direct read is in order.
    auto afterReplay = [comm](std::string* message) -> aclnnStatus {
        alignas(8) uint8_t control[kControlReadBytes];
        ReadDeviceNow(control, comm->OwnDevice(), kControlReadBytes);
        return ReportCommStatus(comm, control, message);
    };
    if (CaptureStatusCheck(stream, afterReplay, nullptr)) return;
    EnqueueDeviceRead(stream, comm->OwnDevice(), kControlReadBytes, [comm](const uint8_t* control, std::string* message) {
        return ReportCommStatus(comm, control, message);
    });
}

aclnnStatus LaunchOnComm(camComm* comm, aclrtStream stream, const std::function<void()>& kernel) {
    OpInFlight inFlight(comm);
    kernel();
    EnqueueStatusCheck(stream, comm);
    inFlight.EndInStreamOrder(stream);
    return ACLNN_SUCCESS;
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
