#include "cam/tiling/dispatch_send_tiling.h"

#include "dataplane_tiling_common.h"

namespace cam::tiling {

using namespace detail;

bool TileDispatchSend(const PlatformInfo& platform, const kernels::dp::CommArgs& comm, int64_t tokens, int64_t layer,
                      bool bf16, bool placed, kernels::DispatchSendTilingData* out, uint64_t* workspaceBytes,
                      std::string* why) {
    kernels::DispatchSendTilingData t{};
    t.comm = comm;
    t.tokens = tokens;
    t.layer = layer;
    t.key = bf16 ? kernels::kDispatchSendBf16 : kernels::kDispatchSendFp16;
    t.colsPerPass = ColsPerPass(comm.topo.H, kernels::kDispatchSendMaxCols);
    t.passes = static_cast<uint32_t>(kernels::CeilDiv(static_cast<uint64_t>(comm.topo.H), t.colsPerPass));
    t.copyChunkBytes = kernels::kDispatchSendCopyChunk;
    t.placed = placed ? 1u : 0u;
    if (kernels::DispatchSendUbBytes(t.colsPerPass, t.copyChunkBytes, placed) > platform.ubBytes) {
        *why = "UB of " + std::to_string(platform.ubBytes) + " bytes cannot hold dispatch_send's working set";
        return false;
    }
    // The round's tables go to UB when they fit beside the working set (every usual topology); otherwise (E up to
    // 2^20 experts, a large Bmax x F) block 0 builds them in the workspace with scalar stores.
    const CamTopology& topo = comm.topo;
    const uint64_t base = kernels::DispatchSendUbBytes(t.colsPerPass, t.copyChunkBytes, placed);
    const uint64_t tables = kernels::DispatchSendTablesUbBytes(cam::layout::plane_slots(topo), topo.F, tokens, topo.K);
    t.tablesInUb = base + tables <= platform.ubBytes ? 1u : 0u;
    // The bytes a block reads: its tokens' activations (each is quantized once, whatever the fan-out).
    t.blockDim = BlocksFor(platform, tokens, uint64_t(tokens) * uint64_t(comm.topo.H) * uint64_t(comm.topo.act_dtype_bytes));
    *workspaceBytes = static_cast<uint64_t>(kernels::DispatchSendWorkspaceLayout(comm.topo).bytes);
    *out = t;
    return true;
}

}  // namespace cam::tiling
