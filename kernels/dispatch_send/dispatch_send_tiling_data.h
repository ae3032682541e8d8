// Tiling of dispatch_send, passed by value to the kernel. Filled by tiling/src/dispatch_send_tiling.cpp.
#pragma once

#include <cstdint>

#include "common/dataplane_args.h"
#include "common/ub_math.h"

namespace cam::kernels {

enum DispatchSendKey : uint32_t { kDispatchSendBf16 = 0, kDispatchSendFp16 = 1 };

struct DispatchSendTilingData {
    dp::CommArgs comm;
    int64_t tokens;        // B of this round
    int64_t layer;
    uint32_t key;
    uint32_t blockDim;
    uint32_t colsPerPass;  // a token row is quantized in passes of this many columns (multiple of 32)
    uint32_t copyChunkBytes;
    uint32_t tablesInUb;   // 1: every block routes its own tokens with its tables in UB (they fit next to the
                           // working set); 0: block 0 routes the whole round in the workspace with scalar stores
                           // (large E, Bmax or F)
    uint32_t placed;       // 1: rows go where the placement table says (§15); 0: the contiguous placement
    uint32_t placeUbWords; // placed: int64 words of the layer's table a block keeps in UB: all of them (resident for
                           // the whole launch) when they fit, else a window of kTableWindowElems / 2
    uint32_t staggered;    // 1 (more than one Attention rank): rows go out destination-major, this rank's FFN ranks
                           // in turn from its own (docs/protocol.md §6.1); 0: token-major, each token to all at once
    uint32_t stageTokens;  // staggered: a block's tokens per group (quantized rows staged in the workspace)
    uint32_t stageGroups;  // staggered: groups every block runs (the same count: each FFN rank's step ends in a SyncAll)
};

constexpr uint32_t kDispatchSendMaxCols = 4096;
// The narrowest quant pass tiling splits a row into to keep the placement rows and the routing tables in UB.
constexpr uint32_t kDispatchSendMinCols = 1024;
constexpr uint32_t kDispatchSendCopyChunk = 16384;
// The staggered order's staging in the workspace (every block's group of quantized rows) is kept at most this large;
// a round whose blocks' shares do not fit goes out in more groups.
constexpr uint64_t kDispatchSendStageBytes = uint64_t(32) << 20;
// ... and a group holds at most this many of a block's tokens (the steps' granularity: 64 rows of DeepSeek-V3's
// 7168 bytes on 48 blocks stage 21 MiB).
constexpr uint64_t kDispatchSendStageTokens = 64;
static_assert(kDispatchSendStageTokens <= dp::kTableWindowElems, "a group's scales fit the scale window");

// A block's routing summary (int32, one row per routing block, docs/protocol.md §6.1): rows per plane slot
// (S = F * R of them), distinct tokens per FFN rank, then the verdict words; each part from a 32-byte block, so
// the vector unit adds whole rows. The exclusive sum of the rows before a block's is where its rows and token slots
// start; the sum of all rows is the round's.
struct DispatchSendSummary {
    int64_t tokensAt;  // first word of the distinct-token counts
    int64_t flagsAt;   // first verdict word
    int64_t words;     // row length, a multiple of 8
};
constexpr int64_t kSummaryBadIds = 0;        // verdict word: ids out of range in the block's tokens
constexpr int64_t kSummaryBadPlacement = 1;  // verdict word: a placement word out of bounds in the block's experts
__aicore__ constexpr DispatchSendSummary DispatchSendSummaryLayout(int64_t S, int64_t F) {
    return DispatchSendSummary{int64_t(AlignUp(uint64_t(S), 8)), int64_t(AlignUp(uint64_t(S), 8) + AlignUp(uint64_t(F), 8)),
                               int64_t(AlignUp(uint64_t(S), 8) + AlignUp(uint64_t(F), 8)) + 8};
}

// Workspace: the routing blocks' summaries, the round's tables (filled by scalar stores when block 0 routes alone),
// the index tables (the routing blocks' runs of entries) and the records, which every block then copies out by MTE.
struct DispatchSendWorkspace {
    int64_t summaryOff;   // int32[blocks][summary words]
    int64_t destsOff;     // int32[Bmax * K]: plane slot of row t * K + k, or -1 (block 0 routing alone)
    int64_t slotsOff;     // int32[Bmax * F]: token slot of token t on FFN rank f, or -1 (block 0 routing alone)
    int64_t indexOff;     // F x region_index_entries index entries, laid out as in the region
    int64_t headerOff;    // F x header_bytes records
    int64_t stageOff;     // staggered and quantized: int8 [blocks][stageTokens][dispatch_row_bytes] staged rows
    int64_t bytes;
};

// Bytes of the staged rows: a quantized row waits there between its quant pass and its steps (the activations of an
// unquantized round are copied from x itself).
__aicore__ inline int64_t DispatchSendStageBytes(const CamTopology& t, int64_t blocks, int64_t stageTokens) {
    return t.quantized ? blocks * stageTokens * cam::layout::dispatch_row_bytes(t) : 0;
}

__aicore__ inline DispatchSendWorkspace DispatchSendWorkspaceLayout(const CamTopology& t, int64_t blocks,
                                                                    int64_t stageTokens) {
    DispatchSendWorkspace w{};
    const DispatchSendSummary s = DispatchSendSummaryLayout(cam::layout::plane_slots(t), t.F);
    w.summaryOff = dp::kWsDecisionBytes;
    w.destsOff = w.summaryOff + int64_t(AlignUp(uint64_t(4 * s.words * (blocks > 0 ? blocks : 1)), kLine));
    w.slotsOff = w.destsOff + int64_t(AlignUp(4 * t.Bmax * t.K, kLine));
    w.indexOff = w.slotsOff + int64_t(AlignUp(4 * t.Bmax * t.F, kLine));
    w.headerOff = w.indexOff + t.F * cam::layout::index_bytes(t);
    w.stageOff = int64_t(AlignUp(uint64_t(w.headerOff + t.F * cam::layout::header_bytes(t)), kLine));
    w.bytes = w.stageOff + DispatchSendStageBytes(t, blocks, stageTokens);
    return w;
}

// UB of a routing block's tables (tablesInUb) for at most `tokens` tokens of its own: four summary rows (its own,
// the sum before it, the running sum, the row being added), the running position per plane slot, int32 destination
// slots [tokens x K] and token slots [tokens x F], and its index entries (int32 pairs) grouped by plane slot, each
// slot's run from a 32-byte UB block (so it leaves by one DataCopyPad): tokens * K entries plus 3 padding entries
// per plane slot. A table of `bytes` in UB: whole 32-byte blocks, at least one (a block may have no tokens).
__aicore__ constexpr uint32_t DispatchSendTableUbBytes(uint64_t bytes) {
    return bytes == 0 ? kUbBlockBytes : UbBytes(bytes);
}
__aicore__ constexpr uint64_t DispatchSendTablesUbBytes(int64_t S, int64_t F, int64_t tokens, int64_t K) {
    return 4 * uint64_t(DispatchSendTableUbBytes(uint64_t(4 * DispatchSendSummaryLayout(S, F).words))) +
           DispatchSendTableUbBytes(uint64_t(4 * S)) + DispatchSendTableUbBytes(uint64_t(4 * tokens * K)) +
           DispatchSendTableUbBytes(uint64_t(4 * tokens * F)) +
           DispatchSendTableUbBytes(uint64_t(8 * (tokens * K + 3 * S)));
}
// Index entries per 32-byte UB block: a plane slot's run of entries starts at a multiple of this.
constexpr int64_t kIndexEntriesPerUbBlock = 4;

// The staggered order's row stream: two buffers of a row (at most a copy chunk each), 0 token-major.
__aicore__ constexpr uint32_t DispatchSendStreamChunk(uint32_t staggered, int64_t rowBytes, uint32_t copyChunkBytes) {
    return staggered == 0 ? 0u : uint64_t(rowBytes) < copyChunkBytes ? UbBytes(uint64_t(rowBytes)) : copyChunkBytes;
}

// UB the kernel carves: the quant working set (16-bit activations), the ids window, a group's scales and one rank's
// run of them, the placement table's words (placeUbWords, 0 without a table), the table mover, the staggered
// order's row stream (streamChunk per buffer, 0 token-major) and the signal word.
__aicore__ constexpr uint32_t DispatchSendUbBytes(uint32_t colsPerPass, uint32_t copyChunkBytes, uint32_t placeUbWords,
                                                  uint32_t streamChunk) {
    return QuantWorkingSetUbBytes(colsPerPass, 2) + 3 * dp::kTableWindowUbBytes +
           (placeUbWords > 0 ? UbBytes(uint64_t(placeUbWords) * 8) : 0) + 2 * UbBytes(copyChunkBytes) +
           2 * streamChunk + dp::kSignalUbBytes + dp::kSealUbBytes;
}

}  // namespace cam::kernels
