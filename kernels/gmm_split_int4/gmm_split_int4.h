// Host-facing entry of the W4A8 activation split (route (a), docs/gmm.md §9): int8 x [M, K] -> two int4 planes
// [2][M, kSplit] (hi, then lo) in the workspace, before the cube kernel reads them.
#pragma once

#include "common/gmm_cube_tiling_data.h"
#include "gmm_split_int4/gmm_split_int4_tiling_data.h"

namespace cam::kernels {

void LaunchGmmSplitInt4(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* groupList, uint8_t* layerIndex,
                        uint8_t* planes, uint8_t* status, const GmmCubeTilingData& cube,
                        const GmmSplitInt4TilingData& tiling);

}  // namespace cam::kernels
