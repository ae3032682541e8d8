// Tiling of dispatch_recv (docs/protocol.md). Returns false with *why set when no tiling fits the platform;
// *workspaceBytes is the per-launch workspace the kernel needs.
#pragma once

#include <string>

#include "cam/tiling/platform_info.h"
#include "dispatch_recv/dispatch_recv_tiling_data.h"

namespace cam::tiling {

bool TileDispatchRecv(const PlatformInfo& platform, const kernels::dp::CommArgs& comm,
                      kernels::DispatchRecvTilingData* out, uint64_t* workspaceBytes, std::string* why);

}  // namespace cam::tiling
