// Per-token symmetric int8 quantization, the one implementation shared by dynamic_quant, dispatch_send and the
// W1 epilogue. Numerics (docs/numerics.md): amax = max|x| in fp32, inv = 127 / amax (one division),
// q = clamp(rint(x * inv), -127, 127), scale = amax / 127.
#pragma once

#include "kernel_operator.h"

#include "common/ub_math.h"

namespace cam::kernels {

constexpr float kQuantMax = 127.0f;
constexpr float kFloatMinNormal = 1.17549435e-38f;
constexpr float kFloatMax = 3.40282347e+38f;

struct QuantParams {
    bool quantize;  // false: the whole row becomes q = 0
    float inv;      // multiplier applied to x when quantize
    float scale;    // dequant scale stored for the row
};

// Scalar decision per row, from the row's amax.
//  - non-finite amax (the row holds inf or NaN): q = 0 and scale = amax / 127, so the fault stays visible downstream;
//  - zero or subnormal amax, or one so small that 127 / amax overflows: q = 0, scale = 0;
//  - otherwise the formula above.
__aicore__ inline QuantParams QuantParamsFromAmax(float amax) {
    if (!(amax <= kFloatMax)) return {false, 0.0f, amax / kQuantMax};  // NaN or +inf
    if (amax < kFloatMinNormal) return {false, 0.0f, 0.0f};
    const float inv = kQuantMax / amax;
    if (!(inv <= kFloatMax)) return {false, 0.0f, 0.0f};
    return {true, inv, amax / kQuantMax};
}

// NaN-propagating max of two chunk maxima, so a NaN anywhere in a row reaches the row's amax.
__aicore__ inline float CombineAmax(float a, float b) {
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
}

// Working tensors for one chunk of up to `count` elements. All are UB scratch owned by the caller.
struct QuantScratch {
    AscendC::LocalTensor<float> absOrInt;   // fp32 |x| for the max; reused as int32 after the multiply
    AscendC::LocalTensor<half> halfTmp;
    AscendC::LocalTensor<float> reduceDst;  // >= 8 floats
    AscendC::LocalTensor<float> reduceWork;
};

// max |xf[0..count)| of a chunk already widened to fp32. Reads the result back to the scalar unit.
__aicore__ inline float ChunkAmax(const AscendC::LocalTensor<float>& xf, uint32_t count, const QuantScratch& s) {
    AscendC::Abs(s.absOrInt, xf, count);
    AscendC::ReduceMax(s.reduceDst, s.absOrInt, s.reduceWork, count);
    AscendC::PipeBarrier<PIPE_V>();
    const int32_t vToS = EVENT_ID0;
    AscendC::SetFlag<AscendC::HardEvent::V_S>(vToS);
    AscendC::WaitFlag<AscendC::HardEvent::V_S>(vToS);
    return s.reduceDst.GetValue(0);
}

// q[0..count) from fp32 xf (xf is clobbered). fp32 -> int32 rounds half to even; int32 -> half -> int8 is exact
// for the clamped range, which is the conversion chain the vector unit offers down to int8. On A2/A3 int32 -> half
// is a dequantisation through the DEQSCALE register (round mode ignored), so the scale is set to 1 first.
__aicore__ inline void QuantizeChunk(const AscendC::LocalTensor<int8_t>& q, const AscendC::LocalTensor<float>& xf,
                                     uint32_t count, const QuantParams& p, const QuantScratch& s) {
    if (!p.quantize) {
        AscendC::Duplicate(s.halfTmp, half(0.0f), count);
        AscendC::Cast(q, s.halfTmp, AscendC::RoundMode::CAST_TRUNC, count);
        return;
    }
    AscendC::Muls(xf, xf, p.inv, count);
    AscendC::Mins(xf, xf, kQuantMax, count);
    AscendC::Maxs(xf, xf, -kQuantMax, count);
    AscendC::LocalTensor<int32_t> asInt = s.absOrInt.ReinterpretCast<int32_t>();
    AscendC::Cast(asInt, xf, AscendC::RoundMode::CAST_RINT, count);
    AscendC::SetDeqScale(static_cast<half>(1.0f));
    AscendC::Cast(s.halfTmp, asInt, AscendC::RoundMode::CAST_NONE, count);
    AscendC::Cast(q, s.halfTmp, AscendC::RoundMode::CAST_TRUNC, count);
}

// The UB working set of a row quantizer over passes of up to `cols` elements of T (dynamic_quant, dispatch_send):
// it owns its buffers, and QuantWorkingSetUbBytes (common/ub_math.h) is their byte count for tiling.
template <typename T>
class QuantWorkingSet {
public:
    __aicore__ inline void Init(AscendC::TPipe& pipe, uint32_t cols) {
        pipe.InitBuffer(inQue_, 2, UbBytes(uint64_t(cols) * sizeof(T)));
        pipe.InitBuffer(outQue_, 2, UbBytes(cols));
        pipe.InitBuffer(rowBuf_, UbBytes(uint64_t(cols) * 4));
        pipe.InitBuffer(absBuf_, UbBytes(uint64_t(cols) * 4));
        pipe.InitBuffer(halfBuf_, UbBytes(uint64_t(cols) * 2));
        pipe.InitBuffer(workBuf_, UbBytes(uint64_t(ReduceMaxWorkElems<float>(cols)) * 4));
        pipe.InitBuffer(reduceBuf_, kUbBlockBytes);
        scratch_ = {absBuf_.Get<float>(), halfBuf_.Get<half>(), reduceBuf_.Get<float>(), workBuf_.Get<float>()};
    }

    // GM chunk -> VECIN queue -> fp32 in xf.
    __aicore__ inline void LoadWidened(const AscendC::GlobalTensor<T>& src, uint32_t n,
                                       const AscendC::LocalTensor<float>& xf) {
        AscendC::LocalTensor<T> in = inQue_.template AllocTensor<T>();
        AscendC::DataCopyPad(in, src, {1, uint32_t(n * sizeof(T)), 0, 0, 0}, {false, 0, 0, T()});
        inQue_.EnQue(in);
        in = inQue_.template DeQue<T>();
        AscendC::Cast(xf, in, AscendC::RoundMode::CAST_NONE, n);
        inQue_.FreeTensor(in);
    }

    // Quantizes xf[0..n) into an output buffer and hands it to the MTE3 side; the caller copies it out and
    // returns it with FreeOut.
    __aicore__ inline AscendC::LocalTensor<int8_t> Quantize(const AscendC::LocalTensor<float>& xf, uint32_t n,
                                                           const QuantParams& p) {
        AscendC::LocalTensor<int8_t> out = outQue_.template AllocTensor<int8_t>();
        QuantizeChunk(out, xf, n, p, scratch_);
        outQue_.EnQue(out);
        return outQue_.template DeQue<int8_t>();
    }
    __aicore__ inline void FreeOut(const AscendC::LocalTensor<int8_t>& out) { outQue_.FreeTensor(out); }

    __aicore__ inline AscendC::LocalTensor<float> Row() { return rowBuf_.Get<float>(); }
    __aicore__ inline const QuantScratch& Scratch() const { return scratch_; }
    // The input queue, for a kernel that also moves rows of T without quantizing them.
    __aicore__ inline AscendC::TQue<AscendC::TPosition::VECIN, 2>& InQue() { return inQue_; }

private:
    AscendC::TQue<AscendC::TPosition::VECIN, 2> inQue_;
    AscendC::TQue<AscendC::TPosition::VECOUT, 2> outQue_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> rowBuf_, absBuf_, halfBuf_, workBuf_, reduceBuf_;
    QuantScratch scratch_;
};

// One row of `cols` elements, in passes of at most `colsPerPass`. `load(col, n, xf)` widens chunk [col, col + n)
// into xf; `store(col, n, xf, params)` quantizes it (QuantizeChunk) and writes it out. A row that fits one pass is
// read once; a longer row is read twice, first for its amax, then to quantize (a zero or non-finite row is not
// re-read: its q is all zero). Returns the row's parameters (params.scale is the row's scale).
template <typename Load, typename Store>
__aicore__ inline QuantParams QuantizeRowInPasses(uint32_t cols, uint32_t colsPerPass,
                                                  const AscendC::LocalTensor<float>& xf, const QuantScratch& s,
                                                  Load&& load, Store&& store) {
    if (cols <= colsPerPass) {
        load(0u, cols, xf);
        const QuantParams p = QuantParamsFromAmax(ChunkAmax(xf, cols, s));
        store(0u, cols, xf, p);
        return p;
    }
    float amax = 0.0f;
    for (uint32_t c = 0; c < cols; c += colsPerPass) {
        const uint32_t n = cols - c < colsPerPass ? cols - c : colsPerPass;
        load(c, n, xf);
        amax = CombineAmax(amax, ChunkAmax(xf, n, s));
    }
    const QuantParams p = QuantParamsFromAmax(amax);
    for (uint32_t c = 0; c < cols; c += colsPerPass) {
        const uint32_t n = cols - c < colsPerPass ? cols - c : colsPerPass;
        if (p.quantize) load(c, n, xf);
        store(c, n, xf, p);
    }
    return p;
}

// Per-row fp32 values (quant scales) staged in UB and written out in batches of `batch`, one copy per batch:
// dynamic_quant's scale and W1's y_scale. Rows are added in increasing order; the last row of a block flushes.
class ScaleStager {
public:
    __aicore__ inline void Init(AscendC::TPipe& pipe, uint32_t batch) {
        batch_ = batch;
        pipe.InitBuffer(que_, 1, batch * 4);
    }

    __aicore__ inline void Add(const AscendC::GlobalTensor<float>& out, uint64_t row, float value, bool last) {
        if (staged_ == 0) {
            buf_ = que_.AllocTensor<float>();
            first_ = row;
        }
        buf_.SetValue(staged_++, value);
        if (staged_ == batch_ || last) {
            que_.EnQue(buf_);
            buf_ = que_.DeQue<float>();
            AscendC::DataCopyPad(out[first_], buf_, {1, staged_ * 4u, 0, 0, 0});
            que_.FreeTensor(buf_);
            staged_ = 0;
        }
    }

private:
    AscendC::TQue<AscendC::TPosition::VECOUT, 1> que_;
    AscendC::LocalTensor<float> buf_;
    uint32_t batch_ = 0;
    uint32_t staged_ = 0;
    uint64_t first_ = 0;
};

}  // namespace cam::kernels
