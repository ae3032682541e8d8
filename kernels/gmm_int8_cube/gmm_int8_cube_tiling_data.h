// Tiling of the int8 grouped-matmul cube kernel shared by W1 and W2 (acc = x . W[l][e] in int32), passed by value.
// Filled by tiling/src/gmm_tiling.cpp. Tile sizes are fixed on the host; the work-unit list is derived on the
// device from group_list (docs/gmm.md §5), because the host never sees the group sizes.
#pragma once

#include <cstdint>

#include "common/group_table.h"
#include "common/ub_math.h"

namespace cam::kernels {

constexpr uint32_t kGmmM0 = 16;      // rows of a cube fractal
constexpr uint32_t kGmmK0 = 32;      // int8 k extent of a cube fractal (one 32-byte C0 block)
constexpr uint32_t kGmmNzRows = 16;  // K padding of the prepacked FRACTAL_NZ weight (torch_npu's layout)
constexpr uint32_t kGmmNzCols = 32;  // N extent of one NZ column block
constexpr uint32_t kGmmL1Buffers = 2;  // A1/B1 and A2/B2 are double buffered
constexpr uint32_t kGmmMaxK = 65535;   // ND->NZ copy row pitch (srcDValue) is 16 bits

struct GmmCubeTilingData {
    uint32_t m;              // row capacity M of x and of the int32 accumulator
    uint32_t k;              // K
    uint32_t n;              // N (full output width of the matmul)
    uint32_t kPadded;        // 16 * ceil(K / 16): rows of one NZ column block in GM
    uint32_t nBlocks;        // ceil(N / 32): NZ column blocks per expert
    uint32_t experts;        // E_local
    uint32_t layers;         // L
    uint32_t groupListType;  // 0 cumsum, 1 counts, 2 group table (common/gmm_groups.h)
    uint32_t groups;         // groups walked: E_local (types 0/1) or the group table's rows
    uint32_t blockDim;       // AIC cores launched
    uint32_t tm;             // rows per unit, multiple of 16
    uint32_t tn;             // columns per unit, multiple of 32
    uint32_t tk;             // k per L0 step, multiple of 32
    uint32_t nTiles;         // ceil(N / tn)
    uint32_t aResident;      // 1: a unit's whole A (tm x K) sits in L1 and is reused by the next unit of the same
                             // rows; 0: A streams through L1 one tk step at a time with B
    uint32_t kGroup;         // K rows per scale group (a multiple of tk): one int32 partial [M, N] each, in order
    uint32_t kGroups;        // K / kGroup; 1 for per-output-channel scales (kGroup == K)
};

__aicore__ constexpr uint64_t GmmExpertWeightBytes(uint32_t kPadded, uint32_t nBlocks) {
    return uint64_t(nBlocks) * kPadded * kGmmNzCols;
}

// Bytes each cube memory needs for tiles (tm, tn, tk); tiling keeps them within the platform's capacities.
__aicore__ constexpr uint64_t GmmL1Bytes(uint32_t tm, uint32_t tn, uint32_t tk) {
    return kGmmL1Buffers * (uint64_t(tm) * tk + uint64_t(tk) * tn);
}
// L1 with A resident: one tm x K (K padded to 32) A buffer, B still double buffered per tk step.
__aicore__ constexpr uint64_t GmmL1BytesResidentA(uint32_t tm, uint32_t tn, uint32_t tk, uint32_t k) {
    return uint64_t(tm) * AlignUp(k, kGmmK0) + kGmmL1Buffers * uint64_t(tk) * tn;
}
__aicore__ constexpr uint64_t GmmL0ABytes(uint32_t tm, uint32_t tk) { return kGmmL1Buffers * uint64_t(tm) * tk; }
__aicore__ constexpr uint64_t GmmL0BBytes(uint32_t tn, uint32_t tk) { return kGmmL1Buffers * uint64_t(tk) * tn; }
__aicore__ constexpr uint64_t GmmL0CBytes(uint32_t tm, uint32_t tn) { return uint64_t(tm) * tn * 4; }

}  // namespace cam::kernels
