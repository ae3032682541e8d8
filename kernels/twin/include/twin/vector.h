// Vector-unit instructions (count form): elementwise, scalar-broadcast, reductions and Cast.
#pragma once

#include <cfenv>
#include <cstring>
#include <cmath>
#include <limits>

#include "twin/tensor.h"

namespace cam::twin {

template <typename T>
void CheckVectorOperand(const AscendC::LocalTensor<T>& t, uint32_t count, const char* role,
                        const std::source_location& where) {
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
}

// fp32 max that propagates NaN, the vector unit's behaviour the kernels are written against (see docs/twin.md).
inline float MaxPropagateNan(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
    return a > b ? a : b;
}
inline float MinPropagateNan(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
    return a < b ? a : b;
}

// Float -> integer with a rounding mode; NaN gives 0 and out-of-range saturates (documented twin semantics).
template <typename I>
I RoundToInt(float v, AscendC::RoundMode mode) {
    if (std::isnan(v)) return 0;
    double r;
    switch (mode) {
        case AscendC::RoundMode::CAST_FLOOR: r = std::floor(v); break;
        case AscendC::RoundMode::CAST_CEIL: r = std::ceil(v); break;
        case AscendC::RoundMode::CAST_ROUND: r = std::round(v); break;
        case AscendC::RoundMode::CAST_TRUNC: r = std::trunc(v); break;
        default: r = std::nearbyint(v); break;  // CAST_RINT / CAST_NONE: nearest, ties to even
    }
    if (r < static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
    if (r > static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
    return static_cast<I>(r);
}

template <typename D, typename S>
D CastOne(S s, AscendC::RoundMode mode) {
    if constexpr (std::is_same_v<D, S>) {
        return s;
    } else if constexpr (std::is_integral_v<D>) {
        return RoundToInt<D>(static_cast<float>(s), mode);  // S is float-like or a small integer
    } else if constexpr (std::is_same_v<D, float>) {
        return static_cast<float>(s);  // int32 -> fp32 rounds to nearest even; 16-bit floats widen exactly
    } else {
        // to half / bfloat16_t: via fp32, rounded to nearest even by the storage type's constructor
        return D(static_cast<float>(s));
    }
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

#define CAM_TWIN_UNARY(NAME, EXPR)                                                                         \
    template <typename T>                                                                                  \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, uint32_t count,                        \
              const std::source_location where = std::source_location::current()) {                       \
        cam::twin::CheckVectorOperand(dst, count, "dst", where);                                           \
        cam::twin::CheckVectorOperand(src, count, "src", where);                                           \
        T* d = dst.Data();                                                                                 \
        const T* s = src.Data();                                                                           \
        for (uint32_t i = 0; i < count; ++i) {                                                             \
            float x = static_cast<float>(s[i]);                                                            \
            d[i] = static_cast<T>(EXPR);                                                                   \
        }                                                                                                  \
    }

CAM_TWIN_UNARY(Abs, std::fabs(x))
CAM_TWIN_UNARY(Exp, std::exp(x))
CAM_TWIN_UNARY(Reciprocal, 1.0f / x)
#undef CAM_TWIN_UNARY

#define CAM_TWIN_BINARY(NAME, EXPR)                                                                        \
    template <typename T>                                                                                  \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,           \
              uint32_t count, const std::source_location where = std::source_location::current()) {       \
        cam::twin::CheckVectorOperand(dst, count, "dst", where);                                           \
        cam::twin::CheckVectorOperand(src0, count, "src0", where);                                         \
        cam::twin::CheckVectorOperand(src1, count, "src1", where);                                         \
        T* d = dst.Data();                                                                                 \
        const T* a = src0.Data();                                                                          \
        const T* b = src1.Data();                                                                          \
        for (uint32_t i = 0; i < count; ++i) {                                                             \
            T x = a[i];                                                                                    \
            T y = b[i];                                                                                    \
            d[i] = static_cast<T>(EXPR);                                                                   \
        }                                                                                                  \
    }

CAM_TWIN_BINARY(Add, x + y)
CAM_TWIN_BINARY(Sub, x - y)
CAM_TWIN_BINARY(Mul, x * y)
CAM_TWIN_BINARY(Div, x / y)
CAM_TWIN_BINARY(Max, cam::twin::MaxPropagateNan(x, y))
CAM_TWIN_BINARY(Min, cam::twin::MinPropagateNan(x, y))
#undef CAM_TWIN_BINARY

#define CAM_TWIN_SCALAR(NAME, EXPR)                                                                        \
    template <typename T>                                                                                  \
    void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, T scalar, uint32_t count,              \
              const std::source_location where = std::source_location::current()) {                       \
        cam::twin::CheckVectorOperand(dst, count, "dst", where);                                           \
        cam::twin::CheckVectorOperand(src, count, "src", where);                                           \
        T* d = dst.Data();                                                                                 \
        const T* s = src.Data();                                                                           \
        for (uint32_t i = 0; i < count; ++i) {                                                             \
            T x = s[i];                                                                                    \
            d[i] = static_cast<T>(EXPR);                                                                   \
        }                                                                                                  \
    }

CAM_TWIN_SCALAR(Adds, x + scalar)
CAM_TWIN_SCALAR(Muls, x * scalar)
CAM_TWIN_SCALAR(Maxs, cam::twin::MaxPropagateNan(x, scalar))
CAM_TWIN_SCALAR(Mins, cam::twin::MinPropagateNan(x, scalar))
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
    D* d = dst.Data();
    const S* s = src.Data();
    if (support == cam::twin::CastSupport::Dequant) {
        // int32 -> half is a dequantisation through DEQSCALE; the round mode is ignored by the hardware.
        const auto& block = cam::twin::CurrentBlock();
        CAM_TWIN_CHECK(block.deqScaleSet, "cast-deqscale",
                       "int32 -> half Cast without SetDeqScale (the hardware scales by whatever DEQSCALE holds)",
                       where);
        for (uint32_t i = 0; i < count; ++i) d[i] = D(static_cast<float>(s[i]) * block.deqScale);
        return;
    }
    for (uint32_t i = 0; i < count; ++i) d[i] = cam::twin::CastOne<D, S>(s[i], mode);
}

}  // namespace AscendC
