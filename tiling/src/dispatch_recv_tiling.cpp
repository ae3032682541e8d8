#include "cam/tiling/dispatch_recv_tiling.h"

#include <algorithm>

#include "dataplane_tiling_common.h"

namespace cam::tiling {

using namespace detail;

uint32_t DispatchRecvBatchItems(const CamTopology& topo) {
    return static_cast<uint32_t>(std::min<int64_t>(topo.D, kernels::kDispatchRecvMaxItems));
}

bool TileDispatchRecv(const PlatformInfo& platform, const kernels::dp::CommArgs& comm, int64_t rowBudget, bool stop,
                      kernels::DispatchRecvTilingData* out, uint64_t* workspaceBytes, std::string* why) {
    kernels::DispatchRecvTilingData t{};
    t.comm = comm;
    t.copyChunkBytes = kernels::kDispatchRecvCopyChunk;
    if (!WorkingSetFits(platform, kernels::DispatchRecvUbBytes(t.copyChunkBytes), "dispatch_recv", why)) return false;
    t.batched = rowBudget > 0 ? 1 : 0;
    t.maxItems = t.batched ? DispatchRecvBatchItems(comm.topo) : 1;
    t.stop = stop ? 1 : 0;
    t.rowBudget = t.batched ? rowBudget : cam::layout::recv_rows(comm.topo);
    const int64_t rows = t.rowBudget;
    t.blockDim = BlocksFor(platform, rows, uint64_t(rows) * uint64_t(cam::layout::dispatch_row_bytes(comm.topo)));
    *workspaceBytes = static_cast<uint64_t>(kernels::DispatchRecvWorkspaceBytes());
    *out = t;
    return true;
}

}  // namespace cam::tiling
