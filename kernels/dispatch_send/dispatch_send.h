// Host-facing entry of the dispatch_send kernel.
#pragma once

#include "dispatch_send/dispatch_send_tiling_data.h"

namespace cam::kernels {

// placement: the plane's int64 [L][E][1 + 2F] table (docs/protocol.md §15) when tiling.placed, else unused
void LaunchDispatchSend(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* topkIds, uint8_t* placement,
                        uint8_t* peers, uint8_t* workspace, const DispatchSendTilingData& tiling);

}  // namespace cam::kernels
