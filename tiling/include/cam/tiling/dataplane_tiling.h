// Tiling of the four data-plane ops (dispatch_send, dispatch_recv, combine_send, combine_recv). Each returns false
// with *why set when no tiling fits the platform; *workspaceBytes is the per-launch workspace the kernel needs.
#pragma once

#include <string>

#include "cam/tiling/platform_info.h"
#include "combine_recv/combine_recv_tiling_data.h"
#include "combine_send/combine_send_tiling_data.h"
#include "dispatch_recv/dispatch_recv_tiling_data.h"
#include "dispatch_send/dispatch_send_tiling_data.h"

namespace cam::tiling {

bool TileDispatchSend(const PlatformInfo& platform, const kernels::dp::CommArgs& comm, int64_t tokens, int64_t layer,
                      bool bf16, kernels::DispatchSendTilingData* out, uint64_t* workspaceBytes, std::string* why);

bool TileDispatchRecv(const PlatformInfo& platform, const kernels::dp::CommArgs& comm,
                      kernels::DispatchRecvTilingData* out, uint64_t* workspaceBytes, std::string* why);

bool TileCombineSend(const PlatformInfo& platform, const kernels::dp::CommArgs& comm,
                     kernels::CombineSendTilingData* out, uint64_t* workspaceBytes, std::string* why);

bool TileCombineRecv(const PlatformInfo& platform, const kernels::dp::CommArgs& comm, int64_t tokens, bool bf16,
                     kernels::CombineRecvTilingData* out, uint64_t* workspaceBytes, std::string* why);

}  // namespace cam::tiling
