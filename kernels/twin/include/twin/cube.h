// The cube path of the Ascend C subset: L1 / L0A / L0B / L0C buffers, GM -> L1 copies (plain and ND -> NZ),
// L1 -> L0 loads (LoadData, LoadDataWithTranspose), Mmad int8 x int8 -> int32, and Fixpipe L0C -> GM.
// Layouts are the documented fractal formats; docs/twin.md ("Cube path") states each one and where the twin
// simplifies. Only what the GMM kernels need: int8 operands, int32 results.
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "twin/data_copy.h"
#include "twin/pipes.h"
#include "twin/tensor.h"

namespace cam::twin {

// Index into BlockContext::cubeUsed and Platform sizes.
enum CubeMemory : int { kL1 = 0, kL0A = 1, kL0B = 2, kL0C = 3 };

inline bool IsCubePosition(AscendC::TPosition pos) {
    using AscendC::TPosition;
    return pos == TPosition::A1 || pos == TPosition::B1 || pos == TPosition::C1 || pos == TPosition::A2 ||
           pos == TPosition::B2 || pos == TPosition::CO1;
}

// Carves a buffer of a cube position out of the block's L1 / L0A / L0B / L0C (sizes from the platform).
uint8_t* CarveCubeBuffer(AscendC::TPosition pos, uint32_t len, const std::source_location& where);

// KERNEL_TASK_TYPE_DEFAULT: a cube-only kernel runs on the AIC cores; the twin checks blockDim against them and
// refuses UB buffers in it (and cube buffers in vector kernels).
void DeclareKernelType(int type, const std::source_location& where = std::source_location::current());

// Bytes of one int8 fractal (16 x 32) and the fractal geometry the cube works in.
constexpr uint32_t kFractalBytes = 512;
constexpr uint32_t kCubeM0 = 16;      // rows of an A / C fractal
constexpr uint32_t kCubeN0 = 16;      // columns of a B / C fractal
constexpr uint32_t kCubeK0Int8 = 32;  // k extent of an int8 fractal (one 32-byte C0 block)

// A per-thread (per-block) staging buffer of at least `bytes` for the cube copies; valid until the next call.
uint8_t* CopyStaging(uint32_t bytes);

void CheckCubeOperand(const BufferRecord* rec, AscendC::TPosition expected, bool write, const char* role,
                      const std::source_location& where);

// The memory a cube position's buffers live in (for the pipe-ordering model, twin/pipes.h).
inline Space CubeSpace(AscendC::TPosition pos) {
    using AscendC::TPosition;
    return pos == TPosition::A2 ? Space::L0A : pos == TPosition::B2 ? Space::L0B : pos == TPosition::CO1 ? Space::L0C
                                                                                                         : Space::L1;
}

// The CPU paths of the int8 Mmad (src/cube_kernels.cpp). CAM_TWIN_CUBE=amx|avx512vnni|avx2|portable forces one
// (auto or unset: the best the CPU and OS allow); a forced path the machine cannot run is a "cube-path" violation
// at the first Mmad, not a silent fallback.
enum class CubePath : uint8_t { Portable, Avx2, Avx512Vnni, Amx };
const char* CubePathName(CubePath path);
bool ParseCubePath(const char* name, CubePath* out);
bool CubePathSupported(CubePath path);
CubePath ActiveCubePath(const std::source_location& where = std::source_location::current());

// C (NZ int32) = / += A (ZZ int8) x B (ZN int8); m, n multiples of 16 and k of 32, operands already checked.
// dst row c (16 bytes at dst + c * dstStride) = column c of the 16 x 16 bytes at src. SSE2: four unpack stages,
// each pairing registers that differ in one bit of the row index (8, 16, 32, then 64-bit units).
inline void Transpose16x16(const uint8_t* src, size_t srcStride, uint8_t* dst, size_t dstStride) {
#if defined(__SSE2__)
    __m128i a[16], b[16];
    for (int r = 0; r < 16; ++r) a[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + r * srcStride));
    for (int g = 0; g < 8; ++g) {  // index (r3 r2 r1 | c3)
        b[2 * g] = _mm_unpacklo_epi8(a[2 * g], a[2 * g + 1]);
        b[2 * g + 1] = _mm_unpackhi_epi8(a[2 * g], a[2 * g + 1]);
    }
    for (int hi = 0; hi < 4; ++hi)  // index (r3 r2 | c3 c2)
        for (int c3 = 0; c3 < 2; ++c3) {
            const __m128i x = b[hi << 2 | c3], y = b[hi << 2 | 2 | c3];
            a[hi << 2 | c3 << 1] = _mm_unpacklo_epi16(x, y);
            a[hi << 2 | c3 << 1 | 1] = _mm_unpackhi_epi16(x, y);
        }
    for (int r3 = 0; r3 < 2; ++r3)  // index (r3 | c3 c2 c1)
        for (int cc = 0; cc < 4; ++cc) {
            const __m128i x = a[r3 << 3 | cc], y = a[r3 << 3 | 4 | cc];
            b[r3 << 3 | cc << 1] = _mm_unpacklo_epi32(x, y);
            b[r3 << 3 | cc << 1 | 1] = _mm_unpackhi_epi32(x, y);
        }
    for (int ccc = 0; ccc < 8; ++ccc) {  // index (c3 c2 c1 c0)
        const __m128i x = b[ccc], y = b[8 | ccc];
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * ccc) * dstStride), _mm_unpacklo_epi64(x, y));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * ccc + 1) * dstStride), _mm_unpackhi_epi64(x, y));
    }
#else
    for (size_t c = 0; c < 16; ++c)
        for (size_t r = 0; r < 16; ++r) dst[c * dstStride + r] = src[r * srcStride + c];
#endif
}

void MmadInt8With(CubePath path, int32_t* c, const int8_t* a, const int8_t* b, uint32_t m, uint32_t n, uint32_t k,
                  bool init);
// An Mmad writing `bytes` of L0C at c: one with cmatrixInitVal (C = A*B) initialises them; one without (C += A*B)
// must add only into bytes an initialising Mmad wrote since the buffer was taken (rule mmad-init).
void CheckMmadInit(BufferRecord* rec, const void* c, uint64_t bytes, bool init, const std::source_location& where);
void MmadInt8(int32_t* c, const int8_t* a, const int8_t* b, uint32_t m, uint32_t n, uint32_t k, bool init,
              const std::source_location& where);

}  // namespace cam::twin

// Kernel-type declaration, spelled and ordered as in Ascend C (global names, used inside the kernel function).
enum KernelMetaType : uint8_t {
    KERNEL_TYPE_AIV_ONLY,
    KERNEL_TYPE_AIC_ONLY,
    KERNEL_TYPE_MIX_AIV_1_0,
    KERNEL_TYPE_MIX_AIC_1_0,
    KERNEL_TYPE_MIX_AIC_1_1,
    KERNEL_TYPE_MIX_AIC_1_2,
};

#define KERNEL_TASK_TYPE_DEFAULT(type) ::cam::twin::DeclareKernelType(type)

namespace AscendC {

// GM -> L1 with ND -> NZ conversion (C0 = 32 bytes). For row j < nValue and 32-byte block b of the row's dValue
// elements: dst block at (j * dstNzNStride + b * dstNzC0Stride) * 32 bytes. A row's last partial block is padded
// with zeros to 32 bytes (documented hardware behaviour); nothing else of dst is written.
struct Nd2NzParams {
    Nd2NzParams() {}
    // As in the Ascend C header (V220), so brace-inits resolve and narrow as under bisheng.
    Nd2NzParams(const uint16_t ndNumIn, const uint16_t nValueIn, const uint16_t dValueIn,
                const uint16_t srcNdMatrixStrideIn, const uint16_t srcDValueIn, const uint16_t dstNzC0StrideIn,
                const uint16_t dstNzNStrideIn, const uint16_t dstNzMatrixStrideIn)
        : ndNum(ndNumIn), nValue(nValueIn), dValue(dValueIn), srcNdMatrixStride(srcNdMatrixStrideIn),
          srcDValue(srcDValueIn), dstNzC0Stride(dstNzC0StrideIn), dstNzNStride(dstNzNStrideIn),
          dstNzMatrixStride(dstNzMatrixStrideIn) {}
    uint16_t ndNum = 1;
    uint16_t nValue = 0;
    uint16_t dValue = 0;
    uint16_t srcNdMatrixStride = 0;
    uint16_t srcDValue = 0;
    uint16_t dstNzC0Stride = 0;
    uint16_t dstNzNStride = 1;
    uint16_t dstNzMatrixStride = 0;
};

// Burst copy GM -> L1: blockCount bursts of blockLen 32-byte blocks; gaps between bursts in 32-byte blocks.
struct DataCopyParams {
    DataCopyParams() {}
    DataCopyParams(const uint16_t count, const uint16_t len, const uint16_t srcStrideIn, const uint16_t dstStrideIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn) {}
    uint16_t blockCount = 1;
    uint16_t blockLen = 0;
    uint16_t srcStride = 0;
    uint16_t dstStride = 0;
};

template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Nd2NzParams& p,
              const std::source_location where = std::source_location::current()) {
    using namespace cam::twin;
    static_assert(sizeof(T) == 1, "the twin's ND->NZ copy covers int8 (C0 = 32 elements)");
    CAM_TWIN_CHECK(dst.Record() && (dst.Record()->position == TPosition::A1 || dst.Record()->position == TPosition::B1),
                   "cube-position", "ND->NZ DataCopy destination is not an L1 (A1/B1) buffer", where);
    CAM_TWIN_CHECK(p.ndNum == 1, "cube-params", "the twin's ND->NZ copy supports ndNum == 1", where);
    CAM_TWIN_CHECK(p.dValue <= p.srcDValue, "cube-params", "Nd2Nz dValue exceeds the source row pitch srcDValue",
                   where);
    CAM_TWIN_CHECK(p.nValue <= 16384 && p.srcDValue >= 1 && p.dstNzC0Stride >= 1 && p.dstNzC0Stride <= 16384,
                   "cube-params", "Nd2Nz nValue <= 16384, srcDValue >= 1 and dstNzC0Stride in [1, 16384] required",
                   where);
    CheckBufferAccess(dst.Record(), Access::CopyIn, where);
    const uint32_t blocks = (p.dValue + kCubeK0Int8 - 1) / kCubeK0Int8;
    if (p.nValue == 0 || blocks == 0) return;
    const uint64_t lastByte = (uint64_t(p.nValue - 1) * p.dstNzNStride + uint64_t(blocks - 1) * p.dstNzC0Stride + 1) * 32;
    CAM_TWIN_CHECK(lastByte <= dst.GetSize(), "l1-bounds",
                   "ND->NZ copy writes " + std::to_string(lastByte) + " bytes into an L1 tensor of " +
                       std::to_string(dst.GetSize()),
                   where);
    uint8_t* out = reinterpret_cast<uint8_t*>(dst.Data());
    // Rows ascend in GM, so the last row's range bounds them all: checked before the first write.
    src.CheckRange(uint64_t(p.nValue - 1) * p.srcDValue, p.dValue, where);
    PipeTouch(Pipe::MTE2, Space::GM, src.GetPhyAddr(), uint64_t(p.nValue - 1) * p.srcDValue + p.dValue, false, where);
    PipeTouch(Pipe::MTE2, Space::L1, dst.Data(), lastByte, true, where);
    TimeGmCopy(Pipe::MTE2, src.GetPhyAddr(), p.dValue, p.nValue, p.srcDValue);
    const GmRaceCopy race(Pipe::MTE2, src.GetPhyAddr(), p.dValue, p.nValue, p.srcDValue, where);
    uint8_t* staged = CopyStaging(blocks * 32u);  // one GM read per row, then 32-byte blocks scattered
    std::memset(staged + p.dValue, 0, blocks * 32u - p.dValue);  // the zero fill of a row's last partial block
    for (uint32_t j = 0; j < p.nValue; ++j) {
        GmRead(staged, reinterpret_cast<const uint8_t*>(src.GetPhyAddr()) + uint64_t(j) * p.srcDValue, p.dValue);
        uint8_t* rowOut = out + uint64_t(j) * p.dstNzNStride * 32;
        for (uint32_t b = 0; b < blocks; ++b)
            std::memcpy(rowOut + uint64_t(b) * p.dstNzC0Stride * 32, staged + b * 32, 32);
    }
}

template <typename T>
void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p,
              const std::source_location where = std::source_location::current()) {
    using namespace cam::twin;
    CheckBufferAccess(dst.Record(), Access::CopyIn, where);
    CAM_TWIN_CHECK(dst.GetPhyAddr() % kUbAlign == 0, "copy-align", "burst DataCopy into an unaligned local address",
                   where);
    const uint64_t burst = uint64_t(p.blockLen) * 32 / sizeof(T);
    const uint64_t srcPitch = burst + uint64_t(p.srcStride) * 32 / sizeof(T);
    const uint64_t dstPitch = burst + uint64_t(p.dstStride) * 32 / sizeof(T);
    if (p.blockCount == 0 || burst == 0) return;
    const uint64_t span = (p.blockCount - 1ull) * dstPitch + burst;
    CAM_TWIN_CHECK(span <= dst.GetSize(), "local-bounds",
                   "burst DataCopy writes " + std::to_string(span) + " elements into a local tensor of " +
                       std::to_string(dst.GetSize()),
                   where);
    src.CheckRange((p.blockCount - 1ull) * srcPitch, burst, where);  // the last burst bounds them all
    PipeTouch(Pipe::MTE2, Space::GM, src.GetPhyAddr(), ((p.blockCount - 1ull) * srcPitch + burst) * sizeof(T), false,
              where);
    PipeTouch(Pipe::MTE2, CubeSpace(dst.Record() ? dst.Record()->position : TPosition::A1), dst.Data(),
              span * sizeof(T), true, where);
    TimeGmCopy(Pipe::MTE2, src.GetPhyAddr(), burst * sizeof(T), p.blockCount, srcPitch * sizeof(T));
    const GmRaceCopy race(Pipe::MTE2, src.GetPhyAddr(), burst * sizeof(T), p.blockCount, srcPitch * sizeof(T), where);
    for (uint32_t b = 0; b < p.blockCount; ++b) {
        GmRead(dst.Data() + b * dstPitch, src.GetPhyAddr() + b * srcPitch, burst * sizeof(T));
    }
}

// L1 -> L0A / L0B, one 512-byte fractal per repeat: source fractal (startIndex + r * srcStride), destination
// fractal r * (1 + dstGap). ifTranspose is not modelled (the GMM kernels transpose B with LoadDataWithTranspose).
struct LoadData2DParams {
    uint16_t startIndex = 0;
    uint8_t repeatTimes = 0;
    uint16_t srcStride = 0;
    uint8_t sid = 0;
    uint16_t dstGap = 0;
    bool ifTranspose = false;
    uint8_t addrMode = 0;
};

template <typename T>
void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParams& p,
              const std::source_location where = std::source_location::current()) {
    using namespace cam::twin;
    CAM_TWIN_CHECK(!p.ifTranspose, "cube-params", "LoadData with ifTranspose is not modelled by the twin", where);
    CAM_TWIN_CHECK(src.Record() && (src.Record()->position == TPosition::A1 || src.Record()->position == TPosition::B1),
                   "cube-position", "LoadData source is not L1 (A1/B1)", where);
    CAM_TWIN_CHECK(dst.Record() && (dst.Record()->position == TPosition::A2 || dst.Record()->position == TPosition::B2),
                   "cube-position", "LoadData destination is not L0A/L0B (A2/B2)", where);
    CheckCubeOperand(src.Record(), src.Record()->position, false, "LoadData src", where);
    CheckCubeOperand(dst.Record(), dst.Record()->position, true, "LoadData dst", where);
    CAM_TWIN_CHECK(dst.GetPhyAddr() % kFractalBytes == 0, "cube-align",
                   "LoadData destination in L0 is not 512-byte aligned", where);
    const uint64_t srcBytes = uint64_t(src.GetSize()) * sizeof(T), dstBytes = uint64_t(dst.GetSize()) * sizeof(T);
    TimeLocalCopy(Pipe::MTE1, uint64_t(p.repeatTimes) * kFractalBytes);
    const uint8_t* s = reinterpret_cast<const uint8_t*>(src.Data());
    uint8_t* d = reinterpret_cast<uint8_t*>(dst.Data());
    for (uint32_t r = 0; r < p.repeatTimes; ++r) {
        const uint64_t so = (uint64_t(p.startIndex) + uint64_t(r) * p.srcStride) * kFractalBytes;
        const uint64_t dO = uint64_t(r) * (1u + p.dstGap) * kFractalBytes;
        CAM_TWIN_CHECK(so + kFractalBytes <= srcBytes, "l1-bounds", "LoadData reads a fractal past its L1 tensor",
                       where);
        CAM_TWIN_CHECK(dO + kFractalBytes <= dstBytes, "l0-bounds", "LoadData writes a fractal past its L0 tensor",
                       where);
        std::memcpy(d + dO, s + so, kFractalBytes);
    }
}

// int8: each repeat merges two consecutive 16x32 source fractals (a 32x32 square, 1024 bytes) at square index
// startIndex + r * srcStride, transposes it, and writes the result as two 16x32 fractals: the first at
// r * (1 + dstGap) fractals, the second (1 + dstFracGap) fractals after the first.
struct LoadData2dTransposeParams {
    uint16_t startIndex = 0;
    uint8_t repeatTimes = 0;
    uint16_t srcStride = 0;
    uint16_t dstGap = 0;
    uint16_t dstFracGap = 0;
    uint8_t addrMode = 0;
};

template <typename T>
void LoadDataWithTranspose(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2dTransposeParams& p,
                           const std::source_location where = std::source_location::current()) {
    using namespace cam::twin;
    static_assert(sizeof(T) == 1, "the twin's LoadDataWithTranspose covers int8 (32x32 squares)");
    CAM_TWIN_CHECK(src.Record() && (src.Record()->position == TPosition::A1 || src.Record()->position == TPosition::B1),
                   "cube-position", "LoadDataWithTranspose source is not L1 (A1/B1)", where);
    CAM_TWIN_CHECK(dst.Record() && (dst.Record()->position == TPosition::A2 || dst.Record()->position == TPosition::B2),
                   "cube-position", "LoadDataWithTranspose destination is not L0A/L0B (A2/B2)", where);
    CheckCubeOperand(src.Record(), src.Record()->position, false, "LoadDataWithTranspose src", where);
    CheckCubeOperand(dst.Record(), dst.Record()->position, true, "LoadDataWithTranspose dst", where);
    CAM_TWIN_CHECK(dst.GetPhyAddr() % kFractalBytes == 0, "cube-align",
                   "LoadDataWithTranspose destination in L0 is not 512-byte aligned", where);
    const uint64_t srcBytes = src.GetSize(), dstBytes = dst.GetSize();
    TimeLocalCopy(Pipe::MTE1, uint64_t(p.repeatTimes) * 2 * kFractalBytes);
    const uint8_t* s = reinterpret_cast<const uint8_t*>(src.Data());
    uint8_t* d = reinterpret_cast<uint8_t*>(dst.Data());
    for (uint32_t r = 0; r < p.repeatTimes; ++r) {
        const uint64_t so = (uint64_t(p.startIndex) + uint64_t(r) * p.srcStride) * 2 * kFractalBytes;
        const uint64_t d0 = uint64_t(r) * (1u + p.dstGap) * kFractalBytes;
        const uint64_t d1 = d0 + (1u + p.dstFracGap) * kFractalBytes;
        CAM_TWIN_CHECK(so + 2 * kFractalBytes <= srcBytes, "l1-bounds",
                       "LoadDataWithTranspose reads a square past its L1 tensor", where);
        CAM_TWIN_CHECK(d1 + kFractalBytes <= dstBytes && d0 + kFractalBytes <= dstBytes, "l0-bounds",
                       "LoadDataWithTranspose writes a fractal past its L0 tensor", where);
        // Square column col -> row col % 16 of the first (col < 16) or second destination fractal.
        const uint8_t* sq = s + so;
        for (uint32_t rb = 0; rb < 32; rb += 16) {
            Transpose16x16(sq + rb * 32, 32, d + d0 + rb, 32);
            Transpose16x16(sq + rb * 32 + 16, 32, d + d1 + rb, 32);
        }
    }
}

struct MmadParams {
    uint16_t m = 0;
    uint16_t n = 0;
    uint16_t k = 0;
    bool isBias = false;
    int32_t fmOffset = 0;
    bool enSsparse = false;
    bool enWinogradA = false;
    bool enWinogradB = false;
    uint8_t unitFlag = 0;
    bool kDirectionAlign = false;
    bool cmatrixSource = false;
    bool cmatrixInitVal = true;  // true: C = A*B; false: C += A*B
};

// C (L0C, NZ int32) = / += A (L0A, ZZ int8) x B (L0B, ZN int8). The twin computes whole fractals: m and n
// rounded up to 16, k up to 32, so padding must be zero on at least one side of every product (docs/twin.md).
// elemBits: the operands' element width as the program issued them (8; 4 for an int4 Mmad, which runs here on its
// unpacked fractals): the timing model charges the cube at that type's rate.
inline void MmadChecked(const LocalTensor<int32_t>& c, const LocalTensor<int8_t>& a, const LocalTensor<int8_t>& b,
                        const MmadParams& p, const std::source_location& where, uint32_t elemBits) {
    using namespace cam::twin;
    CAM_TWIN_CHECK(!p.isBias && !p.enSsparse && !p.enWinogradA && !p.enWinogradB && p.fmOffset == 0, "cube-params",
                   "Mmad features other than plain int8 GEMM are not modelled", where);
    CheckCubeOperand(a.Record(), TPosition::A2, false, "Mmad A", where);
    CheckCubeOperand(b.Record(), TPosition::B2, false, "Mmad B", where);
    CheckCubeOperand(c.Record(), TPosition::CO1, true, "Mmad C", where);
    CAM_TWIN_CHECK(p.m <= 4095 && p.n <= 4095 && p.k <= 4095, "cube-params",
                   "Mmad m, n, k must each be in [0, 4095]", where);
    // m == 1 switches the cube to GEMV mode, which reads L0A as ND instead of ZZ: a ZZ-packed A gives garbage.
    CAM_TWIN_CHECK(p.m != 1, "mmad-gemv",
                   "Mmad with m == 1 runs in GEMV mode and reads L0A as ND (pad m to 16 for a ZZ operand)", where);
    {
        // Below the documented threshold the cube does not order a Mmad after the previous one into the same
        // L0C: PipeBarrier<PIPE_M> must separate them.
        BlockContext& block = CurrentBlock();
        const auto* cBegin = reinterpret_cast<const uint8_t*>(c.Data());
        const uint64_t cBytes = uint64_t(c.GetSize()) * sizeof(int32_t);
        const auto* last = static_cast<const uint8_t*>(block.lastMmadC);
        const bool overlaps = last != nullptr && cBegin < last + block.lastMmadBytes && last < cBegin + cBytes;
        CAM_TWIN_CHECK(!overlaps || (p.m / 16) * (p.n / 16) >= 10, "mmad-barrier",
                       "Mmad into the L0C region of the previous Mmad with (m/16)*(n/16) < 10 and no "
                       "PipeBarrier<PIPE_M> between them",
                       where);
        block.lastMmadC = cBegin;
        block.lastMmadBytes = cBytes;
    }
    const uint32_t mA = (p.m + kCubeM0 - 1) / kCubeM0 * kCubeM0;
    const uint32_t nA = (p.n + kCubeN0 - 1) / kCubeN0 * kCubeN0;
    const uint32_t kA = (p.k + kCubeK0Int8 - 1) / kCubeK0Int8 * kCubeK0Int8;
    CAM_TWIN_CHECK(uint64_t(mA) * kA <= a.GetSize(), "l0-bounds",
                   "Mmad A needs " + std::to_string(uint64_t(mA) * kA) + " bytes of L0A, tensor has " +
                       std::to_string(a.GetSize()),
                   where);
    CAM_TWIN_CHECK(uint64_t(kA) * nA <= b.GetSize(), "l0-bounds",
                   "Mmad B needs " + std::to_string(uint64_t(kA) * nA) + " bytes of L0B, tensor has " +
                       std::to_string(b.GetSize()),
                   where);
    CAM_TWIN_CHECK(uint64_t(mA) * nA <= c.GetSize(), "l0-bounds",
                   "Mmad C needs " + std::to_string(uint64_t(mA) * nA) + " int32 of L0C, tensor has " +
                       std::to_string(c.GetSize()),
                   where);
    CheckMmadInit(c.Record(), c.Data(), uint64_t(mA) * nA * sizeof(int32_t), p.cmatrixInitVal, where);
    // int4 reads K in fractals of 64: charged over k rounded up to 64 at the int4 rate.
    TimeMmad(mA, nA, elemBits == 4 ? (p.k + 63) / 64 * 64 : kA, elemBits);
    cam::twin::MmadInt8(c.Data(), a.Data(), b.Data(), mA, nA, kA, p.cmatrixInitVal, where);
}

inline void Mmad(const LocalTensor<int32_t>& c, const LocalTensor<int8_t>& a, const LocalTensor<int8_t>& b,
                 const MmadParams& p, const std::source_location where = std::source_location::current()) {
    MmadChecked(c, a, b, p, where, 8);
}

enum class CO2Layout : uint8_t { NZ = 0, ROW_MAJOR, COLUMN_MAJOR };

struct FixpipeConfig {
    CO2Layout format;
    constexpr FixpipeConfig(CO2Layout f) : format(f) {}
};

inline constexpr FixpipeConfig CFG_ROW_MAJOR{CO2Layout::ROW_MAJOR};

// L0C -> GM. srcStride: rows of L0C per 16-column block (the C tile's row count rounded up to 16); dstStride:
// elements between GM rows. Only mSize x nSize elements are written; no quantization (int32 in, int32 out).
struct FixpipeParamsV220 {
    uint16_t nSize = 0;
    uint16_t mSize = 0;
    uint16_t srcStride = 0;
    uint32_t dstStride = 0;
    uint8_t ndNum = 1;
    bool reluEn = false;
    uint8_t unitFlag = 0;
};

template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src, const FixpipeParamsV220& p,
             const std::source_location where = std::source_location::current()) {
    using namespace cam::twin;
    static_assert(std::is_same_v<T, int32_t> && std::is_same_v<U, int32_t>,
                  "the twin's Fixpipe moves int32 results without quantization");
    static_assert(config.format == CO2Layout::ROW_MAJOR, "the twin's Fixpipe writes row-major (NZ -> ND)");
    CAM_TWIN_CHECK(p.ndNum == 1 && !p.reluEn, "cube-params", "Fixpipe: only ndNum = 1 without ReLU is modelled",
                   where);
    CheckCubeOperand(src.Record(), TPosition::CO1, false, "Fixpipe src", where);
    // With NZ2ND (CFG_ROW_MAJOR, the only mode modelled) nSize is any value in [1, 4095]: the multiple of 16 the
    // same page asks for is the NZ output's (CFG_NZ, 8 with channel split), which does not compile here. dstStride
    // is the element count of one destination ND row, so a row of nSize elements must fit in it.
    CAM_TWIN_CHECK(p.nSize >= 1 && p.nSize <= 4095 && p.nSize <= p.dstStride, "fixpipe-nsize",
                   "Fixpipe NZ -> ND needs nSize in [1, 4095] and at most dstStride (the destination row's elements), "
                   "got nSize " + std::to_string(p.nSize) + ", dstStride " + std::to_string(p.dstStride),
                   where);
    CAM_TWIN_CHECK(p.mSize >= 1 && p.mSize <= 8192, "cube-params", "Fixpipe NZ -> ND needs mSize in [1, 8192]",
                   where);
    CAM_TWIN_CHECK(p.srcStride % kCubeM0 == 0 && p.srcStride >= p.mSize, "cube-params",
                   "Fixpipe srcStride must be the L0C row count (a multiple of 16, >= mSize)", where);
    // The exact extent read: mSize rows of each 16-column block, blocks srcStride rows apart (a source that starts
    // at a row inside L0C, such as the second of two stacked row planes, reads no further than its last block).
    const uint32_t nBlocksRead = (p.nSize + kCubeN0 - 1) / kCubeN0;
    CAM_TWIN_CHECK((uint64_t(nBlocksRead - 1) * p.srcStride + p.mSize) * kCubeN0 <= src.GetSize(), "l0-bounds",
                   "Fixpipe reads past its L0C tensor", where);
    const int32_t* c = src.Data();
    // Rows ascend in GM: the last row's range bounds them all, checked before the first write.
    dst.CheckRange(uint64_t(p.mSize - 1) * p.dstStride, p.nSize, where);
    PipeTouch(Pipe::FIX, Space::GM, dst.GetPhyAddr(), (uint64_t(p.mSize - 1) * p.dstStride + p.nSize) * sizeof(T),
              true, where);
    TimeGmCopy(Pipe::FIX, dst.GetPhyAddr(), uint64_t(p.nSize) * sizeof(T), p.mSize, uint64_t(p.dstStride) * sizeof(T));
    const GmRaceCopy race(Pipe::FIX, dst.GetPhyAddr(), uint64_t(p.nSize) * sizeof(T), p.mSize,
                          uint64_t(p.dstStride) * sizeof(T), where);
    for (uint32_t i = 0; i < p.mSize; ++i) {
        CheckMteWriteAgainstDirtyLines(dst.GetPhyAddr() + uint64_t(i) * p.dstStride, uint64_t(p.nSize) * sizeof(T),
                                       where);
        // NZ -> ND for one row in a local staging row, then one GM write of the whole row (the engine writes rows,
        // not elements).
        // Row i of each 16-column NZ block is 16 contiguous int32: one 64-byte run per block (the last one cut
        // to the columns left), no per-element index arithmetic.
        T staged[4096];  // nSize <= 4095, checked above
        const int32_t* rowIn = c + uint64_t(i) * kCubeN0;
        // Full blocks move with a constant-size copy (a variable one compiles to `rep movs`, slow at 64 bytes).
        uint32_t j0 = 0;
        for (; j0 + kCubeN0 <= p.nSize; j0 += kCubeN0)
            std::memcpy(staged + j0, rowIn + uint64_t(j0) * p.srcStride, kCubeN0 * sizeof(T));
        if (j0 < p.nSize) std::memcpy(staged + j0, rowIn + uint64_t(j0) * p.srcStride, (p.nSize - j0) * sizeof(T));
        GmWrite(dst.GetPhyAddr() + uint64_t(i) * p.dstStride, staged, uint64_t(p.nSize) * sizeof(T));
    }
}

}  // namespace AscendC
