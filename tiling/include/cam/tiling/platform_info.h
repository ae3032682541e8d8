// What tiling needs to know about the chip. The host backend fills it (twin: its platform description; Ascend:
// the runtime's core counts and buffer sizes), so no size is a literal in tiling or kernels.
#pragma once

#include <cstdint>

namespace cam::tiling {

struct PlatformInfo {
    uint32_t aivCores;
    uint32_t aicCores;
    uint32_t ubBytes;
    uint32_t l1Bytes;
    uint32_t l0aBytes;
    uint32_t l0bBytes;
    uint32_t l0cBytes;
    // Bytes a data-plane block should move at least before one more block pays for its start, its share of the
    // launch's SyncAlls and the block-0 decision hand-off (0: no byte floor, the row floor alone decides).
    uint64_t minBlockBytes;
};

}  // namespace cam::tiling
