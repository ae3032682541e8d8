// Helpers shared by the four data-plane tilings.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "cam/tiling/platform_info.h"
#include "common/dataplane_args.h"
#include "common/ub_math.h"

namespace cam::tiling::detail {

// Rows (or tokens) a block should at least get before another block is worth its launch and SyncAll cost. The
// row counts the FFN ops split are static (capacity), so their blockDim never changes between rounds.
constexpr int64_t kMinRowsPerBlock = 16;

inline uint32_t BlocksFor(const PlatformInfo& platform, int64_t items) {
    const int64_t want = (items + kMinRowsPerBlock - 1) / kMinRowsPerBlock;
    return static_cast<uint32_t>(std::clamp<int64_t>(want, 1, platform.aivCores));
}

inline uint32_t ColsPerPass(int64_t h, uint32_t maxCols) {
    return static_cast<uint32_t>(std::min<uint64_t>(kernels::AlignUp(static_cast<uint64_t>(h), 32), maxCols));
}

// `ubBytes`: what the op's kernel carves (its *UbBytes function).
inline bool WorkingSetFits(const PlatformInfo& platform, uint64_t ubBytes, const char* op, std::string* why) {
    if (ubBytes <= platform.ubBytes) return true;
    *why = "UB of " + std::to_string(platform.ubBytes) + " bytes cannot hold " + op + "'s working set";
    return false;
}

}  // namespace cam::tiling::detail
