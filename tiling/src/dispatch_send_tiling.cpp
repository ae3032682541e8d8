#include "cam/tiling/dispatch_send_tiling.h"

#include "dataplane_tiling_common.h"

namespace cam::tiling {

using namespace detail;

bool TileDispatchSend(const PlatformInfo& platform, const kernels::dp::CommArgs& comm, int64_t tokens, int64_t layer,
                      bool bf16, kernels::DispatchSendTilingData* out, uint64_t* workspaceBytes, std::string* why) {
    kernels::DispatchSendTilingData t{};
    t.comm = comm;
    t.tokens = tokens;
    t.layer = layer;
    t.key = bf16 ? kernels::kDispatchSendBf16 : kernels::kDispatchSendFp16;
    t.colsPerPass = ColsPerPass(comm.topo.H, kernels::kDispatchSendMaxCols);
    t.passes = static_cast<uint32_t>(kernels::CeilDiv(static_cast<uint64_t>(comm.topo.H), t.colsPerPass));
    t.copyChunkBytes = kernels::kDispatchSendCopyChunk;
    if (kernels::DispatchSendUbBytes(t.colsPerPass, t.copyChunkBytes) > platform.ubBytes) {
        *why = "UB of " + std::to_string(platform.ubBytes) + " bytes cannot hold dispatch_send's working set";
        return false;
    }
    t.blockDim = BlocksFor(platform, tokens);
    *workspaceBytes = static_cast<uint64_t>(kernels::DispatchSendWorkspaceLayout(comm.topo).bytes);
    *out = t;
    return true;
}

}  // namespace cam::tiling
