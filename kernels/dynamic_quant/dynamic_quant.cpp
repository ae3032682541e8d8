// dynamic_quant: x [rows, cols] bf16/fp16 -> q int8 [rows, cols], scale fp32 [rows]. Vector cores only.
#include "kernel_operator.h"

#include "common/quant.h"
#include "dynamic_quant/dynamic_quant_tiling_data.h"

namespace cam::kernels {

template <typename T>
class DynamicQuant {
public:
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR q, GM_ADDR scale, const DynamicQuantTilingData& t) {
        tiling_ = t;
        const uint32_t block = static_cast<uint32_t>(AscendC::GetBlockIdx());
        rowBegin_ = block * t.rowsPerBlock + (block < t.rowsRemainder ? block : t.rowsRemainder);
        rowEnd_ = rowBegin_ + t.rowsPerBlock + (block < t.rowsRemainder ? 1 : 0);
        const uint64_t elems = uint64_t(t.rows) * t.cols;
        x_.SetGlobalBuffer(reinterpret_cast<__gm__ T*>(x), elems);
        q_.SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(q), elems);
        scale_.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(scale), t.rows);

        const uint32_t n = t.colsPerPass;
        pipe_.InitBuffer(inQue_, 2, UbBytes(uint64_t(n) * sizeof(T)));
        pipe_.InitBuffer(outQue_, 2, UbBytes(n));
        pipe_.InitBuffer(rowBuf_, UbBytes(uint64_t(n) * 4));
        pipe_.InitBuffer(absBuf_, UbBytes(uint64_t(n) * 4));
        pipe_.InitBuffer(halfBuf_, UbBytes(uint64_t(n) * 2));
        pipe_.InitBuffer(workBuf_, UbBytes(uint64_t(ReduceMaxWorkElems<float>(n)) * 4));
        pipe_.InitBuffer(reduceBuf_, kUbBlockBytes);
        pipe_.InitBuffer(scaleQue_, 1, kDynamicQuantScaleBatch * 4);
        scratch_ = {absBuf_.Get<float>(), halfBuf_.Get<half>(), reduceBuf_.Get<float>(), workBuf_.Get<float>()};
    }

    __aicore__ inline void Process() {
        uint32_t staged = 0;
        uint32_t stageFirstRow = rowBegin_;
        AscendC::LocalTensor<float> scales;
        for (uint32_t row = rowBegin_; row < rowEnd_; ++row) {
            if (staged == 0) {
                scales = scaleQue_.AllocTensor<float>();
                stageFirstRow = row;
            }
            scales.SetValue(staged++, QuantizeRow(row));
            if (staged == kDynamicQuantScaleBatch || row + 1 == rowEnd_) {
                scaleQue_.EnQue(scales);
                scales = scaleQue_.DeQue<float>();
                AscendC::DataCopyPad(scale_[stageFirstRow], scales, {1, staged * 4u, 0, 0, 0});
                scaleQue_.FreeTensor(scales);
                staged = 0;
            }
        }
    }

private:
    // Device code takes no lambdas (bisheng needs every callee to be __aicore__): small functors instead.
    struct LoadChunk {
        DynamicQuant* op;
        uint64_t rowOffset;
        __aicore__ inline void operator()(uint32_t col, uint32_t n, const AscendC::LocalTensor<float>& xf) const {
            LoadWidened(op->inQue_, op->x_[rowOffset + col], n, xf);
        }
    };
    struct StoreRowChunk {
        DynamicQuant* op;
        uint64_t rowOffset;
        __aicore__ inline void operator()(uint32_t col, uint32_t n, const AscendC::LocalTensor<float>& xf,
                                          const QuantParams& p) const {
            op->StoreChunk(rowOffset + col, n, xf, p);
        }
    };

    // Returns the row's scale; writes its q.
    __aicore__ inline float QuantizeRow(uint32_t row) {
        const uint64_t rowOffset = uint64_t(row) * tiling_.cols;
        return QuantizeRowInPasses(tiling_.cols, tiling_.colsPerPass, rowBuf_.Get<float>(), scratch_,
                                   LoadChunk{this, rowOffset}, StoreRowChunk{this, rowOffset})
            .scale;
    }

    __aicore__ inline void StoreChunk(uint64_t offset, uint32_t n, const AscendC::LocalTensor<float>& xf,
                                      const QuantParams& p) {
        AscendC::LocalTensor<int8_t> out = outQue_.AllocTensor<int8_t>();
        QuantizeChunk(out, xf, n, p, scratch_);
        outQue_.EnQue(out);
        out = outQue_.DeQue<int8_t>();
        AscendC::DataCopyPad(q_[offset], out, {1, n, 0, 0, 0});
        outQue_.FreeTensor(out);
    }

    DynamicQuantTilingData tiling_{};
    uint32_t rowBegin_ = 0;
    uint32_t rowEnd_ = 0;
    AscendC::TPipe pipe_;
    AscendC::TQue<AscendC::TPosition::VECIN, 2> inQue_;
    AscendC::TQue<AscendC::TPosition::VECOUT, 2> outQue_;
    AscendC::TQue<AscendC::TPosition::VECOUT, 1> scaleQue_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> rowBuf_, absBuf_, halfBuf_, workBuf_, reduceBuf_;
    QuantScratch scratch_;
    AscendC::GlobalTensor<T> x_;
    AscendC::GlobalTensor<int8_t> q_;
    AscendC::GlobalTensor<float> scale_;
};

}  // namespace cam::kernels

extern "C" __global__ __aicore__ void cam_dynamic_quant(GM_ADDR x, GM_ADDR q, GM_ADDR scale,
                                                        cam::kernels::DynamicQuantTilingData tiling) {
    if (tiling.key == cam::kernels::kDynamicQuantBf16) {
        cam::kernels::DynamicQuant<bfloat16_t> op;
        op.Init(x, q, scale, tiling);
        op.Process();
    } else {
        cam::kernels::DynamicQuant<half> op;
        op.Init(x, q, scale, tiling);
        op.Process();
    }
}

#include "common/launch.h"
#include "dynamic_quant/dynamic_quant.h"

void cam::kernels::LaunchDynamicQuant(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* q, uint8_t* scale,
                                      const DynamicQuantTilingData& tiling) {
    CAM_KERNEL_LAUNCH(cam_dynamic_quant, blockDim, stream, x, q, scale, tiling);
}
