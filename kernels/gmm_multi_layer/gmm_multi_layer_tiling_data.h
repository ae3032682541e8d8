// Tiling of gmm_multi_layer (W2): the shared cube kernel, then a vector epilogue over the valid rows.
#pragma once

#include <cstdint>

#include "common/ub_math.h"
#include "gmm_int8_cube/gmm_int8_cube_tiling_data.h"
#include "gmm_split_int4/gmm_split_int4_tiling_data.h"

namespace cam::kernels {

struct GmmMultiLayerTilingData {
    GmmCubeTilingData cube;
    uint32_t blockDim;  // AIV cores of the epilogue
    uint32_t chunk;     // output columns per pass, a multiple of 16 (32-byte bf16 runs)
    uint32_t outScaled; // 1: out = bf16(c * outScale), an FFN-side routed scaling factor (docs/gmm.md §9.2)
    float outScale;     // finite fp32 (outScaled == 1)
    GmmSplitInt4TilingData split;  // cube.int4: the activation split launched before the cube kernel
};

constexpr uint32_t kGmmEpilogueColAlign = 16;

// UB bytes the W2 epilogue carves for `chunk` columns; `grouped` (per-group scales along K): one more fp32 row for
// each group's dequantized partial before it is added; `int4` (W4A8): the colsum slice of the recombination.
__aicore__ constexpr uint32_t GmmMultiLayerUbBytes(uint32_t chunk, bool grouped = false, bool int4 = false) {
    return DequantUbBytes(chunk, int4)         // accumulator and w_scale in (common/gmm_epilogue.h)
           + UbBytes(uint64_t(chunk) * 4)      // fp32 working row
           + 2 * UbBytes(uint64_t(chunk) * 2)  // bf16 out, double buffered
           + (grouped ? UbBytes(uint64_t(chunk) * 4) : 0);
}

}  // namespace cam::kernels
