#include "cam/tiling/dataplane_tiling.h"

#include <algorithm>

namespace cam::tiling {

namespace {

// Rows (or tokens) a block should at least get before another block is worth its launch and SyncAll cost. The
// row counts the FFN ops split are static (capacity), so their blockDim never changes between rounds.
constexpr int64_t kMinRowsPerBlock = 16;

uint32_t BlocksFor(const PlatformInfo& platform, int64_t items) {
    const int64_t want = (items + kMinRowsPerBlock - 1) / kMinRowsPerBlock;
    return static_cast<uint32_t>(std::clamp<int64_t>(want, 1, platform.aivCores));
}

uint32_t ColsPerPass(int64_t h, uint32_t maxCols) {
    return static_cast<uint32_t>(std::min<uint64_t>(kernels::AlignUp(static_cast<uint64_t>(h), 32), maxCols));
}

bool CopyChunkFits(const PlatformInfo& platform, uint32_t chunk, std::string* why) {
    if (2ull * chunk <= platform.ubBytes) return true;
    *why = "UB of " + std::to_string(platform.ubBytes) + " bytes cannot hold the double-buffered copy chunk";
    return false;
}

}  // namespace

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

bool TileDispatchRecv(const PlatformInfo& platform, const kernels::dp::CommArgs& comm,
                      kernels::DispatchRecvTilingData* out, uint64_t* workspaceBytes, std::string* why) {
    kernels::DispatchRecvTilingData t{};
    t.comm = comm;
    t.copyChunkBytes = kernels::kDispatchRecvCopyChunk;
    if (!CopyChunkFits(platform, t.copyChunkBytes, why)) return false;
    t.blockDim = BlocksFor(platform, cam::layout::recv_rows(comm.topo));
    *workspaceBytes = static_cast<uint64_t>(kernels::DispatchRecvWorkspaceBytes());
    *out = t;
    return true;
}

bool TileCombineSend(const PlatformInfo& platform, const kernels::dp::CommArgs& comm,
                     kernels::CombineSendTilingData* out, uint64_t* workspaceBytes, std::string* why) {
    kernels::CombineSendTilingData t{};
    t.comm = comm;
    t.copyChunkBytes = kernels::kCombineSendCopyChunk;
    if (!CopyChunkFits(platform, t.copyChunkBytes, why)) return false;
    t.blockDim = BlocksFor(platform, cam::layout::recv_rows(comm.topo));
    *workspaceBytes = static_cast<uint64_t>(kernels::CombineSendWorkspaceBytes());
    *out = t;
    return true;
}

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
    t.blockDim = BlocksFor(platform, tokens);
    *workspaceBytes = static_cast<uint64_t>(kernels::CombineRecvWorkspaceBytes());
    *out = t;
    return true;
}

}  // namespace cam::tiling
