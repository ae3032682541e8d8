#include "cam/aclnn_cam_combine_send.h"

#include "cam/tiling/combine_send_tiling.h"
#include "cam/tiling/dispatch_recv_tiling.h"
#include "combine_send/combine_send.h"
#include "dataplane_op.h"
#include "status.h"

using namespace cam::host;

namespace {

// batched: workItem is a dispatch_recv batch's work_items [I, W] and expert_out has rowBudget rows.
struct CombineSendOp {
    static constexpr const char* kName = "combine_send";
    static constexpr bool kAttentionOp = false;
    // It waits on no peer and no host event: it checks the items, writes the rows and signals (a refusal or an
    // aborted plane ends it at once), so a caller that synchronizes at once may run it on its own thread instead of
    // handing it to the stream's worker (≈ 70 of ≈ 90 µs of a call that has nothing to send, on the twin).
    static constexpr bool kEndsOnItsOwn = true;
    bool batched;
    int64_t rowBudget;
    const aclTensor* expertOut;
    const aclTensor* workItem;
    TensorView ov{}, wv{};
    int64_t items = 1, rows = 0;
    cam::kernels::CombineSendTilingData tiling{};

    aclnnStatus Check(const ArgChecker& check, camComm* comm) {
        const CamTopology& t = comm->topo;
        const int64_t chunk = cam::layout::recv_rows(t);
        if (batched && (rowBudget < chunk || rowBudget > cam::kMaxInt32))
            return check.Invalid("row_budget " + std::to_string(rowBudget) + " is outside [" + std::to_string(chunk) +
                                 ", " + std::to_string(cam::kMaxInt32) + "] (one work item's rows, as dispatch_recv)");
        rows = batched ? rowBudget : chunk;
        items = batched ? cam::tiling::DispatchRecvBatchItems(t) : 1;
        const int64_t W = cam::layout::work_item_words(t);
        const char* wiName = batched ? "work_items" : "work_item";
        aclnnStatus st;
        if ((st = check.View(expertOut, "expert_out", &ov)) || (st = check.View(workItem, wiName, &wv))) return st;
        if ((st = check.Tensor(ov, "expert_out", {ACL_BF16, ACL_FLOAT16}, {rows, t.H})) ||
            (st = CheckActDtype(check, ov, "expert_out", comm)))
            return st;
        return batched ? check.Tensor(wv, wiName, {ACL_INT64}, {items, W}) : check.Tensor(wv, wiName, {ACL_INT64}, {W});
    }
    bool Tile(const cam::tiling::PlatformInfo& platform, const cam::kernels::dp::CommArgs& args, uint64_t* ws,
              std::string* why) {
        return cam::tiling::TileCombineSend(platform, args, static_cast<uint32_t>(items), rows, &tiling, ws, why);
    }
    void Launch(camComm* comm, uint8_t* workspace, aclrtStream stream) const {
        cam::kernels::LaunchCombineSend(tiling.blockDim, stream, ov.data, wv.data, comm->DevicePeers(), workspace,
                                        tiling);
    }
};

}  // namespace

extern "C" aclnnStatus aclnnCamCombineSendGetWorkspaceSize(camComm* comm, const aclTensor* expertOut,
                                                           const aclTensor* workItem, uint64_t* workspaceSize,
                                                           aclOpExecutor** executor) {
    return Guarded("aclnnCamCombineSendGetWorkspaceSize", [&]() -> aclnnStatus {
        return PrepareDataPlaneOp(comm, CombineSendOp{false, 0, expertOut, workItem}, workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamCombineSendBatchGetWorkspaceSize(camComm* comm, int64_t rowBudget,
                                                                const aclTensor* expertOut,
                                                                const aclTensor* workItems, uint64_t* workspaceSize,
                                                                aclOpExecutor** executor) {
    return Guarded("aclnnCamCombineSendBatchGetWorkspaceSize", [&]() -> aclnnStatus {
        return PrepareDataPlaneOp(comm, CombineSendOp{true, rowBudget, expertOut, workItems}, workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamCombineSend(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                           aclrtStream stream) {
    return RunExecutor("aclnnCamCombineSend", "combine_send", workspace, workspaceSize, executor, stream);
}
