#include "cam/aclnn_cam_combine_send.h"

#include "backend.h"
#include "cam/tiling/combine_send_tiling.h"
#include "combine_send/combine_send.h"
#include "comm.h"
#include "executor.h"
#include "status.h"
#include "tensor.h"

using namespace cam::host;

extern "C" aclnnStatus aclnnCamCombineSendGetWorkspaceSize(camComm* comm, const aclTensor* expertOut,
                                                           const aclTensor* workItem, uint64_t* workspaceSize,
                                                           aclOpExecutor** executor) {
    return Guarded("aclnnCamCombineSendGetWorkspaceSize", [&]() -> aclnnStatus {
        ArgChecker check("combine_send");
        if (aclnnStatus st = CheckOutPointers("combine_send", workspaceSize, executor)) return st;
        aclnnStatus st;
        if ((st = CheckComm("combine_send", comm, false))) return st;
        const CamTopology& t = comm->topo;
        TensorView ov, wv;
        if ((st = check.View(expertOut, "expert_out", &ov)) || (st = check.View(workItem, "work_item", &wv))) return st;
        if ((st = check.Tensor(ov, "expert_out", {ACL_BF16, ACL_FLOAT16}, {cam::layout::recv_rows(t), t.H})) ||
            (st = CheckActDtype(check, ov, "expert_out", comm)))
            return st;
        if ((st = check.Tensor(wv, "work_item", {ACL_INT64}, {cam::layout::work_item_words(t)})))
            return st;

        cam::kernels::CombineSendTilingData tiling{};
        uint64_t ws = 0;
        std::string why;
        if (!cam::tiling::TileCombineSend(CurrentPlatform(), MakeCommArgs(comm), &tiling, &ws, &why))
            return check.Invalid(why);
        auto ex = std::make_unique<Executor>("combine_send");
        ex->workspaceSize = ws;
        ex->launch = [tiling, comm, o = ov.data, w = wv.data](void* workspace, aclrtStream stream) {
            return LaunchOnComm(comm, stream, [&] {
                cam::kernels::LaunchCombineSend(tiling.blockDim, stream, o, w,
                                                reinterpret_cast<uint8_t*>(comm->peerTable.data()),
                                                static_cast<uint8_t*>(workspace), tiling);
            });
        };
        return Finish(std::move(ex), workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamCombineSend(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                           aclrtStream stream) {
    return RunExecutor("aclnnCamCombineSend", "combine_send", workspace, workspaceSize, executor, stream);
}
