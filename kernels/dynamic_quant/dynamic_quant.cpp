// dynamic_quant: x [rows, cols] bf16/fp16 -> q int8 [rows, cols], scale fp32 [rows]. Vector cores only.
#include "kernel_operator.h"

#include "common/kernel_frame.h"

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

        quant_.Init(pipe_, t.colsPerPass);
        scales_.Init(pipe_, kDynamicQuantScaleBatch);
    }

    __aicore__ inline void Process() {
        for (uint32_t row = rowBegin_; row < rowEnd_; ++row) {
            scales_.Add(scale_, row, QuantizeRow(row), row + 1 == rowEnd_);
        }
    }

private:
    // Device code takes no lambdas (bisheng needs every callee to be __aicore__): small functors instead.
    struct LoadChunk {
        DynamicQuant* op;
        uint64_t rowOffset;
        __aicore__ inline void operator()(uint32_t col, uint32_t n, const AscendC::LocalTensor<float>& xf) const {
            op->quant_.LoadWidened(op->x_[rowOffset + col], n, xf);
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
        return QuantizeRowInPasses(tiling_.cols, tiling_.colsPerPass, quant_.Row(), quant_.Scratch(),
                                   LoadChunk{this, rowOffset}, StoreRowChunk{this, rowOffset})
            .scale;
    }

    __aicore__ inline void StoreChunk(uint64_t offset, uint32_t n, const AscendC::LocalTensor<float>& xf,
                                      const QuantParams& p) {
        AscendC::LocalTensor<int8_t> out = quant_.Quantize(xf, n, p);
        AscendC::DataCopyPad(q_[offset], out, {1, n, 0, 0, 0});
        quant_.FreeOut(out);
    }

    DynamicQuantTilingData tiling_{};
    uint32_t rowBegin_ = 0;
    uint32_t rowEnd_ = 0;
    AscendC::TPipe pipe_;
    QuantWorkingSet<T> quant_;
    ScaleStager scales_;
    AscendC::GlobalTensor<T> x_;
    AscendC::GlobalTensor<int8_t> q_;
    AscendC::GlobalTensor<float> scale_;
};

}  // namespace cam::kernels

extern "C" __global__ __aicore__ void cam_dynamic_quant(GM_ADDR x, GM_ADDR q, GM_ADDR scale,
                                                        cam::kernels::DynamicQuantTilingData tiling) {
    if (tiling.key == cam::kernels::kDynamicQuantBf16) {
        cam::kernels::DynamicQuant<bfloat16_t> op;
        static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
        op.Init(x, q, scale, tiling);
        op.Process();
    } else {
        cam::kernels::DynamicQuant<half> op;
        static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
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
