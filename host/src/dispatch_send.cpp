#include "cam/aclnn_cam_dispatch_send.h"

#include "backend.h"
#include "cam/tiling/dispatch_send_tiling.h"
#include "comm.h"
#include "dispatch_send/dispatch_send.h"
#include "executor.h"
#include "status.h"
#include "tensor.h"

using namespace cam::host;

extern "C" aclnnStatus aclnnCamDispatchSendV2GetWorkspaceSize(camComm* comm, const aclTensor* x,
                                                              const aclTensor* topkIds, int64_t layer,
                                                              const aclTensor* placement, uint64_t* workspaceSize,
                                                              aclOpExecutor** executor) {
    return Guarded("aclnnCamDispatchSendV2GetWorkspaceSize", [&]() -> aclnnStatus {
        ArgChecker check("dispatch_send");
        if (aclnnStatus st = CheckOutPointers("dispatch_send", workspaceSize, executor)) return st;
        aclnnStatus st;
        if ((st = CheckComm("dispatch_send", comm, true))) return st;
        const CamTopology& t = comm->topo;
        TensorView xv, iv;
        if ((st = check.View(x, "x", &xv)) || (st = check.View(topkIds, "topk_ids", &iv))) return st;
        if ((st = check.Tensor(xv, "x", {ACL_BF16, ACL_FLOAT16}, {kAnyDim, kAnyDim})) ||
            (st = CheckActDtype(check, xv, "x", comm)))
            return st;
        const int64_t b = xv.Dim(0);
        if (xv.Dim(1) != t.H) return check.Invalid("x must be [B, H=" + std::to_string(t.H) + "], got " + xv.ShapeString());
        if (b > t.Bmax)
            return check.Invalid("x has B=" + std::to_string(b) + " tokens, more than Bmax=" + std::to_string(t.Bmax));
        if ((st = check.Tensor(iv, "topk_ids", {ACL_INT32}, {b, t.K})))
            return st;
        if (layer < 0 || layer >= t.L)
            return check.Invalid("layer=" + std::to_string(layer) + " outside [0, L=" + std::to_string(t.L) + ")");
        // The table's words (its epoch and rows) are bounded by the kernel's pre-pass (they live in device memory);
        // here only its shape.
        TensorView pv{};
        if (placement == nullptr) {
            if (!cam::layout::contiguous_placement(t))
                return check.Invalid("placement is required: E=" + std::to_string(t.E) + " on F=" +
                                     std::to_string(t.F) + " FFN ranks of expert_slots=" + std::to_string(t.expert_slots) +
                                     " has no contiguous placement");
        } else if ((st = check.View(placement, "placement", &pv)) ||
                   (st = check.Tensor(pv, "placement", {ACL_INT64}, {cam::layout::placement_words(t)}))) {
            return st;
        }

        cam::kernels::DispatchSendTilingData tiling{};
        uint64_t ws = 0;
        std::string why;
        if (!cam::tiling::TileDispatchSend(CurrentPlatform(), MakeCommArgs(comm), b, layer, xv.dtype == ACL_BF16,
                                           placement != nullptr, &tiling, &ws, &why))
            return check.Invalid(why);
        auto ex = std::make_unique<Executor>("dispatch_send");
        ex->workspaceSize = ws;
        ex->launch = [tiling, comm, x = xv.data, ids = iv.data, table = pv.data](void* workspace, aclrtStream stream) {
            return LaunchOnComm(comm, stream, [&] {
                cam::kernels::LaunchDispatchSend(tiling.blockDim, stream, x, ids, table,
                                                 comm->DevicePeers(),
                                                 static_cast<uint8_t*>(workspace), tiling);
            });
        };
        return Finish(std::move(ex), workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamDispatchSendGetWorkspaceSize(camComm* comm, const aclTensor* x, const aclTensor* topkIds,
                                                            int64_t layer, uint64_t* workspaceSize,
                                                            aclOpExecutor** executor) {
    return aclnnCamDispatchSendV2GetWorkspaceSize(comm, x, topkIds, layer, nullptr, workspaceSize, executor);
}

extern "C" aclnnStatus aclnnCamDispatchSend(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                            aclrtStream stream) {
    return RunExecutor("aclnnCamDispatchSend", "dispatch_send", workspace, workspaceSize, executor, stream);
}
