// Host-facing entry of gmm_swiglu_quant_multi_layer's vector epilogue (the cube part is gmm_int8_cube).
#pragma once

#include "gmm_swiglu_quant_multi_layer/gmm_swiglu_quant_multi_layer_tiling_data.h"

namespace cam::kernels {

void LaunchGmmSwigluQuantMultiLayerEpilogue(uint32_t blockDim, void* stream, uint8_t* acc, uint8_t* xScale, uint8_t* groupList,
                                  uint8_t* layerIndex, uint8_t* table, uint8_t* y, uint8_t* yScale, uint8_t* status,
                                  const GmmSwigluQuantMultiLayerTilingData& tiling);

}  // namespace cam::kernels
