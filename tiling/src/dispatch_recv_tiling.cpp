#include "cam/tiling/dispatch_recv_tiling.h"

#include "dataplane_tiling_common.h"

namespace cam::tiling {

using namespace detail;

bool TileDispatchRecv(const PlatformInfo& platform, const kernels::dp::CommArgs& comm,
                      kernels::DispatchRecvTilingData* out, uint64_t* workspaceBytes, std::string* why) {
    kernels::DispatchRecvTilingData t{};
    t.comm = comm;
    t.copyChunkBytes = kernels::kDispatchRecvCopyChunk;
    if (!WorkingSetFits(platform, kernels::DispatchRecvUbBytes(t.copyChunkBytes), "dispatch_recv", why)) return false;
    t.blockDim = BlocksFor(platform, cam::layout::recv_rows(comm.topo));
    *workspaceBytes = static_cast<uint64_t>(kernels::DispatchRecvWorkspaceBytes());
    *out = t;
    return true;
}

}  // namespace cam::tiling
