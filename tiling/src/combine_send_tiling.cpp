#include "cam/tiling/combine_send_tiling.h"

#include "dataplane_tiling_common.h"

namespace cam::tiling {

using namespace detail;

bool TileCombineSend(const PlatformInfo& platform, const kernels::dp::CommArgs& comm, uint32_t items,
                     int64_t rowBudget, kernels::CombineSendTilingData* out, uint64_t* workspaceBytes,
                     std::string* why) {
    kernels::CombineSendTilingData t{};
    t.comm = comm;
    t.copyChunkBytes = kernels::kCombineSendCopyChunk;
    if (!WorkingSetFits(platform, kernels::CombineSendUbBytes(t.copyChunkBytes), "combine_send", why)) return false;
    if (items < 1 || items > kernels::kCombineSendMaxItems) {
        *why = "work_items holds " + std::to_string(items) + " items, at most " +
               std::to_string(kernels::kCombineSendMaxItems);
        return false;
    }
    t.items = items;
    t.rowBudget = rowBudget;
    const int64_t rows = rowBudget;
    t.blockDim = BlocksFor(platform, rows, uint64_t(rows) * uint64_t(comm.topo.H) * uint64_t(comm.topo.act_dtype_bytes));
    *workspaceBytes = static_cast<uint64_t>(kernels::CombineSendWorkspaceBytes());
    *out = t;
    return true;
}

}  // namespace cam::tiling
