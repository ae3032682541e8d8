// Tiling of gmm_swiglu_quant_multi_layer (W1): one mixed kernel, the cube's row tiles handed to the vector cores'
// epilogue through a per-AI-core GM ring; W4A8 launches the activation split before it.
#pragma once

#include <cstdint>

#include "common/gmm_cube_tiling_data.h"
#include "common/ub_math.h"
#include "gmm_split_int4/gmm_split_int4_tiling_data.h"

namespace cam::kernels {

struct GmmSwigluQuantMultiLayerTilingData {
    GmmCubeTilingData cube;  // cube.n = N, the full act|gate width
    uint32_t half;           // N / 2: output columns
    uint32_t chunk;          // output columns per pass, a multiple of 32 (32-byte int8 runs)
    uint32_t passes;         // ceil(half / chunk); > 1 spills s to the workspace and re-reads it for the quant
    uint32_t clamp;          // 1: the clamped SwiGLU (swiglu_limit): act = min(act, limit), gate in [-limit, limit]
    float limit;             // swiglu_limit as fp32 (clamp == 1): >= 0, or +inf
    uint32_t unitCols;       // units (GmmSwigluByUnits): columns per piece of a unit's dequant, a multiple of 32 up
                             // to cube.tn; every K group's w_scale (and colsum) slice of a piece stays in UB
    GmmSplitInt4TilingData split;  // cube.int4: the activation split launched before the mixed kernel
};

constexpr uint32_t kGmmSwigluColAlign = 32;
// What the cube hands over (docs/gmm.md §5, "The mixed W1 kernel"): per output channel (one K group) a whole row
// tile, tm rows x N int32 per plane; with scale groups along K one unit at a time (a row tile x one tn-wide n-tile,
// compact as W2's: GmmUnitSlotBytes), whose groups the vector cores dequantize and add into the AI core's fp32 row
// tile buffer (tm x N) before the row tile's SwiGLU and quant.
__aicore__ constexpr bool GmmSwigluByUnits(const GmmCubeTilingData& c) { return c.kGroups > 1; }
// Units the cube hands over per row tile.
__aicore__ constexpr uint32_t GmmSwigluUnitsPerTile(const GmmCubeTilingData& c) {
    return GmmSwigluByUnits(c) ? c.nTiles : 1;
}
// Bytes of one ring slot.
__aicore__ constexpr uint64_t GmmSwigluSlotBytes(const GmmCubeTilingData& c) {
    return GmmSwigluByUnits(c) ? GmmUnitSlotBytes(c) : uint64_t(c.kGroups) * GmmAccPlanes(c.int4) * c.tm * c.n * 4;
}
// Bytes of one AI core's fp32 row tile buffer (units only).
__aicore__ constexpr uint64_t GmmSwigluRowBufBytes(const GmmCubeTilingData& c) {
    return GmmSwigluByUnits(c) ? AlignUp(uint64_t(c.tm) * c.n * 4, 512) : 0;
}
// The kernel's ring region of the workspace: every AI core's kGmmRingSlots slots, then every AI core's row buffer.
__aicore__ constexpr uint64_t GmmSwigluRingBytes(const GmmCubeTilingData& c) {
    return uint64_t(c.blockDim) * (kGmmRingSlots * GmmSwigluSlotBytes(c) + GmmSwigluRowBufBytes(c));
}
constexpr uint32_t kGmmSwigluScaleBatch = 64;  // y_scale values staged in UB before one copy-out

// UB bytes the W1 epilogue carves for `chunk` output columns; `grouped` (scale groups along K): one more fp32 row,
// the double-buffered int32 blocks of the units' dequant (DequantBlock, `chunk` elements each), a block's row scales
// and `groupSlices` elements of every group's w_scale slice of a piece (and with int4 their colsums); `int4` (W4A8):
// the act and gate colsum slices of the recombination.
__aicore__ constexpr uint32_t GmmSwigluQuantMultiLayerUbBytes(uint32_t chunk, bool grouped = false,
                                                              bool int4 = false, uint32_t groupSlices = 0) {
    return DequantUbBytes(chunk, int4)           // accumulator (act, then gate) and w_scale in
           + 3 * UbBytes(uint64_t(chunk) * 4)    // fp32 act/s, gate, exp term
           + UbBytes(uint64_t(chunk) * 4)        // |s| / int32 quant scratch
           + UbBytes(uint64_t(chunk) * 2)        // half quant scratch
           + UbBytes(uint64_t(ReduceMaxWorkElems<float>(chunk)) * 4)
           + UbBytes(kUbBlockBytes)              // reduce result
           + 2 * UbBytes(uint64_t(chunk) * 4)    // out queue: int8 y, or fp32 s when spilling
           + UbBytes(kGmmSwigluScaleBatch * 4)   // staged y_scale
           + (grouped ? 3 * UbBytes(uint64_t(chunk) * 4) + UbBytes(uint64_t(chunk) / 8 * 4) +
                            (int4 ? 2 : 1) * UbBytes(uint64_t(groupSlices) * 4)
                      : 0);
}

}  // namespace cam::kernels
