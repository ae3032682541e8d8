// The dequant step both GMM epilogues start with (W1: gmm_swiglu_quant_multi_layer, W2: gmm_multi_layer):
//   dst[0..len) = (float(acc[0..len)) * rowScale) * wScale[0..len)      fp32, left to right (docs/numerics.md)
// It owns the two VECIN queues it streams through; DequantUbBytes (common/ub_math.h) is their byte count.
#pragma once

#include "kernel_operator.h"

#include "common/ub_math.h"

namespace cam::kernels {

class DequantStep {
public:
    __aicore__ inline void Init(AscendC::TPipe& pipe, uint32_t chunk) {
        pipe.InitBuffer(accQue_, 2, UbBytes(uint64_t(chunk) * 4));
        pipe.InitBuffer(scaleQue_, 2, UbBytes(uint64_t(chunk) * 4));
    }

    __aicore__ inline void Run(const AscendC::GlobalTensor<int32_t>& acc, const AscendC::GlobalTensor<float>& wScale,
                               uint32_t len, float rowScale, const AscendC::LocalTensor<float>& dst) {
        AscendC::LocalTensor<int32_t> a = accQue_.AllocTensor<int32_t>();
        AscendC::DataCopyPad(a, acc, {1, len * 4u, 0, 0, 0}, {false, 0, 0, 0});
        accQue_.EnQue(a);
        AscendC::LocalTensor<float> ws = scaleQue_.AllocTensor<float>();
        AscendC::DataCopyPad(ws, wScale, {1, len * 4u, 0, 0, 0}, {false, 0, 0, 0.0f});
        scaleQue_.EnQue(ws);
        a = accQue_.DeQue<int32_t>();
        AscendC::Cast(dst, a, AscendC::RoundMode::CAST_RINT, len);  // int32 -> fp32, nearest even
        accQue_.FreeTensor(a);
        AscendC::Muls(dst, dst, rowScale, len);
        ws = scaleQue_.DeQue<float>();
        AscendC::Mul(dst, dst, ws, len);
        scaleQue_.FreeTensor(ws);
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
    AscendC::TQue<AscendC::TPosition::VECIN, 2> scaleQue_;
};

}  // namespace cam::kernels
