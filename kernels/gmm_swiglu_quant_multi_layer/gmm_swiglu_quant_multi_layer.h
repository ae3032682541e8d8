// Host-facing entry of gmm_swiglu_quant_multi_layer: the mixed kernel (W8A8, and W4A8 after the gmm_split_int4
// launch).
#pragma once

#include "gmm_swiglu_quant_multi_layer/gmm_swiglu_quant_multi_layer_tiling_data.h"

namespace cam::kernels {

// blockDim: AI cores (tiling.cube.blockDim); ring: GmmSwigluRingBytes (every AI core's slots, then its row tile
// buffer when units are handed over); x: x (W8A8) or the split's hi / lo planes (W4A8).
void LaunchGmmSwigluQuantMultiLayer(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* xScale, uint8_t* groupList,
                                    uint8_t* layerIndex, uint8_t* table, uint8_t* ring, uint8_t* y, uint8_t* yScale,
                                    uint8_t* status, const GmmSwigluQuantMultiLayerTilingData& tiling);

}  // namespace cam::kernels
