// The twin's compute semantics written element by element, the way they were first defined: the yardstick the fast
// paths (twin/types.h conversions, twin/vector.h loops, the Mmad microkernels of src/cube_kernels.cpp) are proven
// bit-identical against (tests/twin/compute_identity.cpp). Kernels never include this header; nothing here is
// on a kernel's execution path.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "twin/types.h"

namespace cam::twin::ref {

inline uint16_t FloatToBf16Bits(float f) {
    uint32_t u = twin_detail::FloatBits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return static_cast<uint16_t>(u >> 16);
}

inline uint16_t FloatToHalfBits(float f) {
    uint32_t u = twin_detail::FloatBits(f);
    uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
    if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
    if (absu < 0x38800000u) {
        float scaled = twin_detail::BitsFloat(absu) * 16777216.0f;
        return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
    }
    uint32_t mant = absu & 0x7fffffu;
    int32_t exp = static_cast<int32_t>(absu >> 23) - 127 + 15;
    uint32_t half = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half += 1;
    return static_cast<uint16_t>(sign | half);
}

inline float HalfBitsToFloat(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    if (exp == 31) return twin_detail::BitsFloat(sign | 0x7f800000u | (mant << 13));
    return twin_detail::BitsFloat(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

// A 16-bit float value as the reference sees it: through the reference conversions, never the fast ones.
template <typename T>
float ToFloat(T v) {
    if constexpr (std::is_same_v<T, half>) return HalfBitsToFloat(v.bits);
    else if constexpr (std::is_same_v<T, bfloat16_t>) return twin_detail::BitsFloat(uint32_t(v.bits) << 16);
    else return static_cast<float>(v);
}

template <typename T>
T FromFloat(float f) {
    if constexpr (std::is_same_v<T, half>) return half::FromBits(FloatToHalfBits(f));
    else if constexpr (std::is_same_v<T, bfloat16_t>) return bfloat16_t::FromBits(FloatToBf16Bits(f));
    else return static_cast<T>(f);
}

inline float MaxPropagateNan(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
    return a > b ? a : b;
}
inline float MinPropagateNan(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
    return a < b ? a : b;
}

template <typename I>
I RoundToInt(float v, AscendC::RoundMode mode) {
    if (std::isnan(v)) return 0;
    double r;
    switch (mode) {
        case AscendC::RoundMode::CAST_FLOOR: r = std::floor(v); break;
        case AscendC::RoundMode::CAST_CEIL: r = std::ceil(v); break;
        case AscendC::RoundMode::CAST_ROUND: r = std::round(v); break;
        case AscendC::RoundMode::CAST_TRUNC: r = std::trunc(v); break;
        default: r = std::nearbyint(v); break;
    }
    if (r < static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
    // max + 1 in double is exact (a power of two) even for int64, whose max itself is not a double.
    if (r >= static_cast<double>(std::numeric_limits<I>::max()) + 1.0) return std::numeric_limits<I>::max();
    return static_cast<I>(r);
}

template <typename D, typename S>
D CastOne(S s, AscendC::RoundMode mode) {
    if constexpr (std::is_same_v<D, S>) {
        return s;
    } else if constexpr (std::is_integral_v<D>) {
        return RoundToInt<D>(ToFloat(s), mode);
    } else if constexpr (std::is_same_v<D, float>) {
        return ToFloat(s);
    } else {
        return FromFloat<D>(ToFloat(s));
    }
}

// The whole Cast instruction (count elements), dequant (int32 -> half through DEQSCALE) included.
template <typename D, typename S>
void Cast(D* d, const S* s, AscendC::RoundMode mode, uint32_t count, bool dequant, float deqScale) {
    if (dequant) {
        for (uint32_t i = 0; i < count; ++i) d[i] = FromFloat<D>(static_cast<float>(s[i]) * deqScale);
        return;
    }
    for (uint32_t i = 0; i < count; ++i) d[i] = CastOne<D, S>(s[i], mode);
}

// ReduceMax over float, dst value and the work buffer's (value, index) pairs per 256-byte repeat.
inline float ReduceMax(const float* s, float* w, uint32_t count) {
    constexpr uint32_t perRepeat = 64;
    float m = s[0];
    for (uint32_t i = 1; i < count; ++i) m = MaxPropagateNan(m, s[i]);
    for (uint32_t r = 0; r * perRepeat < count; ++r) {
        const uint32_t n = count - r * perRepeat < perRepeat ? count - r * perRepeat : perRepeat;
        uint32_t at = 0;
        float rm = s[r * perRepeat];
        for (uint32_t i = 1; i < n; ++i) {
            const float v = s[r * perRepeat + i];
            if (MaxPropagateNan(rm, v) != rm) rm = v, at = i;
        }
        w[2 * r] = rm;
        std::memcpy(&w[2 * r + 1], &at, sizeof(at));
    }
    return m;
}

// C (NZ int32) = / += A (ZZ int8) x B (ZN int8), m and n multiples of 16, k of 32 (twin/cube.h, "Mmad").
inline void MmadInt8(int32_t* c, const int8_t* a, const int8_t* b, uint32_t m, uint32_t n, uint32_t k, bool init) {
    const uint32_t kBlocks = k / 32;
    for (uint32_t i = 0; i < m; ++i) {
        const int8_t* aRow = a + (i / 16) * (uint64_t(k) * 16) + (i % 16) * 32;
        for (uint32_t j = 0; j < n; ++j) {
            const int8_t* bCol = b + (j / 16) * 512 + (j % 16) * 32;
            int32_t acc = 0;
            for (uint32_t kb = 0; kb < kBlocks; ++kb) {
                const int8_t* av = aRow + kb * 512;
                const int8_t* bv = bCol + uint64_t(kb) * n * 32;
                int32_t part = 0;
                for (uint32_t t = 0; t < 32; ++t) part += int32_t(av[t]) * int32_t(bv[t]);
                acc += part;
            }
            int32_t& out = c[(j / 16) * (uint64_t(m) * 16) + i * 16 + j % 16];
            out = init ? acc : static_cast<int32_t>(static_cast<uint32_t>(out) + static_cast<uint32_t>(acc));
        }
    }
}

}  // namespace cam::twin::ref
