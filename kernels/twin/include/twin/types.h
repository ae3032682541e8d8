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

// fp32 -> bf16, round to nearest even; NaN stays a quiet NaN with its sign.
inline uint16_t FloatToBf16Bits(float f) {
    uint32_t u = FloatBits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return static_cast<uint16_t>(u >> 16);
}

// fp32 -> IEEE binary16, round to nearest even, overflow to inf, subnormals kept.
inline uint16_t FloatToHalfBits(float f) {
    uint32_t u = FloatBits(f);
    uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
    if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
    if (absu < 0x38800000u) {                                              // below 2^-14: subnormal or zero
        // Scale into the subnormal grid with one exact multiply and let the FPU round to nearest even.
        float scaled = BitsFloat(absu) * 16777216.0f;  // 2^24: one half-subnormal ulp becomes 1.0
        return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
    }
    uint32_t mant = absu & 0x7fffffu;
    int32_t exp = static_cast<int32_t>(absu >> 23) - 127 + 15;
    uint32_t half = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half += 1;  // carry may roll into the exponent: correct
    return static_cast<uint16_t>(sign | half);
}

inline float HalfBitsToFloat(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        float v = static_cast<float>(mant) * 5.9604644775390625e-08f;  // 2^-24
        return sign ? -v : v;
    }
    if (exp == 31) return BitsFloat(sign | 0x7f800000u | (mant << 13));
    return BitsFloat(sign | ((exp - 15 + 127) << 23) | (mant << 13));
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
