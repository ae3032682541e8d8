// The part of the data-plane device interface that tiling and host code share with the kernels: plain C++, no
// Ascend C API, so host code can include it.
#pragma once

#include <cstdint>

#include "common/window_layout.h"

namespace cam::kernels::dp {

// Carried by value in every data-plane tiling. Fixed for the life of a Comm, so captured launches replay with the
// same arguments (protocol §11).
struct CommArgs {
    CamTopology topo;
    int64_t rank;            // global rank running the kernel
    int64_t timeoutCycles;   // bound of every wait inside a begun round
    int64_t idleCycles;      // dispatch_recv: nothing ready for this long -> empty work item
    int64_t followerCycles;  // bound of the non-zero blocks' wait for block 0's decision (> any block-0 wait)
    int64_t planeId;         // this plane instance (identity line word kIdentityPlaneId): stamped into work items
};

// Workspace line 0 of every data-plane kernel: block 0's decision for the other blocks.
inline constexpr int64_t kDecisionUndecided = 0;
inline constexpr int64_t kDecisionGo = 1;
inline constexpr int64_t kDecisionStop = 2;
inline constexpr int64_t kWsDecisionBytes = kLine;

// UB each data-plane kernel keeps for staging one cross-rank signal word (common/dataplane.h, SignalPort).
inline constexpr uint32_t kSignalUbBytes = 32;

// Elements (4-byte: index entry halves, scales) of one UB table window (common/dataplane.h, UbWindow): 8 KiB.
inline constexpr uint32_t kTableWindowElems = 2048;
inline constexpr uint32_t kTableWindowUbBytes = kTableWindowElems * 4;

// Seals (common/dataplane.h, SealPort; docs/protocol.md §10.2) staged in UB per copy: a run of int64 words.
inline constexpr uint32_t kSealRunElems = 64;
inline constexpr uint32_t kSealUbBytes = kSealRunElems * 8;

// UB of one row batch (common/dataplane.h, RowBatch): rows of a gather or scatter staged together.
inline constexpr uint32_t kRowBatchUbBytes = 65536;

}  // namespace cam::kernels::dp
