// Tiling of dispatch_recv, passed by value to the kernel. Filled by tiling/src/dispatch_recv_tiling.cpp. It holds
// no per-round value: a captured dispatch_recv replays with the same tiling (protocol §11).
#pragma once

#include <cstdint>

#include "common/dataplane_args.h"
#include "common/group_table.h"
#include "common/ub_math.h"

namespace cam::kernels {

struct DispatchRecvTilingData {
    dp::CommArgs comm;
    uint32_t blockDim;
    uint32_t copyChunkBytes;
    uint32_t batched;    // 0: one work item (expert_counts, work_item[W]); 1: a snapshot batch (group table, origin,
                         // work_items[maxItems, W]), docs/protocol.md §6.2
    uint32_t maxItems;   // work items one launch may take: 1, or min(D, kDispatchRecvMaxItems) when batched
    uint32_t stop;       // 1: honour the Comm's stop word (layout::ffn_stop_off), 0: no stop (eager default)
    int64_t rowBudget;   // rows of expand_x: recv_rows, or the batch's row budget (>= recv_rows)
};

constexpr uint32_t kDispatchRecvCopyChunk = 16384;
// Work items one batch may hold: block 0 keeps what it selected in a fixed array (device code has no heap).
constexpr uint32_t kDispatchRecvMaxItems = 64;
// Words per row of the batch's origin table: replica, participant, t*K + k.
constexpr int64_t kOriginWords = 3;

__aicore__ inline int64_t DispatchRecvWorkspaceBytes() { return dp::kWsDecisionBytes; }

// UB the kernel carves: the double-buffered row mover, the signal word, the index and scale windows, the staged
// output scales and the row batch.
__aicore__ constexpr uint32_t DispatchRecvUbBytes(uint32_t copyChunkBytes) {
    return 2 * UbBytes(copyChunkBytes) + dp::kSignalUbBytes + 3 * dp::kTableWindowUbBytes + dp::kRowBatchUbBytes +
           dp::kSealUbBytes;
}

}  // namespace cam::kernels
