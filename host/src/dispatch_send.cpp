#include "cam/aclnn_cam_dispatch_send.h"

#include "cam/tiling/dispatch_send_tiling.h"
#include "dataplane_op.h"
#include "dispatch_send/dispatch_send.h"
#include "status.h"

using namespace cam::host;

namespace {

struct DispatchSendOp {
    static constexpr const char* kName = "dispatch_send";
    static constexpr bool kAttentionOp = true;
    static constexpr bool kEndsOnItsOwn = false;
    const aclTensor* x;
    const aclTensor* topkIds;
    int64_t layer;
    const aclTensor* placement;
    TensorView xv{}, iv{}, pv{};
    cam::kernels::DispatchSendTilingData tiling{};

    aclnnStatus Check(const ArgChecker& check, camComm* comm) {
        const CamTopology& t = comm->topo;
        aclnnStatus st;
        if ((st = check.View(x, "x", &xv)) || (st = check.View(topkIds, "topk_ids", &iv))) return st;
        if ((st = check.Tensor(xv, "x", {ACL_BF16, ACL_FLOAT16}, {kAnyDim, kAnyDim})) ||
            (st = CheckActDtype(check, xv, "x", comm)))
            return st;
        const int64_t b = xv.Dim(0);
        if (xv.Dim(1) != t.H) return check.Invalid("x must be [B, H=" + std::to_string(t.H) + "], got " + xv.ShapeString());
        if (b > t.Bmax)
            return check.Invalid("x has B=" + std::to_string(b) + " tokens, more than Bmax=" + std::to_string(t.Bmax));
        if ((st = check.Tensor(iv, "topk_ids", {ACL_INT32}, {b, t.K}))) return st;
        if (layer < 0 || layer >= t.L)
            return check.Invalid("layer=" + std::to_string(layer) + " outside [0, L=" + std::to_string(t.L) + ")");
        // The table's words (its epoch and rows) are bounded by the kernel's pre-pass (they live in device memory);
        // here only its shape.
        if (placement == nullptr) {
            if (!cam::layout::contiguous_placement(t))
                return check.Invalid("placement is required: E=" + std::to_string(t.E) + " on F=" +
                                     std::to_string(t.F) + " FFN ranks of expert_slots=" + std::to_string(t.expert_slots) +
                                     " has no contiguous placement");
            return ACLNN_SUCCESS;
        }
        if ((st = check.View(placement, "placement", &pv)) ||
            (st = check.Tensor(pv, "placement", {ACL_INT64}, {cam::layout::placement_words(t)})))
            return st;
        return ACLNN_SUCCESS;
    }
    bool Tile(const cam::tiling::PlatformInfo& platform, const cam::kernels::dp::CommArgs& args, uint64_t* ws,
              std::string* why) {
        return cam::tiling::TileDispatchSend(platform, args, xv.Dim(0), layer, xv.dtype == ACL_BF16,
                                             placement != nullptr, &tiling, ws, why);
    }
    void Launch(camComm* comm, uint8_t* workspace, aclrtStream stream) const {
        cam::kernels::LaunchDispatchSend(tiling.blockDim, stream, xv.data, iv.data, pv.data, comm->DevicePeers(),
                                         workspace, tiling);
    }
};

}  // namespace

extern "C" aclnnStatus aclnnCamDispatchSendV2GetWorkspaceSize(camComm* comm, const aclTensor* x,
                                                              const aclTensor* topkIds, int64_t layer,
                                                              const aclTensor* placement, uint64_t* workspaceSize,
                                                              aclOpExecutor** executor) {
    return Guarded("aclnnCamDispatchSendV2GetWorkspaceSize", [&]() -> aclnnStatus {
        return PrepareDataPlaneOp(comm, DispatchSendOp{x, topkIds, layer, placement}, workspaceSize, executor);
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
