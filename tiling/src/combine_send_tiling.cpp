#include "cam/tiling/combine_send_tiling.h"

#include "dataplane_tiling_common.h"

namespace cam::tiling {

using namespace detail;

bool TileCombineSend(const PlatformInfo& platform, const kernels::dp::CommArgs& comm,
                     kernels::CombineSendTilingData* out, uint64_t* workspaceBytes, std::string* why) {
    kernels::CombineSendTilingData t{};
    t.comm = comm;
    t.copyChunkBytes = kernels::kCombineSendCopyChunk;
    if (!WorkingSetFits(platform, kernels::CombineSendUbBytes(t.copyChunkBytes), "combine_send", why)) return false;
    t.blockDim = BlocksFor(platform, cam::layout::recv_rows(comm.topo));
    *workspaceBytes = static_cast<uint64_t>(kernels::CombineSendWorkspaceBytes());
    *out = t;
    return true;
}

}  // namespace cam::tiling
