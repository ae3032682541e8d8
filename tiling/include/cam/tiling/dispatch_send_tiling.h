// Tiling of dispatch_send (docs/protocol.md). Returns false with *why set when no tiling fits the platform;
// *workspaceBytes is the per-launch workspace the kernel needs.
#pragma once

#include <string>

#include "cam/tiling/platform_info.h"
#include "dispatch_send/dispatch_send_tiling_data.h"

namespace cam::tiling {

bool TileDispatchSend(const PlatformInfo& platform, const kernels::dp::CommArgs& comm, int64_t tokens, int64_t layer,
                      bool bf16, bool placed, kernels::DispatchSendTilingData* out, uint64_t* workspaceBytes,
                      std::string* why);

}  // namespace cam::tiling
