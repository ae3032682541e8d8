#include "cam/aclnn_cam_dynamic_quant.h"

#include "cam/tiling/dynamic_quant_tiling.h"
#include "backend.h"
#include "dynamic_quant/dynamic_quant.h"
#include "executor.h"
#include "status.h"
#include "tensor.h"

using namespace cam::host;

extern "C" aclnnStatus aclnnCamDynamicQuantGetWorkspaceSize(const aclTensor* x, aclTensor* q, aclTensor* scale,
                                                            uint64_t* workspaceSize, aclOpExecutor** executor) {
    return Guarded("aclnnCamDynamicQuantGetWorkspaceSize", [&]() -> aclnnStatus {
        ArgChecker check("dynamic_quant");
        if (aclnnStatus st = CheckOutPointers("dynamic_quant", workspaceSize, executor)) return st;
        TensorView xv, qv, sv;
        aclnnStatus st;
        if ((st = check.View(x, "x", &xv)) || (st = check.View(q, "q", &qv)) || (st = check.View(scale, "scale", &sv)))
            return st;
        if ((st = check.Tensor(xv, "x", {ACL_BF16, ACL_FLOAT16}, {kAnyDim, kAnyDim})))
            return st;
        const int64_t rows = xv.Dim(0), cols = xv.Dim(1);
        if (cols < 1) return check.Invalid("x must have at least one column, got shape " + xv.ShapeString());
        if ((st = check.Tensor(qv, "q", {ACL_INT8}, {rows, cols})))
            return st;
        if ((st = check.Tensor(sv, "scale", {ACL_FLOAT}, {rows})))
            return st;

        cam::kernels::DynamicQuantTilingData tiling{};
        std::string why;
        if (!cam::tiling::TileDynamicQuant(CurrentPlatform(), rows, cols, xv.dtype == ACL_BF16, &tiling, &why))
            return check.Invalid(why);

        auto ex = std::make_unique<Executor>("dynamic_quant");
        ex->endsOnItsOwn = true;  // compute only: no wait on a peer or the host
        if (tiling.blockDim > 0) {
            ex->launch = [tiling, x = xv.data, q = qv.data, s = sv.data](void*, aclrtStream stream) {
                cam::kernels::LaunchDynamicQuant(tiling.blockDim, stream, x, q, s, tiling);
                return ACLNN_SUCCESS;
            };
        }
        return Finish(std::move(ex), workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamDynamicQuant(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                            aclrtStream stream) {
    return RunExecutor("aclnnCamDynamicQuant", "dynamic_quant", workspace, workspaceSize, executor, stream);
}
