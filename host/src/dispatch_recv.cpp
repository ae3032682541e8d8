#include "cam/aclnn_cam_dispatch_recv.h"

#include "backend.h"
#include "cam/tiling/dispatch_recv_tiling.h"
#include "comm.h"
#include "dispatch_recv/dispatch_recv.h"
#include "executor.h"
#include "status.h"
#include "tensor.h"

using namespace cam::host;

extern "C" aclnnStatus aclnnCamDispatchRecvGetWorkspaceSize(camComm* comm, aclTensor* expandX, aclTensor* scales,
                                                            aclTensor* expertCounts, aclTensor* workItem,
                                                            uint64_t* workspaceSize, aclOpExecutor** executor) {
    return Guarded("aclnnCamDispatchRecvGetWorkspaceSize", [&]() -> aclnnStatus {
        ArgChecker check("dispatch_recv");
        if (aclnnStatus st = CheckOutPointers("dispatch_recv", workspaceSize, executor)) return st;
        aclnnStatus st;
        if ((st = CheckComm("dispatch_recv", comm, false))) return st;
        const CamTopology& t = comm->topo;
        TensorView ev, sv, cv, wv;
        if ((st = check.View(expandX, "expand_x", &ev)) || (st = check.View(scales, "scales", &sv)) ||
            (st = check.View(expertCounts, "expert_counts", &cv)) || (st = check.View(workItem, "work_item", &wv)))
            return st;
        const int64_t n = cam::layout::recv_rows(t);
        st = t.quantized ? check.Tensor(ev, "expand_x", {ACL_INT8}, {n, t.H})
                         : check.Tensor(ev, "expand_x", {ACL_BF16, ACL_FLOAT16}, {n, t.H});
        if (st || (!t.quantized && (st = CheckActDtype(check, ev, "expand_x", comm)))) return st;
        if ((st = check.Tensor(sv, "scales", {ACL_FLOAT}, {t.quantized ? n : 1})))
            return st;
        if ((st = check.Tensor(cv, "expert_counts", {ACL_INT64}, {cam::layout::experts_per_ffn(t)})))
            return st;
        if ((st = check.Tensor(wv, "work_item", {ACL_INT64}, {cam::layout::work_item_words(t)})))
            return st;

        cam::kernels::DispatchRecvTilingData tiling{};
        uint64_t ws = 0;
        std::string why;
        if (!cam::tiling::TileDispatchRecv(CurrentPlatform(), MakeCommArgs(comm), &tiling, &ws, &why))
            return check.Invalid(why);
        auto ex = std::make_unique<Executor>("dispatch_recv");
        ex->workspaceSize = ws;
        ex->launch = [tiling, comm, e = ev.data, s = sv.data, c = cv.data, w = wv.data](void* workspace,
                                                                                        aclrtStream stream) {
            return LaunchOnComm(comm, stream, [&] {
                cam::kernels::LaunchDispatchRecv(tiling.blockDim, stream, reinterpret_cast<uint8_t*>(comm->peerTable.data()),
                                                 e, s, c, w, static_cast<uint8_t*>(workspace), tiling);
            });
        };
        return Finish(std::move(ex), workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamDispatchRecv(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                            aclrtStream stream) {
    return RunExecutor("aclnnCamDispatchRecv", "dispatch_recv", workspace, workspaceSize, executor, stream);
}
