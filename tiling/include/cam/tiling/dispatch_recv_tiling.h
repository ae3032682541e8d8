// Tiling of dispatch_recv (docs/protocol.md). Returns false with *why set when no tiling fits the platform;
// *workspaceBytes is the per-launch workspace the kernel needs.
#pragma once

#include <string>

#include "cam/tiling/platform_info.h"
#include "dispatch_recv/dispatch_recv_tiling_data.h"

namespace cam::tiling {

// rowBudget 0: one work item per launch (recv_rows rows); else a batch of up to min(D, kDispatchRecvMaxItems)
// work items within rowBudget rows, which must hold one whole chunk (>= recv_rows; the caller checked that).
// stop: the launch honours the Comm's stop word (the caller checked the word it was given is that one).
bool TileDispatchRecv(const PlatformInfo& platform, const kernels::dp::CommArgs& comm, int64_t rowBudget, bool stop,
                      kernels::DispatchRecvTilingData* out, uint64_t* workspaceBytes, std::string* why);

// Work items of a batch (the rows of its work_items output) for this topology.
uint32_t DispatchRecvBatchItems(const CamTopology& topo);

}  // namespace cam::tiling
