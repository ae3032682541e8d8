// Host-facing entry of gmm_multi_layer: the mixed kernel (W8A8, and W4A8 after the gmm_split_int4 launch).
#pragma once

#include "gmm_multi_layer/gmm_multi_layer_tiling_data.h"

namespace cam::kernels {

// blockDim: AI cores (tiling.cube.blockDim); ring: kGmmRingSlots slots of GmmMultiLayerSlotBytes per AI core; x: y
// (W8A8) or the split's hi / lo planes (W4A8).
void LaunchGmmMultiLayer(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* yScale, uint8_t* groupList,
                         uint8_t* layerIndex, uint8_t* table, uint8_t* ring, uint8_t* out, uint8_t* status,
                         const GmmMultiLayerTilingData& tiling);

}  // namespace cam::kernels
