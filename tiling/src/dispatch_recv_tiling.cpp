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
    const int64_t rows = cam::layout::recv_rows(comm.topo);
    t.blockDim = BlocksFor(platform, rows, uint64_t(rows) * uint64_t(cam::layout::dispatch_row_bytes(comm.topo)));
    *workspaceBytes = static_cast<uint64_t>(kernels::DispatchRecvWorkspaceBytes());
    *out = t;
    return true;
}

}  // namespace cam::tiling
