// Tiling of dispatch_recv, passed by value to the kernel. Filled by tiling/src/dispatch_recv_tiling.cpp. It holds
// no per-round value: a captured dispatch_recv replays with the same tiling (protocol §11).
#pragma once

#include <cstdint>

#include "common/dataplane_args.h"
#include "common/ub_math.h"

namespace cam::kernels {

struct DispatchRecvTilingData {
    dp::CommArgs comm;
    uint32_t blockDim;
    uint32_t copyChunkBytes;
};

constexpr uint32_t kDispatchRecvCopyChunk = 16384;

__aicore__ inline int64_t DispatchRecvWorkspaceBytes() { return dp::kWsDecisionBytes; }

// UB the kernel carves: the double-buffered row mover, the signal word, the index and scale windows, the staged
// output scales and the row batch.
__aicore__ constexpr uint32_t DispatchRecvUbBytes(uint32_t copyChunkBytes) {
    return 2 * UbBytes(copyChunkBytes) + dp::kSignalUbBytes + 3 * dp::kTableWindowUbBytes + dp::kRowBatchUbBytes;
}

}  // namespace cam::kernels
