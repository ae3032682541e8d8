// Tiling of the cube half of the layer-select grouped matmuls (common/gmm_cube.h: acc = x . W[l][e] in int32), which
// W1's and W2's mixed kernels embed in their own tiling data, passed by value.
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
// The mixed GMM kernels' GM ring per AI core (common/gmm_ring.h): the cube fills one slot while the vector cores
// read the other.
constexpr uint32_t kGmmRingSlots = 2;
// W4A8 (docs/gmm.md §9): an int4 fractal holds 64 K values (16 x 64 for A, 64 x 16 for B, 512 bytes each).
constexpr uint32_t kGmmK0Int4 = 64;
constexpr uint32_t kGmmN0Int4 = 16;  // columns of one packed int4 weight fractal
constexpr uint32_t kGmmInt4Planes = 2;  // the split activation's hi and lo rows: two accumulator planes per group

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
    uint32_t int4;           // 1: W4A8 route (a): x arrives split into int4 hi / lo planes of kSplit columns, the
                             // weights are packed int4 ZN fractals, and each K group leaves two int32 planes
    uint32_t kSplit;         // int4: 64 * ceil(K / 64), columns of one split plane row (and of the packed weight)
    uint32_t wNBlocks;       // int4: ceil(N / 16), weight fractals per 64 K rows of one expert
    uint32_t tk1;            // int8: K per B chunk in L1, a multiple of tk (one B copy per chunk, then tk1 / tk L0
                             // steps from it); int4: tk
    uint32_t tk1a;           // int8 with A streamed: K per A chunk in L1, a multiple of tk (one A copy per chunk,
                             // its boundaries independent of B's); otherwise tk1
};

// Accumulator planes of one K group: the int32 sum (int8), or the hi and lo products (int4).
__aicore__ constexpr uint32_t GmmAccPlanes(uint32_t int4) { return int4 ? kGmmInt4Planes : 1; }

// Bytes of a ring slot that holds one unit (a row tile x one tn-wide n-tile) compactly, the form every mixed GMM
// kernel hands over units in (docs/gmm.md §5): per K group and accumulator plane, tm rows of tn int32, rows tn apart
// (GmmCube::UseSlot's width), 512-byte aligned.
__aicore__ constexpr uint64_t GmmUnitSlotBytes(const GmmCubeTilingData& c) {
    return AlignUp(uint64_t(c.kGroups) * GmmAccPlanes(c.int4) * c.tm * c.tn * 4, 512);
}

__aicore__ constexpr uint64_t GmmExpertWeightBytes(uint32_t kPadded, uint32_t nBlocks) {
    return uint64_t(nBlocks) * kPadded * kGmmNzCols;
}

// int4: bytes of one expert's packed weight, ceil(K/64) x ceil(N/16) fractals of 512 bytes.
__aicore__ constexpr uint64_t GmmExpertWeightBytesInt4(uint32_t kSplit, uint32_t wNBlocks) {
    return uint64_t(kSplit / kGmmK0Int4) * wNBlocks * 512;
}

// Bytes each cube memory needs for tiles (tm, tn, tk); tiling keeps them within the platform's capacities. With
// int4 (route (a)) the A tile is 2·tm rows of int4 (hi, then lo: the bytes of tm int8 rows), the B tile half the
// bytes, and L0C holds both row planes (2·tm x tn int32).
__aicore__ constexpr uint64_t GmmBBytes(uint32_t tn, uint32_t tk, uint32_t int4) {
    return int4 ? uint64_t(tk) * tn / 2 : uint64_t(tk) * tn;
}
__aicore__ constexpr uint64_t GmmL1Bytes(uint32_t tm, uint32_t tn, uint32_t tk, uint32_t int4 = 0) {
    return kGmmL1Buffers * (uint64_t(tm) * tk + GmmBBytes(tn, tk, int4));
}
// L1 with A resident: one tm x K (K padded to the A fractal's k) A buffer, B still double buffered per tk step.
__aicore__ constexpr uint64_t GmmL1BytesResidentA(uint32_t tm, uint32_t tn, uint32_t tk, uint32_t k,
                                                  uint32_t int4 = 0) {
    return uint64_t(tm) * AlignUp(k, int4 ? kGmmK0Int4 : kGmmK0) + kGmmL1Buffers * GmmBBytes(tn, tk, int4);
}
// L1 of the int8 loop with B chunks of tk1 and A chunks of tk1a: A (streamed, double buffered, or resident over
// all of K) and the double buffered B chunk.
__aicore__ constexpr uint64_t GmmL1BytesChunked(uint32_t tm, uint32_t tn, uint32_t tk1, uint32_t tk1a, uint32_t k,
                                                bool resident) {
    return (resident ? uint64_t(tm) * AlignUp(k, kGmmK0) : kGmmL1Buffers * uint64_t(tm) * tk1a) +
           kGmmL1Buffers * uint64_t(tk1) * tn;
}
__aicore__ constexpr uint64_t GmmL0ABytes(uint32_t tm, uint32_t tk) { return kGmmL1Buffers * uint64_t(tm) * tk; }
__aicore__ constexpr uint64_t GmmL0BBytes(uint32_t tn, uint32_t tk, uint32_t int4 = 0) {
    return kGmmL1Buffers * GmmBBytes(tn, tk, int4);
}
__aicore__ constexpr uint64_t GmmL0CBytes(uint32_t tm, uint32_t tn, uint32_t int4 = 0) {
    return uint64_t(GmmAccPlanes(int4)) * tm * tn * 4;
}

}  // namespace cam::kernels
