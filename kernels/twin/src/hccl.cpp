#include "twin/hccl.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "twin/runtime.h"

namespace cam::twin {

namespace {

std::mutex gMutex;
std::map<std::pair<std::string, uint32_t>, std::unique_ptr<HcclContext>>& Registry() {
    static auto* registry = new std::map<std::pair<std::string, uint32_t>, std::unique_ptr<HcclContext>>();
    return *registry;
}

thread_local const HcclContextBinding::Layouts* tBound = nullptr;

}  // namespace

// Both layouts of one bound context, built from the launch's own copy of the description.
struct HcclContextBinding::Layouts {
    HcclA2FlatContext a2{};
    HcclA3Context a3{};
    std::vector<HcclA3RankRecord> records;
    bool isA3 = false;
};

bool HcclContextIsA3() { return std::strcmp(ActivePlatform().name, "ascend910_93") == 0; }

void RegisterHcclContext(const std::string& group, uint32_t rank, const HcclContext& context) {
    std::lock_guard<std::mutex> lock(gMutex);
    Registry()[{group, rank}] = std::make_unique<HcclContext>(context);
}

void UnregisterHcclContext(const std::string& group, uint32_t rank) {
    std::lock_guard<std::mutex> lock(gMutex);
    Registry().erase({group, rank});
}

const HcclContext* FindHcclContext(const std::string& group, uint32_t rank) {
    std::lock_guard<std::mutex> lock(gMutex);
    auto it = Registry().find({group, rank});
    return it == Registry().end() ? nullptr : it->second.get();
}

HcclContextBinding::HcclContextBinding(const HcclContext* context) : previous_(tBound) {
    if (context == nullptr) {
        tBound = nullptr;
        return;
    }
    layouts_ = std::make_unique<Layouts>();
    Layouts& l = *layouts_;
    l.isA3 = HcclContextIsA3();
    const uint32_t dim = context->rankDim < kHcclMaxRanks ? context->rankDim : kHcclMaxRanks;
    // A2: a rank count past the flat arrays is still written (the runtime's count), its windows are not.
    l.a2.workSpace = context->workSpace;
    l.a2.workSpaceSize = context->workSpaceSize;
    l.a2.rankId = context->rankId;
    l.a2.rankNum = context->rankDim;
    l.a2.winSize = context->winSize;
    for (uint32_t r = 0; r < dim && r < kHcclA2FlatRanks; ++r) {
        l.a2.windowsIn[r] = context->windowsIn[r];
        l.a2.windowsOut[r] = context->windowsOut[r];
    }
    l.a3.workSpace = context->workSpace;
    l.a3.workSpaceSize = context->workSpaceSize;
    l.a3.rankId = context->rankId;
    l.a3.rankNum = context->rankDim;
    l.a3.winSize = context->winSize;
    if (context->rankId < dim) {
        l.a3.localWindowsIn = context->windowsIn[context->rankId];
        l.a3.localWindowsOut = context->windowsOut[context->rankId];
    }
    l.records.resize(dim);
    for (uint32_t r = 0; r < dim; ++r) {
        l.records[r] = {r, r, context->windowsIn[r], context->windowsOut[r]};
        l.a3.remote[r] = r == context->rankId ? nullptr : &l.records[r];
    }
    tBound = layouts_.get();
}

HcclContextBinding::~HcclContextBinding() { tBound = previous_; }

__gm__ uint8_t* BoundHcclContext(uint32_t index, const std::source_location& where) {
    const HcclContextBinding::Layouts* l = index == 0 ? tBound : nullptr;  // cam's MC2 ops bind one group
    CAM_TWIN_CHECK(l != nullptr, "hccl-context-unbound",
                   "GetHcclContext<" + std::to_string(index) +
                       ">() in a launch that has no HCCL context for that group: only an MC2 op launched with its "
                       "group bound gets one (a plain <<<>>> launch has none)",
                   where);
    const void* c = l->isA3 ? static_cast<const void*>(&l->a3) : static_cast<const void*>(&l->a2);
    return reinterpret_cast<__gm__ uint8_t*>(const_cast<void*>(c));
}

int HcclLayoutAt(const void* context) {
    const HcclContextBinding::Layouts* l = tBound;
    if (l == nullptr || context == nullptr) return 0;
    if (context == &l->a2) return 1;
    if (context == &l->a3) return 2;
    return 0;
}

}  // namespace cam::twin
