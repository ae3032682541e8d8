// Host-facing entries of gmm_swiglu_quant_multi_layer: the W8A8 mixed kernel, and the W4A8 route's vector epilogue
// (its cube part is gmm_int8_cube).
#pragma once

#include "gmm_swiglu_quant_multi_layer/gmm_swiglu_quant_multi_layer_tiling_data.h"

namespace cam::kernels {

// blockDim: AI cores (tiling.cube.blockDim); ring: kGmmRingSlots slots of GmmSwigluSlotBytes per AI core.
void LaunchGmmSwigluQuantMultiLayer(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* xScale, uint8_t* groupList,
                                    uint8_t* layerIndex, uint8_t* table, uint8_t* ring, uint8_t* y, uint8_t* yScale,
                                    uint8_t* status, const GmmSwigluQuantMultiLayerTilingData& tiling);

void LaunchGmmSwigluQuantMultiLayerEpilogue(uint32_t blockDim, void* stream, uint8_t* acc, uint8_t* xScale, uint8_t* groupList,
                                  uint8_t* layerIndex, uint8_t* table, uint8_t* y, uint8_t* yScale, uint8_t* status,
                                  const GmmSwigluQuantMultiLayerTilingData& tiling);

}  // namespace cam::kernels
