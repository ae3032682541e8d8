// Host-facing entry of the dynamic_quant kernel.
#pragma once

#include "dynamic_quant/dynamic_quant_tiling_data.h"

namespace cam::kernels {

void LaunchDynamicQuant(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* q, uint8_t* scale,
                        const DynamicQuantTilingData& tiling);

}  // namespace cam::kernels
