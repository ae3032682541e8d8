#include "cam/aclnn_cam_dispatch_recv.h"

#include <algorithm>

#include "cam/tiling/dispatch_recv_tiling.h"
#include "dataplane_op.h"
#include "dispatch_recv/dispatch_recv.h"
#include "status.h"

using namespace cam::host;

namespace {

// The outputs of either mode; the ones a mode does not have stay null.
struct RecvOutputs {
    aclTensor* expandX = nullptr;
    aclTensor* scales = nullptr;
    aclTensor* expertCounts = nullptr;  // one work item
    aclTensor* groupTable = nullptr;    // a batch
    aclTensor* origin = nullptr;        // a batch
    aclTensor* workItems = nullptr;
};

// The batched mode's row-budget rule, the one place it is compared (a serving policy asks it through
// aclnnCamDispatchRecvCheckRowBudget before it builds anything).
aclnnStatus CheckRowBudget(const ArgChecker& check, const CamTopology& t, int64_t rowBudget) {
    if (rowBudget <= 0) return check.Invalid("row_budget must be positive, got " + std::to_string(rowBudget));
    const int64_t chunk = cam::layout::recv_rows(t);
    // A chunk is cut at recv_rows so that combine_send can recompute it from the cursor alone (§8): a budget that
    // cannot hold one whole chunk (a token's rows among them) could never take the next item.
    if (rowBudget < chunk)
        return check.Invalid("row_budget " + std::to_string(rowBudget) + " is smaller than one work item's rows (" +
                             std::to_string(chunk) + " = min(capacity, P*min(Bmax, window_tokens)*K))");
    return ACLNN_SUCCESS;
}

// The most rows one batch can take: I items of at most one chunk each (and an int32 row count).
int64_t LargestBatchRows(const CamTopology& t) {
    return std::min<int64_t>(int64_t(cam::tiling::DispatchRecvBatchItems(t)) * cam::layout::recv_rows(t),
                             cam::kMaxInt32);
}

// The Comm's stop word, as the kernels and the host address it.
uint8_t* StopWord(const camComm* comm) {
    return static_cast<uint8_t*>(comm->OwnDevice()) + cam::layout::ffn_stop_off(comm->topo);
}

// A stop word given to a receive must be its Comm's: the kernel reads the word at the layout's place whatever it is
// given, so any other address (another Comm's, a tensor of the caller's, a word of the window with another meaning)
// would be a stop the loop never honours. Refused before anything is launched, naming what it is instead.
aclnnStatus CheckStopWord(const ArgChecker& check, const camComm* comm, const void* stopWord) {
    if (stopWord == nullptr) return ACLNN_SUCCESS;
    const auto* word = static_cast<const uint8_t*>(stopWord);
    const auto* base = static_cast<const uint8_t*>(comm->OwnDevice());
    const uint64_t bytes = comm->transport->WindowBytes(comm->rank);
    const std::string rank = std::to_string(comm->rank);
    const std::string expected = " (aclnnCamDispatchRecvStopWord: byte " +
                                 std::to_string(cam::layout::ffn_stop_off(comm->topo)) + " of the window)";
    if (word < base || word >= base + bytes)
        return check.Invalid("stop_word lies outside the Comm's buffers: rank " + rank + "'s window is " +
                             std::to_string(bytes) + " bytes; pass the Comm's stop word" + expected);
    if (word != StopWord(comm))
        return check.Invalid("stop_word is byte " + std::to_string(word - base) + " of rank " + rank +
                             "'s window, not its stop word" + expected);
    return ACLNN_SUCCESS;
}

// rowBudget 0: one work item; else a batch within rowBudget rows (docs/protocol.md §6.2).
struct DispatchRecvOp {
    static constexpr const char* kName = "dispatch_recv";
    static constexpr bool kAttentionOp = false;
    static constexpr bool kEndsOnItsOwn = false;
    int64_t rowBudget;
    RecvOutputs o;
    const void* stopWord = nullptr;  // the Comm's stop word, or null: no stop
    TensorView ev{}, sv{}, cv{}, gv{}, ov{}, wv{};
    cam::kernels::DispatchRecvTilingData tiling{};

    aclnnStatus Check(const ArgChecker& check, camComm* comm) {
        const CamTopology& t = comm->topo;
        const bool batched = rowBudget != 0;
        const int64_t chunk = cam::layout::recv_rows(t);
        aclnnStatus st;
        if ((st = CheckStopWord(check, comm, stopWord))) return st;
        if (batched && (st = CheckRowBudget(check, t, rowBudget))) return st;
        if (batched && rowBudget > cam::kMaxInt32)
            return check.Invalid("row_budget " + std::to_string(rowBudget) + " exceeds " +
                                 std::to_string(cam::kMaxInt32));
        const int64_t n = batched ? rowBudget : chunk;
        const int64_t items = batched ? cam::tiling::DispatchRecvBatchItems(t) : 1;
        const int64_t R = cam::layout::experts_per_ffn(t), W = cam::layout::work_item_words(t);
        if ((st = check.View(o.expandX, "expand_x", &ev)) || (st = check.View(o.scales, "scales", &sv))) return st;
        if (batched) {
            if ((st = check.View(o.groupTable, "group_table", &gv)) || (st = check.View(o.origin, "origin", &ov)) ||
                (st = check.View(o.workItems, "work_items", &wv)))
                return st;
        } else if ((st = check.View(o.expertCounts, "expert_counts", &cv)) ||
                   (st = check.View(o.workItems, "work_item", &wv))) {
            return st;
        }
        st = t.quantized ? check.Tensor(ev, "expand_x", {ACL_INT8}, {n, t.H})
                         : check.Tensor(ev, "expand_x", {ACL_BF16, ACL_FLOAT16}, {n, t.H});
        if (st || (!t.quantized && (st = CheckActDtype(check, ev, "expand_x", comm)))) return st;
        if ((st = check.Tensor(sv, "scales", {ACL_FLOAT}, {t.quantized ? n : 1}))) return st;
        if (batched) {
            if ((st = check.Tensor(gv, "group_table", {ACL_INT64}, {items * R, cam::kernels::kGroupWords})) ||
                (st = check.Tensor(ov, "origin", {ACL_INT64}, {n, cam::kernels::kOriginWords})) ||
                (st = check.Tensor(wv, "work_items", {ACL_INT64}, {items, W})))
                return st;
        } else if ((st = check.Tensor(cv, "expert_counts", {ACL_INT64}, {R})) ||
                   (st = check.Tensor(wv, "work_item", {ACL_INT64}, {W}))) {
            return st;
        }
        return ACLNN_SUCCESS;
    }
    bool Tile(const cam::tiling::PlatformInfo& platform, const cam::kernels::dp::CommArgs& args, uint64_t* ws,
              std::string* why) {
        return cam::tiling::TileDispatchRecv(platform, args, rowBudget, stopWord != nullptr, &tiling, ws, why);
    }
    void Launch(camComm* comm, uint8_t* workspace, aclrtStream stream) const {
        cam::kernels::LaunchDispatchRecv(tiling.blockDim, stream, comm->DevicePeers(), ev.data, sv.data, cv.data,
                                         gv.data, ov.data, wv.data, workspace, tiling);
    }
};

}  // namespace

extern "C" aclnnStatus aclnnCamDispatchRecvV2GetWorkspaceSize(camComm* comm, aclTensor* expandX, aclTensor* scales,
                                                              aclTensor* expertCounts, aclTensor* workItem,
                                                              const void* stopWord, uint64_t* workspaceSize,
                                                              aclOpExecutor** executor) {
    return Guarded("aclnnCamDispatchRecvGetWorkspaceSize", [&]() -> aclnnStatus {
        RecvOutputs o;
        o.expandX = expandX;
        o.scales = scales;
        o.expertCounts = expertCounts;
        o.workItems = workItem;
        return PrepareDataPlaneOp(comm, DispatchRecvOp{0, o, stopWord}, workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamDispatchRecvGetWorkspaceSize(camComm* comm, aclTensor* expandX, aclTensor* scales,
                                                            aclTensor* expertCounts, aclTensor* workItem,
                                                            uint64_t* workspaceSize, aclOpExecutor** executor) {
    return aclnnCamDispatchRecvV2GetWorkspaceSize(comm, expandX, scales, expertCounts, workItem, nullptr,
                                                  workspaceSize, executor);
}

extern "C" aclnnStatus aclnnCamDispatchRecvBatchV2GetWorkspaceSize(camComm* comm, int64_t rowBudget,
                                                                   aclTensor* expandX, aclTensor* scales,
                                                                   aclTensor* groupTable, aclTensor* origin,
                                                                   aclTensor* workItems, const void* stopWord,
                                                                   uint64_t* workspaceSize, aclOpExecutor** executor) {
    return Guarded("aclnnCamDispatchRecvBatchGetWorkspaceSize", [&]() -> aclnnStatus {
        if (rowBudget <= 0)  // 0 would select the one-item mode below: refused here, in CheckRowBudget's words
            return CheckRowBudget(ArgChecker("dispatch_recv"), CamTopology{}, rowBudget);
        RecvOutputs o;
        o.expandX = expandX;
        o.scales = scales;
        o.groupTable = groupTable;
        o.origin = origin;
        o.workItems = workItems;
        return PrepareDataPlaneOp(comm, DispatchRecvOp{rowBudget, o, stopWord}, workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamDispatchRecvBatchGetWorkspaceSize(camComm* comm, int64_t rowBudget, aclTensor* expandX,
                                                                 aclTensor* scales, aclTensor* groupTable,
                                                                 aclTensor* origin, aclTensor* workItems,
                                                                 uint64_t* workspaceSize, aclOpExecutor** executor) {
    return aclnnCamDispatchRecvBatchV2GetWorkspaceSize(comm, rowBudget, expandX, scales, groupTable, origin,
                                                       workItems, nullptr, workspaceSize, executor);
}

// An FFN rank's Comm for the stop calls: no window to hold a stop word before the plane is attached.
static aclnnStatus CheckStopComm(const char* api, camComm* comm) {
    if (!comm) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": comm is null");
    if (!comm->attached)
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": comm has not mapped its peers' windows yet");
    if (comm->IsAttention())
        return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": rank " + std::to_string(comm->rank) +
                                                 " is an Attention rank; the stop word is an FFN rank's");
    return ACLNN_SUCCESS;
}

extern "C" aclnnStatus aclnnCamDispatchRecvStopWord(camComm* comm, void** stopWord) {
    return Guarded("aclnnCamDispatchRecvStopWord", [&]() -> aclnnStatus {
        if (!stopWord) return Fail(ACLNN_ERR_PARAM_NULLPTR, "aclnnCamDispatchRecvStopWord: stopWord is null");
        if (aclnnStatus st = CheckStopComm("aclnnCamDispatchRecvStopWord", comm)) return st;
        *stopWord = StopWord(comm);
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus aclnnCamDispatchRecvSetStop(camComm* comm, int32_t stop, int32_t* wasStopped) {
    return Guarded("aclnnCamDispatchRecvSetStop", [&]() -> aclnnStatus {
        const char* api = "aclnnCamDispatchRecvSetStop";
        if (aclnnStatus st = CheckStopComm(api, comm)) return st;
        if (stop != 0 && stop != 1)
            return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": stop must be 0 or 1, got " +
                                                     std::to_string(stop));
        const int64_t off = cam::layout::ffn_stop_off(comm->topo);
        std::string why;
        int64_t word = 0;  // the int32 stop word and the 4 bytes after it (always 0): little-endian, as the device
        if (!comm->transport->ReadWords(comm->rank, off, &word, 1, &why))
            return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(api) + ": the stop word could not be read: " + why);
        const bool was = static_cast<int32_t>(word & 0xffffffff) != 0;
        if (wasStopped) *wasStopped = was ? 1 : 0;
        if (stop == 1 && was) return ACLNN_SUCCESS;  // stopped already: a second stop changes nothing
        const int64_t zero = 0;
        const bool ok = stop == 1 ? comm->transport->SetIfZero(comm->rank, off, 1, &why)
                                  : comm->transport->WriteWords(comm->rank, off, &zero, 1, &why);
        if (!ok)
            return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(api) + ": the stop word could not be written: " + why);
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus aclnnCamDispatchRecvCheckRowBudget(const CamTopology* topology, int64_t rowBudget,
                                                          int64_t* largestBatchRows) {
    return Guarded("aclnnCamDispatchRecvCheckRowBudget", [&]() -> aclnnStatus {
        ArgChecker check("dispatch_recv");
        if (topology == nullptr || cam::layout::check_topology(*topology) != cam::field::kOk)
            return check.Invalid("topology is null or not a valid CamTopology");
        if (largestBatchRows != nullptr) *largestBatchRows = LargestBatchRows(*topology);
        return CheckRowBudget(check, *topology, rowBudget);
    });
}

extern "C" aclnnStatus aclnnCamDispatchRecv(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                            aclrtStream stream) {
    return RunExecutor("aclnnCamDispatchRecv", "dispatch_recv", workspace, workspaceSize, executor, stream);
}
