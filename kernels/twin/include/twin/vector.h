// Vector-unit instructions (count form): elementwise, scalar-broadcast, reductions and Cast.
#pragma once

#include <cstring>
#include <cmath>
#include <limits>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "twin/tensor.h"

namespace cam::twin {

// `touch`: also hand the operand to the pipe model. An in-place instruction's source (the same bytes as its
// destination) passes false: the destination's write, at the same point of the same instruction, conflicts with
// everything its read would (InPlace).
template <typename T>
void CheckVectorOperand(const AscendC::LocalTensor<T>& t, uint32_t count, const char* role,
                        const std::source_location& where, bool touch = true) {
    CAM_TWIN_CHECK(t.Data() != nullptr, "ub-null", std::string(role) + " operand was never allocated", where);
    CAM_TWIN_CHECK(CurrentBlock().coreKind != static_cast<uint8_t>(CoreKind::Cube), "core-kind",
                   "vector instruction in a cube-only kernel (the AIC has no vector unit)", where);
    CAM_TWIN_CHECK(t.GetPhyAddr() % kUbAlign == 0, "vector-align",
                   std::string(role) + " operand is not 32-byte aligned in UB", where);
    CAM_TWIN_CHECK(count <= t.GetSize(), "ub-bounds",
                   std::string(role) + " operand holds " + std::to_string(t.GetSize()) + " elements, op counts " +
                       std::to_string(count),
                   where);
    CheckBufferAccess(t.Record(), Access::Vector, where);
    const bool write = role[0] == 'd' || role[0] == 'w';  // dst, work: written; src*: read
    if (touch) PipeTouch(Pipe::V, Space::UB, t.Data(), uint64_t(count) * sizeof(T), write, where);
    TimeVectorOperand(role, uint64_t(count) * sizeof(T));
}

// Whether src is dst's bytes (same type, same start, same count at the call): an in-place instruction.
template <typename T>
bool InPlace(const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src) {
    return dst.Data() == src.Data();
}

// fp32 max / min that propagate NaN (as the canonical quiet NaN), the vector unit's behaviour the kernels are written
// against (see docs/twin.md). Written as selects, not branches, so the loops over them vectorise.
inline float MaxPropagateNan(float a, float b) {
    const bool nan = (a != a) | (b != b);
    return nan ? std::numeric_limits<float>::quiet_NaN() : (a > b ? a : b);
}
inline float MinPropagateNan(float a, float b) {
    const bool nan = (a != a) | (b != b);
    return nan ? std::numeric_limits<float>::quiet_NaN() : (a < b ? a : b);
}

// Rounds v to an integral float in the given mode, without libm and without going through double: below 2^23 in
// magnitude fp32 still has fraction bits and the rounding is done by hand (RINT by adding and removing 2^23, which
// leaves the FPU's round-to-nearest-even to do it); from 2^23 on every fp32 is already an integer. NaN and inf pass
// through. Bit-identical to floor / ceil / round / trunc / nearbyint (tests/twin/compute_identity.cpp).
template <AscendC::RoundMode kMode>
inline float RoundIntegral(float v) {
    constexpr float kTwo23 = 8388608.0f;
    const float a = std::fabs(v);
    const bool small = a < kTwo23;  // false for NaN and inf
    const float t = small ? static_cast<float>(static_cast<int32_t>(a)) : a;  // |trunc(v)|
    float r;
    if constexpr (kMode == AscendC::RoundMode::CAST_TRUNC) {
        r = std::copysign(t, v);
    } else if constexpr (kMode == AscendC::RoundMode::CAST_FLOOR) {
        const float tv = std::copysign(t, v);
        r = tv > v ? tv - 1.0f : tv;
    } else if constexpr (kMode == AscendC::RoundMode::CAST_CEIL) {
        const float tv = std::copysign(t, v);
        r = tv < v ? tv + 1.0f : tv;
    } else if constexpr (kMode == AscendC::RoundMode::CAST_ROUND) {
        r = std::copysign(a - t >= 0.5f ? t + 1.0f : t, v);  // a - t is exact: the dropped fraction
    } else {
        r = std::copysign(small ? (a + kTwo23) - kTwo23 : a, v);
    }
    return r;
}

// Float -> integer with a rounding mode; NaN gives 0 and out-of-range saturates (documented twin semantics).
template <typename I, AscendC::RoundMode kMode>
inline I RoundToIntT(float v) {
    const float r = RoundIntegral<kMode>(v);
    constexpr float lo = static_cast<float>(std::numeric_limits<I>::min());  // exact: a power of two or 0
    if constexpr (sizeof(I) >= 4) {
        // The first float past the maximum (2^31, 2^32, 2^63); the int conversion only ever sees in-range values.
        constexpr float hiExcl = static_cast<float>(std::numeric_limits<I>::max() / 2 + 1) * 2.0f;
        const bool nan = r != r;
        const bool over = r >= hiExcl;
        const bool under = r < lo;
        const I conv = static_cast<I>(nan | over | under ? 0.0f : r);
        return nan ? I(0) : (over ? std::numeric_limits<I>::max() : (under ? std::numeric_limits<I>::min() : conv));
    } else {
        constexpr float hi = static_cast<float>(std::numeric_limits<I>::max());
        const float c = r < lo ? lo : (r > hi ? hi : r);
        return r != r ? I(0) : static_cast<I>(static_cast<int32_t>(r != r ? 0.0f : c));
    }
}

template <typename I>
I RoundToInt(float v, AscendC::RoundMode mode) {
    switch (mode) {
        case AscendC::RoundMode::CAST_FLOOR: return RoundToIntT<I, AscendC::RoundMode::CAST_FLOOR>(v);
        case AscendC::RoundMode::CAST_CEIL: return RoundToIntT<I, AscendC::RoundMode::CAST_CEIL>(v);
        case AscendC::RoundMode::CAST_ROUND: return RoundToIntT<I, AscendC::RoundMode::CAST_ROUND>(v);
        case AscendC::RoundMode::CAST_TRUNC: return RoundToIntT<I, AscendC::RoundMode::CAST_TRUNC>(v);
        default: return RoundToIntT<I, AscendC::RoundMode::CAST_RINT>(v);  // CAST_RINT / CAST_NONE
    }
}

template <typename D, typename S, AscendC::RoundMode kMode>
inline D CastOneT(S s) {
    if constexpr (std::is_same_v<D, S>) {
        return s;
    } else if constexpr (std::is_integral_v<D>) {
        return RoundToIntT<D, kMode>(static_cast<float>(s));  // S is float-like or a small integer
    } else if constexpr (std::is_same_v<D, float>) {
        return static_cast<float>(s);  // int32 -> fp32 rounds to nearest even; 16-bit floats widen exactly
    } else {
        // to half / bfloat16_t: via fp32, rounded to nearest even by the storage type's constructor
        return D(static_cast<float>(s));
    }
}

// The end of one 64-element repeat of a count-form ReduceMax, shared by every path: rm is the repeat's maximum
// value (its sign of zero not yet settled), nan whether the repeat holds a NaN. Writes the repeat's (value, index)
// pair as the element-by-element definition leaves it and returns the value: the first element equal to the max,
// which sets the stored bits (+0 vs -0); with a NaN, the serial walk, where every element after a NaN replaces it.
inline float ReduceMaxRepeatFinish(const float* v, uint32_t n, float rm, bool nan, float* pair) {
    uint32_t at = 0;
    if (nan) {
        rm = v[0];
        for (uint32_t j = 1; j < n; ++j)
            if (MaxPropagateNan(rm, v[j]) != rm) rm = v[j], at = j;
    } else {
        while (!(v[at] == rm)) ++at;
        rm = v[at];
    }
    pair[0] = rm;
    std::memcpy(&pair[1], &at, sizeof(at));
    return rm;
}

// The instruction's result from the repeats' maxima: the serial definition keeps the last element equal to the max
// (for +-0, its sign) and turns any NaN into the canonical quiet NaN, so those rare cases walk the elements.
inline float ReduceMaxFinish(const float* s, uint32_t count, float total, bool anyNan) {
    if (anyNan || total == 0.0f) {
        float m = s[0];
        for (uint32_t i = 1; i < count; ++i) m = MaxPropagateNan(m, s[i]);
        return m;
    }
    return total;
}

// The Cast loop of one round mode, element by element through CastOneT: the portable path, and the tail of the
// SIMD paths' full-vector loops.
template <typename D, typename S, AscendC::RoundMode kMode>
void CastLoopT(D* d, const S* s, uint32_t count) {
    for (uint32_t i = 0; i < count; ++i) d[i] = CastOneT<D, S, kMode>(s[i]);
}

// Element-wise Cast of count elements, the round mode resolved once per call (portable path).
template <typename D, typename S>
void CastLoopPortable(D* d, const S* s, AscendC::RoundMode mode, uint32_t count) {
    using AscendC::RoundMode;
    if constexpr (!std::is_integral_v<D>) {
        CastLoopT<D, S, RoundMode::CAST_RINT>(d, s, count);  // to a float type: nearest even whatever the mode
    } else {
        switch (mode) {
            case RoundMode::CAST_FLOOR: CastLoopT<D, S, RoundMode::CAST_FLOOR>(d, s, count); break;
            case RoundMode::CAST_CEIL: CastLoopT<D, S, RoundMode::CAST_CEIL>(d, s, count); break;
            case RoundMode::CAST_ROUND: CastLoopT<D, S, RoundMode::CAST_ROUND>(d, s, count); break;
            case RoundMode::CAST_TRUNC: CastLoopT<D, S, RoundMode::CAST_TRUNC>(d, s, count); break;
            default: CastLoopT<D, S, RoundMode::CAST_RINT>(d, s, count); break;  // CAST_RINT / CAST_NONE
        }
    }
}

// int32 -> half through DEQSCALE: d = half(float(s) * scale) (portable path).
template <typename D>
void DequantLoopPortable(D* d, const int32_t* s, float scale, uint32_t count) {
    for (uint32_t i = 0; i < count; ++i) d[i] = D(static_cast<float>(s[i]) * scale);
}

// Count-form ReduceMax over fp32 (portable path): returns the max (NaN if any element is NaN) and fills the work
// buffer as the element-by-element definition does (twin/reference.h): per 64-element repeat the first maximal
// value and its index. Lanes run independently; only the rare cases where lane order shows in the bits (a NaN, or a
// maximum of +-0 whose sign is the last zero's) take the element-by-element loop.
inline float ReduceMaxFloatPortable(const float* s, float* w, uint32_t count) {
    constexpr uint32_t perRepeat = 64;
    float total = -std::numeric_limits<float>::infinity();
    bool anyNan = false;
    for (uint32_t r = 0; r * perRepeat < count; ++r) {
        const float* v = s + r * perRepeat;
        const uint32_t n = count - r * perRepeat < perRepeat ? count - r * perRepeat : perRepeat;
        float rm;
        bool nan;
#if defined(__SSE2__)
        // maxps(v, acc) is v > acc ? v : acc: the same select as the scalar loop; a NaN lane is caught by cmpunord.
        __m128 acc = _mm_set1_ps(-std::numeric_limits<float>::infinity());
        __m128 unord = _mm_setzero_ps();
        uint32_t i = 0;
        for (; i + 4 <= n; i += 4) {
            const __m128 x = _mm_loadu_ps(v + i);
            acc = _mm_max_ps(x, acc);
            unord = _mm_or_ps(unord, _mm_cmpunord_ps(x, x));
        }
        float lane[4];
        _mm_storeu_ps(lane, acc);
        nan = _mm_movemask_ps(unord) != 0;
        rm = lane[0];
        for (uint32_t l = 1; l < 4; ++l) rm = lane[l] > rm ? lane[l] : rm;
        for (; i < n; ++i) {
            nan |= v[i] != v[i];
            rm = v[i] > rm ? v[i] : rm;
        }
#else
        rm = -std::numeric_limits<float>::infinity();
        nan = false;
        for (uint32_t i = 0; i < n; ++i) {
            nan |= v[i] != v[i];
            rm = v[i] > rm ? v[i] : rm;
        }
#endif
        rm = ReduceMaxRepeatFinish(v, n, rm, nan, w + 2 * r);
        anyNan |= nan;
        total = rm > total ? rm : total;
    }
    return ReduceMaxFinish(s, count, total, anyNan);
}

// The vector unit's fast paths (src/vector_simd.cpp). CAM_TWIN_VECTOR=avx512|avx2|portable forces one (auto or
// unset: the best the CPU allows); a forced path the machine cannot run is a "vector-path" violation at the first
// vector instruction, not a silent fallback. Every path gives the bits of the element-by-element definitions
// (twin/reference.h; tests/twin/compute_identity.cpp runs each path the CPU supports).
enum class VectorPath : uint8_t { Portable, Avx2, Avx512 };
enum class VectorBinaryOp : uint8_t { Add, Sub, Mul, Div, Max, Min };
enum class VectorScalarOp : uint8_t { Adds, Muls, Maxs, Mins };

// The element-by-element forms of the binary and scalar-broadcast instructions (portable path and tails).
template <VectorBinaryOp kOp, typename T>
inline T BinaryOneT(T x, T y) {
    if constexpr (kOp == VectorBinaryOp::Add) return static_cast<T>(x + y);
    else if constexpr (kOp == VectorBinaryOp::Sub) return static_cast<T>(x - y);
    else if constexpr (kOp == VectorBinaryOp::Mul) return static_cast<T>(x * y);
    else if constexpr (kOp == VectorBinaryOp::Div) return static_cast<T>(x / y);
    else if constexpr (kOp == VectorBinaryOp::Max) return static_cast<T>(MaxPropagateNan(x, y));
    else return static_cast<T>(MinPropagateNan(x, y));
}

template <VectorBinaryOp kOp, typename T>
void BinaryLoopT(T* d, const T* a, const T* b, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) d[i] = BinaryOneT<kOp, T>(a[i], b[i]);
}

template <typename T>
void BinaryLoopPortable(VectorBinaryOp op, T* d, const T* a, const T* b, uint32_t n) {
    switch (op) {
        case VectorBinaryOp::Add: return BinaryLoopT<VectorBinaryOp::Add>(d, a, b, n);
        case VectorBinaryOp::Sub: return BinaryLoopT<VectorBinaryOp::Sub>(d, a, b, n);
        case VectorBinaryOp::Mul: return BinaryLoopT<VectorBinaryOp::Mul>(d, a, b, n);
        case VectorBinaryOp::Div: return BinaryLoopT<VectorBinaryOp::Div>(d, a, b, n);
        case VectorBinaryOp::Max: return BinaryLoopT<VectorBinaryOp::Max>(d, a, b, n);
        case VectorBinaryOp::Min: return BinaryLoopT<VectorBinaryOp::Min>(d, a, b, n);
    }
}

template <VectorScalarOp kOp, typename T>
void ScalarLoopT(T* d, const T* s, T scalar, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
        const T x = s[i];
        if constexpr (kOp == VectorScalarOp::Adds) d[i] = static_cast<T>(x + scalar);
        else if constexpr (kOp == VectorScalarOp::Muls) d[i] = static_cast<T>(x * scalar);
        else if constexpr (kOp == VectorScalarOp::Maxs) d[i] = static_cast<T>(MaxPropagateNan(x, scalar));
        else d[i] = static_cast<T>(MinPropagateNan(x, scalar));
    }
}

template <typename T>
void ScalarLoopPortable(VectorScalarOp op, T* d, const T* s, T scalar, uint32_t n) {
    switch (op) {
        case VectorScalarOp::Adds: return ScalarLoopT<VectorScalarOp::Adds>(d, s, scalar, n);
        case VectorScalarOp::Muls: return ScalarLoopT<VectorScalarOp::Muls>(d, s, scalar, n);
        case VectorScalarOp::Maxs: return ScalarLoopT<VectorScalarOp::Maxs>(d, s, scalar, n);
        case VectorScalarOp::Mins: return ScalarLoopT<VectorScalarOp::Mins>(d, s, scalar, n);
    }
}

template <typename T>
void AbsLoopPortable(T* d, const T* s, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) d[i] = static_cast<T>(std::fabs(static_cast<float>(s[i])));
}

// One path's implementation of the instructions (and Cast pairs) on the kernels' hot paths; anything not in the
// table runs the portable templates above. Operands are already checked; d may equal s (in-place) where the
// element sizes match.
struct VectorKernels {
    VectorPath path;
    void (*castBf16ToFloat)(float* d, const bfloat16_t* s, uint32_t n);
    void (*castHalfToFloat)(float* d, const half* s, uint32_t n);
    void (*castFloatToHalf)(half* d, const float* s, uint32_t n);
    void (*castFloatToBf16)(bfloat16_t* d, const float* s, uint32_t n);
    void (*castInt32ToFloat)(float* d, const int32_t* s, uint32_t n);
    void (*castFloatToInt32)(int32_t* d, const float* s, AscendC::RoundMode mode, uint32_t n);
    void (*castHalfToInt8)(int8_t* d, const half* s, AscendC::RoundMode mode, uint32_t n);
    void (*dequantInt32ToHalf)(half* d, const int32_t* s, float scale, uint32_t n);
    void (*absFloat)(float* d, const float* s, uint32_t n);
    void (*scalarFloat)(VectorScalarOp op, float* d, const float* s, float scalar, uint32_t n);
    void (*binaryFloat)(VectorBinaryOp op, float* d, const float* a, const float* b, uint32_t n);
    float (*reduceMaxFloat)(const float* s, float* work, uint32_t n);
};

const char* VectorPathName(VectorPath path);
bool ParseVectorPath(const char* name, VectorPath* out);
bool VectorPathSupported(VectorPath path);
// The table of a path the CPU supports (a "vector-path" violation otherwise).
const VectorKernels& VectorKernelsFor(VectorPath path,
                                      const std::source_location& where = std::source_location::current());
// The path CAM_TWIN_VECTOR selects, resolved once per process.
const VectorKernels& ActiveVectorKernels(const std::source_location& where = std::source_location::current());

// Cast of count elements on a given path: the table's entry for the pairs it has, the portable loop for the rest.
template <typename D, typename S>
void CastLoopWith(const VectorKernels& k, D* d, const S* s, AscendC::RoundMode mode, uint32_t count) {
    if constexpr (std::is_same_v<D, float> && std::is_same_v<S, bfloat16_t>) k.castBf16ToFloat(d, s, count);
    else if constexpr (std::is_same_v<D, float> && std::is_same_v<S, half>) k.castHalfToFloat(d, s, count);
    else if constexpr (std::is_same_v<D, half> && std::is_same_v<S, float>) k.castFloatToHalf(d, s, count);
    else if constexpr (std::is_same_v<D, bfloat16_t> && std::is_same_v<S, float>) k.castFloatToBf16(d, s, count);
    else if constexpr (std::is_same_v<D, float> && std::is_same_v<S, int32_t>) k.castInt32ToFloat(d, s, count);
    else if constexpr (std::is_same_v<D, int32_t> && std::is_same_v<S, float>) k.castFloatToInt32(d, s, mode, count);
    else if constexpr (std::is_same_v<D, int8_t> && std::is_same_v<S, half>) k.castHalfToInt8(d, s, mode, count);
    else CastLoopPortable(d, s, mode, count);
}

template <typename D, typename S>
void CastLoop(D* d, const S* s, AscendC::RoundMode mode, uint32_t count) {
    CastLoopWith(ActiveVectorKernels(), d, s, mode, count);
}

template <typename D>
void DequantLoopWith(const VectorKernels& k, D* d, const int32_t* s, float scale, uint32_t count) {
    if constexpr (std::is_same_v<D, half>) k.dequantInt32ToHalf(d, s, scale, count);
    else DequantLoopPortable(d, s, scale, count);
}

template <typename D>
void DequantLoop(D* d, const int32_t* s, float scale, uint32_t count) {
    DequantLoopWith(ActiveVectorKernels(), d, s, scale, count);
}

inline float ReduceMaxFloat(const float* s, float* w, uint32_t count) {
    return ActiveVectorKernels().reduceMaxFloat(s, w, count);
}

// Which (src, dst, round mode) the vector Cast supports on Atlas A2 / A3 (the two tables of the Ascend C Cast
// documentation are identical for the types cam uses). Dequant: int32 -> half, which goes through DEQSCALE.
enum class CastSupport : uint8_t { No, Yes, Dequant };

template <typename T>
constexpr const char* TypeName() {
    if constexpr (std::is_same_v<T, half>) return "half";
    else if constexpr (std::is_same_v<T, bfloat16_t>) return "bfloat16_t";
    else if constexpr (std::is_same_v<T, float>) return "float";
    else if constexpr (std::is_same_v<T, int8_t>) return "int8_t";
    else if constexpr (std::is_same_v<T, uint8_t>) return "uint8_t";
    else if constexpr (std::is_same_v<T, int16_t>) return "int16_t";
    else if constexpr (std::is_same_v<T, int32_t>) return "int32_t";
    else if constexpr (std::is_same_v<T, int64_t>) return "int64_t";
    else return "?";
}

template <typename D, typename S>
constexpr CastSupport CastOnV220(AscendC::RoundMode mode) {
    using AscendC::RoundMode;
    const bool none = mode == RoundMode::CAST_NONE;
    const bool rounding = mode == RoundMode::CAST_RINT || mode == RoundMode::CAST_FLOOR ||
                          mode == RoundMode::CAST_CEIL || mode == RoundMode::CAST_ROUND ||
                          mode == RoundMode::CAST_TRUNC;
    auto yes = [](bool b) { return b ? CastSupport::Yes : CastSupport::No; };
    if constexpr (std::is_same_v<D, half>) {
        if constexpr (std::is_same_v<S, int8_t> || std::is_same_v<S, uint8_t>) return yes(none);
        if constexpr (std::is_same_v<S, int16_t>) return yes(none || rounding);
        if constexpr (std::is_same_v<S, int32_t>) return CastSupport::Dequant;
        if constexpr (std::is_same_v<S, float>) return yes(none || rounding || mode == RoundMode::CAST_ODD);
    } else if constexpr (std::is_same_v<D, float>) {
        if constexpr (std::is_same_v<S, half> || std::is_same_v<S, bfloat16_t> || std::is_same_v<S, int16_t>)
            return yes(none);
        if constexpr (std::is_same_v<S, int32_t>) return yes(none || rounding);
        if constexpr (std::is_same_v<S, float> || std::is_same_v<S, int64_t>) return yes(rounding);
    } else if constexpr (std::is_same_v<D, int8_t> || std::is_same_v<D, uint8_t>) {
        if constexpr (std::is_same_v<S, half>) return yes(none || rounding);
    } else if constexpr (std::is_same_v<D, int16_t>) {
        if constexpr (std::is_same_v<S, half> || std::is_same_v<S, float>) return yes(rounding);
        if constexpr (std::is_same_v<S, int32_t>) return yes(none);
    } else if constexpr (std::is_same_v<D, int32_t>) {
        if constexpr (std::is_same_v<S, half> || std::is_same_v<S, bfloat16_t> || std::is_same_v<S, float>)
            return yes(rounding);
        if constexpr (std::is_same_v<S, int64_t>) return yes(none);
    } else if constexpr (std::is_same_v<D, bfloat16_t>) {
        if constexpr (std::is_same_v<S, float>) return yes(rounding);
    } else if constexpr (std::is_same_v<D, int64_t>) {
        if constexpr (std::is_same_v<S, int32_t>) return yes(none);
        if constexpr (std::is_same_v<S, float>) return yes(rounding);
    }
    return CastSupport::No;
}

// Work buffer of a count-form ReduceMax: the first round writes a (value, index) pair per 256-byte repeat even
// without calIndex, rounded up to a 32-byte block (Ascend C ReduceMax documentation).
template <typename T>
constexpr uint32_t ReduceMaxWorkElems(uint32_t count) {
    constexpr uint32_t perRepeat = 256 / sizeof(T);
    constexpr uint32_t perBlock = 32 / sizeof(T);
    uint32_t repeats = (count + perRepeat - 1) / perRepeat;
    return (2 * repeats + perBlock - 1) / perBlock * perBlock;
}

// ReduceSum's first round writes one partial per repeat, rounded up to a 32-byte block.
template <typename T>
constexpr uint32_t ReduceSumWorkElems(uint32_t count) {
    constexpr uint32_t perRepeat = 256 / sizeof(T);
    constexpr uint32_t perBlock = 32 / sizeof(T);
    uint32_t repeats = (count + perRepeat - 1) / perRepeat;
    return (repeats + perBlock - 1) / perBlock * perBlock;
}

}  // namespace cam::twin

namespace AscendC {

// Abs, Muls, ... on fp32 (every use in the kernels) run the active path's loop; other element types the portable
// one. Operands are checked once per call, then the loop runs over contiguous elements.
template <typename T>
void Abs(const LocalTensor<T>& dst, const LocalTensor<T>& src, uint32_t count,
         const std::source_location where = std::source_location::current()) {
    cam::twin::CheckVectorOperand(dst, count, "dst", where);
    cam::twin::CheckVectorOperand(src, count, "src", where, !cam::twin::InPlace(dst, src));
    if constexpr (std::is_same_v<T, float>) cam::twin::ActiveVectorKernels(where).absFloat(dst.Data(), src.Data(), count);
    else cam::twin::AbsLoopPortable(dst.Data(), src.Data(), count);
}

// Exp stays element by element through libm (expf): no SIMD exp gives its bits, and the bits are the contract.
#define CAM_TWIN_UNARY(NAME, EXPR)                                                                         \
    template <typename T>                                                                                  \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, uint32_t count,                        \
              const std::source_location where = std::source_location::current()) {                       \
        cam::twin::CheckVectorOperand(dst, count, "dst", where);                                           \
        cam::twin::CheckVectorOperand(src, count, "src", where, !cam::twin::InPlace(dst, src));            \
        T* d = dst.Data();                                                                                 \
        const T* s = src.Data();                                                                           \
        for (uint32_t i = 0; i < count; ++i) {                                                             \
            float x = static_cast<float>(s[i]);                                                            \
            d[i] = static_cast<T>(EXPR);                                                                   \
        }                                                                                                  \
    }

CAM_TWIN_UNARY(Exp, std::exp(x))
CAM_TWIN_UNARY(Reciprocal, 1.0f / x)
#undef CAM_TWIN_UNARY

#define CAM_TWIN_BINARY(NAME, OP)                                                                          \
    template <typename T>                                                                                  \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,           \
              uint32_t count, const std::source_location where = std::source_location::current()) {       \
        cam::twin::CheckVectorOperand(dst, count, "dst", where);                                           \
        cam::twin::CheckVectorOperand(src0, count, "src0", where, !cam::twin::InPlace(dst, src0));         \
        cam::twin::CheckVectorOperand(src1, count, "src1", where, !cam::twin::InPlace(dst, src1));         \
        if constexpr (std::is_same_v<T, float>)                                                            \
            cam::twin::ActiveVectorKernels(where).binaryFloat(OP, dst.Data(), src0.Data(), src1.Data(),   \
                                                              count);                                      \
        else                                                                                               \
            cam::twin::BinaryLoopPortable(OP, dst.Data(), src0.Data(), src1.Data(), count);               \
    }

CAM_TWIN_BINARY(Add, cam::twin::VectorBinaryOp::Add)
CAM_TWIN_BINARY(Sub, cam::twin::VectorBinaryOp::Sub)
CAM_TWIN_BINARY(Mul, cam::twin::VectorBinaryOp::Mul)
CAM_TWIN_BINARY(Div, cam::twin::VectorBinaryOp::Div)
CAM_TWIN_BINARY(Max, cam::twin::VectorBinaryOp::Max)
CAM_TWIN_BINARY(Min, cam::twin::VectorBinaryOp::Min)
#undef CAM_TWIN_BINARY

#define CAM_TWIN_SCALAR(NAME, OP)                                                                          \
    template <typename T>                                                                                  \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, T scalar, uint32_t count,              \
              const std::source_location where = std::source_location::current()) {                       \
        cam::twin::CheckVectorOperand(dst, count, "dst", where);                                           \
        cam::twin::CheckVectorOperand(src, count, "src", where, !cam::twin::InPlace(dst, src));            \
        if constexpr (std::is_same_v<T, float>)                                                            \
            cam::twin::ActiveVectorKernels(where).scalarFloat(OP, dst.Data(), src.Data(), scalar, count);  \
        else                                                                                               \
            cam::twin::ScalarLoopPortable(OP, dst.Data(), src.Data(), scalar, count);                      \
    }

CAM_TWIN_SCALAR(Adds, cam::twin::VectorScalarOp::Adds)
CAM_TWIN_SCALAR(Muls, cam::twin::VectorScalarOp::Muls)
CAM_TWIN_SCALAR(Maxs, cam::twin::VectorScalarOp::Maxs)
CAM_TWIN_SCALAR(Mins, cam::twin::VectorScalarOp::Mins)
#undef CAM_TWIN_SCALAR

template <typename T>
void Duplicate(const LocalTensor<T>& dst, T value, uint32_t count,
               const std::source_location where = std::source_location::current()) {
    cam::twin::CheckVectorOperand(dst, count, "dst", where);
    T* d = dst.Data();
    for (uint32_t i = 0; i < count; ++i) d[i] = value;
}

// dst[0] = max(src[0..count)); NaN propagates. count == 0 is rejected: the hardware result would be undefined.
// The work buffer gets what the hardware leaves there: per repeat its max and the max's index within the repeat.
template <typename T>
void ReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& work, uint32_t count,
               bool calIndex = false, const std::source_location where = std::source_location::current()) {
    (void)calIndex;
    CAM_TWIN_CHECK(count > 0, "vector-count", "ReduceMax over 0 elements", where);
    cam::twin::CheckVectorOperand(dst, 1, "dst", where);
    cam::twin::CheckVectorOperand(src, count, "src", where);
    cam::twin::CheckVectorOperand(work, cam::twin::ReduceMaxWorkElems<T>(count), "work", where);
    if constexpr (std::is_same_v<T, float>) {
        dst.Data()[0] = cam::twin::ActiveVectorKernels(where).reduceMaxFloat(src.Data(), work.Data(), count);
        return;
    } else {
        constexpr uint32_t perRepeat = 256 / sizeof(T);
        const T* s = src.Data();
        float m = static_cast<float>(s[0]);
        for (uint32_t i = 1; i < count; ++i) m = cam::twin::MaxPropagateNan(m, static_cast<float>(s[i]));
        T* w = work.Data();
        for (uint32_t r = 0; r * perRepeat < count; ++r) {
            const uint32_t n = count - r * perRepeat < perRepeat ? count - r * perRepeat : perRepeat;
            uint32_t at = 0;
            float rm = static_cast<float>(s[r * perRepeat]);
            for (uint32_t i = 1; i < n; ++i) {
                const float v = static_cast<float>(s[r * perRepeat + i]);
                if (cam::twin::MaxPropagateNan(rm, v) != rm) rm = v, at = i;
            }
            w[2 * r] = static_cast<T>(rm);
            std::memcpy(&w[2 * r + 1], &at, sizeof(T) < sizeof(at) ? sizeof(T) : sizeof(at));
        }
        dst.Data()[0] = static_cast<T>(m);
    }
}

// dst[0] = sum(src[0..count)) accumulated left to right in T's arithmetic.
template <typename T>
void ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& work, uint32_t count,
               const std::source_location where = std::source_location::current()) {
    CAM_TWIN_CHECK(count > 0, "vector-count", "ReduceSum over 0 elements", where);
    cam::twin::CheckVectorOperand(dst, 1, "dst", where);
    cam::twin::CheckVectorOperand(src, count, "src", where);
    cam::twin::CheckVectorOperand(work, cam::twin::ReduceSumWorkElems<T>(count), "work", where);
    const T* s = src.Data();
    T acc = s[0];
    for (uint32_t i = 1; i < count; ++i) acc = acc + s[i];
    dst.Data()[0] = acc;
}

// The DEQSCALE register an int32 -> half Cast multiplies by (per block).
inline void SetDeqScale(half scale) {
    auto& block = cam::twin::CurrentBlock();
    block.deqScale = static_cast<float>(scale);
    block.deqScaleSet = true;
}

template <typename D, typename S>
void Cast(const LocalTensor<D>& dst, const LocalTensor<S>& src, RoundMode mode, uint32_t count,
          const std::source_location where = std::source_location::current()) {
    cam::twin::CheckVectorOperand(dst, count, "dst", where);
    cam::twin::CheckVectorOperand(src, count, "src", where);
    const cam::twin::CastSupport support = cam::twin::CastOnV220<D, S>(mode);
    CAM_TWIN_CHECK(support != cam::twin::CastSupport::No, "cast-support",
                   std::string("Cast ") + cam::twin::TypeName<S>() + " -> " + cam::twin::TypeName<D>() +
                       " with round mode " + std::to_string(static_cast<int>(mode)) +
                       " is not in the A2/A3 Cast table",
                   where);
    if (support == cam::twin::CastSupport::Dequant) {
        // int32 -> half is a dequantisation through DEQSCALE; the round mode is ignored by the hardware.
        const auto& block = cam::twin::CurrentBlock();
        CAM_TWIN_CHECK(block.deqScaleSet, "cast-deqscale",
                       "int32 -> half Cast without SetDeqScale (the hardware scales by whatever DEQSCALE holds)",
                       where);
        if constexpr (std::is_same_v<S, int32_t>)
            cam::twin::DequantLoopWith(cam::twin::ActiveVectorKernels(where), dst.Data(), src.Data(), block.deqScale,
                                       count);
        return;
    }
    cam::twin::CastLoopWith(cam::twin::ActiveVectorKernels(where), dst.Data(), src.Data(), mode, count);
}

}  // namespace AscendC
