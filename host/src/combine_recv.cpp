#include "cam/aclnn_cam_combine_recv.h"

#include "cam/tiling/combine_recv_tiling.h"
#include "combine_recv/combine_recv.h"
#include "dataplane_op.h"
#include "status.h"

using namespace cam::host;

namespace {

struct CombineRecvOp {
    static constexpr const char* kName = "combine_recv";
    static constexpr bool kAttentionOp = true;
    static constexpr bool kEndsOnItsOwn = false;
    const aclTensor* topkIds;
    const aclTensor* topkWeights;
    aclTensor* out;
    TensorView iv{}, wv{}, ov{};
    cam::kernels::CombineRecvTilingData tiling{};

    aclnnStatus Check(const ArgChecker& check, camComm* comm) {
        const CamTopology& t = comm->topo;
        aclnnStatus st;
        if ((st = check.View(topkIds, "topk_ids", &iv)) || (st = check.View(topkWeights, "topk_weights", &wv)) ||
            (st = check.View(out, "out", &ov)))
            return st;
        if ((st = check.Tensor(iv, "topk_ids", {ACL_INT32}, {kAnyDim, kAnyDim}))) return st;
        const int64_t b = iv.Dim(0);
        if (iv.Dim(1) != t.K || b > t.Bmax)
            return check.Invalid("topk_ids must be [B <= Bmax=" + std::to_string(t.Bmax) + ", K=" + std::to_string(t.K) +
                                 "], got " + iv.ShapeString());
        if ((st = check.Tensor(wv, "topk_weights", {ACL_FLOAT}, {b, t.K}))) return st;
        if ((st = check.Tensor(ov, "out", {ACL_BF16, ACL_FLOAT16}, {b, t.H})) ||
            (st = CheckActDtype(check, ov, "out", comm)))
            return st;
        return ACLNN_SUCCESS;
    }
    bool Tile(const cam::tiling::PlatformInfo& platform, const cam::kernels::dp::CommArgs& args, uint64_t* ws,
              std::string* why) {
        return cam::tiling::TileCombineRecv(platform, args, iv.Dim(0), ov.dtype == ACL_BF16, &tiling, ws, why);
    }
    void Launch(camComm* comm, uint8_t* workspace, aclrtStream stream) const {
        cam::kernels::LaunchCombineRecv(tiling.blockDim, stream, iv.data, wv.data, ov.data, comm->DevicePeers(),
                                        workspace, tiling);
    }
};

}  // namespace

extern "C" aclnnStatus aclnnCamCombineRecvGetWorkspaceSize(camComm* comm, const aclTensor* topkIds,
                                                           const aclTensor* topkWeights, aclTensor* out,
                                                           uint64_t* workspaceSize, aclOpExecutor** executor) {
    return Guarded("aclnnCamCombineRecvGetWorkspaceSize", [&]() -> aclnnStatus {
        return PrepareDataPlaneOp(comm, CombineRecvOp{topkIds, topkWeights, out}, workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamCombineRecv(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                           aclrtStream stream) {
    return RunExecutor("aclnnCamCombineRecv", "combine_recv", workspace, workspaceSize, executor, stream);
}
