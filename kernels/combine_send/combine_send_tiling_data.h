// Tiling of combine_send, passed by value to the kernel. Filled by tiling/src/combine_send_tiling.cpp. No per-round
// value: the work item (device memory) says which round this is (protocol §11).
#pragma once

#include <cstdint>

#include "common/dataplane_args.h"
#include "common/ub_math.h"

namespace cam::kernels {

struct CombineSendTilingData {
    dp::CommArgs comm;
    uint32_t blockDim;
    uint32_t copyChunkBytes;
};

constexpr uint32_t kCombineSendCopyChunk = 16384;

__aicore__ inline int64_t CombineSendWorkspaceBytes() { return dp::kWsDecisionBytes; }

// UB the kernel carves: the double-buffered row mover, the signal word, the index window and the row batch.
__aicore__ constexpr uint32_t CombineSendUbBytes(uint32_t copyChunkBytes) {
    return 2 * UbBytes(copyChunkBytes) + dp::kSignalUbBytes + dp::kTableWindowUbBytes + dp::kRowBatchUbBytes;
}

}  // namespace cam::kernels
