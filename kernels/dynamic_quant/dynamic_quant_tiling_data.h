// Tiling of dynamic_quant, passed by value to the kernel. Filled by tiling/src/dynamic_quant_tiling.cpp.
#pragma once

#include <cstdint>

#include "common/ub_math.h"

namespace cam::kernels {

enum DynamicQuantKey : uint32_t { kDynamicQuantBf16 = 0, kDynamicQuantFp16 = 1 };

// Rows (tokens) are split over blocks: block b takes rowsPerBlock rows, plus one if b < rowsRemainder.
// A row is processed in passes of colsPerPass elements; one pass keeps the row in UB, more re-read it.
struct DynamicQuantTilingData {
    uint32_t key;
    uint32_t rows;
    uint32_t cols;
    uint32_t blockDim;
    uint32_t rowsPerBlock;
    uint32_t rowsRemainder;
    uint32_t colsPerPass;  // multiple of 32 elements, so every dtype's chunk is 32-byte aligned
};

constexpr uint32_t kDynamicQuantColAlign = 32;
constexpr uint32_t kDynamicQuantScaleBatch = 64;  // scales staged in UB before one copy-out

// UB bytes the kernel carves for a pass of colsPerPass elements of an input of inBytes per element.
__aicore__ constexpr uint32_t DynamicQuantUbBytes(uint32_t colsPerPass, uint32_t inBytes) {
    return QuantWorkingSetUbBytes(colsPerPass, inBytes) + UbBytes(kDynamicQuantScaleBatch * 4);  // + staged scales
}

}  // namespace cam::kernels
