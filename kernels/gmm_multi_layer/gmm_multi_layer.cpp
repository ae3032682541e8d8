// gmm_multi_layer (W2) epilogue on the vector cores: out[m, h] = bf16((float(acc[m, h]) * y_scale[m]) *
// w_scale[l(m)][e(m)][h]), fp32 left to right, both conversions round to nearest even; with an output scale, one more
// fp32 multiply before the bf16 rounding. W4A8 (cube.int4): acc is first recombined from the split's two planes
// (common/gmm_epilogue.h, RunGroup). Rows past the last group are in no block's range, so they are never written.
#include "kernel_operator.h"

#include "common/kernel_frame.h"

#include "common/gmm_epilogue.h"
#include "common/gmm_groups.h"
#include "gmm_multi_layer/gmm_multi_layer.h"

namespace cam::kernels {

class GmmMultiLayerEpilogue {
public:
    __aicore__ inline void Init(GM_ADDR acc, GM_ADDR yScale, GM_ADDR groupList, GM_ADDR layerIndex, GM_ADDR table,
                                GM_ADDR out, GM_ADDR status, const GmmMultiLayerTilingData& t) {
        t_ = t;
        groupList_ = groupList;
        layerIndex_ = layerIndex;
        table_ = table;
        status_ = status;
        const uint64_t elems = uint64_t(t.cube.m) * t.cube.n;
        acc_.SetGlobalBuffer(reinterpret_cast<__gm__ int32_t*>(acc), elems * t.cube.kGroups * GmmAccPlanes(t.cube.int4));
        planes_ = {acc_, elems, t.cube.int4};
        yScale_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(yScale), t.cube.m);
        out_.SetGlobalBuffer(reinterpret_cast<__gm__ bfloat16_t*>(out), elems);
        dequant_.Init(pipe_, t.chunk);
        scale_.Init(pipe_, t.chunk);
        if (t.cube.int4) colsum_.Init(pipe_, t.chunk);
        pipe_.InitBuffer(rowBuf_, UbBytes(uint64_t(t.chunk) * 4));
        pipe_.InitBuffer(outQue_, 2, UbBytes(uint64_t(t.chunk) * 2));
        if (t.cube.kGroups > 1) pipe_.InitBuffer(partBuf_, UbBytes(uint64_t(t.chunk) * 4));
    }

    __aicore__ inline void Process() {
        GmmDeviceArgs args;
        const GmmCubeTilingData& c = t_.cube;
        if (!GmmPrePass(layerIndex_, groupList_, c.experts, c.groups, c.layers, c.groupListType, c.m, status_, &args))
            return;
        const uint64_t block = AscendC::GetBlockIdx(), blocks = t_.blockDim;
        const uint64_t rowBegin = args.total * block / blocks, rowEnd = args.total * (block + 1) / blocks;
        GroupCursor groups;
        groups.Init(groupList_, c.groups, c.groupListType, args.layer);
        groups.Next();
        for (uint64_t row = rowBegin; row < rowEnd; ++row) {
            while (row >= groups.End() && groups.Next()) {
            }  // rows < total always have a group
            UseLayer(groups.Layer());
            const float ys = yScale_.GetValue(row);
            for (uint32_t col = 0; col < c.n; col += t_.chunk) {
                const uint32_t len = c.n - col < t_.chunk ? c.n - col : t_.chunk;
                Chunk(row, groups.Layer(), groups.Expert(), col, len, ys);
            }
        }
        scale_.Release();
        colsum_.Release();
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

    __aicore__ inline void Chunk(uint64_t row, uint32_t layer, uint32_t expert, uint32_t col, uint32_t len,
                                 float ys) {
        const uint64_t off = row * t_.cube.n + col;
        AscendC::LocalTensor<float> f = rowBuf_.Get<float>();
        // Per-group scales ([E, G, N]): each group's partial dequantized with its own slice, then summed in group
        // order (docs/gmm.md §9.2); one group is the per-channel case.
        const uint32_t groups = t_.cube.kGroups;
        for (uint32_t g = 0; g < groups; ++g) {
            AscendC::LocalTensor<float> part = g == 0 ? f : partBuf_.Get<float>();
            const AscendC::LocalTensor<int32_t>* cs =
                t_.cube.int4 ? &colsum_.Get(colsums_, t_.cube.n, layer, expert * groups + g, col, len) : nullptr;
            dequant_.RunGroup(planes_, off, g, cs, scale_.Get(wScale_, t_.cube.n, layer, expert * groups + g, col, len),
                              len, ys, part);
            if (g > 0) AscendC::Add(f, f, part, len);
        }
        if (t_.outScaled) AscendC::Muls(f, f, t_.outScale, len);

        AscendC::LocalTensor<bfloat16_t> o = outQue_.AllocTensor<bfloat16_t>();
        AscendC::Cast(o, f, AscendC::RoundMode::CAST_RINT, len);
        outQue_.EnQue(o);
        o = outQue_.DeQue<bfloat16_t>();
        AscendC::DataCopyPad(out_[off], o, {1, len * 2u, 0, 0, 0});
        outQue_.FreeTensor(o);
    }

    GmmMultiLayerTilingData t_{};
    int64_t wLayer_ = -1;  // the layer wScale_ points at
    GM_ADDR groupList_ = nullptr;
    GM_ADDR layerIndex_ = nullptr;
    GM_ADDR table_ = nullptr;
    GM_ADDR status_ = nullptr;
    AscendC::TPipe pipe_;
    DequantStep dequant_;
    ScaleSlice scale_;  // w_scale of the current expert, kept while its rows stream through
    ColsumSlice colsum_;  // W4A8: the current expert's colsums
    AscendC::TQue<AscendC::TPosition::VECOUT, 2> outQue_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> rowBuf_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> partBuf_;  // one group's dequantized partial (kGroups > 1)
    AscendC::GlobalTensor<int32_t> acc_;
    AscendC::GlobalTensor<float> yScale_;
    AscendC::GlobalTensor<float> wScale_;
    AscendC::GlobalTensor<int32_t> colsums_;
    GmmAccView planes_;
    AscendC::GlobalTensor<bfloat16_t> out_;
};

}  // namespace cam::kernels

extern "C" __global__ __aicore__ void cam_gmm_multi_layer_epilogue(GM_ADDR acc, GM_ADDR yScale, GM_ADDR groupList,
                                                                   GM_ADDR layerIndex, GM_ADDR table, GM_ADDR out,
                                                                   GM_ADDR status,
                                                                   cam::kernels::GmmMultiLayerTilingData tiling) {
    cam::kernels::GmmMultiLayerEpilogue op;
    static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
    op.Init(acc, yScale, groupList, layerIndex, table, out, status, tiling);
    op.Process();
}

#include "common/launch.h"

void cam::kernels::LaunchGmmMultiLayerEpilogue(uint32_t blockDim, void* stream, uint8_t* acc, uint8_t* yScale,
                                               uint8_t* groupList, uint8_t* layerIndex, uint8_t* table, uint8_t* out,
                                               uint8_t* status, const GmmMultiLayerTilingData& tiling) {
    CAM_KERNEL_LAUNCH(cam_gmm_multi_layer_epilogue, blockDim, stream, acc, yScale, groupList, layerIndex, table, out,
                      status, tiling);
}
