// Host-facing entry of the combine_send kernel.
#pragma once

#include "combine_send/combine_send_tiling_data.h"

namespace cam::kernels {

void LaunchCombineSend(uint32_t blockDim, void* stream, uint8_t* expertOut, uint8_t* workItem, uint8_t* peers,
                       uint8_t* workspace, const CombineSendTilingData& tiling);

}  // namespace cam::kernels
