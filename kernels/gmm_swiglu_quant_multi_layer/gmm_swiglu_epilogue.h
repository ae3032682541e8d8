// gmm_swiglu_quant_multi_layer (W1) epilogue on a vector core, per valid row m of group (layer l, expert e):
//   c    = (float(acc[m]) * x_scale[m]) * w_scale[l][e]          fp32, left to right
//   s    = (act / (1 + exp(-act))) * gate                        act = c[:N/2], gate = c[N/2:]
//          with swiglu_limit L first act = min(act, L), gate = max(min(gate, L), -L)   (DeepSeek-V4's clamp)
//   y[m], y_scale[m] = per-row dynamic quant of s                (common/quant.h, the one shared implementation)
// Whole rows belong to one core, so the row's amax needs no cross-core step. A row longer than one UB pass
// spills s (fp32) over the act half of its own accumulator row, which that pass has already consumed, and
// re-reads it for the quant. W4A8 (cube.int4): acc is first recombined from the split's two planes (common/
// gmm_epilogue.h, RunGroup); the spill then lands on the act half of the row's hi plane of group 0, as consumed.
// The accumulator is the mixed kernel's ring slot of tm rows (UseAcc, Rows); with scale groups along K the slot holds
// one unit (UseUnit), whose dequantized group sum SumUnit writes into the AI core's fp32 row tile buffer (UseRowBuf),
// and Rows then reads c from that buffer (and spills into it) instead of dequantizing: the same fp32 values, so y and
// y_scale are the same bits.
#pragma once

#include "kernel_operator.h"

#include "common/gmm_epilogue.h"
#include "common/gmm_groups.h"
#include "common/quant.h"
#include "gmm_swiglu_quant_multi_layer/gmm_swiglu_quant_multi_layer_tiling_data.h"

namespace cam::kernels {

class GmmSwigluQuantMultiLayerEpilogue {
public:
    __aicore__ inline void Init(GM_ADDR xScale, GM_ADDR table, GM_ADDR y, GM_ADDR yScale,
                                const GmmSwigluQuantMultiLayerTilingData& t) {
        t_ = t;
        table_ = table;
        xScale_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(xScale), t.cube.m);
        y_.SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(y), uint64_t(t.cube.m) * t.half);
        yScale_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(yScale), t.cube.m);

        const uint32_t n = t.chunk;
        dequant_.Init(pipe_, n);
        actScale_.Init(pipe_, n);
        gateScale_.Init(pipe_, n);
        if (t.cube.int4) {
            actColsum_.Init(pipe_, n);
            gateColsum_.Init(pipe_, n);
        }
        pipe_.InitBuffer(sBuf_, UbBytes(uint64_t(n) * 4));
        pipe_.InitBuffer(gateBuf_, UbBytes(uint64_t(n) * 4));
        pipe_.InitBuffer(expBuf_, UbBytes(uint64_t(n) * 4));
        pipe_.InitBuffer(absBuf_, UbBytes(uint64_t(n) * 4));
        pipe_.InitBuffer(halfBuf_, UbBytes(uint64_t(n) * 2));
        pipe_.InitBuffer(workBuf_, UbBytes(uint64_t(ReduceMaxWorkElems<float>(n)) * 4));
        pipe_.InitBuffer(reduceBuf_, kUbBlockBytes);
        pipe_.InitBuffer(outQue_, 2, UbBytes(uint64_t(n) * 4));
        if (t.cube.kGroups > 1) {
            pipe_.InitBuffer(partBuf_, UbBytes(uint64_t(n) * 4));
            block_.Init(pipe_, 1, n);  // units: blocks of up to `chunk` elements (SumUnit)
            // A block's row scales: at most chunk / 8 rows (a piece's pitch is a multiple of 8 elements).
            pipe_.InitBuffer(rowScaleBuf_, UbBytes(uint64_t(n) / 8 * 4));
            pipe_.InitBuffer(groupScales_, 1, UbBytes(uint64_t(t.cube.kGroups) * t.unitCols * 4));
            if (t.cube.int4) pipe_.InitBuffer(groupColsums_, 1, UbBytes(uint64_t(t.cube.kGroups) * t.unitCols * 4));
        }
        yScales_.Init(pipe_, kGmmSwigluScaleBatch);
        scratch_ = {absBuf_.Get<float>(), halfBuf_.Get<half>(), reduceBuf_.Get<float>(), workBuf_.Get<float>()};
    }

    // The accumulator the rows are read from: the mixed kernel's ring slot, planes of `plane` = tm * N elements.
    __aicore__ inline void UseAcc(GM_ADDR acc, uint64_t plane) {
        acc_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(acc),
                             plane * t_.cube.kGroups * GmmAccPlanes(t_.cube.int4));
        planes_ = {acc_, plane, t_.cube.int4};
        spill_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(acc), plane);
    }

    // Units (scale groups along K): the AI core's fp32 row tile buffer, tm x N, rows N apart. From then on Rows
    // reads c from it (summed by SumUnit) instead of dequantizing, and spills into it.
    __aicore__ inline void UseRowBuf(GM_ADDR buf) {
        rowBuf_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(buf), uint64_t(t_.cube.tm) * t_.cube.n);
        spill_ = rowBuf_;
        fromRowBuf_ = true;
    }

    // The unit the following SumUnit reads: its ring slot, planes of tm x tn elements, rows tn apart.
    __aicore__ inline void UseUnit(GM_ADDR slot) {
        const uint64_t plane = uint64_t(t_.cube.tm) * t_.cube.tn;
        acc_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(slot),
                             plane * t_.cube.kGroups * GmmAccPlanes(t_.cube.int4));
        planes_ = {acc_, plane, t_.cube.int4};
    }

    // c of rows [row, row + rows) x n-tile nt's columns (the unit's rows from slotRow on) into the row tile buffer
    // (its rows from bufRow on): each K group's partial dequantized and the groups added in order, per element
    // exactly as Rows' dequant does (DequantBlock: bit for bit DequantStep's per row). The unit's columns go in
    // pieces of at most unitCols (and one UB pass), never across the act | gate boundary; a piece's w_scale (and
    // colsum) slices of every group come in with one strided copy each and stay for its blocks of rows, as many rows
    // as one pass's `chunk` elements hold at the piece's pitch: one strided copy per group and plane in, one out.
    __aicore__ inline void SumUnit(uint32_t layer, uint32_t expert, uint64_t row, uint64_t slotRow, uint64_t bufRow,
                                   uint32_t rows, uint32_t nt) {
        UseLayer(layer);
        layer_ = layer;
        const GmmCubeTilingData& c = t_.cube;
        const uint32_t n0 = nt * c.tn, end = c.n - n0 < c.tn ? c.n : n0 + c.tn;
        const uint32_t most = t_.chunk < t_.unitCols ? t_.chunk : t_.unitCols;
        AscendC::LocalTensor<float> f = sBuf_.Get<float>();
        AscendC::LocalTensor<float> rs = rowScaleBuf_.Get<float>();  // the block's row scales (scalar unit only)
        for (uint32_t col = n0; col < end;) {
            const uint32_t stop = col < t_.half && t_.half < end ? t_.half : end;
            const uint32_t len = stop - col < most ? stop - col : most;
            const uint32_t pitch = static_cast<uint32_t>(AlignUp(len, kUbBlockBytes / 4));
            const uint32_t blockRows = t_.chunk / pitch;
            // Every group's slice of these columns: [E, G, N] row (expert, g) at g * pitch in UB.
            const uint64_t first = uint64_t(expert) * c.kGroups * c.n + col;
            const AscendC::DataCopyExtParams slices = DequantBlock::BlockCopyIn(c.kGroups, len, c.n, pitch);
            AscendC::LocalTensor<float> ws = groupScales_.AllocTensor<float>();
            AscendC::DataCopyPad(ws, wScale_[first], slices, {false, 0, 0, 0.0f});
            groupScales_.EnQue(ws);
            ws = groupScales_.DeQue<float>();
            AscendC::LocalTensor<int32_t> cs;
            if (c.int4) {
                cs = groupColsums_.AllocTensor<int32_t>();
                AscendC::DataCopyPad(cs, colsums_[first], slices, {false, 0, 0, 0});
                groupColsums_.EnQue(cs);
                cs = groupColsums_.DeQue<int32_t>();
            }
            for (uint32_t r0 = 0; r0 < rows; r0 += blockRows) {
                const uint32_t b = rows - r0 < blockRows ? rows - r0 : blockRows;
                for (uint32_t i = 0; i < b; ++i) rs.SetValue(i, xScale_.GetValue(row + r0 + i));
                const uint64_t off = (slotRow + r0) * c.tn + (col - n0);
                for (uint32_t g = 0; g < c.kGroups; ++g) {
                    AscendC::LocalTensor<float> part = g == 0 ? f : partBuf_.Get<float>();
                    const AscendC::LocalTensor<int32_t> groupColsum = c.int4 ? cs[g * pitch] : cs;
                    block_.RunGroup(planes_, off, g, c.tn, b, len, pitch, rs, &groupColsum, ws[g * pitch], part);
                    if (g > 0) AscendC::Add(f, f, part, b * pitch);
                }
                AscendC::LocalTensor<float> o = outQue_.AllocTensor<float>();
                AscendC::Muls(o, f, 1.0f, b * pitch);  // vector copy into the out queue's buffer; x * 1 keeps every bit
                outQue_.EnQue(o);
                o = outQue_.DeQue<float>();
                // UB -> GM: srcStride the UB gap in 32-byte blocks, dstStride the GM gap in bytes.
                AscendC::DataCopyPad(rowBuf_[(bufRow + r0) * c.n + col], o,
                                     {static_cast<uint16_t>(b), len * 4u,
                                      (pitch * 4u - static_cast<uint32_t>(AlignUp(len * 4u, kUbBlockBytes))) /
                                          kUbBlockBytes,
                                      (c.n - len) * 4u, 0});
                outQue_.FreeTensor(o);
            }
            groupScales_.FreeTensor(ws);
            if (c.int4) groupColsums_.FreeTensor(cs);
            col += len;
        }
    }

    // y and y_scale of rows [row, row + rows) of `expert` of `layer`, their accumulator rows from accRow on.
    __aicore__ inline void Rows(uint32_t layer, uint32_t expert, uint64_t row, uint64_t accRow, uint32_t rows) {
        UseLayer(layer);
        layer_ = layer;
        if (fromRowBuf_) {
            // The row tile buffer was written by this core's MTE3 (SumUnit): its reads wait for those writes.
            const AscendC::TEventID summed = pipe_.FetchEventID(AscendC::HardEvent::MTE3_MTE2);
            AscendC::SetFlag<AscendC::HardEvent::MTE3_MTE2>(summed);
            AscendC::WaitFlag<AscendC::HardEvent::MTE3_MTE2>(summed);
        }
        for (uint32_t r = 0; r < rows; ++r)
            yScales_.Add(yScale_, row + r, Row(row + r, accRow + r, expert), r + 1 == rows);
    }

    // Gives the resident slices back to their queues (before the kernel ends).
    __aicore__ inline void Finish() {
        actScale_.Release();
        gateScale_.Release();
        actColsum_.Release();
        gateColsum_.Release();
    }

private:
    // wScale_ = the scales of `layer` (bounded by the pre-pass), switched only when a group's layer differs.
    __aicore__ inline void UseLayer(uint32_t layer) {
        if (wLayer_ == int64_t(layer)) return;
        wScale_.SetGlobalBuffer(LayerAddress<float>(table_, t_.cube.layers + layer),
                                uint64_t(t_.cube.experts) * t_.cube.kGroups * t_.cube.n);
        // W4A8: the layer's colsums [E, G, N] follow the scales in the address table.
        if (t_.cube.int4)
            colsums_.SetGlobalBuffer(LayerAddress<int32_t>(table_, 2 * t_.cube.layers + layer),
                                     uint64_t(t_.cube.experts) * t_.cube.kGroups * t_.cube.n);
        wLayer_ = layer;
    }

    // Writes y[row] (its accumulator: row accRow) and returns y_scale[row].
    __aicore__ inline float Row(uint64_t row, uint64_t accRow, uint32_t expert) {
        const float xs = xScale_.GetValue(row);
        AscendC::LocalTensor<float> s = sBuf_.Get<float>();
        float amax = 0.0f;
        for (uint32_t p = 0; p < t_.passes; ++p) {
            const uint32_t col = p * t_.chunk, len = Len(col);
            SwigluChunk(accRow, expert, col, len, xs, s);
            amax = CombineAmax(amax, ChunkAmax(s, len, scratch_));
            if (t_.passes > 1) Spill(accRow, col, len, s);
        }
        const QuantParams q = QuantParamsFromAmax(amax);
        if (t_.passes == 1) {
            Store(row, 0, Len(0), s, q);
            return q.scale;
        }
        const AscendC::TEventID spilled = pipe_.FetchEventID(AscendC::HardEvent::MTE3_MTE2);
        AscendC::SetFlag<AscendC::HardEvent::MTE3_MTE2>(spilled);
        AscendC::WaitFlag<AscendC::HardEvent::MTE3_MTE2>(spilled);
        for (uint32_t p = 0; p < t_.passes; ++p) {
            const uint32_t col = p * t_.chunk, len = Len(col);
            if (q.quantize) Reload(accRow, col, len, s);
            Store(row, col, len, s, q);
        }
        return q.scale;
    }

    __aicore__ inline uint32_t Len(uint32_t col) const { return t_.half - col < t_.chunk ? t_.half - col : t_.chunk; }

    // dst = (float(acc[row, col..col+len)) * xs) * w_scale[expert, col..col+len); `slice` holds the act or the
    // gate columns' scales, so both stay resident across the rows of one expert. With scale groups along K
    // ([E, G, N]), each group's partial is dequantized with its own slice and the groups are added in order
    // (docs/gmm.md §9.2).
    // off: the columns' first element in the accumulator (planes_).
    __aicore__ inline void Dequant(uint64_t off, uint32_t expert, uint32_t col, uint32_t len, float xs,
                                   ScaleSlice& slice, ColsumSlice& colsum, const AscendC::LocalTensor<float>& dst) {
        const uint32_t groups = t_.cube.kGroups;
        for (uint32_t g = 0; g < groups; ++g) {
            AscendC::LocalTensor<float> part = g == 0 ? dst : partBuf_.Get<float>();
            const AscendC::LocalTensor<int32_t>* cs =
                t_.cube.int4 ? &colsum.Get(colsums_, t_.cube.n, layer_, expert * groups + g, col, len) : nullptr;
            dequant_.RunGroup(planes_, off, g, cs, slice.Get(wScale_, t_.cube.n, layer_, expert * groups + g, col, len),
                              len, xs, part);
            if (g > 0) AscendC::Add(dst, dst, part, len);
        }
    }

    // s[0..len) for output columns [col, col+len): silu(act) * gate, in the stated operation order; act and gate
    // dequantized from the accumulator row `row`, or read from the row tile buffer's (units).
    __aicore__ inline void SwigluChunk(uint64_t row, uint32_t expert, uint32_t col, uint32_t len, float xs,
                                       const AscendC::LocalTensor<float>& s) {
        AscendC::LocalTensor<float> gate = gateBuf_.Get<float>();
        AscendC::LocalTensor<float> e = expBuf_.Get<float>();
        const uint64_t off = row * t_.cube.n + col;
        if (fromRowBuf_) {
            dequant_.Reload(rowBuf_[off], len, s);
            dequant_.Reload(rowBuf_[off + t_.half], len, gate);
        } else {
            Dequant(off, expert, col, len, xs, actScale_, actColsum_, s);
            Dequant(off + t_.half, expert, t_.half + col, len, xs, gateScale_, gateColsum_, gate);
        }
        if (t_.clamp) {
            AscendC::Mins(s, s, t_.limit, len);
            AscendC::Mins(gate, gate, t_.limit, len);
            AscendC::Maxs(gate, gate, -t_.limit, len);
        }
        AscendC::Muls(e, s, -1.0f, len);
        AscendC::Exp(e, e, len);
        AscendC::Adds(e, e, 1.0f, len);
        AscendC::Div(s, s, e, len);
        AscendC::Mul(s, s, gate, len);
    }

    __aicore__ inline void Spill(uint64_t row, uint32_t col, uint32_t len, const AscendC::LocalTensor<float>& s) {
        AscendC::LocalTensor<float> o = outQue_.AllocTensor<float>();
        AscendC::Muls(o, s, 1.0f, len);  // vector copy into the out queue's buffer; x * 1 keeps every bit
        outQue_.EnQue(o);
        o = outQue_.DeQue<float>();
        AscendC::DataCopyPad(spill_[row * t_.cube.n + col], o, {1, len * 4u, 0, 0, 0});
        outQue_.FreeTensor(o);
    }

    __aicore__ inline void Reload(uint64_t row, uint32_t col, uint32_t len, const AscendC::LocalTensor<float>& s) {
        dequant_.Reload(spill_[row * t_.cube.n + col], len, s);
    }

    __aicore__ inline void Store(uint64_t row, uint32_t col, uint32_t len, const AscendC::LocalTensor<float>& s,
                                 const QuantParams& q) {
        AscendC::LocalTensor<int8_t> o = outQue_.AllocTensor<int8_t>();
        QuantizeChunk(o, s, len, q, scratch_);
        outQue_.EnQue(o);
        o = outQue_.DeQue<int8_t>();
        AscendC::DataCopyPad(y_[row * t_.half + col], o, {1, len, 0, 0, 0});
        outQue_.FreeTensor(o);
    }

    GmmSwigluQuantMultiLayerTilingData t_{};
    int64_t wLayer_ = -1;  // the layer wScale_ points at
    uint32_t layer_ = 0;   // the current row's layer (its w_scale slices)
    GM_ADDR table_ = nullptr;
    AscendC::TPipe pipe_;
    DequantStep dequant_;
    DequantBlock block_;  // units: the dequant of a block of the unit's rows
    ScaleSlice actScale_, gateScale_;  // w_scale of the current expert's act / gate columns
    ColsumSlice actColsum_, gateColsum_;  // W4A8: their colsums
    AscendC::TQue<AscendC::TPosition::VECOUT, 2> outQue_;
    ScaleStager yScales_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> sBuf_, gateBuf_, expBuf_, absBuf_, halfBuf_, workBuf_, reduceBuf_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> partBuf_;  // one K group's dequantized partial (kGroups > 1)
    AscendC::TBuf<AscendC::TPosition::VECCALC> rowScaleBuf_;  // units: a block's x_scale values
    AscendC::TQue<AscendC::TPosition::VECIN, 1> groupScales_, groupColsums_;  // units: a piece's slices, every group
    QuantScratch scratch_;
    AscendC::GlobalTensor<int32_t> acc_;
    AscendC::GlobalTensor<float> spill_;
    AscendC::GlobalTensor<float> rowBuf_;  // units: the AI core's fp32 row tile buffer
    bool fromRowBuf_ = false;
    AscendC::GlobalTensor<float> xScale_;
    AscendC::GlobalTensor<float> wScale_;
    AscendC::GlobalTensor<int32_t> colsums_;
    GmmAccView planes_;
    AscendC::GlobalTensor<int8_t> y_;
    AscendC::GlobalTensor<float> yScale_;
};


}  // namespace cam::kernels
