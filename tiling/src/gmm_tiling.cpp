#include "cam/tiling/gmm_tiling.h"

#include <algorithm>
#include <limits>

namespace cam::tiling {

using kernels::AlignUp;
using kernels::CeilDiv;

namespace {

// Tiles shrink to the problem and the platform's buffers from these preferred sizes. 256-deep L0 steps (W2's W4A8
// tiles). int8: L1 takes K in chunks of up to kPreferredTk1 so that one A copy and one B copy feed several L0 steps
// (a copy's fixed cost is shared, docs/gmm.md §5); int4: one copy per step.
constexpr uint32_t kPreferredTk = 256;
// The wide n-tiles: 256 columns (the mixed W1 kernel's, both formats) and, with int8, 128-deep steps.
constexpr uint32_t kWideTn = 256;
constexpr uint32_t kWideTk = 128;
constexpr uint32_t kPreferredTk1 = 1024;
// The tall form (the mixed W2 kernel's, W8A8): a 160 x 192 C tile (120 KiB of L0C) and 160-deep steps (L0A 2 x 50 KiB, L0B
// 2 x 60 KiB): row tiles of up to 160 rows, so a group of 129-160 rows is one row tile, not a full one and a sliver,
// and streams its weights once (W2's mixed kernel: each row tile streams its expert's weight strip).
constexpr uint32_t kTallTm = 160;
constexpr uint32_t kTallTn = 192;
constexpr uint32_t kTallTk = 160;
// W2's taller form, for groups that the tall one would cut into more row tiles: a 192 x 160 C tile (120 KiB of L0C)
// with the same steps; 192 rows of x at K = 2048 still stay resident in L1 next to two 320-deep B chunks. Narrower
// n-tiles pay Fixpipe's per-row cost more often, so it is taken only where it saves a weight read.
constexpr uint32_t kTallerTm = 192;
constexpr uint32_t kTallerTn = 160;
// The mixed W1 kernel's row tiles: at most kMixedTmMax rows of one group (balanced over the group's tiles, docs/gmm.md
// §5), as wide as the rest of L0C allows (up to kWideTn), 128-deep steps. Each row tile streams its expert's whole
// weight and each n-tile its rows of x, so taller tiles trade weight reads for x reads.
constexpr uint32_t kMixedTmMax = 144;
// The mixed W1 kernel's B chunks in L1 (four 128-deep steps); its streamed A chunks are the longest multiple of tk
// that fits beside them: an A copy pays a burst per row (up to 144) where B's pays one per 32-column block (7), so
// A's copies are made the fewer (docs/gmm.md §5).
constexpr uint32_t kMixedTk1B = 512;

// The mixed W1 kernel's W4A8 row tiles: L0C holds each tile's hi and lo planes, so 64 rows x 256 columns fill it;
// 192-deep steps leave 64 rows of x at DeepSeek-V3's K = 7168 (64 x 7168 bytes of int4 pairs) resident in L1 beside
// two B steps, so a row tile reads x once rather than once per n-tile (docs/gmm.md §9).
constexpr uint32_t kW4a8W1Tm = 64;
constexpr uint32_t kW4a8W1Tk = 192;
// The mixed W2 kernel's W4A8 tiles: 96 x 160 (2 x 96 x 160 int32, 120 KiB of L0C). Row tiles are sized to their
// group, so a group of 129-192 rows is two tiles with 128 rows or 96 alike, and the wider n-tiles load each row
// tile's x from L1 into L0A fewer times than 128 x 128 would. The model predicts them faster at DeepSeek-V3's
// 4096-16384-token rounds, even at 16384 where 520 rows take six row tiles instead of five (docs/gmm.md §9.5).
constexpr uint32_t kW4a8W2Tm = 96;
constexpr uint32_t kW4a8W2Tn = 160;

bool Fits(const PlatformInfo& p, uint32_t tm, uint32_t tn, uint32_t tk, uint32_t int4) {
    return kernels::GmmL1Bytes(tm, tn, tk, int4) <= p.l1Bytes && kernels::GmmL0ABytes(tm, tk) <= p.l0aBytes &&
           kernels::GmmL0BBytes(tn, tk, int4) <= p.l0bBytes && kernels::GmmL0CBytes(tm, tn, int4) <= p.l0cBytes;
}

// Largest multiple of `align` (at most `cap`) whose UB need fits.
template <typename F>
uint32_t LargestChunk(uint32_t ub, uint32_t align, uint32_t cap, F bytes) {
    uint32_t best = 0;
    for (uint32_t step = 1u << 20; step >= align; step /= 2) {
        while (best + step <= cap && bytes(best + step) <= ub) best += step;
    }
    return best;
}

}  // namespace

namespace {

// Preferred tile sizes before they shrink to the problem and the platform's buffers; fillL0c: tn is the widest
// multiple of 32 (up to tn) whose tm x tn int32 C tile fits L0C, taken before anything shrinks; tk1b (int8, A
// streamed): the B chunk, with A in chunks of the longest multiple of tk that fits (0: A and B chunks equal).
struct GmmCubeTiles {
    uint32_t tm, tn, tk;
    bool fillL0c;
    uint32_t tk1b = 0;
};

bool TileGmmCubeWith(const PlatformInfo& platform, const GmmShape& s, kernels::GmmCubeTilingData* out,
                     std::string* why, GmmCubeTiles pref);

}  // namespace

namespace {

bool TileGmmCubeWith(const PlatformInfo& platform, const GmmShape& s, kernels::GmmCubeTilingData* out,
                     std::string* why, GmmCubeTiles pref) {
    constexpr uint64_t kMax32 = std::numeric_limits<uint32_t>::max();
    if (s.k < 1 || s.k > kernels::kGmmMaxK) {
        *why = "K = " + std::to_string(s.k) + " outside [1, " + std::to_string(kernels::kGmmMaxK) + "]";
        return false;
    }
    if (s.n < 1 || s.m > kMax32 / 2 || s.n > kMax32 / 2 || s.m * s.n > (uint64_t(1) << 40)) {
        *why = "M x N = " + std::to_string(s.m) + " x " + std::to_string(s.n) + " is outside the supported range";
        return false;
    }
    if (s.experts < 1 || s.experts > 65535 || s.layers < 1 || s.layers > 65535) {
        *why = "E_local = " + std::to_string(s.experts) + " and L = " + std::to_string(s.layers) +
               " must each be in [1, 65535]";
        return false;
    }
    if (s.groupListType < 0 || s.groupListType > 2) {
        *why = "group_list_type must be 0 (cumsum), 1 (counts) or 2 (group table), got " +
               std::to_string(s.groupListType);
        return false;
    }
    const uint64_t groups = s.groupListType == kernels::kGroupListTable ? s.groups : s.experts;
    if (groups > kMax32 / kernels::kGroupWords) {
        *why = "the group table has " + std::to_string(groups) + " groups, more than supported";
        return false;
    }
    // An int4 fractal holds 64 K values, so with int4 weights a k step, and every scale group, is a multiple of 64.
    const uint32_t k0 = s.int4 ? kernels::kGmmK0Int4 : kernels::kGmmK0;
    const uint32_t int4 = s.int4 ? 1u : 0u;
    if (s.kGroups < 1 || s.k % s.kGroups != 0 || (s.kGroups > 1 && (s.k / s.kGroups) % k0 != 0)) {
        *why = "K = " + std::to_string(s.k) + " in " + std::to_string(s.kGroups) +
               " scale groups: each group must be a multiple of " + std::to_string(k0) + " rows of K" +
               (s.int4 ? " (int4 weights: an int4 fractal holds 64 K values)" : "");
        return false;
    }
    const uint64_t kSplit = AlignUp(s.k, kernels::kGmmK0Int4);
    // Per output channel the int4 loop runs over the 64-padded K as one group.
    const uint64_t kGroup = s.int4 && s.kGroups == 1 ? kSplit : s.k / s.kGroups;
    uint32_t tm = static_cast<uint32_t>(std::min<uint64_t>(pref.tm, AlignUp(std::max<uint64_t>(s.m, 1), 16)));
    uint32_t tn = static_cast<uint32_t>(std::min<uint64_t>(pref.tn, AlignUp(s.n, 32)));
    uint32_t tk = static_cast<uint32_t>(std::min<uint64_t>(pref.tk, AlignUp(s.k, k0)));
    if (pref.fillL0c) {
        const uint64_t widest = platform.l0cBytes / kernels::GmmL0CBytes(tm, 1, int4) / 32 * 32;
        tn = static_cast<uint32_t>(std::min<uint64_t>(tn, std::max<uint64_t>(widest, 32)));
    }
    // Shrink k first (costs only more steps), then n, then m, until every buffer fits.
    while (!Fits(platform, tm, tn, tk, int4)) {
        if (tk > k0) tk -= k0;
        else if (tn > 32) tn -= 32;
        else if (tm > 16) tm -= 16;
        else {
            *why = "the cube buffers of this platform cannot hold one 16 x 32 x 32 int8 tile";
            return false;
        }
    }
    // A k step never straddles two scale groups: each group's partial is flushed on its own.
    if (s.kGroups > 1) {
        while (kGroup % tk != 0) tk -= k0;
    }
    kernels::GmmCubeTilingData t{};
    t.kGroup = static_cast<uint32_t>(kGroup);
    t.kGroups = static_cast<uint32_t>(s.kGroups);
    t.m = static_cast<uint32_t>(s.m);
    t.k = static_cast<uint32_t>(s.k);
    t.n = static_cast<uint32_t>(s.n);
    t.kPadded = static_cast<uint32_t>(AlignUp(s.k, kernels::kGmmNzRows));
    t.nBlocks = static_cast<uint32_t>(CeilDiv(s.n, kernels::kGmmNzCols));
    t.experts = static_cast<uint32_t>(s.experts);
    t.layers = static_cast<uint32_t>(s.layers);
    t.groupListType = static_cast<uint32_t>(s.groupListType);
    t.groups = static_cast<uint32_t>(groups);
    t.blockDim = std::max<uint32_t>(platform.aicCores, 1);
    t.tm = tm;
    t.tn = tn;
    t.tk = tk;
    t.nTiles = static_cast<uint32_t>(CeilDiv(s.n, tn));
    // Units of one core that share rows (the n-tiles of an m-tile) then copy x in once instead of once per unit;
    // K too long for L1 keeps the streaming schedule.
    t.aResident = kernels::GmmL1BytesResidentA(tm, tn, tk, t.k, int4) <= platform.l1Bytes ? 1u : 0u;
    t.int4 = int4;
    t.kSplit = s.int4 ? static_cast<uint32_t>(kSplit) : 0u;
    t.wNBlocks = s.int4 ? static_cast<uint32_t>(CeilDiv(s.n, kernels::kGmmN0Int4)) : 0u;
    // int8: the largest L1 chunk (a multiple of tk, at most K rounded up to tk) that fits with the A schedule chosen
    // above; a chunk never needs to respect scale groups (a group ends at an L0 step's end, inside a chunk or not).
    t.tk1 = tk;
    t.tk1a = tk;
    const auto fitsL1 = [&](uint32_t tk1, uint32_t tk1a) {
        return kernels::GmmL1BytesChunked(tm, tn, tk1, tk1a, t.k, t.aResident != 0) <= platform.l1Bytes;
    };
    if (!s.int4 && !t.aResident && pref.tk1b > 0) {
        // B chunks of tk1b (fewer steps when K or L1 is short), A chunks the longest multiple of tk that fits.
        t.tk1 = static_cast<uint32_t>(std::min<uint64_t>(AlignUp(pref.tk1b, tk), AlignUp(s.k, tk)));
        while (t.tk1 > tk && !fitsL1(t.tk1, t.tk1)) t.tk1 -= tk;
        t.tk1a = t.tk1;
        while (t.tk1a + tk <= AlignUp(s.k, tk) && fitsL1(t.tk1, t.tk1a + tk)) t.tk1a += tk;
    } else if (!s.int4) {
        const uint32_t kCap = static_cast<uint32_t>(std::min<uint64_t>(kPreferredTk1, AlignUp(s.k, tk)));
        while (t.tk1 + tk <= kCap && fitsL1(t.tk1 + tk, t.tk1 + tk)) t.tk1 += tk;
        t.tk1a = t.tk1;
    }
    *out = t;
    return true;
}

}  // namespace

bool TileGmmSplitInt4(const PlatformInfo& platform, const kernels::GmmCubeTilingData& cube,
                      kernels::GmmSplitInt4TilingData* out, std::string* why) {
    kernels::GmmSplitInt4TilingData t{};
    if (!cube.int4) {
        *out = t;
        return true;
    }
    t.chunk = LargestChunk(platform.ubBytes, kernels::kGmmSplitColAlign, cube.kSplit,
                           [](uint32_t c) { return kernels::GmmSplitInt4UbBytes(c); });
    if (t.chunk == 0) {
        *why = "UB of " + std::to_string(platform.ubBytes) + " bytes cannot hold one activation split pass";
        return false;
    }
    t.blockDim = std::max<uint32_t>(platform.aivCores, 1);
    *out = t;
    return true;
}

bool TileGmmMultiLayer(const PlatformInfo& platform, const GmmShape& s, kernels::GmmMultiLayerTilingData* out,
                       std::string* why) {
    kernels::GmmMultiLayerTilingData t{};
    // One mixed kernel for both formats. Its row tiles each stream their expert's whole weight: W8A8 takes the tall
    // form (a group of up to 160 rows reads its weights once), or the taller one when a group of the average size
    // (M over the groups: the host does not see the sizes) takes fewer row tiles of it (at DeepSeek-V3's
    // 16384-token rounds, about 520 rows: three tiles instead of four). W4A8's L0C holds each tile's hi and lo
    // planes: its tiles are 96 x 160 (kW4a8W2Tm).
    const uint64_t groups = std::max<uint64_t>(s.groupListType == kernels::kGroupListTable ? s.groups : s.experts, 1);
    const uint64_t average = CeilDiv(s.m, groups);
    const bool taller = CeilDiv(average, kTallerTm) < CeilDiv(average, kTallTm);
    const GmmCubeTiles tiles = s.int4   ? GmmCubeTiles{kW4a8W2Tm, kW4a8W2Tn, kPreferredTk, false}
                               : taller ? GmmCubeTiles{kTallerTm, kTallerTn, kTallTk, false}
                                        : GmmCubeTiles{kTallTm, kTallTn, kTallTk, false};
    if (!TileGmmCubeWith(platform, s, &t.cube, why, tiles)) return false;
    if (!TileGmmSplitInt4(platform, t.cube, &t.split, why)) return false;
    const bool grouped = s.kGroups > 1, int4 = s.int4;
    t.pitch = static_cast<uint32_t>(AlignUp(t.cube.tn, kernels::kGmmEpilogueColAlign));
    // Rows per block pass: as many of a vector core's half of a unit as UB holds.
    const uint32_t half = (t.cube.tm + 1) / 2;
    for (uint32_t r = half; r >= 1; --r) {
        if (kernels::GmmMultiLayerBlockUbBytes(r, t.pitch, t.cube.tm, grouped, int4) <= platform.ubBytes) {
            t.blockRows = r;
            break;
        }
    }
    if (t.blockRows == 0) {
        *why = "UB of " + std::to_string(platform.ubBytes) + " bytes cannot hold one epilogue block";
        return false;
    }
    *out = t;
    return true;
}

bool TileGmmSwigluQuantMultiLayer(const PlatformInfo& platform, const GmmShape& s,
                                  kernels::GmmSwigluQuantMultiLayerTilingData* out, std::string* why) {
    if (s.n % 2 != 0) {
        *why = "N = " + std::to_string(s.n) + " must be even (act | gate halves)";
        return false;
    }
    kernels::GmmSwigluQuantMultiLayerTilingData t{};
    // One mixed kernel for both formats: W8A8 with row tiles of at most kMixedTmMax rows; W4A8 with row tiles of at
    // most kW4a8W1Tm rows, x resident in L1.
    if (!(s.int4 ? TileGmmCubeWith(platform, s, &t.cube, why, GmmCubeTiles{kW4a8W1Tm, kWideTn, kW4a8W1Tk, false})
                 : TileGmmCubeWith(platform, s, &t.cube, why,
                                   GmmCubeTiles{kMixedTmMax, kWideTn, kWideTk, true, kMixedTk1B})))
        return false;
    if (!TileGmmSplitInt4(platform, t.cube, &t.split, why)) return false;
    t.half = static_cast<uint32_t>(s.n / 2);
    const uint32_t cap = static_cast<uint32_t>(AlignUp(t.half, kernels::kGmmSwigluColAlign));
    const bool grouped = s.kGroups > 1, int4 = s.int4;
    const auto chunkWith = [&](uint32_t groupSlices) {
        return LargestChunk(platform.ubBytes, kernels::kGmmSwigluColAlign, cap, [=](uint32_t c) {
            return kernels::GmmSwigluQuantMultiLayerUbBytes(c, grouped, int4, groupSlices);
        });
    };
    t.chunk = chunkWith(0);
    if (grouped && t.chunk > 0) {
        // Units: the widest piece whose every-group slices leave the epilogue its passes; else the narrowest.
        const uint32_t passes = static_cast<uint32_t>(CeilDiv(t.half, t.chunk));
        uint32_t cols = t.cube.tn;
        while (cols > kernels::kGmmSwigluColAlign &&
               CeilDiv(t.half, std::max<uint32_t>(chunkWith(t.cube.kGroups * cols), 1)) != passes)
            cols -= kernels::kGmmSwigluColAlign;
        t.unitCols = cols;
        t.chunk = chunkWith(t.cube.kGroups * cols);
    }
    if (t.chunk == 0) {
        *why = "UB of " + std::to_string(platform.ubBytes) + " bytes cannot hold one epilogue pass";
        return false;
    }
    t.passes = static_cast<uint32_t>(CeilDiv(t.half, t.chunk));
    *out = t;
    return true;
}

}  // namespace cam::tiling
