// Tiling of combine_send (docs/protocol.md). Returns false with *why set when no tiling fits the platform;
// *workspaceBytes is the per-launch workspace the kernel needs.
#pragma once

#include <string>

#include "cam/tiling/platform_info.h"
#include "combine_send/combine_send_tiling_data.h"

namespace cam::tiling {

// `items` work items (1, or a dispatch_recv batch's) over expert_out rows [0, rowBudget).
bool TileCombineSend(const PlatformInfo& platform, const kernels::dp::CommArgs& comm, uint32_t items,
                     int64_t rowBudget, kernels::CombineSendTilingData* out, uint64_t* workspaceBytes,
                     std::string* why);

}  // namespace cam::tiling
