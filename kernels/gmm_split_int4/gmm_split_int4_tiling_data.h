// Tiling of the W4A8 activation split (gmm_split_int4): the vector kernel that turns int8 x into the int4 hi / lo
// planes the int4 cube loop reads (docs/gmm.md §9.1, route (a)).
#pragma once

#include <cstdint>

#include "common/ub_math.h"

namespace cam::kernels {

struct GmmSplitInt4TilingData {
    uint32_t blockDim;  // AIV cores
    uint32_t chunk;     // columns per pass, a multiple of 64 (one int4 C0 block of each plane)
};

constexpr uint32_t kGmmSplitColAlign = 64;

// UB the split carves for `chunk` columns.
__aicore__ constexpr uint32_t GmmSplitInt4UbBytes(uint32_t chunk) {
    return 2 * UbBytes(chunk)                   // int8 x in, double buffered
           + 3 * UbBytes(uint64_t(chunk) * 2)   // half x, x / 16 (then lo), int16 floor
           + 4 * UbBytes(chunk / 2);            // int4 hi and lo out, double buffered
}

}  // namespace cam::kernels
