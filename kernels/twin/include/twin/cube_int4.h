// int4 operands on the cube path: int4b_t tensors (two elements a byte) through the GM -> L1 copies, LoadData into
// L0A / L0B and Mmad int4 x int4 -> int32. Every copy moves whole bytes, so each one is the int8 instruction on a
// byte view of the same buffer; the Mmad unpacks its fractals to int8 and runs the int8 unit, which is exact.
// The rules the hardware imposes on int4 (docs/twin.md, "int4 operands"): both Mmad operands int4, K in fractals
// of 64 elements, no element offset inside a byte.
#pragma once

#include <cmath>
#include <concepts>

#include "twin/cube.h"

namespace cam::twin {

constexpr uint32_t kCubeK0Int4 = 64;  // k extent of an int4 fractal: 64 elements in one 32-byte C0 block

// dst (int8 ZZ, m x k8) from src (int4 ZZ, m x k4): k8 = k rounded up to 32, k4 = k rounded up to 64, m a multiple
// of 16; the int4 columns past k8 are padding the Mmad ignores.
void UnpackInt4A(int8_t* dst, const uint8_t* src, uint32_t m, uint32_t k8, uint32_t k4);
// dst (int8 ZN, k8 x n) from src (int4 ZN, k4 x n), n a multiple of 16.
void UnpackInt4B(int8_t* dst, const uint8_t* src, uint32_t k8, uint32_t k4, uint32_t n);
// Per-thread unpack buffers of at least `bytes` (which: 0 for A, 1 for B); valid until the next call.
int8_t* Int4Staging(int which, uint64_t bytes);

// The byte view of an int4 tensor (the same buffer record, the byte count of its elements).
inline AscendC::LocalTensor<int8_t> Int4Bytes(const AscendC::LocalTensor<int4b_t>& t) {
    return AscendC::LocalTensor<int8_t>(reinterpret_cast<int8_t*>(t.Data()),
                                        static_cast<uint32_t>(BytesOfElems<int4b_t>(t.GetSize())), t.Record());
}
inline AscendC::GlobalTensor<int8_t> Int4Bytes(const AscendC::GlobalTensor<int4b_t>& t) {
    AscendC::GlobalTensor<int8_t> bytes;
    bytes.SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(t.GetPhyAddr()), BytesOfElems<int4b_t>(t.GetSize()));
    return bytes;
}

inline void CheckInt4Pair(uint64_t elems, const char* what, const std::source_location& where) {
    CAM_TWIN_CHECK(elems % 2 == 0, "int4-pair",
                   std::string(what) + " of " + std::to_string(elems) + " int4 elements is odd (two share a byte)",
                   where);
}

}  // namespace cam::twin

namespace AscendC {

// ND -> NZ of an int4 matrix: dValue and srcDValue count elements, C0 is 32 bytes (64 elements); the strides in
// C0 blocks are the int8 copy's.
inline void DataCopy(const LocalTensor<int4b_t>& dst, const GlobalTensor<int4b_t>& src, const Nd2NzParams& p,
                     const std::source_location where = std::source_location::current()) {
    using namespace cam::twin;
    CheckInt4Pair(p.dValue, "Nd2Nz dValue", where);
    CheckInt4Pair(p.srcDValue, "Nd2Nz srcDValue", where);
    Nd2NzParams bytes = p;
    bytes.dValue = p.dValue / 2;
    bytes.srcDValue = p.srcDValue / 2;
    DataCopy(Int4Bytes(dst), Int4Bytes(src), bytes, where);
}

// Burst GM -> L1 of int4 data: the burst lengths and gaps are in 32-byte blocks whatever the type.
inline void DataCopy(const LocalTensor<int4b_t>& dst, const GlobalTensor<int4b_t>& src, const DataCopyParams& p,
                     const std::source_location where = std::source_location::current()) {
    DataCopy(cam::twin::Int4Bytes(dst), cam::twin::Int4Bytes(src), p, where);
}

// L1 -> L0A / L0B of int4 fractals: 512 bytes each (16 x 64 for A, 64 x 16 for B), moved as bytes.
inline void LoadData(const LocalTensor<int4b_t>& dst, const LocalTensor<int4b_t>& src, const LoadData2DParams& p,
                     const std::source_location where = std::source_location::current()) {
    LoadData(cam::twin::Int4Bytes(dst), cam::twin::Int4Bytes(src), p, where);
}

// The int8 transpose's 32 x 32 byte squares are no int4 geometry; the twin does not model an int4 transpose (an
// int4 B operand is prepacked in its ZN layout and loaded with LoadData).
void LoadDataWithTranspose(const LocalTensor<int4b_t>&, const LocalTensor<int4b_t>&, const LoadData2dTransposeParams&,
                           const std::source_location = std::source_location::current()) = delete;

// C (L0C, NZ int32) = / += A (L0A, ZZ int4) x B (L0B, ZN int4). The hardware reads K in fractals of 64 elements,
// so each operand must hold its rows (columns) to k rounded up to 64; the rest of the rules (positions, ranges,
// GEMV, ordering, bounds) are the int8 Mmad's, which runs on the unpacked fractals with the operands' records; the
// timing model charges it at the int4 rate (cube_int4_macs_per_cycle).
inline void Mmad(const LocalTensor<int32_t>& c, const LocalTensor<int4b_t>& a, const LocalTensor<int4b_t>& b,
                 const MmadParams& p, const std::source_location where = std::source_location::current()) {
    using namespace cam::twin;
    CAM_TWIN_CHECK(a.Record() != nullptr && b.Record() != nullptr, "cube-position",
                   "Mmad int4 operand was never allocated", where);
    const uint32_t mA = (p.m + kCubeM0 - 1) / kCubeM0 * kCubeM0;
    const uint32_t nA = (p.n + kCubeN0 - 1) / kCubeN0 * kCubeN0;
    const uint32_t k4 = (p.k + kCubeK0Int4 - 1) / kCubeK0Int4 * kCubeK0Int4;
    const uint32_t k8 = (p.k + kCubeK0Int8 - 1) / kCubeK0Int8 * kCubeK0Int8;
    CAM_TWIN_CHECK(uint64_t(mA) * k4 <= a.GetSize(), "mmad-int4-k",
                   "int4 Mmad reads K in fractals of 64: A (m " + std::to_string(p.m) + ", k " + std::to_string(p.k) +
                       ") needs " + std::to_string(uint64_t(mA) * k4) + " elements of L0A, tensor has " +
                       std::to_string(a.GetSize()),
                   where);
    CAM_TWIN_CHECK(uint64_t(k4) * nA <= b.GetSize(), "mmad-int4-k",
                   "int4 Mmad reads K in fractals of 64: B (k " + std::to_string(p.k) + ", n " + std::to_string(p.n) +
                       ") needs " + std::to_string(uint64_t(k4) * nA) + " elements of L0B, tensor has " +
                       std::to_string(b.GetSize()),
                   where);
    int8_t* a8 = Int4Staging(0, uint64_t(mA) * k8);
    int8_t* b8 = Int4Staging(1, uint64_t(k8) * nA);
    UnpackInt4A(a8, reinterpret_cast<const uint8_t*>(a.Data()), mA, k8, k4);
    UnpackInt4B(b8, reinterpret_cast<const uint8_t*>(b.Data()), k8, k4, nA);
    MmadChecked(c, LocalTensor<int8_t>(a8, mA * k8, a.Record()), LocalTensor<int8_t>(b8, k8 * nA, b.Record()), p,
                where, 4);
}

// Vector Cast half -> int4b_t (asc-devkit `asc_half2int4` / `vconv_f162s4*`, A2/A3: the int4 operand's producer on
// the AIV cores): rounds in `mode` (CAST_NONE as RINT), saturates to [-8, 7], packs two a byte (element 2i in the
// low nibble). count must be even: a byte is never half written.
inline void Cast(const LocalTensor<int4b_t>& dst, const LocalTensor<half>& src, RoundMode mode, uint32_t count,
                 const std::source_location where = std::source_location::current()) {
    using namespace cam::twin;
    CheckInt4Pair(count, "Cast count", where);
    CAM_TWIN_CHECK(mode == RoundMode::CAST_NONE || mode == RoundMode::CAST_RINT || mode == RoundMode::CAST_FLOOR ||
                       mode == RoundMode::CAST_CEIL || mode == RoundMode::CAST_ROUND || mode == RoundMode::CAST_TRUNC,
                   "cast-support", "Cast half -> int4b_t with round mode " + std::to_string(static_cast<int>(mode)) +
                                       " is not in the A2/A3 Cast table",
                   where);
    const LocalTensor<int8_t> bytes = Int4Bytes(dst);
    CheckVectorOperand(bytes, count / 2, "dst", where);
    CheckVectorOperand(src, count, "src", where);
    const half* in = src.Data();
    uint8_t* out = reinterpret_cast<uint8_t*>(bytes.Data());
    auto one = [mode](half h) -> uint8_t {
        const float f = static_cast<float>(h);
        float r = f;
        switch (mode) {
            case RoundMode::CAST_FLOOR: r = std::floor(f); break;
            case RoundMode::CAST_CEIL: r = std::ceil(f); break;
            case RoundMode::CAST_ROUND: r = std::round(f); break;
            case RoundMode::CAST_TRUNC: r = std::trunc(f); break;
            default: r = std::nearbyint(f); break;  // the FPU's default mode: nearest even
        }
        const int v = std::isnan(r) ? 0 : r < -8.0f ? -8 : r > 7.0f ? 7 : static_cast<int>(r);
        return static_cast<uint8_t>(v) & 0x0F;
    };
    for (uint32_t i = 0; i < count / 2; ++i) out[i] = static_cast<uint8_t>(one(in[2 * i]) | (one(in[2 * i + 1]) << 4));
}

// On A2/A3 the cube multiplies int4 only by int4: an int8 x int4 (or int4 x int8) Mmad does not exist.
template <typename U, typename S>
    requires(std::same_as<U, int4b_t> != std::same_as<S, int4b_t>)
void Mmad(const LocalTensor<int32_t>&, const LocalTensor<U>&, const LocalTensor<S>&, const MmadParams&,
          const std::source_location where = std::source_location::current()) {
    CAM_TWIN_CHECK(false, "mmad-int4-pair",
                   std::string("Mmad of ") + (std::same_as<U, int4b_t> ? "int4 A" : "int8 A") + " by " +
                       (std::same_as<S, int4b_t> ? "int4 B" : "int8 B") +
                       ": the cube multiplies int4 only by int4 (no mixed int8 x int4 form)",
                   where);
}

}  // namespace AscendC
