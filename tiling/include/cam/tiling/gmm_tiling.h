#pragma once

#include <string>

#include "cam/tiling/platform_info.h"
#include "gmm_multi_layer/gmm_multi_layer_tiling_data.h"
#include "gmm_swiglu_quant_multi_layer/gmm_swiglu_quant_multi_layer_tiling_data.h"

namespace cam::tiling {

// Shapes as the host knows them: the group sizes are on the device, so tiling depends on capacities only.
struct GmmShape {
    uint64_t m;        // row capacity M
    uint64_t k;        // K
    uint64_t n;        // N of the matmul (W1: act|gate width; W2: H)
    uint64_t experts;  // E_local
    uint64_t layers;   // L
    int64_t groupListType;  // 0 cumsum, 1 counts (E_local groups of one layer), 2 a group table
    uint64_t groups = 0;    // rows of the group table (type 2); E_local otherwise
    uint64_t kGroups = 1;   // scale groups along K (docs/gmm.md §9.2); 1: per output channel
    bool int4 = false;      // W4A8 route (a): packed int4 weights, the activation split into int4 halves (§9)
};

// W4A8's activation split (a no-op tiling when cube.int4 is 0); called by the two ops' tilings.
bool TileGmmSplitInt4(const PlatformInfo& platform, const kernels::GmmCubeTilingData& cube,
                      kernels::GmmSplitInt4TilingData* out, std::string* why);

bool TileGmmMultiLayer(const PlatformInfo& platform, const GmmShape& shape, kernels::GmmMultiLayerTilingData* out,
                       std::string* why);

// shape.n must be even (act | gate halves).
bool TileGmmSwigluQuantMultiLayer(const PlatformInfo& platform, const GmmShape& shape,
                                  kernels::GmmSwigluQuantMultiLayerTilingData* out, std::string* why);

}  // namespace cam::tiling
