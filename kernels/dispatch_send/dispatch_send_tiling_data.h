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
    uint32_t passes;
    uint32_t copyChunkBytes;
    uint32_t tablesInUb;   // 1: the round's tables (counts, slots, index entries) are built in UB (they fit next
                           // to the working set); 0: in the workspace with scalar stores (large E, Bmax or F)
    uint32_t placed;       // 1: rows go where the placement table says (§15); 0: the contiguous placement
};

constexpr uint32_t kDispatchSendMaxCols = 4096;
constexpr uint32_t kDispatchSendCopyChunk = 16384;

// Workspace: block 0 builds the round's tables here with scalar stores, then every block copies them out with MTE.
struct DispatchSendWorkspace {
    int64_t countsOff;    // int64[F * R]: rows per plane slot, then the running index position of each slot
    int64_t destsOff;     // int32[Bmax * K]: plane slot of row t * K + k, or -1
    int64_t tokensOff;    // int64[F]: distinct tokens per FFN rank
    int64_t slotsOff;     // int32[Bmax * F]: token slot of token t on FFN rank f, or -1
    int64_t indexOff;     // F x region_index_entries index entries, laid out as in the region
    int64_t headerOff;    // F x header_bytes records
    int64_t bytes;
};

__aicore__ inline DispatchSendWorkspace DispatchSendWorkspaceLayout(const CamTopology& t) {
    DispatchSendWorkspace w{};
    w.countsOff = dp::kWsDecisionBytes;
    w.destsOff = w.countsOff + int64_t(AlignUp(8 * cam::layout::plane_slots(t), kLine));
    w.tokensOff = w.destsOff + int64_t(AlignUp(4 * t.Bmax * t.K, kLine));
    w.slotsOff = w.tokensOff + int64_t(AlignUp(8 * t.F, kLine));
    w.indexOff = w.slotsOff + int64_t(AlignUp(4 * t.Bmax * t.F, kLine));
    w.headerOff = w.indexOff + t.F * cam::layout::index_bytes(t);
    w.bytes = w.headerOff + t.F * cam::layout::header_bytes(t);
    return w;
}

// UB of the round's tables when they are built there (tablesInUb): int32 counts / running positions per plane slot
// (S = F * R of them), int32 distinct tokens per FFN rank, int32 slots [tokens x F], int32 destination slots
// [tokens x K], and every FFN rank's index entries (int32 pairs)
// one after another, each rank's run starting on a 32-byte UB block (so it leaves by one DataCopyPad): at most
// tokens * K entries in all plus 3 padding entries per rank.
// A table of `bytes` in UB: whole 32-byte blocks, at least one (a round may have no tokens).
__aicore__ constexpr uint32_t DispatchSendTableUbBytes(uint64_t bytes) {
    return bytes == 0 ? kUbBlockBytes : UbBytes(bytes);
}
__aicore__ constexpr uint64_t DispatchSendTablesUbBytes(int64_t S, int64_t F, int64_t tokens, int64_t K) {
    return uint64_t(DispatchSendTableUbBytes(uint64_t(4 * S))) + DispatchSendTableUbBytes(uint64_t(4 * F)) +
           DispatchSendTableUbBytes(uint64_t(4 * tokens * K)) +
           DispatchSendTableUbBytes(uint64_t(4 * tokens * F)) + DispatchSendTableUbBytes(uint64_t(8 * (tokens * K + 3 * F)));
}
// Index entries per 32-byte UB block: a rank's run of entries starts at a multiple of this.
constexpr int64_t kIndexEntriesPerUbBlock = 4;

// UB the kernel carves: the quant working set (16-bit activations), the ids window, a group's scales and one rank's
// run of them, the placement table's window when placed, the table mover and the signal word.
__aicore__ constexpr uint32_t DispatchSendUbBytes(uint32_t colsPerPass, uint32_t copyChunkBytes, bool placed) {
    return QuantWorkingSetUbBytes(colsPerPass, 2) + (placed ? 4 : 3) * dp::kTableWindowUbBytes +
           2 * UbBytes(copyChunkBytes) + dp::kSignalUbBytes + dp::kSealUbBytes;
}

}  // namespace cam::kernels
