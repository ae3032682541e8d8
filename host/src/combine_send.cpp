#include "cam/aclnn_cam_combine_send.h"

#include "backend.h"
#include "cam/tiling/combine_send_tiling.h"
#include "cam/tiling/dispatch_recv_tiling.h"
#include "combine_send/combine_send.h"
#include "comm.h"
#include "executor.h"
#include "status.h"
#include "tensor.h"

using namespace cam::host;

namespace {

// batched: workItem is a dispatch_recv batch's work_items [I, W] and expert_out has rowBudget rows.
aclnnStatus PrepareCombineSend(camComm* comm, bool batched, int64_t rowBudget, const aclTensor* expertOut,
                               const aclTensor* workItem, uint64_t* workspaceSize, aclOpExecutor** executor) {
    ArgChecker check("combine_send");
    if (aclnnStatus st = CheckOutPointers("combine_send", workspaceSize, executor)) return st;
    aclnnStatus st;
    if ((st = CheckComm("combine_send", comm, false))) return st;
    const CamTopology& t = comm->topo;
    const int64_t chunk = cam::layout::recv_rows(t);
    if (batched && (rowBudget < chunk || rowBudget > cam::kMaxInt32))
        return check.Invalid("row_budget " + std::to_string(rowBudget) + " is outside [" + std::to_string(chunk) +
                             ", " + std::to_string(cam::kMaxInt32) + "] (one work item's rows, as dispatch_recv)");
    const int64_t n = batched ? rowBudget : chunk;
    const int64_t items = batched ? cam::tiling::DispatchRecvBatchItems(t) : 1;
    const int64_t W = cam::layout::work_item_words(t);
    const char* wiName = batched ? "work_items" : "work_item";
    TensorView ov, wv;
    if ((st = check.View(expertOut, "expert_out", &ov)) || (st = check.View(workItem, wiName, &wv))) return st;
    if ((st = check.Tensor(ov, "expert_out", {ACL_BF16, ACL_FLOAT16}, {n, t.H})) ||
        (st = CheckActDtype(check, ov, "expert_out", comm)))
        return st;
    st = batched ? check.Tensor(wv, wiName, {ACL_INT64}, {items, W}) : check.Tensor(wv, wiName, {ACL_INT64}, {W});
    if (st) return st;

    cam::kernels::CombineSendTilingData tiling{};
    uint64_t ws = 0;
    std::string why;
    if (!cam::tiling::TileCombineSend(CurrentPlatform(), MakeCommArgs(comm), static_cast<uint32_t>(items), n, &tiling,
                                      &ws, &why))
        return check.Invalid(why);
    auto ex = std::make_unique<Executor>("combine_send");
    ex->workspaceSize = ws;
    // It waits on no peer and no host event: it checks the items, writes the rows and signals (a refusal or an
    // aborted plane ends it at once), so a caller that synchronizes at once may run it on its own thread instead of
    // handing it to the stream's worker (≈ 70 of ≈ 90 µs of a call that has nothing to send, on the twin).
    ex->endsOnItsOwn = true;
    ex->launch = [tiling, comm, o = ov.data, w = wv.data](void* workspace, aclrtStream stream) {
        return LaunchOnComm(comm, stream, [&] {
            cam::kernels::LaunchCombineSend(tiling.blockDim, stream, o, w,
                                            comm->DevicePeers(),
                                            static_cast<uint8_t*>(workspace), tiling);
        });
    };
    return Finish(std::move(ex), workspaceSize, executor);
}

}  // namespace

extern "C" aclnnStatus aclnnCamCombineSendGetWorkspaceSize(camComm* comm, const aclTensor* expertOut,
                                                           const aclTensor* workItem, uint64_t* workspaceSize,
                                                           aclOpExecutor** executor) {
    return Guarded("aclnnCamCombineSendGetWorkspaceSize", [&]() -> aclnnStatus {
        return PrepareCombineSend(comm, false, 0, expertOut, workItem, workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamCombineSendBatchGetWorkspaceSize(camComm* comm, int64_t rowBudget,
                                                                const aclTensor* expertOut,
                                                                const aclTensor* workItems, uint64_t* workspaceSize,
                                                                aclOpExecutor** executor) {
    return Guarded("aclnnCamCombineSendBatchGetWorkspaceSize", [&]() -> aclnnStatus {
        return PrepareCombineSend(comm, true, rowBudget, expertOut, workItems, workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamCombineSend(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                           aclrtStream stream) {
    return RunExecutor("aclnnCamCombineSend", "combine_send", workspace, workspaceSize, executor, stream);
}
