// The twin's model of the HCCL context an MC2 op's kernel reads (docs/ascend.md §5). On Ascend the op framework
// binds the context of the op's HCCL group to the launch and the kernel finds it with AscendC::GetHcclContext<i>()
// (at most two groups, i = 0 or 1); the Ascend C Hccl client then reads the rank, the rank count and every rank's
// window from it (Hccl::Init / GetRankId / GetRankDim / GetWindowsInAddr). A plain <<<>>> launch has no context.
//
// Two layouts exist and the twin models both (docs/twin.md, "HCCL context"): on Atlas A2 the flat one (rank id, rank
// count, window size, then windowsIn[] / windowsOut[] of HCCL_MAX_RANK_NUM = 32 entries); on A3 (ascend910_93) a
// header with this rank's own windows and one record per remote rank. The client reads the flat layout unless
// Init got an init tiling (the deprecated tiling-less Init on an A3 context reads other fields' bytes as windows),
// so the twin refuses the tiling-less form on the A3 description (rule hccl-init-tiling), an init tiling whose
// device type makes the client read the other layout (hccl-init-device-type), a window of a
// rank the flat layout cannot hold (hccl-a2-ranks) and requires Finalize (hccl-finalize).
//
// On the twin the transports fill one description per rank (HcclContext, the layout-free input) where the HCCL
// runtime would, register it under the group name, and an MC2 launch copies it when it is queued and binds the
// active platform's layout, built from that copy, to the launch's block threads: the kernel never reads the
// registry, so unregistering a group cannot pull memory from under a queued or running kernel.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <source_location>
#include <string>

#include "twin/runtime.h"
#include "twin/types.h"

namespace cam::twin {

// Ranks of the layout-free description (window_table's own limit).
constexpr uint32_t kHcclMaxRanks = 1024;
constexpr uint32_t kHcclMaxGroups = 2;   // GetHcclContext<index>: index 0 or 1
// Windows the A2 flat layout holds (HCCL_MAX_RANK_NUM of the Ascend C Hccl client's HcclCombineOpParam).
constexpr uint32_t kHcclA2FlatRanks = 32;
// The init tiling as the client reads it (asc-devkit's Mc2InitTilingInner, 64 bytes): Init copies the byte at
// offset 46 as the device type, and the window lookups read the A2 flat context when it is HCCL_ASCEND910B (1),
// the A3 one for any other value (impl/adv_api/detail/hccl/impl/platform_v220/hccl_aicpu.h).
constexpr uint32_t kHcclInitTilingDeviceTypeByte = 46;
constexpr uint8_t kHcclAscend910B = 1;

struct HcclContext {
    uint64_t workSpace;
    uint64_t workSpaceSize;
    uint32_t rankId;
    uint32_t rankDim;
    uint64_t winSize;
    uint64_t windowsIn[kHcclMaxRanks];
    uint64_t windowsOut[kHcclMaxRanks];
};

// The A2 flat layout as the client reads it.
struct HcclA2FlatContext {
    uint64_t workSpace;
    uint64_t workSpaceSize;
    uint32_t rankId;
    uint32_t rankNum;
    uint64_t winSize;
    uint64_t windowsIn[kHcclA2FlatRanks];
    uint64_t windowsOut[kHcclA2FlatRanks];
};

// The A3 layout: a header with this rank's windows and, per remote rank, a pointer to that rank's record.
struct HcclA3RankRecord {
    uint32_t remoteUsrRankId;
    uint32_t remoteWorldRank;
    uint64_t windowsIn;
    uint64_t windowsOut;
};
struct HcclA3Context {
    uint64_t workSpace;
    uint64_t workSpaceSize;
    uint32_t rankId;
    uint32_t rankNum;
    uint64_t winSize;
    uint64_t localWindowsIn;
    uint64_t localWindowsOut;
    char hcomId[128];
    const HcclA3RankRecord* remote[kHcclMaxRanks];
};

// Whether the active platform's HCCL context has the A3 layout.
bool HcclContextIsA3();

// The group -> context registry the twin transports fill (per rank: in-process ranks share one process).
void RegisterHcclContext(const std::string& group, uint32_t rank, const HcclContext& context);
void UnregisterHcclContext(const std::string& group, uint32_t rank);
// The registered description's address, nullptr when (group, rank) has none. Stays valid until unregistered: an
// MC2 launch copies it when queued (CAM_MC2_LAUNCH), so only the caller's own use must end before that.
const HcclContext* FindHcclContext(const std::string& group, uint32_t rank);

// Binds the active platform's layout of `context` (copied) as group 0 of the calling block thread for its lifetime
// (the MC2 launch wraps the kernel in it).
class HcclContextBinding {
public:
    explicit HcclContextBinding(const HcclContext* context);
    ~HcclContextBinding();
    HcclContextBinding(const HcclContextBinding&) = delete;
    HcclContextBinding& operator=(const HcclContextBinding&) = delete;

    struct Layouts;

private:
    std::unique_ptr<Layouts> layouts_;
    const Layouts* previous_;
};

// Rule hccl-context-unbound: a kernel asked for the HCCL context of a launch that has none (a plain launch, or a
// group index nothing was bound to).
__gm__ uint8_t* BoundHcclContext(uint32_t index, const std::source_location& where);

// What the client sees at `context` (the bound layouts of this block): 0 none of them, 1 the A2 flat layout,
// 2 the A3 layout.
int HcclLayoutAt(const void* context);

}  // namespace cam::twin

namespace AscendC {

constexpr uint32_t HCCL_GROUP_ID_0 = 0;
constexpr uint32_t HCCL_GROUP_ID_1 = 1;

template <uint32_t index>
inline __gm__ uint8_t* GetHcclContext(const std::source_location where = std::source_location::current()) {
    static_assert(index < ::cam::twin::kHcclMaxGroups, "GetHcclContext: at most two communication groups (0, 1)");
    return ::cam::twin::BoundHcclContext(index, where);
}

enum HcclServerType : uint32_t { HCCL_SERVER_TYPE_AICPU = 0 };

// The part of the Ascend C Hccl client that reads the context (no collective messages): Init, the getters and
// Finalize.
template <HcclServerType serverType = HCCL_SERVER_TYPE_AICPU>
class Hccl {
public:
    Hccl() = default;
    Hccl(const Hccl&) = delete;
    Hccl& operator=(const Hccl&) = delete;
    // The client's docs: Finalize once no more communication follows; a client left initialised is reported.
    ~Hccl() noexcept(false) {
        if (layout_ != 0 && !finalized_ && ::cam::twin::InKernel() && std::uncaught_exceptions() == 0)
            ::cam::twin::Violation("hccl-finalize", "Hccl client initialised and never finalized (call Finalize)",
                                   initWhere_);
    }

    __aicore__ inline void Init(GM_ADDR context, __gm__ void* initTiling = nullptr,
                                const std::source_location where = std::source_location::current()) {
        initWhere_ = where;
        const int layout = ::cam::twin::HcclLayoutAt(context);
        CAM_TWIN_CHECK(layout != 0, "hccl-context-unbound", "Hccl::Init with an address that is no bound context",
                       where);
        CAM_TWIN_CHECK(initTiling != nullptr || layout == 1, "hccl-init-tiling",
                       "Hccl::Init(context) without an init tiling reads the A2 flat layout, but this platform's "
                       "context is the A3 one (per-rank records): its 'windows' would be other fields' bytes; pass "
                       "the Mc2InitTiling (Init(context, initTiling))",
                       where);
        if (initTiling != nullptr) {
            const uint8_t type = static_cast<const uint8_t*>(initTiling)[::cam::twin::kHcclInitTilingDeviceTypeByte];
            const int reads = type == ::cam::twin::kHcclAscend910B ? 1 : 2;
            CAM_TWIN_CHECK(reads == layout, "hccl-init-device-type",
                           "Hccl::Init with an init tiling of device type " + std::to_string(type) + ": the client "
                           "then reads the " + (reads == 1 ? "A2 flat" : "A3 per-rank") + " context, but this "
                           "platform's context is the " + (layout == 1 ? "A2 flat" : "A3 per-rank") + " one: every "
                           "peer address would come from other fields' bytes; fill the tiling's device type for "
                           "the SoC (1 on Ascend910B)",
                           where);
        }
        layout_ = layout;
        context_ = context;
    }
    template <bool sync = true>
    __aicore__ inline void Finalize() {
        finalized_ = true;
    }
    __aicore__ inline uint32_t GetRankId() const { return layout_ == 2 ? A3()->rankId : A2()->rankId; }
    __aicore__ inline uint32_t GetRankDim() const { return layout_ == 2 ? A3()->rankNum : A2()->rankNum; }
    // nullptr for a rank outside [0, rankDim), as documented.
    __aicore__ inline GM_ADDR GetWindowsInAddr(uint32_t rankId,
                                               const std::source_location where = std::source_location::current()) const {
        return Window(rankId, true, where);
    }
    __aicore__ inline GM_ADDR GetWindowsOutAddr(uint32_t rankId,
                                                const std::source_location where = std::source_location::current()) const {
        return Window(rankId, false, where);
    }

private:
    const ::cam::twin::HcclA2FlatContext* A2() const {
        return reinterpret_cast<const ::cam::twin::HcclA2FlatContext*>(context_);
    }
    const ::cam::twin::HcclA3Context* A3() const {
        return reinterpret_cast<const ::cam::twin::HcclA3Context*>(context_);
    }
    GM_ADDR Window(uint32_t r, bool in, const std::source_location& where) const {
        CAM_TWIN_CHECK(layout_ != 0, "hccl-context-unbound", "Hccl getter before Init", where);
        if (r >= GetRankDim()) return nullptr;
        if (layout_ == 2) {
            const auto* c = A3();
            if (r == c->rankId) return reinterpret_cast<GM_ADDR>(in ? c->localWindowsIn : c->localWindowsOut);
            const auto* rec = c->remote[r];
            return rec ? reinterpret_cast<GM_ADDR>(in ? rec->windowsIn : rec->windowsOut) : nullptr;
        }
        CAM_TWIN_CHECK(r < ::cam::twin::kHcclA2FlatRanks, "hccl-a2-ranks",
                       "window of rank " + std::to_string(r) + " asked from the A2 flat context, which holds " +
                           std::to_string(::cam::twin::kHcclA2FlatRanks) +
                           " (past them the client reads other fields): bound the world size first",
                       where);
        return reinterpret_cast<GM_ADDR>(in ? A2()->windowsIn[r] : A2()->windowsOut[r]);
    }

    GM_ADDR context_ = nullptr;
    int layout_ = 0;
    bool finalized_ = false;
    std::source_location initWhere_{};
};

}  // namespace AscendC
