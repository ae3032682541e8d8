// The vector unit's CPU paths (twin/vector.h, VectorKernels): portable (the element-by-element templates, which the
// compiler vectorises for the baseline ISA), AVX2 + F16C and AVX-512, chosen at run time so one wheel runs on every
// x86-64. Each SIMD loop does the full vectors and leaves the tail to the portable element form; every path gives
// the bits of twin/reference.h (tests/twin/compute_identity.cpp, "vector PATH"). Where a SIMD instruction's own
// result differs from the definition (F16C quiets a signalling NaN and keeps NaN payloads, the int conversions
// return 0x80000000 for NaN and overflow), the lanes concerned are patched with a select, never a branch.
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernel_operator.h"
#include "twin/env_path.h"

namespace cam::twin {

namespace {

using AscendC::RoundMode;

// ---- portable: the element-by-element templates of twin/vector.h ----------------------------------------------

void PortableBf16ToFloat(float* d, const bfloat16_t* s, uint32_t n) { CastLoopPortable(d, s, RoundMode::CAST_NONE, n); }
void PortableHalfToFloat(float* d, const half* s, uint32_t n) { CastLoopPortable(d, s, RoundMode::CAST_NONE, n); }
void PortableFloatToHalf(half* d, const float* s, uint32_t n) { CastLoopPortable(d, s, RoundMode::CAST_RINT, n); }
void PortableFloatToBf16(bfloat16_t* d, const float* s, uint32_t n) { CastLoopPortable(d, s, RoundMode::CAST_RINT, n); }
void PortableInt32ToFloat(float* d, const int32_t* s, uint32_t n) { CastLoopPortable(d, s, RoundMode::CAST_NONE, n); }
void PortableFloatToInt32(int32_t* d, const float* s, RoundMode mode, uint32_t n) { CastLoopPortable(d, s, mode, n); }
void PortableHalfToInt8(int8_t* d, const half* s, RoundMode mode, uint32_t n) { CastLoopPortable(d, s, mode, n); }
void PortableDequant(half* d, const int32_t* s, float scale, uint32_t n) { DequantLoopPortable(d, s, scale, n); }
void PortableAbs(float* d, const float* s, uint32_t n) { AbsLoopPortable(d, s, n); }
void PortableScalar(VectorScalarOp op, float* d, const float* s, float scalar, uint32_t n) {
    ScalarLoopPortable(op, d, s, scalar, n);
}
void PortableBinary(VectorBinaryOp op, float* d, const float* a, const float* b, uint32_t n) {
    BinaryLoopPortable(op, d, a, b, n);
}

constexpr VectorKernels kPortable = {VectorPath::Portable, PortableBf16ToFloat, PortableHalfToFloat,
                                     PortableFloatToHalf,  PortableFloatToBf16, PortableInt32ToFloat,
                                     PortableFloatToInt32, PortableHalfToInt8,  PortableDequant,
                                     PortableAbs,          PortableScalar,      PortableBinary,
                                     ReduceMaxFloatPortable};

#if defined(__x86_64__)

// A tail of fewer than one vector: the portable element form, which the identity test proves equal.
template <typename D, typename S>
inline void CastTail(D* d, const S* s, RoundMode mode, uint32_t from, uint32_t n) {
    if (from < n) CastLoopPortable(d + from, s + from, mode, n - from);
}

// ---- AVX2 + F16C (8 lanes) -------------------------------------------------------------------------------------
#pragma GCC push_options
#pragma GCC target("avx2,f16c")

// RoundIntegral<CAST_ROUND>: |x| truncated, plus one if the dropped fraction is at least a half, then x's sign.
inline __m256 RoundHalfAway8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 a = _mm256_andnot_ps(sign, x);
    const __m256 t = _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 up = _mm256_cmp_ps(_mm256_sub_ps(a, t), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 r = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_set1_ps(1.0f)));
    return _mm256_or_ps(r, _mm256_and_ps(sign, x));
}

template <RoundMode kMode>
inline __m256 RoundIntegral8(__m256 x) {
    if constexpr (kMode == RoundMode::CAST_FLOOR) return _mm256_round_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    else if constexpr (kMode == RoundMode::CAST_CEIL) return _mm256_round_ps(x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
    else if constexpr (kMode == RoundMode::CAST_TRUNC) return _mm256_round_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    else if constexpr (kMode == RoundMode::CAST_ROUND) return RoundHalfAway8(x);
    else return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// A loop template instantiated per round mode, so the mode is a constant inside the loop.
#define CAM_TWIN_BY_MODE(FN, mode, ...)                                                         \
    switch (mode) {                                                                             \
        case RoundMode::CAST_FLOOR: return FN<RoundMode::CAST_FLOOR>(__VA_ARGS__);              \
        case RoundMode::CAST_CEIL: return FN<RoundMode::CAST_CEIL>(__VA_ARGS__);                \
        case RoundMode::CAST_TRUNC: return FN<RoundMode::CAST_TRUNC>(__VA_ARGS__);              \
        case RoundMode::CAST_ROUND: return FN<RoundMode::CAST_ROUND>(__VA_ARGS__);              \
        default: return FN<RoundMode::CAST_RINT>(__VA_ARGS__); /* RINT, NONE: nearest even */  \
    }

// The int32 result of an integral-valued fp32 lane r (x the lane before rounding): NaN -> 0, r >= 2^31 -> INT32_MAX;
// below -2^31 the conversion's own 0x80000000 is already the saturated INT32_MIN.
inline __m256i SaturateInt32x8(__m256 x, __m256 r) {
    const __m256i c = _mm256_cvttps_epi32(r);
    const __m256i over = _mm256_castps_si256(_mm256_cmp_ps(r, _mm256_set1_ps(2147483648.0f), _CMP_GE_OQ));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_andnot_si256(nan, _mm256_blendv_epi8(c, _mm256_set1_epi32(0x7fffffff), over));
}

// 8 fp32 -> 8 half bits, round to nearest even; a NaN becomes sign | 0x7e00 (the definition drops the payload).
inline __m128i FloatToHalf8(__m256 x) {
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m128i nan = _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
    const __m128i quiet = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(int16_t(0x8000))), _mm_set1_epi16(0x7e00));
    return _mm_blendv_epi8(h, quiet, nan);
}

void Avx2Bf16ToFloat(float* d, const bfloat16_t* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
    }
    CastTail(d, s, RoundMode::CAST_NONE, i, n);
}

void Avx2HalfToFloat(float* d, const half* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
        const __m256 f = _mm256_cvtph_ps(h);
        // F16C quiets a signalling NaN; the definition keeps the half's mantissa as it is.
        const __m256i e = _mm256_cvtepu16_epi32(h);
        const __m256i em = _mm256_and_si256(e, _mm256_set1_epi32(0x7fff));
        const __m256i nan = _mm256_cmpgt_epi32(em, _mm256_set1_epi32(0x7c00));
        const __m256i bits = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(e, _mm256_set1_epi32(0x8000)), 16),
                                             _mm256_add_epi32(_mm256_slli_epi32(em, 13), _mm256_set1_epi32(0x70000000)));
        _mm256_storeu_ps(d + i, _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(nan)));
    }
    CastTail(d, s, RoundMode::CAST_NONE, i, n);
}

void Avx2FloatToHalf(half* d, const float* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), FloatToHalf8(_mm256_loadu_ps(s + i)));
    CastTail(d, s, RoundMode::CAST_RINT, i, n);
}

void Avx2FloatToBf16(bfloat16_t* d, const float* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
        const __m256i hi = _mm256_srli_epi32(u, 16);
        const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
        const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
        const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
        const __m256i absu = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
        const __m256i nan = _mm256_cmpgt_epi32(absu, _mm256_set1_epi32(0x7f800000));
        const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);  // every lane <= 0xffff: packus keeps it
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                         _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
    }
    CastTail(d, s, RoundMode::CAST_RINT, i, n);
}

void Avx2Int32ToFloat(float* d, const int32_t* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))));
    CastTail(d, s, RoundMode::CAST_NONE, i, n);
}

template <RoundMode kMode>
void Avx2FloatToInt32T(int32_t* d, const float* s, RoundMode mode, uint32_t n) {
    const __m256 two31 = _mm256_set1_ps(2147483648.0f);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(s + i);
        const __m256 r = RoundIntegral8<kMode>(x);
        __m256i c = _mm256_cvttps_epi32(r);
        // NaN or x >= 2^31 (not-less-than is true for NaN): patch only when one compare finds a lane.
        if (__builtin_expect(_mm256_movemask_ps(_mm256_cmp_ps(x, two31, _CMP_NLT_UQ)) != 0, 0)) c = SaturateInt32x8(x, r);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), c);
    }
    CastTail(d, s, mode, i, n);
}

// half -> int8, 32 lanes at a time: every finite half rounds to an exact int32 and the signed saturating packs are
// the clamp to [-128, 127] (integer bounds: clamping and rounding commute). A group holding an inf or NaN takes the
// element form. The packs work per 128-bit lane; one dword permute restores the order.
void Avx2FloatToInt32(int32_t* d, const float* s, RoundMode mode, uint32_t n) {
    CAM_TWIN_BY_MODE(Avx2FloatToInt32T, mode, d, s, mode, n)
}

template <RoundMode kMode>
inline __m256i HalfToInt32x8(__m128i h) {
    return _mm256_cvttps_epi32(RoundIntegral8<kMode>(_mm256_cvtph_ps(h)));
}

template <RoundMode kMode>
void Avx2HalfToInt8T(int8_t* d, const half* s, RoundMode mode, uint32_t n) {
    const __m256i absMask = _mm256_set1_epi16(0x7fff), belowInf = _mm256_set1_epi16(0x7bff);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i h0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
        const __m256i h1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 16));
        const __m256i special = _mm256_or_si256(_mm256_cmpgt_epi16(_mm256_and_si256(h0, absMask), belowInf),
                                                _mm256_cmpgt_epi16(_mm256_and_si256(h1, absMask), belowInf));
        if (__builtin_expect(!_mm256_testz_si256(special, special), 0)) {
            CastLoopPortable(d + i, s + i, mode, 32);
            continue;
        }
        const __m256i a = HalfToInt32x8<kMode>(_mm256_castsi256_si128(h0));
        const __m256i b = HalfToInt32x8<kMode>(_mm256_extracti128_si256(h0, 1));
        const __m256i c = HalfToInt32x8<kMode>(_mm256_castsi256_si128(h1));
        const __m256i e = HalfToInt32x8<kMode>(_mm256_extracti128_si256(h1, 1));
        // Bytes come out as 4-byte groups a0 b0 c0 e0 a1 b1 c1 e1.
        const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, e));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm256_permutevar8x32_epi32(bytes, order));
    }
    CastTail(d, s, mode, i, n);
}

void Avx2HalfToInt8(int8_t* d, const half* s, RoundMode mode, uint32_t n) {
    CAM_TWIN_BY_MODE(Avx2HalfToInt8T, mode, d, s, mode, n)
}
#undef CAM_TWIN_BY_MODE

void Avx2Dequant(half* d, const int32_t* s, float scale, uint32_t n) {
    const __m256 k = _mm256_set1_ps(scale);
    // An int32 times a finite scale is never NaN: the NaN patch is needed only for a non-finite DEQSCALE.
    const bool finite = std::fabs(scale) <= std::numeric_limits<float>::max();
    uint32_t i = 0;
    for (; finite && i + 8 <= n; i += 8) {
        const __m256 f = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                         _mm256_cvtps_ph(_mm256_mul_ps(f, k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 f = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), FloatToHalf8(_mm256_mul_ps(f, k)));
    }
    if (i < n) DequantLoopPortable(d + i, s + i, scale, n - i);
}

void Avx2Abs(float* d, const float* s, uint32_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_andnot_ps(sign, _mm256_loadu_ps(s + i)));
    if (i < n) AbsLoopPortable(d + i, s + i, n - i);
}

// maxps / minps (a, b) are a > b ? a : b and a < b ? a : b: the definition's selects; a NaN lane becomes the
// canonical quiet NaN.
inline __m256 MaxNan8(__m256 a, __m256 b) {
    const __m256 nan = _mm256_cmp_ps(a, b, _CMP_UNORD_Q);
    return _mm256_blendv_ps(_mm256_max_ps(a, b), _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), nan);
}
inline __m256 MinNan8(__m256 a, __m256 b) {
    const __m256 nan = _mm256_cmp_ps(a, b, _CMP_UNORD_Q);
    return _mm256_blendv_ps(_mm256_min_ps(a, b), _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), nan);
}

template <VectorScalarOp kOp>
void Avx2ScalarT(float* d, const float* s, float scalar, uint32_t n) {
    const __m256 k = _mm256_set1_ps(scalar);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(s + i);
        __m256 r;
        if constexpr (kOp == VectorScalarOp::Adds) r = _mm256_add_ps(x, k);
        else if constexpr (kOp == VectorScalarOp::Muls) r = _mm256_mul_ps(x, k);
        else if constexpr (kOp == VectorScalarOp::Maxs) r = MaxNan8(x, k);
        else r = MinNan8(x, k);
        _mm256_storeu_ps(d + i, r);
    }
    if (i < n) ScalarLoopT<kOp>(d + i, s + i, scalar, n - i);
}

void Avx2Scalar(VectorScalarOp op, float* d, const float* s, float scalar, uint32_t n) {
    switch (op) {
        case VectorScalarOp::Adds: return Avx2ScalarT<VectorScalarOp::Adds>(d, s, scalar, n);
        case VectorScalarOp::Muls: return Avx2ScalarT<VectorScalarOp::Muls>(d, s, scalar, n);
        case VectorScalarOp::Maxs: return Avx2ScalarT<VectorScalarOp::Maxs>(d, s, scalar, n);
        case VectorScalarOp::Mins: return Avx2ScalarT<VectorScalarOp::Mins>(d, s, scalar, n);
    }
}

template <VectorBinaryOp kOp>
void Avx2BinaryT(float* d, const float* a, const float* b, uint32_t n) {
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(a + i), y = _mm256_loadu_ps(b + i);
        __m256 r;
        if constexpr (kOp == VectorBinaryOp::Add) r = _mm256_add_ps(x, y);
        else if constexpr (kOp == VectorBinaryOp::Sub) r = _mm256_sub_ps(x, y);
        else if constexpr (kOp == VectorBinaryOp::Mul) r = _mm256_mul_ps(x, y);
        else if constexpr (kOp == VectorBinaryOp::Div) r = _mm256_div_ps(x, y);
        else if constexpr (kOp == VectorBinaryOp::Max) r = MaxNan8(x, y);
        else r = MinNan8(x, y);
        _mm256_storeu_ps(d + i, r);
    }
    if (i < n) BinaryLoopT<kOp>(d + i, a + i, b + i, n - i);
}

void Avx2Binary(VectorBinaryOp op, float* d, const float* a, const float* b, uint32_t n) {
    switch (op) {
        case VectorBinaryOp::Add: return Avx2BinaryT<VectorBinaryOp::Add>(d, a, b, n);
        case VectorBinaryOp::Sub: return Avx2BinaryT<VectorBinaryOp::Sub>(d, a, b, n);
        case VectorBinaryOp::Mul: return Avx2BinaryT<VectorBinaryOp::Mul>(d, a, b, n);
        case VectorBinaryOp::Div: return Avx2BinaryT<VectorBinaryOp::Div>(d, a, b, n);
        case VectorBinaryOp::Max: return Avx2BinaryT<VectorBinaryOp::Max>(d, a, b, n);
        case VectorBinaryOp::Min: return Avx2BinaryT<VectorBinaryOp::Min>(d, a, b, n);
    }
}

// Count-form ReduceMax: a full 64-element repeat in eight registers (its max, whether it holds a NaN, the first
// lane equal to the max from the compare masks); a partial last repeat and the finish as on the portable path.
float Avx2ReduceMax(const float* s, float* w, uint32_t count) {
    constexpr uint32_t perRepeat = 64;
    float total = -std::numeric_limits<float>::infinity();
    bool anyNan = false;
    uint32_t r = 0;
    for (; (r + 1) * perRepeat <= count; ++r) {
        const float* v = s + r * perRepeat;
        __m256 x[8];
        for (int j = 0; j < 8; ++j) x[j] = _mm256_loadu_ps(v + 8 * j);
        __m256 unord = _mm256_cmp_ps(x[0], x[1], _CMP_UNORD_Q);
        for (int j = 2; j < 8; j += 2) unord = _mm256_or_ps(unord, _mm256_cmp_ps(x[j], x[j + 1], _CMP_UNORD_Q));
        const bool nan = _mm256_movemask_ps(unord) != 0;
        float rm;
        if (nan) {
            rm = ReduceMaxRepeatFinish(v, perRepeat, 0.0f, true, w + 2 * r);
        } else {
            __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_max_ps(x[0], x[1]), _mm256_max_ps(x[2], x[3])),
                                     _mm256_max_ps(_mm256_max_ps(x[4], x[5]), _mm256_max_ps(x[6], x[7])));
            __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            h = _mm_max_ss(h, _mm_movehdup_ps(h));
            const __m256 mx = _mm256_set1_ps(_mm_cvtss_f32(h));
            uint64_t eq = 0;
            for (int j = 0; j < 8; ++j)
                eq |= uint64_t(uint32_t(_mm256_movemask_ps(_mm256_cmp_ps(x[j], mx, _CMP_EQ_OQ)))) << (8 * j);
            const uint32_t at = uint32_t(__builtin_ctzll(eq));  // eq != 0: the max is one of the lanes
            rm = v[at];  // the first equal element sets the stored bits (+0 vs -0)
            w[2 * r] = rm;
            std::memcpy(&w[2 * r + 1], &at, sizeof(at));
        }
        anyNan |= nan;
        total = rm > total ? rm : total;
    }
    if (r * perRepeat < count) {
        const uint32_t done = r * perRepeat;
        const float* v = s + done;
        const uint32_t n = count - done;
        bool nan = false;
        float rm = -std::numeric_limits<float>::infinity();
        for (uint32_t i = 0; i < n; ++i) {
            nan |= v[i] != v[i];
            rm = v[i] > rm ? v[i] : rm;
        }
        rm = ReduceMaxRepeatFinish(v, n, rm, nan, w + 2 * r);
        anyNan |= nan;
        total = rm > total ? rm : total;
    }
    return ReduceMaxFinish(s, count, total, anyNan);
}

#pragma GCC pop_options

constexpr VectorKernels kAvx2 = {VectorPath::Avx2, Avx2Bf16ToFloat,  Avx2HalfToFloat, Avx2FloatToHalf,
                                 Avx2FloatToBf16,  Avx2Int32ToFloat, Avx2FloatToInt32, Avx2HalfToInt8,
                                 Avx2Dequant,      Avx2Abs,          Avx2Scalar,       Avx2Binary,
                                 Avx2ReduceMax};

// ---- AVX-512 (16 lanes; F/BW/VL/DQ + F16C) ----------------------------------------------------------------------
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c")

inline __m512 RoundIntegral16(__m512 x, RoundMode mode) {
    switch (mode) {
        case RoundMode::CAST_FLOOR: return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        case RoundMode::CAST_CEIL: return _mm512_roundscale_ps(x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
        case RoundMode::CAST_TRUNC: return _mm512_roundscale_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        case RoundMode::CAST_ROUND: {
            const __m512 a = _mm512_abs_ps(x);
            const __m512 t = _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(a, t), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
            const __m512 r = _mm512_mask_add_ps(t, up, t, _mm512_set1_ps(1.0f));
            return _mm512_or_ps(r, _mm512_and_ps(_mm512_set1_ps(-0.0f), x));
        }
        default: return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
}

inline __m256i FloatToHalf16(__m512 x) {
    const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m256i quiet = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(int16_t(0x8000))),
                                          _mm256_set1_epi16(0x7e00));
    return _mm256_mask_blend_epi16(nan, h, quiet);
}

void Avx512Bf16ToFloat(float* d, const bfloat16_t* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
        _mm512_storeu_si512(d + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    }
    CastTail(d, s, RoundMode::CAST_NONE, i, n);
}

void Avx512HalfToFloat(float* d, const half* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
        const __m512 f = _mm512_cvtph_ps(h);
        const __m512i e = _mm512_cvtepu16_epi32(h);
        const __m512i em = _mm512_and_si512(e, _mm512_set1_epi32(0x7fff));
        const __mmask16 nan = _mm512_cmpgt_epi32_mask(em, _mm512_set1_epi32(0x7c00));
        const __m512i bits = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(e, _mm512_set1_epi32(0x8000)), 16),
                                             _mm512_add_epi32(_mm512_slli_epi32(em, 13), _mm512_set1_epi32(0x70000000)));
        _mm512_storeu_ps(d + i, _mm512_mask_blend_ps(nan, f, _mm512_castsi512_ps(bits)));
    }
    CastTail(d, s, RoundMode::CAST_NONE, i, n);
}

void Avx512FloatToHalf(half* d, const float* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), FloatToHalf16(_mm512_loadu_ps(s + i)));
    CastTail(d, s, RoundMode::CAST_RINT, i, n);
}

void Avx512FloatToBf16(bfloat16_t* d, const float* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i u = _mm512_loadu_si512(s + i);
        const __m512i hi = _mm512_srli_epi32(u, 16);
        const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
        const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
        const __m512i quiet = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
        const __mmask16 nan =
            _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet)));
    }
    CastTail(d, s, RoundMode::CAST_RINT, i, n);
}

void Avx512Int32ToFloat(float* d, const int32_t* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, _mm512_cvtepi32_ps(_mm512_loadu_si512(s + i)));
    CastTail(d, s, RoundMode::CAST_NONE, i, n);
}

// fp32 -> int32 with the rounding embedded in the conversion (no separate round), the directed modes alike. The
// conversion's 0x80000000 for NaN and overflow is patched: NaN -> 0, x >= 2^31 -> INT32_MAX (no fp32 lies strictly
// between 2^31 - 128 and 2^31, so x >= 2^31 exactly when the rounded value is); below -2^31 it is the saturated
// INT32_MIN already. One compare finds both cases (not-less-than is true for NaN); the patch runs only when it hits.
// CAST_ROUND (half away from zero) has no embedded form and rounds first.
template <int kRounding>
inline __m512i FloatToInt32x16(__m512 x) {
    __m512i c;
    if constexpr (kRounding < 0) c = _mm512_cvttps_epi32(RoundIntegral16(x, RoundMode::CAST_ROUND));
    else c = _mm512_cvt_roundps_epi32(x, kRounding | _MM_FROUND_NO_EXC);
    const __mmask16 special = _mm512_cmp_ps_mask(x, _mm512_set1_ps(2147483648.0f), _CMP_NLT_UQ);
    if (__builtin_expect(special != 0, 0)) {
        c = _mm512_mask_mov_epi32(c, special, _mm512_set1_epi32(0x7fffffff));
        c = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(x, x, _CMP_ORD_Q), c);
    }
    return c;
}

template <int kRounding>
void Avx512FloatToInt32T(int32_t* d, const float* s, RoundMode mode, uint32_t n) {
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_si512(d + i, FloatToInt32x16<kRounding>(_mm512_loadu_ps(s + i)));
    CastTail(d, s, mode, i, n);
}

// The embedded-rounding immediate of a round mode; -1: CAST_ROUND, which has none.
#define CAM_TWIN_BY_ROUNDING(FN, mode, ...)                                                           \
    switch (mode) {                                                                                   \
        case RoundMode::CAST_FLOOR: return FN<_MM_FROUND_TO_NEG_INF>(__VA_ARGS__);                    \
        case RoundMode::CAST_CEIL: return FN<_MM_FROUND_TO_POS_INF>(__VA_ARGS__);                     \
        case RoundMode::CAST_TRUNC: return FN<_MM_FROUND_TO_ZERO>(__VA_ARGS__);                       \
        case RoundMode::CAST_ROUND: return FN<-1>(__VA_ARGS__);                                       \
        default: return FN<_MM_FROUND_TO_NEAREST_INT>(__VA_ARGS__); /* RINT, NONE: nearest even */    \
    }

void Avx512FloatToInt32(int32_t* d, const float* s, RoundMode mode, uint32_t n) {
    CAM_TWIN_BY_ROUNDING(Avx512FloatToInt32T, mode, d, s, mode, n)
}

template <int kRounding>
inline __m512i HalfToInt32x16(__m256i h) {
    const __m512 x = _mm512_cvtph_ps(h);
    if constexpr (kRounding < 0) return _mm512_cvttps_epi32(RoundIntegral16(x, RoundMode::CAST_ROUND));
    else return _mm512_cvt_roundps_epi32(x, kRounding | _MM_FROUND_NO_EXC);
}

// half -> int8. Every finite half is an integer-exact fp32 well inside int32, so rounding converts it exactly and
// the signed saturating packs (int32 -> int16 -> int8) are the clamp to [-128, 127] (the bounds are integers, so
// clamping and rounding commute). Only inf and NaN need the definition's own answer (+-inf saturate, NaN -> 0): a
// group of 64 holding one takes the element form. The packs work per 128-bit lane; one dword permute restores order.
// The 16-lane loop (clamp, convert, NaN -> 0, narrow) takes what is left of a row.
template <int kRounding>
void Avx512HalfToInt8T(int8_t* d, const half* s, RoundMode mode, uint32_t n) {
    const __m512i absMask = _mm512_set1_epi16(0x7fff), infBits = _mm512_set1_epi16(0x7c00);
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    uint32_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m512i h0 = _mm512_loadu_si512(s + i), h1 = _mm512_loadu_si512(s + i + 32);
        const __mmask32 special = _mm512_cmpge_epi16_mask(_mm512_and_si512(h0, absMask), infBits) |
                                  _mm512_cmpge_epi16_mask(_mm512_and_si512(h1, absMask), infBits);
        if (__builtin_expect(special != 0, 0)) {
            CastLoopPortable(d + i, s + i, mode, 64);
            continue;
        }
        const __m512i a = HalfToInt32x16<kRounding>(_mm512_castsi512_si256(h0));
        const __m512i b = HalfToInt32x16<kRounding>(_mm512_extracti64x4_epi64(h0, 1));
        const __m512i c = HalfToInt32x16<kRounding>(_mm512_castsi512_si256(h1));
        const __m512i e = HalfToInt32x16<kRounding>(_mm512_extracti64x4_epi64(h1, 1));
        const __m512i bytes = _mm512_packs_epi16(_mm512_packs_epi32(a, b), _mm512_packs_epi32(c, e));
        _mm512_storeu_si512(d + i, _mm512_permutexvar_epi32(order, bytes));
    }
    const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
        const __m512 c = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
        __m512i v;
        if constexpr (kRounding < 0) v = _mm512_cvttps_epi32(RoundIntegral16(c, RoundMode::CAST_ROUND));
        else v = _mm512_cvt_roundps_epi32(c, kRounding | _MM_FROUND_NO_EXC);
        v = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(x, x, _CMP_ORD_Q), v);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm512_cvtepi32_epi8(v));
    }
    CastTail(d, s, mode, i, n);
}

void Avx512HalfToInt8(int8_t* d, const half* s, RoundMode mode, uint32_t n) {
    CAM_TWIN_BY_ROUNDING(Avx512HalfToInt8T, mode, d, s, mode, n)
}
#undef CAM_TWIN_BY_ROUNDING

void Avx512Dequant(half* d, const int32_t* s, float scale, uint32_t n) {
    const __m512 k = _mm512_set1_ps(scale);
    // An int32 times a finite scale is never NaN: the NaN patch is needed only for a non-finite DEQSCALE.
    const bool finite = std::fabs(scale) <= std::numeric_limits<float>::max();
    uint32_t i = 0;
    for (; finite && i + 16 <= n; i += 16) {
        const __m512 f = _mm512_cvtepi32_ps(_mm512_loadu_si512(s + i));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                            _mm512_cvtps_ph(_mm512_mul_ps(f, k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i + 16 <= n; i += 16) {
        const __m512 f = _mm512_cvtepi32_ps(_mm512_loadu_si512(s + i));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), FloatToHalf16(_mm512_mul_ps(f, k)));
    }
    if (i < n) DequantLoopPortable(d + i, s + i, scale, n - i);
}

void Avx512Abs(float* d, const float* s, uint32_t n) {
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, _mm512_abs_ps(_mm512_loadu_ps(s + i)));
    if (i < n) AbsLoopPortable(d + i, s + i, n - i);
}

inline __m512 MaxNan16(__m512 a, __m512 b) {
    return _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q),
                              _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
}
inline __m512 MinNan16(__m512 a, __m512 b) {
    return _mm512_mask_mov_ps(_mm512_min_ps(a, b), _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q),
                              _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
}

template <VectorScalarOp kOp>
void Avx512ScalarT(float* d, const float* s, float scalar, uint32_t n) {
    const __m512 k = _mm512_set1_ps(scalar);
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(s + i);
        __m512 r;
        if constexpr (kOp == VectorScalarOp::Adds) r = _mm512_add_ps(x, k);
        else if constexpr (kOp == VectorScalarOp::Muls) r = _mm512_mul_ps(x, k);
        else if constexpr (kOp == VectorScalarOp::Maxs) r = MaxNan16(x, k);
        else r = MinNan16(x, k);
        _mm512_storeu_ps(d + i, r);
    }
    if (i < n) ScalarLoopT<kOp>(d + i, s + i, scalar, n - i);
}

void Avx512Scalar(VectorScalarOp op, float* d, const float* s, float scalar, uint32_t n) {
    switch (op) {
        case VectorScalarOp::Adds: return Avx512ScalarT<VectorScalarOp::Adds>(d, s, scalar, n);
        case VectorScalarOp::Muls: return Avx512ScalarT<VectorScalarOp::Muls>(d, s, scalar, n);
        case VectorScalarOp::Maxs: return Avx512ScalarT<VectorScalarOp::Maxs>(d, s, scalar, n);
        case VectorScalarOp::Mins: return Avx512ScalarT<VectorScalarOp::Mins>(d, s, scalar, n);
    }
}

template <VectorBinaryOp kOp>
void Avx512BinaryT(float* d, const float* a, const float* b, uint32_t n) {
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_loadu_ps(a + i), y = _mm512_loadu_ps(b + i);
        __m512 r;
        if constexpr (kOp == VectorBinaryOp::Add) r = _mm512_add_ps(x, y);
        else if constexpr (kOp == VectorBinaryOp::Sub) r = _mm512_sub_ps(x, y);
        else if constexpr (kOp == VectorBinaryOp::Mul) r = _mm512_mul_ps(x, y);
        else if constexpr (kOp == VectorBinaryOp::Div) r = _mm512_div_ps(x, y);
        else if constexpr (kOp == VectorBinaryOp::Max) r = MaxNan16(x, y);
        else r = MinNan16(x, y);
        _mm512_storeu_ps(d + i, r);
    }
    if (i < n) BinaryLoopT<kOp>(d + i, a + i, b + i, n - i);
}

void Avx512Binary(VectorBinaryOp op, float* d, const float* a, const float* b, uint32_t n) {
    switch (op) {
        case VectorBinaryOp::Add: return Avx512BinaryT<VectorBinaryOp::Add>(d, a, b, n);
        case VectorBinaryOp::Sub: return Avx512BinaryT<VectorBinaryOp::Sub>(d, a, b, n);
        case VectorBinaryOp::Mul: return Avx512BinaryT<VectorBinaryOp::Mul>(d, a, b, n);
        case VectorBinaryOp::Div: return Avx512BinaryT<VectorBinaryOp::Div>(d, a, b, n);
        case VectorBinaryOp::Max: return Avx512BinaryT<VectorBinaryOp::Max>(d, a, b, n);
        case VectorBinaryOp::Min: return Avx512BinaryT<VectorBinaryOp::Min>(d, a, b, n);
    }
}

float Avx512ReduceMax(const float* s, float* w, uint32_t count) {
    constexpr uint32_t perRepeat = 64;
    float total = -std::numeric_limits<float>::infinity();
    bool anyNan = false;
    uint32_t r = 0;
    for (; (r + 1) * perRepeat <= count; ++r) {
        const float* v = s + r * perRepeat;
        const __m512 x0 = _mm512_loadu_ps(v), x1 = _mm512_loadu_ps(v + 16);
        const __m512 x2 = _mm512_loadu_ps(v + 32), x3 = _mm512_loadu_ps(v + 48);
        const bool nan = (_mm512_cmp_ps_mask(x0, x1, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(x2, x3, _CMP_UNORD_Q)) != 0;
        float rm;
        if (nan) {
            rm = ReduceMaxRepeatFinish(v, perRepeat, 0.0f, true, w + 2 * r);
        } else {
            // The repeat's max in every lane (no NaN here, so max is order-free up to the sign of a zero, which the
            // first equal element settles).
            __m512 mx = _mm512_max_ps(_mm512_max_ps(x0, x1), _mm512_max_ps(x2, x3));
            mx = _mm512_max_ps(mx, _mm512_shuffle_f32x4(mx, mx, _MM_SHUFFLE(1, 0, 3, 2)));
            mx = _mm512_max_ps(mx, _mm512_shuffle_f32x4(mx, mx, _MM_SHUFFLE(2, 3, 0, 1)));
            mx = _mm512_max_ps(mx, _mm512_permute_ps(mx, _MM_SHUFFLE(1, 0, 3, 2)));
            mx = _mm512_max_ps(mx, _mm512_permute_ps(mx, _MM_SHUFFLE(2, 3, 0, 1)));
            const uint64_t eq = uint64_t(_mm512_cmp_ps_mask(x0, mx, _CMP_EQ_OQ)) |
                                uint64_t(_mm512_cmp_ps_mask(x1, mx, _CMP_EQ_OQ)) << 16 |
                                uint64_t(_mm512_cmp_ps_mask(x2, mx, _CMP_EQ_OQ)) << 32 |
                                uint64_t(_mm512_cmp_ps_mask(x3, mx, _CMP_EQ_OQ)) << 48;
            const uint32_t at = uint32_t(__builtin_ctzll(eq));
            rm = v[at];
            w[2 * r] = rm;
            std::memcpy(&w[2 * r + 1], &at, sizeof(at));
        }
        anyNan |= nan;
        total = rm > total ? rm : total;
    }
    if (r * perRepeat < count) {
        const uint32_t done = r * perRepeat;
        const float* v = s + done;
        const uint32_t n = count - done;
        bool nan = false;
        float rm = -std::numeric_limits<float>::infinity();
        for (uint32_t i = 0; i < n; ++i) {
            nan |= v[i] != v[i];
            rm = v[i] > rm ? v[i] : rm;
        }
        rm = ReduceMaxRepeatFinish(v, n, rm, nan, w + 2 * r);
        anyNan |= nan;
        total = rm > total ? rm : total;
    }
    return ReduceMaxFinish(s, count, total, anyNan);
}

#pragma GCC pop_options

constexpr VectorKernels kAvx512 = {VectorPath::Avx512,  Avx512Bf16ToFloat,  Avx512HalfToFloat, Avx512FloatToHalf,
                                   Avx512FloatToBf16,   Avx512Int32ToFloat, Avx512FloatToInt32, Avx512HalfToInt8,
                                   Avx512Dequant,       Avx512Abs,          Avx512Scalar,      Avx512Binary,
                                   Avx512ReduceMax};

#endif  // __x86_64__

bool Probe(VectorPath path) {
#if defined(__x86_64__)
    switch (path) {
        case VectorPath::Portable: return true;
        case VectorPath::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
        case VectorPath::Avx512:
            return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    }
    return false;
#else
    return path == VectorPath::Portable;
#endif
}

bool Supported(VectorPath path) {
    static const bool supported[3] = {Probe(VectorPath::Portable), Probe(VectorPath::Avx2), Probe(VectorPath::Avx512)};
    return static_cast<int>(path) < 3 && supported[static_cast<int>(path)];
}

const VectorKernels& Table(VectorPath path) {
    switch (path) {
#if defined(__x86_64__)
        case VectorPath::Avx512: return kAvx512;
        case VectorPath::Avx2: return kAvx2;
#endif
        default: return kPortable;
    }
}

const EnvPath<VectorPath>& Resolve() {
    static const EnvPath<VectorPath> resolved =
        ResolveEnvPath("CAM_TWIN_VECTOR", {VectorPath::Avx512, VectorPath::Avx2, VectorPath::Portable},
                       VectorPathName, Supported, "this CPU does not support it");
    return resolved;
}

}  // namespace

const char* VectorPathName(VectorPath path) {
    switch (path) {
        case VectorPath::Avx512: return "avx512";
        case VectorPath::Avx2: return "avx2";
        case VectorPath::Portable: return "portable";
    }
    return "?";
}

bool ParseVectorPath(const char* name, VectorPath* out) {
    for (VectorPath p : {VectorPath::Avx512, VectorPath::Avx2, VectorPath::Portable}) {
        if (std::strcmp(name, VectorPathName(p)) == 0) {
            *out = p;
            return true;
        }
    }
    return false;
}

bool VectorPathSupported(VectorPath path) { return Supported(path); }

const VectorKernels& VectorKernelsFor(VectorPath path, const std::source_location& where) {
    // Never run an instruction set the CPU has not got: that is a SIGILL, not an error.
    CAM_TWIN_CHECK(Supported(path), "vector-path",
                   std::string("vector path ") + VectorPathName(path) + " is not supported on this machine", where);
    return Table(path);
}

const VectorKernels& ActiveVectorKernels(const std::source_location& where) {
    const EnvPath<VectorPath>& r = Resolve();
    CAM_TWIN_CHECK(r.error.empty(), "vector-path", r.error, where);
    return Table(r.path);
}

}  // namespace cam::twin
