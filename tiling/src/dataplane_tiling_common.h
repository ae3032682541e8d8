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

// Blocks for `items` rows (or tokens) that move `bytes` in all: a block per kMinRowsPerBlock rows, and no more
// blocks than the platform's byte floor per block (PlatformInfo::minBlockBytes) allows, within the vector cores.
inline uint32_t BlocksFor(const PlatformInfo& platform, int64_t items, uint64_t bytes) {
    int64_t want = (items + kMinRowsPerBlock - 1) / kMinRowsPerBlock;
    if (platform.minBlockBytes > 0) {
        const uint64_t byBytes = (bytes + platform.minBlockBytes - 1) / platform.minBlockBytes;
        want = std::min<int64_t>(want, static_cast<int64_t>(std::min<uint64_t>(byBytes, INT64_MAX)));
    }
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
