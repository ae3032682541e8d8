// The cube half of the layer-select grouped matmuls (W1 and W2): acc[m, :] = x[m, :] . W[l(m)][e(m)] in int32 on an
// AIC core, for every row of every group; each group's weights come from its own layer's entry of the address
// table. GM -> L1 (x: ND -> NZ copy; W: already FRACTAL_NZ, burst copy) -> L0A (LoadData) / L0B
// (LoadDataWithTranspose) -> Mmad -> L0C -> Fixpipe (NZ -> ND) into an int32 accumulator: a small per-core ring slot
// that the same mixed kernel's vector cores read after a cross-core flag, holding a whole row tile (tm x N, W1 per
// output channel) or one unit (tm x tn: W2, and W1 with scale groups along K) (UseSlot; both formats).
// W4A8 (tiling int4, docs/gmm.md §9): x arrives split into int4 hi / lo planes (kernels/gmm_split_int4), the weights
// are packed int4 ZN fractals; only the inner tile loop differs (ComputeUnitInt4): a unit's A tile is its hi rows
// then its lo rows (2·mAl rows), one int4 x int4 Mmad per k step fills both row planes of L0C, and Fixpipe stores
// them as the group's two int32 planes, which the epilogue recombines (16·hi + lo + 8·colsum).
#pragma once

#include "kernel_operator.h"

#include "common/gmm_cube_tiling_data.h"
#include "common/gmm_groups.h"

namespace cam::kernels {

// The cube half of W1's and W2's mixed kernels, for both weight formats (int8 NZ: ComputeUnit; packed int4 on the
// split activation: ComputeUnitInt4).
class GmmCube {
public:
    // The accumulator is given per unit (UseSlot).
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR table, const GmmCubeTilingData& t) {
        t_ = t;
        table_ = table;
        if (t.int4) {
            InitInt4(x);
            return;
        }
        x_.SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(x), uint64_t(t.m) * t.k);
        if (t.aResident)
            pipe_.InitBuffer(aRes_, 1, t.tm * static_cast<uint32_t>(AlignUp(t.k, kGmmK0)));
        else
            pipe_.InitBuffer(a1_, kGmmL1Buffers, t.tm * t.tk1a);
        pipe_.InitBuffer(b1_, kGmmL1Buffers, t.tk1 * t.tn);
        pipe_.InitBuffer(a2_, kGmmL1Buffers, t.tm * t.tk);
        pipe_.InitBuffer(b2_, kGmmL1Buffers, t.tk * t.tn);
        pipe_.InitBuffer(c_, 1, t.tm * t.tn * 4);
    }

    // The accumulator of the rows [row0, row0 + tm) x the columns [col0, col0 + width) alone (a mixed kernel's
    // workspace slot): K group g's partial of element (r, c) lands at slot[g * tm * width + (r - row0) * width +
    // (c - col0)], the int4 planes tm * width apart. A whole row tile: col0 0, width N; one unit: its n-tile's
    // first column, width tn.
    __aicore__ inline void UseSlot(GM_ADDR slot, uint64_t row0, uint32_t col0, uint32_t width) {
        accPlane_ = uint64_t(t_.tm) * width;
        accRow0_ = row0;
        accCol0_ = col0;
        accWidth_ = width;
        acc_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(slot),
                             uint64_t(t_.kGroups) * GmmAccPlanes(t_.int4) * accPlane_);
    }

    // Every n-tile of the rows [row0, row0 + mLen) of `expert` of `layer`, in column order; with x streamed the
    // n-tiles walk K in alternate directions, so each starts on the A chunk the one before ended on (one copy of x
    // fewer per n-tile).
    __aicore__ inline void ComputeRows(uint32_t layer, uint32_t expert, uint64_t row0, uint32_t mLen) {
        const uint64_t expertBytes = ExpertBytes();
        UseLayer(layer, expertBytes);
        for (uint32_t nt = 0; nt < t_.nTiles; ++nt) {
            if (t_.int4)
                ComputeUnitInt4(expert, row0, mLen, nt, expertBytes);
            else
                ComputeUnit(expert, row0, mLen, nt, expertBytes, !t_.aResident && nt % 2 == 1);
        }
    }

    // Gives the resident A, or the last streamed A chunk, back to its queue (before the kernel ends).
    __aicore__ inline void Finish() {
        if (aHeld_) aRes_.FreeTensor(aHeldTensor_);
        if (aHeld4_) aRes_.FreeTensor(aHeld4Tensor_);
        if (aStream_) a1_.FreeTensor(aStreamTensor_);
        aHeld_ = false;
        aHeld4_ = false;
        aStream_ = false;
    }

    __aicore__ inline uint64_t ExpertBytes() const {
        return t_.int4 ? GmmExpertWeightBytesInt4(t_.kSplit, t_.wNBlocks) : GmmExpertWeightBytes(t_.kPadded, t_.nBlocks);
    }

private:
    // w_ = the weights of `layer` (bounded by the pre-pass), switched only when a group's layer differs.
    __aicore__ inline void UseLayer(uint32_t layer, uint64_t expertBytes) {
        if (wLayer_ == int64_t(layer)) return;
        if (t_.int4)
            w4_.SetGlobalBuffer(LayerAddress<int4b_t>(table_, layer), 2 * expertBytes * t_.experts);
        else
            w_.SetGlobalBuffer(LayerAddress<int8_t>(table_, layer), expertBytes * t_.experts);
        wLayer_ = layer;
    }

    // int4: x is the split activation, two planes of M rows x kSplit int4 (hi, then lo); A tiles hold 2·tm rows.
    __aicore__ inline void InitInt4(GM_ADDR x) {
        const uint64_t plane = uint64_t(t_.m) * t_.kSplit;
        x4_.SetGlobalBuffer(reinterpret_cast<__gm__ int4b_t*>(x), kGmmInt4Planes * plane);
        // Byte counts: 2·tm int4 rows of tk are the bytes of tm int8 rows; a B tile is tk x tn int4.
        if (t_.aResident)
            pipe_.InitBuffer(aRes_, 1, t_.tm * t_.kSplit);
        else
            pipe_.InitBuffer(a1_, kGmmL1Buffers, t_.tm * t_.tk);
        pipe_.InitBuffer(b1_, kGmmL1Buffers, t_.tk * t_.tn / 2);
        pipe_.InitBuffer(a2_, kGmmL1Buffers, t_.tm * t_.tk);
        pipe_.InitBuffer(b2_, kGmmL1Buffers, t_.tk * t_.tn / 2);
        pipe_.InitBuffer(c_, 1, kGmmInt4Planes * t_.tm * t_.tn * 4);
    }

    // ND -> NZ copy of the hi and lo rows [row0, row0 + mLen) x [k0, k0 + kLen) into one A tile: 64-element column
    // blocks of 2·mAl rows, the hi rows at row 0, the lo rows at row mAl.
    __aicore__ inline void SplitToNz(const AscendC::LocalTensor<int4b_t>& a, uint64_t row0, uint32_t mLen,
                                     uint32_t mAl, uint32_t k0, uint32_t kLen) {
        AscendC::Nd2NzParams nd;
        nd.ndNum = 1;
        nd.nValue = static_cast<uint16_t>(mLen);
        nd.dValue = static_cast<uint16_t>(kLen);
        nd.srcNdMatrixStride = 0;
        nd.srcDValue = static_cast<uint16_t>(t_.kSplit);
        nd.dstNzC0Stride = static_cast<uint16_t>(2 * mAl);
        nd.dstNzNStride = 1;
        nd.dstNzMatrixStride = 0;
        const uint64_t plane = uint64_t(t_.m) * t_.kSplit;
        AscendC::DataCopy(a, x4_[row0 * t_.kSplit + k0], nd);
        AscendC::DataCopy(a[mAl * kGmmK0Int4], x4_[plane + row0 * t_.kSplit + k0], nd);
    }

    // int4 twin of HoldA: the unit's hi and lo rows over all of kSplit stay in L1 for the units of the same rows.
    __aicore__ inline void HoldAInt4(uint64_t row0, uint32_t mLen, uint32_t mAl) {
        if (aHeld4_ && aRow0_ == row0 && aRows_ == mLen) return;
        if (aHeld4_) aRes_.FreeTensor(aHeld4Tensor_);
        AscendC::LocalTensor<int4b_t> a = aRes_.AllocTensor<int4b_t>();
        SplitToNz(a, row0, mLen, mAl, 0, t_.kSplit);
        aRes_.EnQue(a);
        aHeld4Tensor_ = aRes_.DeQue<int4b_t>();
        aHeld4_ = true;
        aRow0_ = row0;
        aRows_ = mLen;
    }

    // The W4A8 inner tile loop: per k step (a multiple of 64, never straddling a K group), A = the unit's hi and lo
    // rows (2·mAl), B = the packed weight fractals of the step (burst copy, then LoadData: no int4 transpose), one
    // int4 x int4 Mmad into both row planes of C; each K group leaves through StoreCInt4 as two int32 planes.
    __aicore__ inline void ComputeUnitInt4(uint32_t expert, uint64_t row0, uint32_t mLen, uint32_t nt,
                                           uint64_t expertBytes) {
        const uint32_t n0 = nt * t_.tn;
        const uint32_t nLen = t_.n - n0 < t_.tn ? t_.n - n0 : t_.tn;
        const uint32_t nBlk = static_cast<uint32_t>(CeilDiv(nLen, kGmmN0Int4));
        const uint32_t nAl = nBlk * kGmmN0Int4;
        const uint32_t mAl = static_cast<uint32_t>(AlignUp(mLen, kGmmM0));
        const uint32_t mRows = 2 * mAl;  // hi rows, then lo rows
        // Packed weight offsets in int4 elements: fractal (kb, nb) of the expert at (kb·wNBlocks + nb)·1024.
        const uint64_t wBase = 2 * (expert * expertBytes) + uint64_t(n0 / kGmmN0Int4) * 1024;

        if (t_.aResident) HoldAInt4(row0, mLen, mAl);
        AscendC::LocalTensor<int32_t> c = c_.AllocTensor<int32_t>();
        for (uint32_t k0 = 0; k0 < t_.kSplit; k0 += t_.tk) {
            const uint32_t kLen = t_.kSplit - k0 < t_.tk ? t_.kSplit - k0 : t_.tk;  // a multiple of 64
            const uint32_t kBlk = kLen / kGmmK0Int4;

            AscendC::LocalTensor<int4b_t> a1;
            uint32_t aFrac0 = 0;
            if (t_.aResident) {
                a1 = aHeld4Tensor_;
                aFrac0 = k0 / kGmmK0Int4 * (mRows / kGmmM0);
            } else {
                a1 = a1_.AllocTensor<int4b_t>();
                SplitToNz(a1, row0, mLen, mAl, k0, kLen);
                a1_.EnQue(a1);
            }

            AscendC::LocalTensor<int4b_t> b1 = b1_.AllocTensor<int4b_t>();
            AscendC::DataCopyParams burst;
            burst.blockCount = static_cast<uint16_t>(kBlk);
            burst.blockLen = static_cast<uint16_t>(nBlk * 16);  // 512-byte fractals in 32-byte blocks
            burst.srcStride = static_cast<uint16_t>((t_.wNBlocks - nBlk) * 16);
            burst.dstStride = 0;
            AscendC::DataCopy(b1, w4_[wBase + uint64_t(k0 / kGmmK0Int4) * t_.wNBlocks * 1024], burst);
            b1_.EnQue(b1);

            if (!t_.aResident) a1 = a1_.DeQue<int4b_t>();
            AscendC::LocalTensor<int4b_t> a2 = a2_.AllocTensor<int4b_t>();
            for (uint32_t mb = 0; mb < mRows / kGmmM0; ++mb) {
                AscendC::LoadData2DParams ld;
                ld.startIndex = static_cast<uint16_t>(aFrac0 + mb);
                ld.repeatTimes = static_cast<uint8_t>(kBlk);
                ld.srcStride = static_cast<uint16_t>(mRows / kGmmM0);
                ld.dstGap = 0;
                ld.ifTranspose = false;
                AscendC::LoadData(a2[mb * kLen * kGmmM0], a1, ld);
            }
            a2_.EnQue(a2);
            if (!t_.aResident) a1_.FreeTensor(a1);

            // B is already in L0B's ZN order (kb-major fractals of 64 k x 16 columns): one straight load.
            b1 = b1_.DeQue<int4b_t>();
            AscendC::LocalTensor<int4b_t> b2 = b2_.AllocTensor<int4b_t>();
            AscendC::LoadData2DParams lb;
            lb.startIndex = 0;
            lb.repeatTimes = static_cast<uint8_t>(kBlk * nBlk);
            lb.srcStride = 1;
            lb.dstGap = 0;
            lb.ifTranspose = false;
            AscendC::LoadData(b2, b1, lb);
            b2_.EnQue(b2);
            b1_.FreeTensor(b1);

            a2 = a2_.DeQue<int4b_t>();
            b2 = b2_.DeQue<int4b_t>();
            if (k0 % t_.kGroup != 0 && (mRows / kGmmM0) * (nAl / 16) < 10) AscendC::PipeBarrier<PIPE_M>();
            AscendC::MmadParams mm;
            mm.m = static_cast<uint16_t>(mRows);
            mm.n = static_cast<uint16_t>(nAl);
            mm.k = static_cast<uint16_t>(kLen);
            mm.cmatrixInitVal = k0 % t_.kGroup == 0;
            AscendC::Mmad(c, a2, b2, mm);
            a2_.FreeTensor(a2);
            b2_.FreeTensor(b2);
            const uint32_t kEnd = k0 + kLen;
            if (kEnd % t_.kGroup == 0 && kEnd < t_.kSplit) {
                StoreCInt4(c, kEnd / t_.kGroup - 1, row0, mLen, mAl, n0, nLen);
                c = c_.AllocTensor<int32_t>();
            }
        }
        StoreCInt4(c, t_.kGroups - 1, row0, mLen, mAl, n0, nLen);
    }

    // L0C's two row planes (hi at row 0, lo at row mAl) -> planes (group, 0) and (group, 1) of the workspace.
    __aicore__ inline void StoreCInt4(AscendC::LocalTensor<int32_t>& c, uint32_t group, uint64_t row0, uint32_t mLen,
                                      uint32_t mAl, uint32_t n0, uint32_t nLen) {
        c_.EnQue(c);
        c = c_.DeQue<int32_t>();
        AscendC::FixpipeParamsV220 fp;
        fp.nSize = static_cast<uint16_t>(nLen);
        fp.mSize = static_cast<uint16_t>(mLen);
        fp.srcStride = static_cast<uint16_t>(2 * mAl);
        fp.dstStride = accWidth_;
        const uint64_t plane = accPlane_;
        const uint64_t dst =
            uint64_t(group) * kGmmInt4Planes * plane + (row0 - accRow0_) * accWidth_ + (n0 - accCol0_);
        AscendC::Fixpipe<int32_t, int32_t, AscendC::CFG_ROW_MAJOR>(acc_[dst], c, fp);
        AscendC::Fixpipe<int32_t, int32_t, AscendC::CFG_ROW_MAJOR>(acc_[dst + plane], c[mAl * kGmmM0], fp);
        c_.FreeTensor(c);
    }

    // reverse: K is walked from its end (chunks and steps in reverse order; the int32 sums are the same), so that a
    // unit following one of the same rows starts on the streamed A chunk the other ended on (StreamA).
    __aicore__ inline void ComputeUnit(uint32_t expert, uint64_t row0, uint32_t mLen, uint32_t nt,
                                       uint64_t expertBytes, bool reverse = false) {
        const uint32_t n0 = nt * t_.tn;
        const uint32_t nLen = t_.n - n0 < t_.tn ? t_.n - n0 : t_.tn;
        const uint32_t nBlk = static_cast<uint32_t>(CeilDiv(nLen, kGmmNzCols));
        const uint32_t nAl = nBlk * kGmmNzCols;
        const uint32_t mAl = static_cast<uint32_t>(AlignUp(mLen, kGmmM0));
        const uint64_t wBase = expert * expertBytes + uint64_t(n0 / kGmmNzCols) * t_.kPadded * kGmmNzCols;

        if (t_.aResident) HoldA(row0, mLen, mAl);
        AscendC::LocalTensor<int32_t> c = c_.AllocTensor<int32_t>();
        // L1 takes K in chunks: B in chunks of tk1, A in chunks of tk1a (all of K when resident), both multiples of
        // tk, so a chunk of either starts at an L0 step: one copy per chunk, whose fixed cost per instruction is then
        // shared by the chunk's L0 steps. A's copy pays a burst per row, so its chunks are the longer ones.
        AscendC::LocalTensor<int8_t> a1;
        uint32_t kA0 = 0;  // first k of the A chunk in L1
        if (t_.aResident) a1 = aHeldTensor_;
        const uint32_t bChunks = static_cast<uint32_t>(CeilDiv(t_.k, t_.tk1));
        for (uint32_t bi = 0; bi < bChunks; ++bi) {
            const uint32_t k1 = (reverse ? bChunks - 1 - bi : bi) * t_.tk1;
            const uint32_t kLenC = t_.k - k1 < t_.tk1 ? t_.k - k1 : t_.tk1;
            const uint32_t kAlC = static_cast<uint32_t>(AlignUp(kLenC, kGmmK0));
            // The NZ weight has K padded to 16 only; when the last chunk reaches past it, the missing B rows meet
            // A columns that the ND->NZ copy zero-filled, so they contribute nothing.
            const uint32_t kRowsB = t_.kPadded - k1 < kAlC ? t_.kPadded - k1 : kAlC;

            AscendC::LocalTensor<int8_t> b1 = b1_.AllocTensor<int8_t>();
            AscendC::DataCopyParams burst;
            burst.blockCount = static_cast<uint16_t>(nBlk);
            burst.blockLen = static_cast<uint16_t>(kRowsB);  // one 32-byte row of a column block per k
            burst.srcStride = static_cast<uint16_t>(t_.kPadded - kRowsB);
            burst.dstStride = static_cast<uint16_t>(kAlC - kRowsB);
            AscendC::DataCopy(b1, w_[wBase + uint64_t(k1) * kGmmNzCols], burst);
            b1_.EnQue(b1);
            b1 = b1_.DeQue<int8_t>();

            const uint32_t steps = static_cast<uint32_t>(CeilDiv(kLenC, t_.tk));
            for (uint32_t si = 0; si < steps; ++si) {
                const uint32_t kk = (reverse ? steps - 1 - si : si) * t_.tk;
                const uint32_t k0 = k1 + kk;
                const uint32_t kLen = kLenC - kk < t_.tk ? kLenC - kk : t_.tk;
                const uint32_t kAl = static_cast<uint32_t>(AlignUp(kLen, kGmmK0));
                // Steps never straddle groups (tiling): a group's first and last steps in this walk's order.
                const uint32_t kEnd = k0 + kLen;
                const bool groupFirst = reverse ? kEnd % t_.kGroup == 0 : k0 % t_.kGroup == 0;
                const bool groupLast = reverse ? k0 % t_.kGroup == 0 : kEnd % t_.kGroup == 0;

                // The streamed A chunk (NZ, C0 stride mAl) this step falls in.
                if (!t_.aResident) {
                    StreamA(row0, mLen, mAl, k0 / t_.tk1a);
                    a1 = aStreamTensor_;
                    kA0 = k0 / t_.tk1a * t_.tk1a;
                }

                // A: L1 NZ (column blocks of mAl rows) -> L0A ZZ (row blocks of kAl columns). Fractal (mb, kb) goes
                // from L1 fractal kb·mBlk + mb (kb counted from the A chunk's start) to L0A fractal mb·kBlk + kb. A
                // call has a fixed start-up cost, so the loop runs over the shorter side: one call per m-block (its
                // kBlk fractals mBlk apart in L1) or one per k-block (its mBlk fractals consecutive in L1, kBlk apart
                // in L0A).
                const uint32_t mBlk = mAl / kGmmM0, kBlk = kAl / kGmmK0;
                const uint32_t aStep0 = (k0 - kA0) / kGmmK0 * mBlk;
                AscendC::LocalTensor<int8_t> a2 = a2_.AllocTensor<int8_t>();
                const bool aByK = kBlk < mBlk;
                for (uint32_t i = 0; i < (aByK ? kBlk : mBlk); ++i) {
                    AscendC::LoadData2DParams ld;
                    ld.startIndex = static_cast<uint16_t>(aByK ? aStep0 + i * mBlk : aStep0 + i);
                    ld.repeatTimes = static_cast<uint8_t>(aByK ? mBlk : kBlk);
                    ld.srcStride = static_cast<uint16_t>(aByK ? 1 : mBlk);
                    ld.dstGap = static_cast<uint16_t>(aByK ? kBlk - 1 : 0);
                    ld.ifTranspose = false;
                    AscendC::LoadData(a2[(aByK ? i : i * kBlk) * kGmmM0 * kGmmK0], a1, ld);
                }
                a2_.EnQue(a2);

                // B: L1 NZ (k rows of 32 n) -> L0B ZN (16 n of 32 k per fractal): transpose 32x32 squares. Square
                // (nb, kb) is L1 square nb·(kAlC/32) + kb and lands at L0B fractal kb·(nAl/16) + 2·nb; again over
                // the shorter side: one call per 32-column block (its k squares nAl/16 fractals apart in L0B) or one
                // per k square (its column blocks' squares kAlC/32 apart in L1, side by side in L0B).
                AscendC::LocalTensor<int8_t> b2 = b2_.AllocTensor<int8_t>();
                const bool bByK = kBlk < nBlk;
                for (uint32_t i = 0; i < (bByK ? kBlk : nBlk); ++i) {
                    AscendC::LoadData2dTransposeParams lt;
                    lt.startIndex = static_cast<uint16_t>(bByK ? kk / kGmmK0 + i : i * (kAlC / kGmmK0) + kk / kGmmK0);
                    lt.repeatTimes = static_cast<uint8_t>(bByK ? nBlk : kBlk);
                    lt.srcStride = static_cast<uint16_t>(bByK ? kAlC / kGmmK0 : 1);
                    lt.dstGap = static_cast<uint16_t>(bByK ? 1 : nAl / kGmmM0 - 1);
                    lt.dstFracGap = 0;
                    AscendC::LoadDataWithTranspose(b2[(bByK ? i * (nAl / kGmmM0) : 2 * i) * kGmmM0 * kGmmK0], b1, lt);
                }
                b2_.EnQue(b2);

                a2 = a2_.DeQue<int8_t>();
                b2 = b2_.DeQue<int8_t>();
                // Below (m/16)*(n/16) = 10 the cube does not order this Mmad after the previous one into c.
                if (!groupFirst && (mAl / kGmmM0) * (nAl / 16) < 10) AscendC::PipeBarrier<PIPE_M>();
                AscendC::MmadParams mm;
                // m == 1 would put the cube in GEMV mode, which reads L0A as ND; our A is ZZ, so always pass the
                // padded row count (rows past mLen are computed from padding and never stored).
                mm.m = static_cast<uint16_t>(mAl);
                // L0B holds whole 32-column blocks (the transposing load's granule), so the cube walks nAl columns;
                // the extra ones are never stored.
                mm.n = static_cast<uint16_t>(nAl);
                mm.k = static_cast<uint16_t>(kLen);
                mm.cmatrixInitVal = groupFirst;  // each scale group's partial starts from zero
                AscendC::Mmad(c, a2, b2, mm);
                a2_.FreeTensor(a2);
                b2_.FreeTensor(b2);
                if (groupLast) {
                    StoreC(c, k0 / t_.kGroup, row0, mLen, mAl, n0, nLen, nAl);
                    if (bi + 1 < bChunks || si + 1 < steps) c = c_.AllocTensor<int32_t>();
                }
            }
            b1_.FreeTensor(b1);
        }
        // The streamed A chunk stays in L1 for the next unit (StreamA, Finish).
    }

    // Makes A chunk `chunk` (k from chunk·tk1a, tk1a long) of the rows [row0, row0 + mLen) the streamed chunk in L1:
    // kept when it already is (the previous unit, of the same rows, walked K the other way and ended on it; x is
    // read-only for the kernel, so the rows and the chunk identify the contents), else copied in after the chunk
    // held so far is given back (double buffered: the copy runs while the previous chunk is still being loaded).
    __aicore__ inline void StreamA(uint64_t row0, uint32_t mLen, uint32_t mAl, uint32_t chunk) {
        if (aStream_ && aRow0_ == row0 && aRows_ == mLen && aChunk_ == chunk) return;
        if (aStream_) a1_.FreeTensor(aStreamTensor_);
        const uint32_t kA0 = chunk * t_.tk1a;
        const uint32_t kLenA = t_.k - kA0 < t_.tk1a ? t_.k - kA0 : t_.tk1a;
        aStreamTensor_ = a1_.AllocTensor<int8_t>();
        AscendC::DataCopy(aStreamTensor_, x_[row0 * t_.k + kA0], XToNz(mLen, kLenA, mAl));
        a1_.EnQue(aStreamTensor_);
        aStreamTensor_ = a1_.DeQue<int8_t>();
        aStream_ = true;
        aRow0_ = row0;
        aRows_ = mLen;
        aChunk_ = chunk;
    }

    // L0C -> the int32 partial of K group `group` (the whole sum for per-channel scales), only the valid rows and
    // columns; gives c back to its queue.
    __aicore__ inline void StoreC(AscendC::LocalTensor<int32_t>& c, uint32_t group, uint64_t row0, uint32_t mLen,
                                  uint32_t mAl, uint32_t n0, uint32_t nLen, uint32_t nAl) {
        (void)nAl;
        c_.EnQue(c);
        c = c_.DeQue<int32_t>();
        AscendC::FixpipeParamsV220 fp;
        fp.nSize = static_cast<uint16_t>(nLen);
        fp.mSize = static_cast<uint16_t>(mLen);
        fp.srcStride = static_cast<uint16_t>(mAl);
        fp.dstStride = accWidth_;
        AscendC::Fixpipe<int32_t, int32_t, AscendC::CFG_ROW_MAJOR>(
            acc_[uint64_t(group) * accPlane_ + (row0 - accRow0_) * accWidth_ + (n0 - accCol0_)], c, fp);
        c_.FreeTensor(c);
    }

    // ND -> NZ copy of mLen x rows of kLen columns (row pitch K) into 32-byte column blocks mAl rows apart.
    __aicore__ inline AscendC::Nd2NzParams XToNz(uint32_t mLen, uint32_t kLen, uint32_t mAl) const {
        AscendC::Nd2NzParams nd2nz;
        nd2nz.ndNum = 1;
        nd2nz.nValue = static_cast<uint16_t>(mLen);
        nd2nz.dValue = static_cast<uint16_t>(kLen);
        nd2nz.srcNdMatrixStride = 0;
        nd2nz.srcDValue = static_cast<uint16_t>(t_.k);
        nd2nz.dstNzC0Stride = static_cast<uint16_t>(mAl);
        nd2nz.dstNzNStride = 1;
        nd2nz.dstNzMatrixStride = 0;
        return nd2nz;
    }

    // Makes x rows [row0, row0 + mLen) x all of K the resident A in L1. A core's consecutive units are mostly the
    // n-tiles of one m-tile, so this copies each m-tile in once per core instead of once per unit; x is read-only
    // for the kernel, so the rows identify the contents.
    __aicore__ inline void HoldA(uint64_t row0, uint32_t mLen, uint32_t mAl) {
        if (aHeld_ && aRow0_ == row0 && aRows_ == mLen) return;
        if (aHeld_) aRes_.FreeTensor(aHeldTensor_);
        AscendC::LocalTensor<int8_t> a = aRes_.AllocTensor<int8_t>();
        AscendC::DataCopy(a, x_[row0 * t_.k], XToNz(mLen, t_.k, mAl));
        aRes_.EnQue(a);
        aHeldTensor_ = aRes_.DeQue<int8_t>();
        aHeld_ = true;
        aRow0_ = row0;
        aRows_ = mLen;
    }

    GmmCubeTilingData t_{};
    int64_t wLayer_ = -1;  // the layer w_ points at
    GM_ADDR table_ = nullptr;
    AscendC::TPipe pipe_;
    AscendC::TQue<AscendC::TPosition::A1, kGmmL1Buffers> a1_;  // streamed A tiles (aResident == 0)
    AscendC::TQue<AscendC::TPosition::A1, 1> aRes_;            // resident A (aResident == 1)
    AscendC::LocalTensor<int8_t> aHeldTensor_;
    bool aHeld_ = false;
    uint64_t aRow0_ = 0;  // the rows held (resident A, or the streamed chunk)
    uint32_t aRows_ = 0;
    AscendC::LocalTensor<int8_t> aStreamTensor_;  // the streamed A chunk kept across units (aResident == 0)
    bool aStream_ = false;
    uint32_t aChunk_ = 0;
    AscendC::TQue<AscendC::TPosition::B1, kGmmL1Buffers> b1_;
    AscendC::TQue<AscendC::TPosition::A2, kGmmL1Buffers> a2_;
    AscendC::TQue<AscendC::TPosition::B2, kGmmL1Buffers> b2_;
    AscendC::TQue<AscendC::TPosition::CO1, 1> c_;
    AscendC::LocalTensor<int4b_t> aHeld4Tensor_;  // resident split A (int4)
    bool aHeld4_ = false;
    AscendC::GlobalTensor<int8_t> x_;
    AscendC::GlobalTensor<int8_t> w_;
    AscendC::GlobalTensor<int4b_t> x4_;  // int4: the split activation's hi and lo planes
    AscendC::GlobalTensor<int4b_t> w4_;  // int4: the current layer's packed weights
    AscendC::GlobalTensor<int32_t> acc_;
    uint64_t accPlane_ = 0;  // elements of one accumulator plane: tm * width of the slot
    uint64_t accRow0_ = 0;   // the first row the slot holds
    uint32_t accCol0_ = 0;   // the first column the slot holds
    uint32_t accWidth_ = 0;  // the slot's row stride, elements: N (a whole row tile) or tn (one unit)

public:
    // One unit: n-tile nt of the rows [row0, row0 + mLen) of `expert` of `layer` (a mixed kernel that hands each
    // unit to its vector cores on its own). alternate: the core's consecutive units are the n-tiles of one row tile
    // in order (W1), so with x streamed the odd n-tiles walk K backwards as ComputeRows does.
    __aicore__ inline void ComputeTile(uint32_t layer, uint32_t expert, uint64_t row0, uint32_t mLen, uint32_t nt,
                                       bool alternate = false) {
        const uint64_t expertBytes = ExpertBytes();
        UseLayer(layer, expertBytes);
        if (t_.int4)
            ComputeUnitInt4(expert, row0, mLen, nt, expertBytes);
        else
            ComputeUnit(expert, row0, mLen, nt, expertBytes, alternate && !t_.aResident && nt % 2 == 1);
    }
};


}  // namespace cam::kernels
