// Host-facing entry of the dispatch_send kernel.
#pragma once

#include "dispatch_send/dispatch_send_tiling_data.h"

namespace cam::kernels {

void LaunchDispatchSend(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* topkIds, uint8_t* peers,
                        uint8_t* workspace, const DispatchSendTilingData& tiling);

}  // namespace cam::kernels
