// window_table: cam's one MC2 op (docs/ascend.md §5), and the Comm's peer table built with it.
#include "window_table.h"

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend.h"
#include "cam/aclnn_cam_window_table.h"
#include "cam/cam_platform.h"
#include "cam/tiling/window_table_tiling.h"
#include "device_status.h"
#include "executor.h"
#include "status.h"
#include "tensor.h"
#include "window_table/window_table.h"

using namespace cam::host;

namespace cam::host {

namespace {

// The op's workspace: the status record, then the init tiling Hccl::Init gets (kernels/window_table).
constexpr uint64_t kWorkspaceBytes = kernels::kDeviceStatusBytes + kernels::kWindowTableInitTilingBytes;

// What the op needs once its arguments are checked: the launch, the status record in the workspace around it, and
// the init tiling after it, filled for this SoC (a zeroed one makes the client read A3's layout on A2).
aclnnStatus LaunchChecked(const kernels::WindowTableTilingData& tiling,
                          const kernels::WindowTableInitTiling& initTiling, const void* context, uint8_t* peers,
                          uint8_t* workspace, aclrtStream stream) {
    uint8_t* status = workspace;
    uint8_t* init = workspace + kernels::kDeviceStatusBytes;
    EnqueueDeviceStatusReset(stream, status);
    const auto* bytes = reinterpret_cast<const uint8_t*>(&initTiling);
    EnqueueHostToDevice(stream, init, std::vector<uint8_t>(bytes, bytes + sizeof(initTiling)));
    kernels::LaunchWindowTable(tiling.blockDim, stream, context, peers, status, init, tiling);
    EnqueueDeviceStatusCheck(stream, status, "window_table");
    return ACLNN_SUCCESS;
}

// The group checks both entry points share: a tiling for (topology, rank), the init tiling for this SoC and the
// group's context for the rank.
aclnnStatus Prepare(const char* op, const CamTopology& topo, int64_t rank, const char* group,
                    kernels::WindowTableTilingData* tiling, kernels::WindowTableInitTiling* initTiling,
                    const void** context) {
    std::string why;
    if (!tiling::TileWindowTable(layout::world_size(topo), rank, tiling, &why))
        return Fail(ACLNN_ERR_PARAM_INVALID, why);
    camPlatformInfo platform{};
    if (aclnnStatus st = camGetPlatform(&platform)) return st;
    if (!tiling::TileWindowTableInit(platform.name, initTiling, &why)) return Fail(ACLNN_ERR_PARAM_INVALID, why);
    *context = HcclContextFor(group, rank, &why);
    if (*context == nullptr) return Fail(ACLNN_ERR_PARAM_INVALID, std::string(op) + ": group '" + group + "': " + why);
    return ACLNN_SUCCESS;
}

}  // namespace

std::string WindowTablePlaneTooLarge(const char* api, const CamTopology& topo) {
    const int64_t world = layout::world_size(topo);
    if (world <= tiling::kWindowTableMaxRanks) return "";
    return std::string(api) + ": world size " + std::to_string(world) + " exceeds " +
           std::to_string(tiling::kWindowTableMaxRanks) +
           ", the most ranks the HCCL window path's peer table holds (window_table reads the A2 flat context's 32 "
           "windows); the IPC transport (camCommCreateIpc) builds its own table and has no such bound";
}

aclnnStatus RunWindowTable(const camComm* comm, const std::string& group, int64_t* peers, int32_t timeoutMs,
                           std::string* why) {
    kernels::WindowTableTilingData tiling{};
    kernels::WindowTableInitTiling initTiling{};
    const void* context = nullptr;
    if (aclnnStatus st = Prepare("window_table", comm->topo, comm->rank, group.c_str(), &tiling, &initTiling, &context)) {
        *why = camGetLastErrorMessage();
        return st;
    }
    aclrtStream stream = CreateOwnStream();
    void* status = AllocGraphMemory(kWorkspaceBytes);
    LaunchChecked(tiling, initTiling, context, reinterpret_cast<uint8_t*>(peers),
                  static_cast<uint8_t*>(status), stream);
    const aclnnStatus st = camSynchronizeStream(stream, timeoutMs);
    if (st == CAM_ERR_SYNC_TIMEOUT) {
        // The kernel may still run: its status record and stream stay allocated (never freed under a live kernel).
        *why = std::string("window_table did not finish within ") + std::to_string(timeoutMs) + " ms: " +
               camGetLastErrorMessage();
        return st;
    }
    if (st != ACLNN_SUCCESS) *why = camGetLastErrorMessage();
    FreeGraphMemory(status);
    DestroyOwnStream(stream);
    return st;
}

aclnnStatus FillPeerTableFromTransport(camComm* comm, std::string* why) {
    const int64_t world = layout::world_size(comm->topo);
    std::vector<uint64_t> windows(world);
    uint64_t smallest = ~0ull;
    for (int64_t r = 0; r < world; ++r) {
        windows[r] = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(comm->transport->DeviceWindow(r)));
        smallest = std::min<uint64_t>(smallest, comm->transport->WindowBytes(r));
    }
    // A name no other Comm of this process has: the group lives only while the table is built.
    char group[48];
    std::snprintf(group, sizeof(group), "cam-twin-plane-%p", static_cast<void*>(comm));
    PublishHcclContext(group, comm->rank, windows, smallest);
    // The kernel writes device memory of its own, copied into the Comm once it ran: after a timeout the kernel may
    // still read the context and write the table, so then neither is freed (the Comm that fails may be).
    auto* table = static_cast<int64_t*>(AllocGraphMemory(8 * world));
    const aclnnStatus st = RunWindowTable(comm, group, table, kWindowTableTimeoutMs, why);
    if (st == CAM_ERR_SYNC_TIMEOUT) return st;
    comm->peerTable.assign(world, 0);
    if (st == ACLNN_SUCCESS) {
        ReadDeviceNow(comm->peerTable.data(), table, 8 * world);
        comm->devicePeers = std::shared_ptr<int64_t>(table, FreeGraphMemory);  // the kernels read this one
    } else {
        FreeGraphMemory(table);
    }
    WithdrawHcclContext(group, comm->rank);
    return st;
}

}  // namespace cam::host

extern "C" aclnnStatus aclnnCamWindowTableGetWorkspaceSize(const CamTopology* topology, int64_t rank, const char* group,
                                                           aclTensor* peers, uint64_t* workspaceSize,
                                                           aclOpExecutor** executor) {
    return Guarded("aclnnCamWindowTableGetWorkspaceSize", [&]() -> aclnnStatus {
        ArgChecker check("window_table");
        if (!workspaceSize || !executor)
            return Fail(ACLNN_ERR_PARAM_NULLPTR, "window_table: workspaceSize/executor out-pointer is null");
        if (!topology) return Fail(ACLNN_ERR_PARAM_NULLPTR, "window_table: topology is null");
        if (!group) return Fail(ACLNN_ERR_PARAM_NULLPTR, "window_table: group is null");
        if (cam::layout::check_topology(*topology) != cam::field::kOk)
            return check.Invalid("topology is invalid (see camCommCreate* for which field)");
        TensorView pv;
        aclnnStatus st;
        if ((st = check.View(peers, "peers", &pv)) ||
            (st = check.Tensor(pv, "peers", {ACL_INT64}, {cam::layout::world_size(*topology)})))
            return st;
        cam::kernels::WindowTableTilingData tiling{};
        cam::kernels::WindowTableInitTiling initTiling{};
        const void* context = nullptr;
        if ((st = Prepare("window_table", *topology, rank, group, &tiling, &initTiling, &context))) return st;
        (void)context;
        auto ex = std::make_unique<Executor>("window_table");
        ex->workspaceSize = kWorkspaceBytes;
        // The group's context is looked up again when the op runs, not kept from here: the group may be gone by
        // then (its context freed), and the launch copies what it finds (kernels/common/launch.h).
        ex->launch = [tiling, topo = *topology, rank, g = std::string(group), p = pv.data](void* workspace,
                                                                                           aclrtStream stream) {
            cam::kernels::WindowTableTilingData fresh{};
            cam::kernels::WindowTableInitTiling freshInit{};
            const void* now = nullptr;
            if (aclnnStatus s = Prepare("window_table", topo, rank, g.c_str(), &fresh, &freshInit, &now)) return s;
            return LaunchChecked(tiling, freshInit, now, p, static_cast<uint8_t*>(workspace), stream);
        };
        return Finish(std::move(ex), workspaceSize, executor);
    });
}

extern "C" aclnnStatus aclnnCamWindowTable(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,
                                           aclrtStream stream) {
    return RunExecutor("aclnnCamWindowTable", "window_table", workspace, workspaceSize, executor, stream);
}

extern "C" aclnnStatus camCommGetPeerTable(const camComm* comm, int64_t* peers, int64_t count) {
    if (!comm || !peers) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camCommGetPeerTable: null argument");
    if (!comm->attached)
        return Fail(ACLNN_ERR_PARAM_INVALID, "camCommGetPeerTable: the communicator is not attached yet");
    if (count != static_cast<int64_t>(comm->peerTable.size()))
        return Fail(ACLNN_ERR_PARAM_INVALID, "camCommGetPeerTable: count " + std::to_string(count) +
                                                 ", the plane has " + std::to_string(comm->peerTable.size()) +
                                                 " ranks");
    std::copy(comm->peerTable.begin(), comm->peerTable.end(), peers);
    return ACLNN_SUCCESS;
}
