// Size arithmetic shared by kernels (to carve UB) and tiling (to choose tiles that fit). Plain C++, no Ascend
// API, so host code can include it.
#pragma once

#include <cstdint>

#ifndef __aicore__
#define __aicore__
#endif

namespace cam::kernels {

constexpr uint32_t kUbBlockBytes = 32;      // DataCopy / vector operand granularity
constexpr uint32_t kVectorRepeatBytes = 256;  // one vector repeat

__aicore__ constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
__aicore__ constexpr uint64_t CeilDiv(uint64_t v, uint64_t d) { return (v + d - 1) / d; }
__aicore__ constexpr uint32_t UbBytes(uint64_t bytes) { return static_cast<uint32_t>(AlignUp(bytes, kUbBlockBytes)); }

// Work buffer for a count-form ReduceMax: the hardware writes a (value, index) pair per 256-byte repeat even
// without calIndex, so 2 elements per repeat, rounded up to a 32-byte block (Ascend C ReduceMax documentation).
template <typename T>
__aicore__ constexpr uint32_t ReduceMaxWorkElems(uint32_t count) {
    return static_cast<uint32_t>(
        AlignUp(2 * CeilDiv(count, kVectorRepeatBytes / sizeof(T)), kUbBlockBytes / sizeof(T)));
}

// UB of the row quantizer's working set (common/quant.h, QuantWorkingSet) for passes of `cols` elements of an
// input with `inBytes` per element: the one count the kernels carve and tiling budgets.
__aicore__ constexpr uint32_t QuantWorkingSetUbBytes(uint32_t cols, uint32_t inBytes) {
    return 2 * UbBytes(uint64_t(cols) * inBytes)                   // input queue, double buffered
           + 2 * UbBytes(cols)                                     // int8 output queue, double buffered
           + UbBytes(uint64_t(cols) * 4)                           // fp32 row chunk
           + UbBytes(uint64_t(cols) * 4)                           // |x| / int32 scratch
           + UbBytes(uint64_t(cols) * 2)                           // half scratch
           + UbBytes(uint64_t(ReduceMaxWorkElems<float>(cols)) * 4)  // ReduceMax work
           + kUbBlockBytes;                                        // ReduceMax result
}

// UB of the GMM epilogues' dequant step (common/gmm_epilogue.h) for `chunk` columns; `int4`: up to two resident
// colsum slices more (W4A8's recombination, ColsumSlice).
__aicore__ constexpr uint32_t DequantUbBytes(uint32_t chunk, bool int4 = false) {
    return 2 * UbBytes(uint64_t(chunk) * 4)     // int32 accumulator in, double buffered (int4: hi and lo)
           + 2 * UbBytes(uint64_t(chunk) * 4)   // up to two resident w_scale slices (ScaleSlice)
           + (int4 ? 2 * UbBytes(uint64_t(chunk) * 4) : 0);
}

}  // namespace cam::kernels
