// The twin's model of the HCCL context an MC2 op's kernel reads (docs/ascend.md §5). On Ascend the op framework
// binds the context of the op's HCCL group to the launch and the kernel finds it with AscendC::GetHcclContext<i>()
// (at most two groups, i = 0 or 1); the Ascend C Hccl client then reads the rank, the rank count and every rank's
// window from it (Hccl::Init / GetRankId / GetRankDim / GetWindowsInAddr). A plain <<<>>> launch has no context.
//
// The layout modelled is the flat one the Hccl client reads on Atlas A2 (rank id, rank count, window size, then
// windowsIn[] / windowsOut[] indexed by rank); A3 reaches the remote windows through per-rank records instead, which
// the client hides. Kernels never touch the struct: they go through the client, as on hardware.
//
// On the twin the transports fill one context per rank where the HCCL runtime would, register it under the group
// name, and an MC2 launch binds it to the launch's block threads (BindHcclContext).
#pragma once

#include <cstdint>
#include <source_location>
#include <string>

#include "twin/types.h"

namespace cam::twin {

// windowsIn/windowsOut entries of the modelled context. HCCL's own array length differs by release and SoC (and
// the client hides it); the twin's is window_table's limit, so no plane the host accepts is refused here.
constexpr uint32_t kHcclMaxRanks = 1024;
constexpr uint32_t kHcclMaxGroups = 2;   // GetHcclContext<index>: index 0 or 1

struct HcclContext {
    uint64_t workSpace;
    uint64_t workSpaceSize;
    uint32_t rankId;
    uint32_t rankDim;
    uint64_t winSize;
    uint64_t windowsIn[kHcclMaxRanks];
    uint64_t windowsOut[kHcclMaxRanks];
};

// The group -> context registry the twin transports fill (per rank: in-process ranks share one process).
void RegisterHcclContext(const std::string& group, uint32_t rank, const HcclContext& context);
void UnregisterHcclContext(const std::string& group, uint32_t rank);
// The registered context's address, nullptr when (group, rank) has none. Stays valid until unregistered.
const HcclContext* FindHcclContext(const std::string& group, uint32_t rank);

// Binds `context` as group 0 of the calling block thread for its lifetime (the MC2 launch wraps the kernel in it).
class HcclContextBinding {
public:
    explicit HcclContextBinding(const HcclContext* context);
    ~HcclContextBinding();
    HcclContextBinding(const HcclContextBinding&) = delete;
    HcclContextBinding& operator=(const HcclContextBinding&) = delete;

private:
    const HcclContext* previous_;
};

// Rule hccl-context-unbound: a kernel asked for the HCCL context of a launch that has none (a plain launch, or a
// group index nothing was bound to).
__gm__ uint8_t* BoundHcclContext(uint32_t index, const std::source_location& where);

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

// The part of the Ascend C Hccl client that reads the context (no collective messages).
template <HcclServerType serverType = HCCL_SERVER_TYPE_AICPU>
class Hccl {
public:
    __aicore__ inline void Init(GM_ADDR context, __gm__ void* initTiling = nullptr) {
        (void)initTiling;
        context_ = reinterpret_cast<const ::cam::twin::HcclContext*>(context);
    }
    __aicore__ inline uint32_t GetRankId() const { return context_->rankId; }
    __aicore__ inline uint32_t GetRankDim() const { return context_->rankDim; }
    // nullptr for a rank outside [0, rankDim), as documented.
    __aicore__ inline GM_ADDR GetWindowsInAddr(uint32_t rankId) const {
        if (rankId >= context_->rankDim || rankId >= ::cam::twin::kHcclMaxRanks) return nullptr;
        return reinterpret_cast<GM_ADDR>(context_->windowsIn[rankId]);
    }
    __aicore__ inline GM_ADDR GetWindowsOutAddr(uint32_t rankId) const {
        if (rankId >= context_->rankDim || rankId >= ::cam::twin::kHcclMaxRanks) return nullptr;
        return reinterpret_cast<GM_ADDR>(context_->windowsOut[rankId]);
    }

private:
    const ::cam::twin::HcclContext* context_ = nullptr;
};

}  // namespace AscendC
