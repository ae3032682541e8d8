#include "cam/tiling/dynamic_quant_tiling.h"

#include <algorithm>
#include <limits>

namespace cam::tiling {

using kernels::DynamicQuantUbBytes;
using kernels::kDynamicQuantColAlign;

bool TileDynamicQuant(const PlatformInfo& platform, uint64_t rows, uint64_t cols, bool bf16,
                      kernels::DynamicQuantTilingData* out, std::string* why) {
    constexpr uint64_t kMax32 = std::numeric_limits<uint32_t>::max();
    if (rows > kMax32 || cols > kMax32 - kDynamicQuantColAlign) {
        *why = "x has " + std::to_string(rows) + " x " + std::to_string(cols) + " elements; each dim must be < 2^32";
        return false;
    }
    constexpr uint32_t kInBytes = 2;
    // Largest pass (a multiple of 32 columns) that fits UB; a row at most that long stays in UB for both steps.
    uint32_t maxPass = 0;
    for (uint32_t step = 1u << 20; step >= kDynamicQuantColAlign; step /= 2) {
        while (DynamicQuantUbBytes(maxPass + step, kInBytes) <= platform.ubBytes) maxPass += step;
    }
    if (maxPass == 0) {
        *why = "UB of " + std::to_string(platform.ubBytes) + " bytes cannot hold one 32-column pass";
        return false;
    }
    const uint32_t alignedCols = static_cast<uint32_t>(kernels::AlignUp(std::max<uint64_t>(cols, 1), kDynamicQuantColAlign));
    kernels::DynamicQuantTilingData t{};
    t.key = bf16 ? kernels::kDynamicQuantBf16 : kernels::kDynamicQuantFp16;
    t.rows = static_cast<uint32_t>(rows);
    t.cols = static_cast<uint32_t>(cols);
    t.colsPerPass = std::min(alignedCols, maxPass);
    t.blockDim = static_cast<uint32_t>(std::min<uint64_t>(platform.aivCores, rows));
    if (t.blockDim > 0) {
        t.rowsPerBlock = t.rows / t.blockDim;
        t.rowsRemainder = t.rows % t.blockDim;
    }
    *out = t;
    return true;
}

}  // namespace cam::tiling
