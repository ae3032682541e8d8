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
};

}  // namespace cam::tiling
