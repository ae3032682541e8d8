// Tiling of combine_send (docs/protocol.md). Returns false with *why set when no tiling fits the platform;
// *workspaceBytes is the per-launch workspace the kernel needs.
#pragma once

#include <string>

#include "cam/tiling/platform_info.h"
#include "combine_send/combine_send_tiling_data.h"

namespace cam::tiling {

bool TileCombineSend(const PlatformInfo& platform, const kernels::dp::CommArgs& comm,
                     kernels::CombineSendTilingData* out, uint64_t* workspaceBytes, std::string* why);

}  // namespace cam::tiling
