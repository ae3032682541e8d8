// Host-facing entry of the combine_recv kernel.
#pragma once

#include "combine_recv/combine_recv_tiling_data.h"

namespace cam::kernels {

void LaunchCombineRecv(uint32_t blockDim, void* stream, uint8_t* topkIds, uint8_t* topkWeights, uint8_t* out,
                       uint8_t* peers, uint8_t* workspace, const CombineRecvTilingData& tiling);

}  // namespace cam::kernels
