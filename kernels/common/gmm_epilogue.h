// The dequant step both GMM epilogues start with (W1: gmm_swiglu_quant_multi_layer, W2: gmm_multi_layer):
//   dst[0..len) = (float(acc[0..len)) * rowScale) * wScale[0..len)      fp32, left to right (docs/numerics.md)
// The w_scale slice of one (expert, column range) is the same for every row of that expert, and rows arrive
// grouped by expert, so a slice is copied into UB once and stays there while rows of the same expert stream
// through (ScaleSlice); only the accumulator row is copied in per row. DequantUbBytes (common/ub_math.h) covers the
// two accumulator buffers and up to two resident slices (W1 keeps its act and gate slices, W2 one), and with W4A8's
// int4 weights up to two colsum slices.
#pragma once

#include "kernel_operator.h"

#include "common/gmm_cube_tiling_data.h"
#include "common/ub_math.h"

namespace cam::kernels {

// One resident per-column slice in UB (a w_scale slice, or W4A8's colsum slice), reloaded only when the (layer,
// expert, column, length) it holds changes.
template <typename T>
class ResidentSlice {
public:
    __aicore__ inline void Init(AscendC::TPipe& pipe, uint32_t chunk) { pipe.InitBuffer(que_, 1, UbBytes(uint64_t(chunk) * 4)); }

    // wScale: layer `layer`'s [E_local, N] values; returns wScale[expert, col..col+len) in UB.
    __aicore__ inline const AscendC::LocalTensor<T>& Get(const AscendC::GlobalTensor<T>& wScale, uint32_t n,
                                                         uint32_t layer, uint32_t expert, uint32_t col,
                                                         uint32_t len) {
        if (held_ && layer == layer_ && expert == expert_ && col == col_ && len == len_) return ws_;
        Release();
        AscendC::LocalTensor<T> ws = que_.AllocTensor<T>();
        AscendC::DataCopyPad(ws, wScale[uint64_t(expert) * n + col], {1, len * 4u, 0, 0, 0}, {false, 0, 0, T(0)});
        que_.EnQue(ws);
        ws_ = que_.DeQue<T>();
        held_ = true;
        layer_ = layer;
        expert_ = expert;
        col_ = col;
        len_ = len;
        return ws_;
    }

    // Gives the buffer back to its queue (before the kernel ends, or before loading another slice).
    __aicore__ inline void Release() {
        if (held_) que_.FreeTensor(ws_);
        held_ = false;
    }

private:
    AscendC::TQue<AscendC::TPosition::VECIN, 1> que_;
    AscendC::LocalTensor<T> ws_;
    bool held_ = false;
    uint32_t layer_ = 0, expert_ = 0, col_ = 0, len_ = 0;
};
using ScaleSlice = ResidentSlice<float>;
using ColsumSlice = ResidentSlice<int32_t>;  // W4A8: Σ_k w over the K group, the recombination's +8 term

// W4A8's recombination of one K group's row (docs/gmm.md §9.1), the one rule both W2 epilogues and W1's call:
// hi = 16·hi + lo + 8·colsum, exactly, in int32, evaluated as 8·(2·hi + colsum) + lo (no term overflows for
// K < 2^21). hi, lo: the row's products of the split's hi and lo planes; colsum: Σ_k w over the group, per column.
__aicore__ inline void GmmRecombineInt4(const AscendC::LocalTensor<int32_t>& hi,
                                        const AscendC::LocalTensor<int32_t>& lo,
                                        const AscendC::LocalTensor<int32_t>& colsum, uint32_t len) {
    AscendC::Muls(hi, hi, int32_t(2), len);
    AscendC::Add(hi, hi, colsum, len);
    AscendC::Muls(hi, hi, int32_t(8), len);
    AscendC::Add(hi, hi, lo, len);
}

// The cube kernel's int32 output as the epilogues read it: per K group one plane [M, N] (int8), or two (int4: the
// hi and lo products of the split activation, docs/gmm.md §9.1).
struct GmmAccView {
    AscendC::GlobalTensor<int32_t> acc;
    uint64_t plane = 0;  // M * N
    uint32_t int4 = 0;

    // K group g's first plane, in elements (int4: its hi plane, the lo plane one plane after; common/gmm_cube.h,
    // StoreCInt4 writes them so).
    __aicore__ inline uint64_t Group(uint32_t g) const { return uint64_t(GmmAccPlanes(int4)) * g * plane; }
};

class DequantStep {
public:
    __aicore__ inline void Init(AscendC::TPipe& pipe, uint32_t chunk) {
        pipe.InitBuffer(accQue_, 2, UbBytes(uint64_t(chunk) * 4));
    }

    // ws: the resident w_scale slice of the row's expert for these columns (ScaleSlice::Get).
    __aicore__ inline void Run(const AscendC::GlobalTensor<int32_t>& acc, const AscendC::LocalTensor<float>& ws,
                               uint32_t len, float rowScale, const AscendC::LocalTensor<float>& dst) {
        AscendC::LocalTensor<int32_t> a = accQue_.AllocTensor<int32_t>();
        AscendC::DataCopyPad(a, acc, {1, len * 4u, 0, 0, 0}, {false, 0, 0, 0});
        accQue_.EnQue(a);
        a = accQue_.DeQue<int32_t>();
        AscendC::Cast(dst, a, AscendC::RoundMode::CAST_RINT, len);  // int32 -> fp32, nearest even
        accQue_.FreeTensor(a);
        AscendC::Muls(dst, dst, rowScale, len);
        AscendC::Mul(dst, dst, ws, len);
    }

    // The dequant of K group g's partial at row offset off (a row's first column): int8 reads the group's int32
    // sum; int4 recombines its two planes first (GmmRecombineInt4).
    __aicore__ inline void RunGroup(const GmmAccView& p, uint64_t off, uint32_t g,
                                    const AscendC::LocalTensor<int32_t>* colsum, const AscendC::LocalTensor<float>& ws,
                                    uint32_t len, float rowScale, const AscendC::LocalTensor<float>& dst) {
        if (!p.int4) {
            Run(p.acc[p.Group(g) + off], ws, len, rowScale, dst);
            return;
        }
        const uint64_t hiOff = p.Group(g) + off;
        AscendC::LocalTensor<int32_t> hi = accQue_.AllocTensor<int32_t>();
        AscendC::LocalTensor<int32_t> lo = accQue_.AllocTensor<int32_t>();
        AscendC::DataCopyPad(hi, p.acc[hiOff], {1, len * 4u, 0, 0, 0}, {false, 0, 0, 0});
        AscendC::DataCopyPad(lo, p.acc[hiOff + p.plane], {1, len * 4u, 0, 0, 0}, {false, 0, 0, 0});
        accQue_.EnQue(hi);
        accQue_.EnQue(lo);
        hi = accQue_.DeQue<int32_t>();
        lo = accQue_.DeQue<int32_t>();
        GmmRecombineInt4(hi, lo, *colsum, len);
        accQue_.FreeTensor(lo);
        AscendC::Cast(dst, hi, AscendC::RoundMode::CAST_RINT, len);  // int32 -> fp32, nearest even
        accQue_.FreeTensor(hi);
        AscendC::Muls(dst, dst, rowScale, len);
        AscendC::Mul(dst, dst, ws, len);
    }

    // fp32 GM -> dst through the accumulator queue (W1 re-reads its spilled s this way).
    __aicore__ inline void Reload(const AscendC::GlobalTensor<float>& src, uint32_t len,
                                  const AscendC::LocalTensor<float>& dst) {
        AscendC::LocalTensor<int32_t> in = accQue_.AllocTensor<int32_t>();
        AscendC::DataCopyPad(in.ReinterpretCast<float>(), src, {1, len * 4u, 0, 0, 0}, {false, 0, 0, 0.0f});
        accQue_.EnQue(in);
        in = accQue_.DeQue<int32_t>();
        AscendC::Muls(dst, in.ReinterpretCast<float>(), 1.0f, len);  // vector copy; x * 1 keeps every bit
        accQue_.FreeTensor(in);
    }

private:
    AscendC::TQue<AscendC::TPosition::VECIN, 2> accQue_;
};

// The dequant of a block of rows at once (the W2 mixed kernel's unit, docs/gmm.md §5): the rows x len int32
// accumulator, rows `srcPitch` elements apart in GM, comes in with one strided DataCopyPad (blockCount = rows), each
// row at a UB row of `pitch` elements (a multiple of 16: 32-byte aligned as fp32 and as bf16); the int32 -> fp32
// Cast covers the whole block in one instruction; then per row, in the stated order, Muls by the row's scale and
// Mul by the resident w_scale slice: dst[r] = (float(acc[r]) * rowScale[r]) * ws, bit for bit DequantStep::Run on
// each row. Elements past len of a UB row are never written out.
class DequantBlock {
public:
    // rows, pitch: the largest block (tiling's blockRows and pitch).
    __aicore__ inline void Init(AscendC::TPipe& pipe, uint32_t rows, uint32_t pitch) {
        pipe.InitBuffer(accQue_, 2, UbBytes(uint64_t(rows) * pitch * 4));
    }

    // rowScale: the rows' scales in UB (read by the scalar unit), ws: the slice of these columns (ScaleSlice::Get).
    __aicore__ inline void Run(const AscendC::GlobalTensor<int32_t>& acc, uint64_t srcPitch, uint32_t rows,
                               uint32_t len, uint32_t pitch, const AscendC::LocalTensor<float>& rowScale,
                               const AscendC::LocalTensor<float>& ws, const AscendC::LocalTensor<float>& dst) {
        AscendC::LocalTensor<int32_t> a = accQue_.AllocTensor<int32_t>();
        AscendC::DataCopyPad(a, acc, BlockCopyIn(rows, len, srcPitch, pitch), {false, 0, 0, 0});
        accQue_.EnQue(a);
        a = accQue_.DeQue<int32_t>();
        Scale(a, rows, len, pitch, rowScale, ws, dst);
    }

    // W4A8 (docs/gmm.md §9.1): the block's hi and lo products (the split's two planes of one K group, each rows x
    // len, srcPitch apart in GM) come in as two strided copies, each row is recombined (GmmRecombineInt4, with the
    // group's colsum slice), then dequantized as Run does: bit for bit DequantStep::RunGroup on each row.
    __aicore__ inline void RunInt4(const AscendC::GlobalTensor<int32_t>& hiAcc,
                                   const AscendC::GlobalTensor<int32_t>& loAcc, uint64_t srcPitch, uint32_t rows,
                                   uint32_t len, uint32_t pitch, const AscendC::LocalTensor<float>& rowScale,
                                   const AscendC::LocalTensor<int32_t>& colsum,
                                   const AscendC::LocalTensor<float>& ws, const AscendC::LocalTensor<float>& dst) {
        AscendC::LocalTensor<int32_t> hi = accQue_.AllocTensor<int32_t>();
        AscendC::LocalTensor<int32_t> lo = accQue_.AllocTensor<int32_t>();
        AscendC::DataCopyPad(hi, hiAcc, BlockCopyIn(rows, len, srcPitch, pitch), {false, 0, 0, 0});
        AscendC::DataCopyPad(lo, loAcc, BlockCopyIn(rows, len, srcPitch, pitch), {false, 0, 0, 0});
        accQue_.EnQue(hi);
        accQue_.EnQue(lo);
        hi = accQue_.DeQue<int32_t>();
        lo = accQue_.DeQue<int32_t>();
        for (uint32_t r = 0; r < rows; ++r) GmmRecombineInt4(hi[r * pitch], lo[r * pitch], colsum, len);
        accQue_.FreeTensor(lo);
        Scale(hi, rows, len, pitch, rowScale, ws, dst);
    }

    // K group g's block of the view at element offset off (rows srcPitch apart): Run on int8's sum, RunInt4 on
    // int4's hi and lo planes with the group's colsum slice; bit for bit DequantStep::RunGroup on each row.
    __aicore__ inline void RunGroup(const GmmAccView& p, uint64_t off, uint32_t g, uint64_t srcPitch, uint32_t rows,
                                    uint32_t len, uint32_t pitch, const AscendC::LocalTensor<float>& rowScale,
                                    const AscendC::LocalTensor<int32_t>* colsum,
                                    const AscendC::LocalTensor<float>& ws, const AscendC::LocalTensor<float>& dst) {
        const uint64_t at = p.Group(g) + off;
        if (p.int4)
            RunInt4(p.acc[at], p.acc[at + p.plane], srcPitch, rows, len, pitch, rowScale, *colsum, ws, dst);
        else
            Run(p.acc[at], srcPitch, rows, len, pitch, rowScale, ws, dst);
    }

    // GM -> UB of rows x len 4-byte elements, srcPitch apart in GM, pitch apart in UB: DataCopyExtParams' srcStride
    // is the GM gap in bytes, dstStride the UB gap in 32-byte blocks (Ascend C DataCopyPad, docs/gmm.md §5).
    __aicore__ static inline AscendC::DataCopyExtParams BlockCopyIn(uint32_t rows, uint32_t len, uint64_t srcPitch,
                                                                    uint32_t pitch) {
        const uint32_t rowBytes = len * 4u;
        return {static_cast<uint16_t>(rows), rowBytes, static_cast<uint32_t>((srcPitch - len) * 4u),
                (pitch * 4u - static_cast<uint32_t>(AlignUp(rowBytes, kUbBlockBytes))) / kUbBlockBytes, 0};
    }

private:
    // dst = (float(a) * rowScale[r]) * ws per row; frees `a` back to the accumulator queue.
    __aicore__ inline void Scale(AscendC::LocalTensor<int32_t>& a, uint32_t rows, uint32_t len, uint32_t pitch,
                                 const AscendC::LocalTensor<float>& rowScale, const AscendC::LocalTensor<float>& ws,
                                 const AscendC::LocalTensor<float>& dst) {
        AscendC::Cast(dst, a, AscendC::RoundMode::CAST_RINT, rows * pitch);  // int32 -> fp32, nearest even
        accQue_.FreeTensor(a);
        for (uint32_t r = 0; r < rows; ++r) {
            AscendC::LocalTensor<float> row = dst[r * pitch];
            AscendC::Muls(row, row, rowScale.GetValue(r), len);
            AscendC::Mul(row, row, ws, len);
        }
    }

    AscendC::TQue<AscendC::TPosition::VECIN, 2> accQue_;
};

}  // namespace cam::kernels
