#include "cam/tiling/combine_recv_tiling.h"

#include "dataplane_tiling_common.h"

namespace cam::tiling {

using namespace detail;

bool TileCombineRecv(const PlatformInfo& platform, const kernels::dp::CommArgs& comm, int64_t tokens, bool bf16,
                     kernels::CombineRecvTilingData* out, uint64_t* workspaceBytes, std::string* why) {
    kernels::CombineRecvTilingData t{};
    t.comm = comm;
    t.tokens = tokens;
    t.key = bf16 ? kernels::kCombineRecvBf16 : kernels::kCombineRecvFp16;
    t.colsPerPass = ColsPerPass(comm.topo.H, kernels::kCombineRecvMaxCols);
    if (kernels::CombineRecvUbBytes(t.colsPerPass) > platform.ubBytes) {
        *why = "UB of " + std::to_string(platform.ubBytes) + " bytes cannot hold combine_recv's working set";
        return false;
    }
    // The bytes reduced: K combine rows per token.
    t.blockDim = BlocksFor(platform, tokens,
                          uint64_t(tokens) * uint64_t(comm.topo.K) * uint64_t(comm.topo.H) * uint64_t(comm.topo.act_dtype_bytes));
    *workspaceBytes = static_cast<uint64_t>(kernels::CombineRecvWorkspaceBytes());
    *out = t;
    return true;
}

}  // namespace cam::tiling
