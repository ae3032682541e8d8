#pragma once

#include <string>

#include "cam/tiling/platform_info.h"
#include "dynamic_quant/dynamic_quant_tiling_data.h"

namespace cam::tiling {

// Fills `out` for x [rows, cols] with elemBytes per element (2: bf16/fp16). Returns false with *why set when no
// tiling exists (the row cannot be split finely enough for this UB). rows == 0 gives blockDim 0: nothing to launch.
bool TileDynamicQuant(const PlatformInfo& platform, uint64_t rows, uint64_t cols, bool bf16,
                      kernels::DynamicQuantTilingData* out, std::string* why);

}  // namespace cam::tiling
