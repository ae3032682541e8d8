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
    GmmSplitInt4TilingData split;  // cube.int4: the activation split launched before the mixed kernel
};

constexpr uint32_t kGmmSwigluColAlign = 32;
// Bytes of one ring slot: the int32 accumulator of tm rows x N, per K group (and per int4 plane).
__aicore__ constexpr uint64_t GmmSwigluSlotBytes(const GmmCubeTilingData& c) {
    return uint64_t(c.kGroups) * GmmAccPlanes(c.int4) * c.tm * c.n * 4;
}
constexpr uint32_t kGmmSwigluScaleBatch = 64;  // y_scale values staged in UB before one copy-out

// UB bytes the W1 epilogue carves for `chunk` output columns; `grouped` (scale groups along K): one more fp32 row;
// `int4` (W4A8): the act and gate colsum slices of the recombination.
__aicore__ constexpr uint32_t GmmSwigluQuantMultiLayerUbBytes(uint32_t chunk, bool grouped = false,
                                                              bool int4 = false) {
    return DequantUbBytes(chunk, int4)           // accumulator (act, then gate) and w_scale in
           + 3 * UbBytes(uint64_t(chunk) * 4)    // fp32 act/s, gate, exp term
           + UbBytes(uint64_t(chunk) * 4)        // |s| / int32 quant scratch
           + UbBytes(uint64_t(chunk) * 2)        // half quant scratch
           + UbBytes(uint64_t(ReduceMaxWorkElems<float>(chunk)) * 4)
           + UbBytes(kUbBlockBytes)              // reduce result
           + 2 * UbBytes(uint64_t(chunk) * 4)    // out queue: int8 y, or fp32 s when spilling
           + UbBytes(kGmmSwigluScaleBatch * 4)   // staged y_scale
           + (grouped ? UbBytes(uint64_t(chunk) * 4) : 0);
}

}  // namespace cam::kernels
