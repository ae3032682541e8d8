#include "twin/hccl.h"

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "twin/runtime.h"

namespace cam::twin {

namespace {

std::mutex gMutex;
std::map<std::pair<std::string, uint32_t>, std::unique_ptr<HcclContext>>& Registry() {
    static auto* registry = new std::map<std::pair<std::string, uint32_t>, std::unique_ptr<HcclContext>>();
    return *registry;
}

thread_local const HcclContext* tBound = nullptr;

}  // namespace

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

HcclContextBinding::HcclContextBinding(const HcclContext* context) : previous_(tBound) { tBound = context; }
HcclContextBinding::~HcclContextBinding() { tBound = previous_; }

__gm__ uint8_t* BoundHcclContext(uint32_t index, const std::source_location& where) {
    const HcclContext* context = index == 0 ? tBound : nullptr;  // cam's MC2 ops bind one group
    CAM_TWIN_CHECK(context != nullptr, "hccl-context-unbound",
                   "GetHcclContext<" + std::to_string(index) +
                       ">() in a launch that has no HCCL context for that group: only an MC2 op launched with its "
                       "group bound gets one (a plain <<<>>> launch has none)",
                   where);
    return reinterpret_cast<__gm__ uint8_t*>(const_cast<HcclContext*>(context));
}

}  // namespace cam::twin
