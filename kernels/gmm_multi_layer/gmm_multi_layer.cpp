// gmm_multi_layer (W2): out[m, h] = bf16((float(acc[m, h]) * y_scale[m]) * w_scale[l(m)][e(m)][h]), fp32 left to
// right, both conversions round to nearest even; with an output scale, one more fp32 multiply before the bf16
// rounding; with K groups, each group's partial dequantized with its own slice, added in group order.
// One mixed kernel (KERNEL_TYPE_MIX_AIC_1_2, docs/gmm.md §5): each AI core's cube core computes one unit (tm rows of
// one group, one tn-wide n-tile) at a time into its GM ring and sets "full"; its two vector cores wait for it, run
// the block epilogue over half the unit's rows each (one strided copy in, the dequant in UB, one strided copy out)
// and set "free"; the cube computes the next unit meanwhile. W4A8 (cube.int4, docs/gmm.md §9): x arrives split into
// int4 hi / lo planes (the gmm_split_int4 launch before this one), the cube's unit is the group's two int32 planes,
// and the block epilogue recombines them (GmmRecombineInt4) before the same dequant. Rows past the last group are
// never written.
#include "kernel_operator.h"

#include "common/kernel_frame.h"

#include "common/gmm_cube.h"
#include "common/gmm_epilogue.h"
#include "common/gmm_groups.h"
#include "common/gmm_ring.h"
#include "gmm_multi_layer/gmm_multi_layer.h"

namespace cam::kernels {

// The per-layer tensors W2's vector side reads through the address table: w_scale [E, G, N] of the current layer
// (bounded by the pre-pass), and with W4A8 the layer's colsums [E, G, N], which follow the scales in the table;
// switched only when a group's layer differs.
class GmmLayerScales {
public:
    __aicore__ inline void Init(GM_ADDR table, const GmmCubeTilingData& c) {
        table_ = table;
        layers_ = c.layers;
        elems_ = uint64_t(c.experts) * c.kGroups * c.n;
        int4_ = c.int4 != 0;
    }
    __aicore__ inline void Use(uint32_t layer) {
        if (layer_ == int64_t(layer)) return;
        wScale_.SetGlobalBuffer(LayerAddress<float>(table_, layers_ + layer), elems_);
        if (int4_) colsums_.SetGlobalBuffer(LayerAddress<int32_t>(table_, 2 * layers_ + layer), elems_);
        layer_ = layer;
    }

    __aicore__ inline const AscendC::GlobalTensor<float>& WScale() const { return wScale_; }
    __aicore__ inline const AscendC::GlobalTensor<int32_t>& Colsums() const { return colsums_; }

private:
    AscendC::GlobalTensor<float> wScale_;
    AscendC::GlobalTensor<int32_t> colsums_;
    GM_ADDR table_ = nullptr;
    uint32_t layers_ = 0;
    uint64_t elems_ = 0;
    bool int4_ = false;
    int64_t layer_ = -1;  // the layer the tensors point at
};

class GmmMultiLayerCube : public GmmMixedCube<GmmMultiLayerCube, GmmTileUnits> {
public:
    // GmmMixedCube's hooks: the walker from the accepted layer, and the n-th unit into its slot.
    __aicore__ inline void Start(int64_t layer) {
        units_.Init(groupList_, c_->groups, c_->groupListType, layer, c_->tm, c_->nTiles, core_, c_->blockDim);
    }
    __aicore__ inline void Compute(uint32_t n) {
        // The unit alone in its slot, rows tn apart (GmmMultiLayerSlotBytes).
        cube_.UseSlot(GmmRingSlot(ring_, GmmMultiLayerSlotBytes(*c_), core_, n), units_.Row0(),
                      units_.NTile() * c_->tn, c_->tn);
        cube_.ComputeTile(units_.Layer(), units_.Expert(), units_.Row0(), units_.Rows(), units_.NTile());
    }
};

// The vector side: per unit, this vector core's half of its rows (core 0 the first ceil(rows/2), core 1 the rest) in
// blocks of at most blockRows rows: the block dequant (DequantBlock; W4A8 recombines each K group's hi and lo planes
// first, RunInt4), K groups added in order, the output scale, the bf16 Cast over the block and one strided copy into
// out.
class GmmMultiLayerVector {
public:
    __aicore__ inline void Run(GM_ADDR yScale, GM_ADDR groupList, GM_ADDR layerIndex, GM_ADDR table, GM_ADDR ring,
                               GM_ADDR out, GM_ADDR status, const GmmMultiLayerTilingData& t) {
        t_ = t;
        layerScales_.Init(table, t.cube);
        const GmmCubeTilingData& c = t.cube;
        yScale_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(yScale), c.m);
        out_.SetGlobalBuffer(reinterpret_cast<__gm__ bfloat16_t*>(out), uint64_t(c.m) * c.n);
        block_.Init(pipe_, t.blockRows, t.pitch);
        scale_.Init(pipe_, t.pitch);
        if (c.int4) colsum_.Init(pipe_, t.pitch);
        pipe_.InitBuffer(fBuf_, UbBytes(uint64_t(t.blockRows) * t.pitch * 4));
        if (c.kGroups > 1) pipe_.InitBuffer(partBuf_, UbBytes(uint64_t(t.blockRows) * t.pitch * 4));
        pipe_.InitBuffer(outQue_, 2, UbBytes(uint64_t(t.blockRows) * t.pitch * 2));
        pipe_.InitBuffer(rowScaleBuf_, UbBytes(uint64_t(c.tm) * 4));
        GmmDeviceArgs args;
        if (!GmmPrePass(layerIndex, groupList, c.experts, c.groups, c.layers, c.groupListType, c.m, status, &args,
                        false))
            return;
        const uint32_t ratio = static_cast<uint32_t>(AscendC::GetTaskRation());
        const uint32_t core = static_cast<uint32_t>(AscendC::GetBlockIdx()) / ratio;
        const uint32_t sub = static_cast<uint32_t>(AscendC::GetBlockIdx()) % ratio;
        GmmTileUnits units;
        units.Init(groupList, c.groups, c.groupListType, args.layer, c.tm, c.nTiles, core, c.blockDim);
        AscendC::LocalTensor<float> rs = rowScaleBuf_.Get<float>();
        uint32_t begin = 0, count = 0;
        for (uint32_t n = 0; units.Next(); ++n) {
            if (units.First()) {
                const uint32_t rows = units.Rows(), first = (rows + 1) / 2;
                begin = sub == 0 ? 0 : first;
                count = sub == 0 ? first : rows - first;
                layerScales_.Use(units.Layer());
                // The rows' scales, read once per run of a row tile and kept in UB for its n-tiles.
                for (uint32_t r = 0; r < count; ++r) rs.SetValue(r, yScale_.GetValue(units.Row0() + begin + r));
            }
            GmmRingWaitFull();
            const uint32_t col = units.NTile() * c.tn, len = c.n - col < c.tn ? c.n - col : c.tn;
            GM_ADDR slot = GmmRingSlot(ring, GmmMultiLayerSlotBytes(c), core, n);
            acc_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(slot),
                                 uint64_t(c.kGroups) * GmmAccPlanes(c.int4) * c.tm * c.tn);
            for (uint32_t r0 = 0; r0 < count; r0 += t.blockRows) {
                const uint32_t b = count - r0 < t.blockRows ? count - r0 : t.blockRows;
                Block(units.Layer(), units.Expert(), begin + r0, units.Row0() + begin + r0, b, col, len, rs[r0]);
            }
            // After the unit's last copy-out, which comes after every read of the slot.
            GmmRingRelease();
        }
        scale_.Release();
        colsum_.Release();
    }

private:
    // out rows [row, row + rows) x columns [col, col + len) from the slot's rows [slotRow, slotRow + rows).
    __aicore__ inline void Block(uint32_t layer, uint32_t expert, uint32_t slotRow, uint64_t row, uint32_t rows,
                                 uint32_t col, uint32_t len, const AscendC::LocalTensor<float>& rs) {
        const GmmCubeTilingData& c = t_.cube;
        const uint32_t pitch = t_.pitch, elems = rows * pitch;
        const GmmAccView unit{acc_, uint64_t(c.tm) * c.tn, c.int4};  // the unit's slot: rows tn apart
        AscendC::LocalTensor<float> f = fBuf_.Get<float>();
        for (uint32_t g = 0; g < c.kGroups; ++g) {
            AscendC::LocalTensor<float> part = g == 0 ? f : partBuf_.Get<float>();
            const uint32_t slice = expert * c.kGroups + g;
            const AscendC::LocalTensor<float>& ws = scale_.Get(layerScales_.WScale(), c.n, layer, slice, col, len);
            const AscendC::LocalTensor<int32_t>* cs =
                c.int4 ? &colsum_.Get(layerScales_.Colsums(), c.n, layer, slice, col, len) : nullptr;
            block_.RunGroup(unit, uint64_t(slotRow) * c.tn, g, c.tn, rows, len, pitch, rs, cs, ws, part);
            if (g > 0) AscendC::Add(f, f, part, elems);
        }
        if (t_.outScaled) AscendC::Muls(f, f, t_.outScale, elems);
        AscendC::LocalTensor<bfloat16_t> o = outQue_.AllocTensor<bfloat16_t>();
        AscendC::Cast(o, f, AscendC::RoundMode::CAST_RINT, elems);
        outQue_.EnQue(o);
        o = outQue_.DeQue<bfloat16_t>();
        // UB -> GM: srcStride the UB gap in 32-byte blocks, dstStride the GM gap in bytes.
        const uint32_t rowBytes = len * 2u;
        AscendC::DataCopyPad(out_[row * c.n + col], o,
                             {static_cast<uint16_t>(rows), rowBytes,
                              (pitch * 2u - static_cast<uint32_t>(AlignUp(rowBytes, kUbBlockBytes))) / kUbBlockBytes,
                              (c.n - len) * 2u, 0});
        outQue_.FreeTensor(o);
    }

    GmmMultiLayerTilingData t_{};
    GmmLayerScales layerScales_;
    AscendC::TPipe pipe_;
    DequantBlock block_;
    ScaleSlice scale_;
    ColsumSlice colsum_;  // W4A8: the group's colsums of these columns
    AscendC::TBuf<AscendC::TPosition::VECCALC> fBuf_, partBuf_, rowScaleBuf_;
    AscendC::TQue<AscendC::TPosition::VECOUT, 2> outQue_;
    AscendC::GlobalTensor<int32_t> acc_;
    AscendC::GlobalTensor<float> yScale_;
    AscendC::GlobalTensor<bfloat16_t> out_;
};

}  // namespace cam::kernels

extern "C" __global__ __aicore__ void cam_gmm_multi_layer(GM_ADDR x, GM_ADDR yScale, GM_ADDR groupList,
                                                          GM_ADDR layerIndex, GM_ADDR table, GM_ADDR ring,
                                                          GM_ADDR out, GM_ADDR status,
                                                          cam::kernels::GmmMultiLayerTilingData tiling) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    if ASCEND_IS_AIC {
        cam::kernels::GmmMultiLayerCube op;
        static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
        op.Run(x, groupList, layerIndex, table, ring, status, tiling.cube);
    } else {
        cam::kernels::GmmMultiLayerVector op;
        static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
        op.Run(yScale, groupList, layerIndex, table, ring, out, status, tiling);
    }
}

#include "common/launch.h"

void cam::kernels::LaunchGmmMultiLayer(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* yScale,
                                       uint8_t* groupList, uint8_t* layerIndex, uint8_t* table, uint8_t* ring,
                                       uint8_t* out, uint8_t* status, const GmmMultiLayerTilingData& tiling) {
    CAM_KERNEL_LAUNCH(cam_gmm_multi_layer, blockDim, stream, x, yScale, groupList, layerIndex, table, ring, out, status,
                      tiling);
}
