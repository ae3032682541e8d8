// Host-facing entry of the dispatch_recv kernel.
#pragma once

#include "dispatch_recv/dispatch_recv_tiling_data.h"

namespace cam::kernels {

void LaunchDispatchRecv(uint32_t blockDim, void* stream, uint8_t* peers, uint8_t* expandX, uint8_t* scales,
                        uint8_t* expertCounts, uint8_t* groupTable, uint8_t* origin, uint8_t* workItem,
                        uint8_t* workspace, const DispatchRecvTilingData& tiling);

}  // namespace cam::kernels
