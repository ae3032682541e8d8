// Tiling of gmm_multi_layer (W2): one mixed kernel, the cube's tm x tn units handed to the vector cores' block
// epilogue through a per-AI-core GM ring; W4A8 launches the activation split before it.
#pragma once

#include <cstdint>

#include "common/gmm_cube_tiling_data.h"
#include "common/ub_math.h"
#include "gmm_split_int4/gmm_split_int4_tiling_data.h"

namespace cam::kernels {

struct GmmMultiLayerTilingData {
    GmmCubeTilingData cube;  // cube.blockDim AI cores
    uint32_t outScaled; // 1: out = bf16(c * outScale), an FFN-side routed scaling factor (docs/gmm.md §9.2)
    float outScale;     // finite fp32 (outScaled == 1)
    GmmSplitInt4TilingData split;  // cube.int4: the activation split launched before the mixed kernel
    uint32_t pitch;     // UB row pitch of the block epilogue, elements: cube.tn rounded up to 16
    uint32_t blockRows; // rows per block epilogue pass (UB-bound), at most ceil(cube.tm / 2)
};

constexpr uint32_t kGmmEpilogueColAlign = 16;

// The mixed kernel's ring (kGmmRingSlots per AI core, common/gmm_ring.h), alternating unit by unit, so the unit the
// cube computes never shares a slot with the one its vector cores may still be reading. A slot holds one unit
// compactly (GmmUnitSlotBytes, common/gmm_cube_tiling_data.h): per K group and plane tm rows of tn int32, rows tn
// apart, whatever the unit's n-tile, so a slot's units reuse the same lines (L2-resident, docs/gmm.md §5).
__aicore__ constexpr uint64_t GmmMultiLayerSlotBytes(const GmmCubeTilingData& c) { return GmmUnitSlotBytes(c); }

// UB bytes of the block epilogue for blocks of `rows` x `pitch`: the int32 block in (double buffered), the fp32
// block, with K groups one more fp32 block (a group's partial), the bf16 block out (double buffered), the w_scale
// slice of `pitch` columns and the row tile's `tm` row scales; `int4` (W4A8): the colsum slice (the two int32 buffers
// then hold a block's hi and lo products).
__aicore__ constexpr uint32_t GmmMultiLayerBlockUbBytes(uint32_t rows, uint32_t pitch, uint32_t tm, bool grouped,
                                                        bool int4 = false) {
    return 2 * UbBytes(uint64_t(rows) * pitch * 4)           // int32 in (common/gmm_epilogue.h, DequantBlock)
           + (int4 ? UbBytes(uint64_t(pitch) * 4) : 0)       // colsum slice (ColsumSlice)
           + UbBytes(uint64_t(rows) * pitch * 4)             // fp32 block
           + (grouped ? UbBytes(uint64_t(rows) * pitch * 4) : 0)
           + 2 * UbBytes(uint64_t(rows) * pitch * 2)         // bf16 out
           + UbBytes(uint64_t(pitch) * 4)                    // w_scale slice (ScaleSlice)
           + UbBytes(uint64_t(tm) * 4);                      // row scales
}

}  // namespace cam::kernels
