#include "cam/tiling/dispatch_send_tiling.h"

#include "dataplane_tiling_common.h"

namespace cam::tiling {

using namespace detail;

bool TileDispatchSend(const PlatformInfo& platform, const kernels::dp::CommArgs& comm, int64_t tokens, int64_t layer,
                      bool bf16, bool placed, kernels::DispatchSendTilingData* out, uint64_t* workspaceBytes,
                      std::string* why) {
    kernels::DispatchSendTilingData t{};
    const CamTopology& topo = comm.topo;
    t.comm = comm;
    t.tokens = tokens;
    t.layer = layer;
    t.key = bf16 ? kernels::kDispatchSendBf16 : kernels::kDispatchSendFp16;
    t.colsPerPass = ColsPerPass(topo.H, kernels::kDispatchSendMaxCols);
    t.copyChunkBytes = kernels::kDispatchSendCopyChunk;
    t.placed = placed ? 1u : 0u;
    // More than one Attention rank: every sender's writes go destination-major from its own FFN rank on, so at any
    // moment the senders write different receivers (docs/protocol.md §6.1).
    t.staggered = cam::layout::attention_ranks(topo) > 1 ? 1u : 0u;
    const uint32_t streamChunk = kernels::DispatchSendStreamChunk(
        t.staggered, topo.H * cam::layout::dispatch_elem_bytes(topo), t.copyChunkBytes);
    // The bytes a block reads: its tokens' activations (each is quantized once, whatever the fan-out).
    t.blockDim = BlocksFor(platform, tokens, uint64_t(tokens) * uint64_t(topo.H) * uint64_t(topo.act_dtype_bytes));
    // The UB budget, decided once here: the layer's placement rows resident for the whole launch, and every block
    // routing its own tokens with its tables in UB (every usual topology), each kept when it fits, the tables first.
    // Otherwise the placement rows are read through a window, and block 0 routes the whole round in the workspace
    // with scalar stores (E up to 2^20 experts, a large Bmax x F).
    const uint64_t tableWords = placed ? uint64_t(topo.E * cam::layout::placement_width(topo)) : 0;
    const uint64_t windowWords = placed ? std::min<uint64_t>(tableWords, kernels::dp::kTableWindowElems / 2) : 0;
    const int64_t share = static_cast<int64_t>(kernels::CeilDiv(static_cast<uint64_t>(tokens), t.blockDim));
    const uint64_t tables =
        kernels::DispatchSendTablesUbBytes(cam::layout::plane_slots(topo), topo.F, share, topo.K);
    auto base = [&](uint64_t placeWords) {
        return uint64_t(kernels::DispatchSendUbBytes(t.colsPerPass, t.copyChunkBytes, static_cast<uint32_t>(placeWords),
                                                     streamChunk));
    };
    if (!WorkingSetFits(platform, base(windowWords), "dispatch_send", why)) return false;
    const bool residentFits = tableWords <= UINT32_MAX;
    // A row longer than a pass is read twice whatever the pass width (quant.h), so narrower passes cost only more,
    // shorter instructions, while a window over the table costs a refill per lookup: when the resident rows and the
    // tables miss UB at the widest pass, the row is split into one more pass of equal width at a time (down to
    // kDispatchSendMinCols) before the rows are given up for a window or the routing to block 0 alone.
    const uint32_t widest = t.colsPerPass;
    bool resident = residentFits && base(tableWords) + tables <= platform.ubBytes;
    for (int64_t passes = static_cast<int64_t>(kernels::CeilDiv(static_cast<uint64_t>(topo.H), widest));
         residentFits && !resident; ++passes) {
        const uint32_t cols = ColsPerPass(
            static_cast<int64_t>(kernels::CeilDiv(static_cast<uint64_t>(topo.H), static_cast<uint64_t>(passes))), widest);
        if (cols < kernels::kDispatchSendMinCols) break;
        t.colsPerPass = cols;
        resident = base(tableWords) + tables <= platform.ubBytes;
    }
    if (resident) {
        t.placeUbWords = static_cast<uint32_t>(tableWords);
        t.tablesInUb = 1;
    } else if (t.colsPerPass = widest; base(windowWords) + tables <= platform.ubBytes) {
        t.placeUbWords = static_cast<uint32_t>(windowWords);
        t.tablesInUb = 1;
    } else {
        t.placeUbWords = static_cast<uint32_t>(residentFits && base(tableWords) <= platform.ubBytes ? tableWords
                                                                                                   : windowWords);
        t.tablesInUb = 0;
    }
    // The staggered order: a block's share goes in groups of at most kDispatchSendStageTokens whose quantized rows
    // the workspace stages (kDispatchSendStageBytes over every block; the scale window holds more).
    if (t.staggered != 0) {
        const uint64_t perToken = uint64_t(t.blockDim) * uint64_t(cam::layout::dispatch_row_bytes(topo));
        const uint64_t byBytes = topo.quantized ? std::max<uint64_t>(1, kernels::kDispatchSendStageBytes / perToken)
                                                : uint64_t(kernels::dp::kTableWindowElems);
        const uint64_t stage = std::min<uint64_t>({byBytes, kernels::kDispatchSendStageTokens,
                                                   std::max<uint64_t>(1, uint64_t(share))});
        t.stageTokens = static_cast<uint32_t>(stage);
        t.stageGroups = static_cast<uint32_t>(kernels::CeilDiv(static_cast<uint64_t>(share), stage));
    }
    *workspaceBytes =
        static_cast<uint64_t>(kernels::DispatchSendWorkspaceLayout(topo, t.blockDim, t.stageTokens).bytes);
    *out = t;
    return true;
}

}  // namespace cam::tiling
