// Tiling of combine_recv (docs/protocol.md). Returns false with *why set when no tiling fits the platform;
// *workspaceBytes is the per-launch workspace the kernel needs.
#pragma once

#include <string>

#include "cam/tiling/platform_info.h"
#include "combine_recv/combine_recv_tiling_data.h"

namespace cam::tiling {

bool TileCombineRecv(const PlatformInfo& platform, const kernels::dp::CommArgs& comm, int64_t tokens, bool bf16,
                     kernels::CombineRecvTilingData* out, uint64_t* workspaceBytes, std::string* why);

}  // namespace cam::tiling
