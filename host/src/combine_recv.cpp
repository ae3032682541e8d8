#include "cam/aclnn_cam_combine_recv.h"

#include "backend.h"
#include "cam/tiling/combine_recv_tiling.h"
#include "combine_recv/combine_recv.h"
#include "comm.h"
#include "executor.h"
#include "status.h"
#include "tensor.h"

using namespace cam::host;

extern "C" aclnnStatus aclnnCamCombineRecvGetWorkspaceSize(camComm* comm, const aclTensor* topkIds,
                                                           const aclTensor* topkWeights, aclTensor* out,
                                                           uint64_t* workspaceSize, aclOpExecutor** executor) {
    return Guarded("aclnnCamCombineRecvGetWorkspaceSize", [&]() -> aclnnStatus {
        ArgChecker check("combine_recv");
        if (aclnnStatus st = CheckOutPointers("combine_recv", workspaceSize, executor)) return st;
        aclnnStatus st;
        if ((st = CheckComm("combine_recv", comm, true))) return st;
        const CamTopology& t = comm->topo;
        TensorView iv, wv, ov;
        if ((st = check.View(topkIds, "topk_ids", &iv)) || (st = check.View(topkWeights, "topk_weights", &wv)) ||
            (st = check.View(out, "out", &ov)))
            return st;
        if ((st = check.Tensor(iv, "topk_ids", {ACL_INT32}, {kAnyDim, kAnyDim})))
            return st;
        const int64_t b = iv.Dim(0);
        if (iv.Dim(1) != t.K || b > t.Bmax)
            return check.Invalid("topk_ids must be [B <= Bmax=" + std::to_string(t.Bmax) + ", K=" + std::to_string(t.K) +
                                 "], got " + iv.ShapeString());
        if ((st = check.Tensor(wv, "topk_weights", {ACL_FLOAT}, {b, t.K})))
            return st;
        if ((st = check.Tensor(ov, "out", {ACL_BF16, ACL_FLOAT16}, {b, t.H})) ||
            (st = CheckActDtype(check, ov, "out", comm)))
            return st;

        cam::kernels::CombineRecvTilingData tiling{};
        uint64_t ws = 0;
        std::string why;
        if (!cam::tiling::TileCombineRecv(CurrentPlatform(), MakeCommArgs(comm), b, ov.dtype == ACL_BF16, &tiling, &ws,
                                          &why))
            return check.Invalid(why);
        auto ex = std::make_unique<Executor>("combine_recv");
        ex->workspaceSize = ws;
        ex->launch = [tiling, comm, i = iv.data, w = wv.data, o = ov.data](void* workspace, aclrtStream stream) {
            return LaunchOnComm(comm, stream, [&] {
                cam::kernels::LaunchCombineRecv(tiling.blockDim, stream, i, w, o,
                                                comm->DevicePeers(),
                                                static_cast<uint8_t*>(workspace), tiling);
            });
        };
        return Finish(std::move(ex), workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamCombineRecv(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                           aclrtStream stream) {
    return RunExecutor("aclnnCamCombineRecv", "combine_recv", workspace, workspaceSize, executor, stream);
}
