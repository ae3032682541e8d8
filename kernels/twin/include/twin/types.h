// Scalar types and keywords of the Ascend C dialect, as the twin compiles them with g++.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#define __global__
#define __aicore__
#define __gm__
#define __inline__ inline

// A macro, as in the Ascend C headers: `GM_ADDR a = nullptr, b = nullptr;` declares b as uint8_t there, so it
// must not compile here either.
#define GM_ADDR __gm__ uint8_t*

// bisheng declares the pipes and event ids at global scope (compiler built-ins, not in namespace AscendC), so
// `AscendC::PIPE_V` or `AscendC::event_t` do not compile there; the twin declares them where bisheng does.
enum pipe_t : uint8_t { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_FIX, PIPE_ALL };
enum event_t : int32_t { EVENT_ID0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };
// The Ascend C documentation itself writes AscendC::PipeBarrier<AscendC::PIPE_ALL>() (the TPipe constructor page,
// docs/zh/api/.../TPipe构造函数.md), so the pipe names are reachable through AscendC too; event_t is not.
namespace AscendC {
using ::PIPE_S, ::PIPE_V, ::PIPE_M, ::PIPE_MTE1, ::PIPE_MTE2, ::PIPE_MTE3, ::PIPE_FIX, ::PIPE_ALL;
}  // namespace AscendC

namespace twin_detail {

inline uint32_t FloatBits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
}

inline float BitsFloat(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
}

// The conversions below are branch-free (every case computed, one selected) so loops over them vectorise; each is
// bit-identical to the element-by-element definition in twin/reference.h (tests/twin/compute_identity.cpp: all
// 65536 inputs of the 16-bit -> fp32 direction, every exponent and rounding boundary plus random fp32 the other way).

// fp32 -> bf16, round to nearest even; NaN stays a quiet NaN with its sign.
inline uint16_t FloatToBf16Bits(float f) {
    const uint32_t u = FloatBits(f);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet = (u >> 16) | 0x0040u;
    return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

// fp32 -> IEEE binary16, round to nearest even, overflow to inf, subnormals kept, NaN -> quiet NaN with the sign.
inline uint16_t FloatToHalfBits(float f) {
    const uint32_t u = FloatBits(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t absu = u & 0x7fffffffu;
    // Normal range: rebias, then round the 13 dropped bits to nearest even; a carry rolls into the exponent, up to
    // inf for values from 65520 on.
    const uint32_t normal = (absu + 0xc8000fffu + ((absu >> 13) & 1u)) >> 13;  // 0xc8000000: (15 - 127) << 23
    // Below 2^-14: adding 0.5 puts one half-subnormal ulp at fp32's last place, so the FPU's own round to nearest
    // even does the rounding; the result's low bits are the half.
    const uint32_t sub = FloatBits(BitsFloat(absu) + 0.5f) - 0x3f000000u;
    const uint32_t big = absu > 0x7f800000u ? 0x7e00u : 0x7c00u;
    const uint32_t h = absu >= 0x47800000u ? big : (absu < 0x38800000u ? sub : normal);
    return static_cast<uint16_t>(sign | h);
}

inline float HalfBitsToFloat(uint16_t h) {
    const uint32_t em = h & 0x7fffu;
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t normal = (em << 13) + 0x38000000u;  // exponent rebias (127 - 15) << 23
    const uint32_t infNan = normal + 0x38000000u;      // exponent 31 -> 255, payload kept
    const uint32_t sub = FloatBits(static_cast<float>(static_cast<int32_t>(em)) * 5.9604644775390625e-08f);  // 2^-24
    return BitsFloat(sign | (em >= 0x7c00u ? infNan : (em < 0x0400u ? sub : normal)));
}

}  // namespace twin_detail

// 16-bit float types with the storage of the hardware; arithmetic happens in fp32 after Cast.
struct half {
    uint16_t bits = 0;
    half() = default;
    half(float f) : bits(twin_detail::FloatToHalfBits(f)) {}
    operator float() const { return twin_detail::HalfBitsToFloat(bits); }
    static half FromBits(uint16_t b) { half h; h.bits = b; return h; }
};

struct bfloat16_t {
    uint16_t bits = 0;
    bfloat16_t() = default;
    bfloat16_t(float f) : bits(twin_detail::FloatToBf16Bits(f)) {}
    operator float() const { return twin_detail::BitsFloat(static_cast<uint32_t>(bits) << 16); }
    static bfloat16_t FromBits(uint16_t b) { bfloat16_t h; h.bits = b; return h; }
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16_t) == 2, "16-bit float storage");

// A 4-bit signed integer in [-8, 7], the cube's int4 operand type. It has no storage of its own: a tensor of it
// packs two elements to a byte, element 2i in the low nibble and 2i + 1 in the high one, and its sizes and offsets
// count elements (docs/twin.md, "int4 operands"). The struct is the byte of a pair, for pointers only.
struct int4b_t {
    uint8_t pair;
};

namespace cam::twin {

// Bits of one element of a tensor of T: what turns element counts into bytes for every tensor type.
template <typename T>
inline constexpr uint64_t kElemBits = sizeof(T) * 8;
template <>
inline constexpr uint64_t kElemBits<int4b_t> = 4;

template <typename T>
constexpr uint64_t ElemsInBytes(uint64_t bytes) { return bytes * 8 / kElemBits<T>; }
template <typename T>
constexpr uint64_t BytesOfElems(uint64_t elems) { return (elems * kElemBits<T> + 7) / 8; }
// p advanced by `elems` elements; for int4 the caller checks that elems is even (a pair never splits).
template <typename T>
T* AdvanceElems(T* p, uint64_t elems) {
    if constexpr (kElemBits<T> == 4) return reinterpret_cast<T*>(reinterpret_cast<uint8_t*>(p) + elems / 2);
    else return p + elems;
}

}  // namespace cam::twin

namespace AscendC {

enum class TPosition : uint8_t { GM, VECIN, VECOUT, VECCALC, A1, A2, B1, B2, C1, C2, CO1, CO2, LCM };
using QuePosition = TPosition;

enum class RoundMode : uint8_t { CAST_NONE, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };

enum class HardEvent : uint8_t { MTE2_V, V_MTE2, MTE3_V, V_MTE3, MTE2_MTE3, MTE3_MTE2, S_V, V_S, MTE2_S, S_MTE2,
                                 MTE3_S, S_MTE3, M_V, V_M, FIX_V, MTE1_M, M_MTE1 };

// What TPipe::FetchEventID returns (kernel_tensor_base.h declares it in AscendC).
using TEventID = int8_t;

enum class CacheLine : uint8_t { SINGLE_CACHE_LINE, ENTIRE_DATA_CACHE };
enum class DcciDst : uint8_t { CACHELINE_ALL, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };

}  // namespace AscendC
