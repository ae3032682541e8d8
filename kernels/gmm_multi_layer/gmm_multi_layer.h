// Host-facing entries of gmm_multi_layer: the W8A8 mixed kernel, and the W4A8 route's vector epilogue (its cube part
// is gmm_int8_cube).
#pragma once

#include "gmm_multi_layer/gmm_multi_layer_tiling_data.h"

namespace cam::kernels {

// blockDim: AI cores (tiling.cube.blockDim); ring: kGmmRingSlots slots of GmmMultiLayerSlotBytes per AI core.
void LaunchGmmMultiLayer(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* yScale, uint8_t* groupList,
                         uint8_t* layerIndex, uint8_t* table, uint8_t* ring, uint8_t* out, uint8_t* status,
                         const GmmMultiLayerTilingData& tiling);

void LaunchGmmMultiLayerEpilogue(uint32_t blockDim, void* stream, uint8_t* acc, uint8_t* yScale, uint8_t* groupList,
                                 uint8_t* layerIndex, uint8_t* table, uint8_t* out, uint8_t* status,
                                 const GmmMultiLayerTilingData& tiling);

}  // namespace cam::kernels
