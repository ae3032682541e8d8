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

}  // namespace cam::kernels
