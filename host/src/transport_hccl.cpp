// The HCCL transport (Ascend builds only): a plane's windows are the windows of an HcclComm, sized by
// HcclCommConfig.hcclBufferSize, and the device peer table is written by the window_table MC2 op bound to the
// communicator's group (docs/ascend.md §5).
//
// libhccl is resolved with dlopen, as the ACL runtime is (backend_ascend.cpp): the library loads where CANN is
// absent. Every entry point's type is taken from HCCL's own prototype (decltype(&HcclCommInitRootInfoConfig) ...), so
// a change in HCCL's headers is a compile error in the header check (tests/test_ascend_hccl.py). Never run.
//
// HCCL headers without a configured communicator (torch-npu 2.8.0's hccl.h has no HcclCommInitRootInfoConfig, and
// the window size is its configuration) build both entry points as one refusal that says so
// (CAM_CANN_HAS_HCCL_COMM_CONFIG, cmake/CamCannFeatures.cmake).
#include "cam_cann_features.h"

#if CAM_CANN_HAS_HCCL_COMM_CONFIG
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "hccl/hccl.h"
#include "backend.h"
#include "dl_library.h"
#include "cam/cam_comm_hccl.h"
#include "comm.h"
#include "status.h"
#include "window_table.h"

namespace cam::host {

namespace {

// HCCL's entry points the transport calls, (member, symbol).
#define CAM_HCCL_ENTRIES(X)                                                                                    \
    X(getRootInfo, HcclGetRootInfo) X(initRootInfoConfig, HcclCommInitRootInfoConfig)                        \
    X(getCommName, HcclGetCommName) X(getRankSize, HcclGetRankSize) X(getRankId, HcclGetRankId)              \
    X(commDestroy, HcclCommDestroy) X(errorString, HcclGetErrorString)

struct HcclApi {
    CAM_HCCL_ENTRIES(CAM_DL_MEMBER)
    std::string unavailable;  // why HCCL cannot be used; "" when it can
};

const HcclApi& Hccl() {
    static const HcclApi api = CAM_DL_LOAD_TABLE(HcclApi, CAM_HCCL_ENTRIES, "libhccl.so", "the HCCL library");
    return api;
}

std::string HcclError(const char* call, HcclResult rc) {
    const char* text = Hccl().errorString ? Hccl().errorString(rc) : nullptr;
    return std::string(call) + " failed with HCCL error " + std::to_string(static_cast<int>(rc)) +
           (text ? std::string(" (") + text + ")" : "");
}

constexpr uint64_t kMiB = 1024ull * 1024ull;

// The windows are HCCL's, in device memory the host cannot address: Window() is null (nothing host-side touches
// them), and the kernels reach them only through the device peer table window_table writes.
class HcclTransport : public Transport {
public:
    HcclTransport(HcclComm comm, std::string group, uint64_t windowBytes, int64_t* devicePeers)
        : comm_(comm), group_(std::move(group)), windowBytes_(windowBytes), devicePeers_(devicePeers) {}
    ~HcclTransport() override {
        if (devicePeers_) FreeGraphMemory(devicePeers_);
        if (comm_) Hccl().commDestroy(comm_);
    }
    const char* Name() const override { return "hccl"; }
    uint8_t* Window(int64_t) const override { return nullptr; }
    uint64_t WindowBytes(int64_t) const override { return windowBytes_; }
    const std::string& Group() const { return group_; }
    int64_t* DevicePeers() const { return devicePeers_; }

private:
    HcclComm comm_;
    std::string group_;
    uint64_t windowBytes_;
    int64_t* devicePeers_;
};

}  // namespace

}  // namespace cam::host

using namespace cam::host;

extern "C" aclnnStatus camHcclGetRootInfo(void* rootInfo, uint64_t bytes, uint64_t* written) {
    return Guarded("camHcclGetRootInfo", [&]() -> aclnnStatus {
        if (!rootInfo || !written) return Fail(ACLNN_ERR_PARAM_NULLPTR, "camHcclGetRootInfo: null argument");
        if (bytes < sizeof(HcclRootInfo))
            return Fail(ACLNN_ERR_PARAM_INVALID, "camHcclGetRootInfo: rootInfo has " + std::to_string(bytes) +
                                                     " bytes, HCCL's root info needs " +
                                                     std::to_string(sizeof(HcclRootInfo)));
        const HcclApi& h = Hccl();
        if (!h.unavailable.empty()) return Fail(ACLNN_ERR_RUNTIME_ERROR, "camHcclGetRootInfo: " + h.unavailable);
        HcclRootInfo info{};
        if (HcclResult rc = h.getRootInfo(&info); rc != HCCL_SUCCESS)
            return Fail(ACLNN_ERR_RUNTIME_ERROR, "camHcclGetRootInfo: " + HcclError("HcclGetRootInfo", rc));
        std::memcpy(rootInfo, &info, sizeof(info));
        *written = sizeof(info);
        return ACLNN_SUCCESS;
    });
}

extern "C" aclnnStatus camCommCreateHccl(const void* rootInfo, uint64_t rootInfoBytes, const CamTopology* topology,
                                         int64_t rank, const camCommConfig* config, uint32_t aicoreTimeoutS,
                                         camComm** comm) {
    return Guarded("camCommCreateHccl", [&]() -> aclnnStatus {
        const char* api = "camCommCreateHccl";
        if (!rootInfo) return Fail(ACLNN_ERR_PARAM_NULLPTR, std::string(api) + ": rootInfo is null");
        if (rootInfoBytes != sizeof(HcclRootInfo))
            return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": rootInfoBytes is " +
                                                     std::to_string(rootInfoBytes) + ", HCCL's root info has " +
                                                     std::to_string(sizeof(HcclRootInfo)));
        if (aclnnStatus st = CheckCreateArgs(api, topology, rank, config, comm)) return st;
        if (const std::string why = WindowTablePlaneTooLarge(api, *topology); !why.empty())
            return Fail(ACLNN_ERR_PARAM_INVALID, why);
        const CamTopology topo = *topology;
        const int64_t world = cam::layout::world_size(topo);
        // Every rank gets the same HCCL window, so it must hold the larger role's window (protocol §3).
        const auto mib = static_cast<uint32_t>((cam::layout::window_bytes(topo) + kMiB - 1) / kMiB);
        if (aclnnStatus st = camCheckAscendPlane(&topo, config, mib, aicoreTimeoutS)) return st;
        const HcclApi& h = Hccl();
        if (!h.unavailable.empty()) return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(api) + ": " + h.unavailable);

        HcclCommConfig cfg;
        HcclCommConfigInit(&cfg);
        cfg.hcclBufferSize = mib;
        HcclComm hcomm = nullptr;
        if (HcclResult rc = h.initRootInfoConfig(static_cast<uint32_t>(world),
                                                 static_cast<const HcclRootInfo*>(rootInfo),
                                                 static_cast<uint32_t>(rank), &cfg, &hcomm);
            rc != HCCL_SUCCESS)
            return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(api) + ": " + HcclError("HcclCommInitRootInfoConfig", rc));
        // From here on the transport owns the communicator (and destroys it on every failure below).
        char name[COMM_NAME_MAX_LENGTH + 1] = {};
        uint32_t size = 0, id = 0;
        HcclResult rc = h.getRankSize(hcomm, &size);
        if (rc == HCCL_SUCCESS) rc = h.getRankId(hcomm, &id);
        if (rc == HCCL_SUCCESS) rc = h.getCommName(hcomm, name);
        auto transport = std::make_unique<HcclTransport>(hcomm, name, uint64_t(mib) * kMiB,
                                                         static_cast<int64_t*>(AllocGraphMemory(8 * world)));
        if (rc != HCCL_SUCCESS)
            return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(api) + ": " + HcclError("HcclGetRankSize/Id/CommName", rc));
        if (size != world || id != rank)
            return Fail(ACLNN_ERR_PARAM_INVALID, std::string(api) + ": the HCCL communicator has rank " +
                                                     std::to_string(id) + " of " + std::to_string(size) +
                                                     ", the plane expects rank " + std::to_string(rank) + " of " +
                                                     std::to_string(world));
        auto c = std::make_unique<camComm>();
        c->topo = topo;
        c->rank = rank;
        c->config = *config;
        std::string why;
        if (aclnnStatus st = RunWindowTable(c.get(), transport->Group(), transport->DevicePeers(),
                                            kWindowTableTimeoutMs, &why)) {
            // After a timeout the kernel may still write the table and read the windows: keep them all.
            if (st == CAM_ERR_SYNC_TIMEOUT) (void)transport.release();
            return Fail(st, std::string(api) + ": the peer table could not be built: " + why);
        }
        // Not reached on hardware yet: the plane's identity lines, abort word and status record live in device
        // windows, and the host side that reads them through the device (docs/ascend.md §3) is not written.
        return Fail(ACLNN_ERR_RUNTIME_ERROR, std::string(api) + ": the HCCL data plane's host side past the peer "
                                                                "table is not built yet (docs/ascend.md section 5)");
    });
}

#else  // !CAM_CANN_HAS_HCCL_COMM_CONFIG

#include <string>

#include "cam/cam_comm_hccl.h"
#include "status.h"

namespace {
const char kNoHcclConfig[] =
    ": the HCCL transport is off in this build: its HCCL headers declare no HcclCommInitRootInfoConfig / "
    "HcclGetRankSize / HcclGetRankId (torch-npu 2.8.0's hccl.h; docs/ascend.md section 2)";
}

extern "C" aclnnStatus camHcclGetRootInfo(void*, uint64_t, uint64_t*) {
    return cam::host::Fail(ACLNN_ERR_RUNTIME_ERROR, std::string("camHcclGetRootInfo") + kNoHcclConfig);
}

extern "C" aclnnStatus camCommCreateHccl(const void*, uint64_t, const CamTopology*, int64_t, const camCommConfig*,
                                         uint32_t, camComm**) {
    return cam::host::Fail(ACLNN_ERR_RUNTIME_ERROR, std::string("camCommCreateHccl") + kNoHcclConfig);
}

#endif  // CAM_CANN_HAS_HCCL_COMM_CONFIG
