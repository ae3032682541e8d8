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

// A loop template instantiated per round mode, so the mode is a constant inside the loop.
#define CAM_TWIN_BY_MODE(FN, mode, ...)                                                         \
    switch (mode) {                                                                             \
        case RoundMode::CAST_FLOOR: return FN<RoundMode::CAST_FLOOR>(__VA_ARGS__);              \
        case RoundMode::CAST_CEIL: return FN<RoundMode::CAST_CEIL>(__VA_ARGS__);                \
        case RoundMode::CAST_TRUNC: return FN<RoundMode::CAST_TRUNC>(__VA_ARGS__);              \
        case RoundMode::CAST_ROUND: return FN<RoundMode::CAST_ROUND>(__VA_ARGS__);              \
        default: return FN<RoundMode::CAST_RINT>(__VA_ARGS__); /* RINT, NONE: nearest even */  \
    }

// The kernels themselves are in vector_simd_body.inc, written once over a traits struct; each path below defines
// its traits (the instructions whose form differs by ISA) and includes the body inside its own target region, so
// no instruction of one path can reach the other's code.

// ---- AVX2 + F16C (8 lanes) -------------------------------------------------------------------------------------
namespace avx2 {
#pragma GCC push_options
#pragma GCC target("avx2,f16c")

struct Avx2 {
    static constexpr VectorPath kPath = VectorPath::Avx2;
    static constexpr uint32_t kLanes = 8;
    using F = __m256;   // kLanes fp32
    using I = __m256i;  // kLanes int32, or 2 * kLanes half bits
    using H = __m128i;  // kLanes half / bf16 bits
    using M = __m256;   // a lane mask: all-ones lanes

    static F LoadF(const float* p) { return _mm256_loadu_ps(p); }
    static void StoreF(float* p, F x) { _mm256_storeu_ps(p, x); }
    static I LoadI(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
    static void StoreI(void* p, I x) { _mm256_storeu_si256(static_cast<__m256i*>(p), x); }
    static H LoadH(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
    static void StoreH(void* p, H x) { _mm_storeu_si128(static_cast<__m128i*>(p), x); }

    static F Set1(float v) { return _mm256_set1_ps(v); }
    static F Add(F a, F b) { return _mm256_add_ps(a, b); }
    static F Sub(F a, F b) { return _mm256_sub_ps(a, b); }
    static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F Div(F a, F b) { return _mm256_div_ps(a, b); }
    // maxps / minps (a, b) are a > b ? a : b and a < b ? a : b: the definition's selects.
    static F Max(F a, F b) { return _mm256_max_ps(a, b); }
    static F Min(F a, F b) { return _mm256_min_ps(a, b); }
    // ... with a NaN lane made the canonical quiet NaN.
    static F MaxNan(F a, F b) {
        return _mm256_blendv_ps(_mm256_max_ps(a, b), _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()),
                                Unord(a, b));
    }
    static F MinNan(F a, F b) {
        return _mm256_blendv_ps(_mm256_min_ps(a, b), _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()),
                                Unord(a, b));
    }
    static F Abs(F x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

    static M Unord(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_UNORD_Q); }
    static M NotLess(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_NLT_UQ); }
    static M Or(M a, M b) { return _mm256_or_ps(a, b); }
    static bool Any(M m) { return _mm256_movemask_ps(m) != 0; }
    static uint32_t EqualBits(F a, F b) { return uint32_t(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_EQ_OQ))); }
    // The max of the lanes in every lane.
    static F BroadcastMax(F m) {
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        return _mm256_set1_ps(_mm_cvtss_f32(h));
    }

    static I Bf16ToFloatBits(H b) { return _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16); }
    static F HalfToFloatRaw(H h) { return _mm256_cvtph_ps(h); }
    // F16C quiets a signalling NaN; the definition keeps the half's mantissa as it is.
    static F HalfToFloat(H h) {
        const __m256 f = _mm256_cvtph_ps(h);
        const __m256i e = _mm256_cvtepu16_epi32(h);
        const __m256i em = _mm256_and_si256(e, _mm256_set1_epi32(0x7fff));
        const __m256i nan = _mm256_cmpgt_epi32(em, _mm256_set1_epi32(0x7c00));
        const __m256i bits = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(e, _mm256_set1_epi32(0x8000)), 16),
                                             _mm256_add_epi32(_mm256_slli_epi32(em, 13), _mm256_set1_epi32(0x70000000)));
        return _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(nan));
    }
    // Round to nearest even in the immediate (not MXCSR).
    static H FloatToHalfRaw(F x) { return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    // ... and a NaN becomes sign | 0x7e00 (the definition drops the payload).
    static H FloatToHalf(F x) {
        const __m128i h = FloatToHalfRaw(x);
        const __m256i nan32 = _mm256_castps_si256(Unord(x, x));
        const __m128i nan = _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
        const __m128i quiet = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16(int16_t(0x8000))), _mm_set1_epi16(0x7e00));
        return _mm_blendv_epi8(h, quiet, nan);
    }
    static H FloatBitsToBf16(I u) {
        const __m256i hi = _mm256_srli_epi32(u, 16);
        const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
        const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
        const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
        const __m256i absu = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
        const __m256i nan = _mm256_cmpgt_epi32(absu, _mm256_set1_epi32(0x7f800000));
        const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);  // every lane <= 0xffff: packus keeps it
        return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    }
    static F Int32ToFloat(I x) { return _mm256_cvtepi32_ps(x); }

    // RoundIntegral<CAST_ROUND>: |x| truncated, plus one if the dropped fraction is at least a half, then x's sign.
    static F RoundHalfAway(F x) {
        const __m256 sign = _mm256_set1_ps(-0.0f);
        const __m256 a = _mm256_andnot_ps(sign, x);
        const __m256 t = _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __m256 up = _mm256_cmp_ps(_mm256_sub_ps(a, t), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
        const __m256 r = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_set1_ps(1.0f)));
        return _mm256_or_ps(r, _mm256_and_ps(sign, x));
    }
    // The int32 of x rounded in kMode: roundps, then the truncating conversion (0x80000000 for NaN and overflow).
    template <RoundMode kMode>
    static I CvtRound(F x) {
        if constexpr (kMode == RoundMode::CAST_ROUND) {
            return _mm256_cvttps_epi32(RoundHalfAway(x));
        } else {
            constexpr int kRounding = kMode == RoundMode::CAST_FLOOR  ? _MM_FROUND_TO_NEG_INF
                                      : kMode == RoundMode::CAST_CEIL ? _MM_FROUND_TO_POS_INF
                                      : kMode == RoundMode::CAST_TRUNC ? _MM_FROUND_TO_ZERO
                                                                       : _MM_FROUND_TO_NEAREST_INT;
            return _mm256_cvttps_epi32(_mm256_round_ps(x, kRounding | _MM_FROUND_NO_EXC));
        }
    }
    // The special lanes (x >= 2^31 or NaN) become INT32_MAX, then the NaN lanes 0.
    static I SaturateInt32(I c, F x, M special) {
        const __m256i over = _mm256_blendv_epi8(c, _mm256_set1_epi32(0x7fffffff), _mm256_castps_si256(special));
        return _mm256_andnot_si256(_mm256_castps_si256(Unord(x, x)), over);
    }
    static I ZeroWhereNan(I v, F x) { return _mm256_andnot_si256(_mm256_castps_si256(Unord(x, x)), v); }

    static H LowHalf(I h) { return _mm256_castsi256_si128(h); }
    static H HighHalf(I h) { return _mm256_extracti128_si256(h, 1); }
    // Whether any of the 2 * 2 * kLanes half bits is an inf or NaN.
    static bool AnyHalfNotFinite(I h0, I h1) {
        const __m256i absMask = _mm256_set1_epi16(0x7fff), belowInf = _mm256_set1_epi16(0x7bff);
        const __m256i special = _mm256_or_si256(_mm256_cmpgt_epi16(_mm256_and_si256(h0, absMask), belowInf),
                                                _mm256_cmpgt_epi16(_mm256_and_si256(h1, absMask), belowInf));
        return !_mm256_testz_si256(special, special);
    }
    // 4 * kLanes int32 in order a, b, c, e -> as many int8, saturating. The packs work per 128-bit lane (bytes come
    // out as 4-byte groups a0 b0 c0 e0 a1 b1 c1 e1); one dword permute restores the order.
    static I PackInt8(I a, I b, I c, I e) {
        const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, e));
        return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    }
    // kLanes int32 already in [-128, 127] -> kLanes int8.
    static void StoreInt8(int8_t* d, I v) {
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(d), _mm_packs_epi16(w, w));
    }
};

using V = Avx2;
#include "vector_simd_body.inc"

#pragma GCC pop_options
}  // namespace avx2

// ---- AVX-512 (16 lanes; F/BW/VL/DQ + F16C) ----------------------------------------------------------------------
namespace avx512 {
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c")

struct Avx512 {
    static constexpr VectorPath kPath = VectorPath::Avx512;
    static constexpr uint32_t kLanes = 16;
    using F = __m512;    // kLanes fp32
    using I = __m512i;   // kLanes int32, or 2 * kLanes half bits
    using H = __m256i;   // kLanes half / bf16 bits
    using M = __mmask16;

    static F LoadF(const float* p) { return _mm512_loadu_ps(p); }
    static void StoreF(float* p, F x) { _mm512_storeu_ps(p, x); }
    static I LoadI(const void* p) { return _mm512_loadu_si512(p); }
    static void StoreI(void* p, I x) { _mm512_storeu_si512(p, x); }
    static H LoadH(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
    static void StoreH(void* p, H x) { _mm256_storeu_si256(static_cast<__m256i*>(p), x); }

    static F Set1(float v) { return _mm512_set1_ps(v); }
    static F Add(F a, F b) { return _mm512_add_ps(a, b); }
    static F Sub(F a, F b) { return _mm512_sub_ps(a, b); }
    static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
    static F Div(F a, F b) { return _mm512_div_ps(a, b); }
    static F Max(F a, F b) { return _mm512_max_ps(a, b); }
    static F Min(F a, F b) { return _mm512_min_ps(a, b); }
    static F MaxNan(F a, F b) {
        return _mm512_mask_mov_ps(_mm512_max_ps(a, b), Unord(a, b), _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
    }
    static F MinNan(F a, F b) {
        return _mm512_mask_mov_ps(_mm512_min_ps(a, b), Unord(a, b), _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
    }
    static F Abs(F x) { return _mm512_abs_ps(x); }

    static M Unord(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }
    static M NotLess(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_NLT_UQ); }
    static M Or(M a, M b) { return M(a | b); }
    static bool Any(M m) { return m != 0; }
    static uint32_t EqualBits(F a, F b) { return uint32_t(_mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ)); }
    static F BroadcastMax(F m) {
        m = _mm512_max_ps(m, _mm512_shuffle_f32x4(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
        m = _mm512_max_ps(m, _mm512_shuffle_f32x4(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
        m = _mm512_max_ps(m, _mm512_permute_ps(m, _MM_SHUFFLE(1, 0, 3, 2)));
        return _mm512_max_ps(m, _mm512_permute_ps(m, _MM_SHUFFLE(2, 3, 0, 1)));
    }

    static I Bf16ToFloatBits(H b) { return _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16); }
    static F HalfToFloatRaw(H h) { return _mm512_cvtph_ps(h); }
    static F HalfToFloat(H h) {
        const __m512 f = _mm512_cvtph_ps(h);
        const __m512i e = _mm512_cvtepu16_epi32(h);
        const __m512i em = _mm512_and_si512(e, _mm512_set1_epi32(0x7fff));
        const __mmask16 nan = _mm512_cmpgt_epi32_mask(em, _mm512_set1_epi32(0x7c00));
        const __m512i bits = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(e, _mm512_set1_epi32(0x8000)), 16),
                                             _mm512_add_epi32(_mm512_slli_epi32(em, 13), _mm512_set1_epi32(0x70000000)));
        return _mm512_mask_blend_ps(nan, f, _mm512_castsi512_ps(bits));
    }
    static H FloatToHalfRaw(F x) { return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static H FloatToHalf(F x) {
        const __m256i h = FloatToHalfRaw(x);
        const __m256i quiet = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(int16_t(0x8000))),
                                              _mm256_set1_epi16(0x7e00));
        return _mm256_mask_blend_epi16(Unord(x, x), h, quiet);
    }
    static H FloatBitsToBf16(I u) {
        const __m512i hi = _mm512_srli_epi32(u, 16);
        const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
        const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
        const __m512i quiet = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
        const __mmask16 nan =
            _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
        return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
    }
    static F Int32ToFloat(I x) { return _mm512_cvtepi32_ps(x); }

    static F RoundHalfAway(F x) {
        const __m512 a = _mm512_abs_ps(x);
        const __m512 t = _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(a, t), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
        const __m512 r = _mm512_mask_add_ps(t, up, t, _mm512_set1_ps(1.0f));
        return _mm512_or_ps(r, _mm512_and_ps(_mm512_set1_ps(-0.0f), x));
    }
    // The rounding embedded in the conversion ({rn,rd,ru,rz}-sae), no separate round; CAST_ROUND (half away from
    // zero) has no embedded form and rounds first.
    template <RoundMode kMode>
    static I CvtRound(F x) {
        if constexpr (kMode == RoundMode::CAST_ROUND) {
            return _mm512_cvttps_epi32(RoundHalfAway(x));
        } else {
            constexpr int kRounding = kMode == RoundMode::CAST_FLOOR  ? _MM_FROUND_TO_NEG_INF
                                      : kMode == RoundMode::CAST_CEIL ? _MM_FROUND_TO_POS_INF
                                      : kMode == RoundMode::CAST_TRUNC ? _MM_FROUND_TO_ZERO
                                                                       : _MM_FROUND_TO_NEAREST_INT;
            return _mm512_cvt_roundps_epi32(x, kRounding | _MM_FROUND_NO_EXC);
        }
    }
    static I SaturateInt32(I c, F x, M special) {
        c = _mm512_mask_mov_epi32(c, special, _mm512_set1_epi32(0x7fffffff));
        return ZeroWhereNan(c, x);
    }
    static I ZeroWhereNan(I v, F x) { return _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(x, x, _CMP_ORD_Q), v); }

    static H LowHalf(I h) { return _mm512_castsi512_si256(h); }
    static H HighHalf(I h) { return _mm512_extracti64x4_epi64(h, 1); }
    static bool AnyHalfNotFinite(I h0, I h1) {
        const __m512i absMask = _mm512_set1_epi16(0x7fff), infBits = _mm512_set1_epi16(0x7c00);
        return (_mm512_cmpge_epi16_mask(_mm512_and_si512(h0, absMask), infBits) |
                _mm512_cmpge_epi16_mask(_mm512_and_si512(h1, absMask), infBits)) != 0;
    }
    static I PackInt8(I a, I b, I c, I e) {
        const __m512i bytes = _mm512_packs_epi16(_mm512_packs_epi32(a, b), _mm512_packs_epi32(c, e));
        return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), bytes);
    }
    static void StoreInt8(int8_t* d, I v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm512_cvtepi32_epi8(v)); }
};

using V = Avx512;
#include "vector_simd_body.inc"

#pragma GCC pop_options
}  // namespace avx512

#undef CAM_TWIN_BY_MODE

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
        case VectorPath::Avx512: return avx512::kTable;
        case VectorPath::Avx2: return avx2::kTable;
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
