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
    uint32_t items;     // work items in the work-item tensor: 1, or a dispatch_recv batch's slots
    int64_t rowBudget;  // rows of expert_out: recv_rows, or the batch's row budget
};

constexpr uint32_t kCombineSendCopyChunk = 16384;
constexpr uint32_t kCombineSendMaxItems = 64;  // = kDispatchRecvMaxItems: the batches dispatch_recv makes
// Block 0's plan for the other blocks, after the decision line: per item {replica, slot, rows, first row, seq}, rows 0
// for an item nobody scatters (empty or fenced). In the workspace, so no block reads it from the user's tensor.
constexpr int64_t kCombinePlanWords = 5;

__aicore__ inline int64_t CombineSendWorkspaceBytes() {
    return dp::kWsDecisionBytes + int64_t(kCombineSendMaxItems) * kCombinePlanWords * 8;
}

// UB the kernel carves: the double-buffered row mover, the signal word, the index window, the row batch and the
// seal run.
__aicore__ constexpr uint32_t CombineSendUbBytes(uint32_t copyChunkBytes) {
    return 2 * UbBytes(copyChunkBytes) + dp::kSignalUbBytes + dp::kTableWindowUbBytes + dp::kRowBatchUbBytes +
           dp::kSealUbBytes;
}

}  // namespace cam::kernels
