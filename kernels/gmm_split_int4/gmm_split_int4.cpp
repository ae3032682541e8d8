// The W4A8 activation split on the vector cores (route (a), docs/gmm.md §9.1): every valid row of int8 x becomes
//   hi = floor(x / 16)          in [-8, 7]
//   lo = x - 16·hi - 8          in [-8, 7]          so that x = 16·hi + lo + 8 exactly
// written as two int4 planes [M, kSplit] (columns past K hold the split of 0; the packed weights' K padding is 0,
// so they add nothing). Every step is exact in half: |x| <= 128, x / 16 is a power-of-two scaling, and the rest are
// small integers. The int4 values are packed by the vector Cast half -> int4b_t. Rows past the groups' total are in
// no block's range, and the pre-pass refuses bad group lists before anything is written (the cube kernel and the
// epilogue run the same pre-pass).
#include "kernel_operator.h"

#include "common/kernel_frame.h"

#include "common/gmm_groups.h"
#include "gmm_split_int4/gmm_split_int4.h"

namespace cam::kernels {

class GmmSplitInt4 {
public:
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR groupList, GM_ADDR layerIndex, GM_ADDR planes, GM_ADDR status,
                                const GmmCubeTilingData& c, const GmmSplitInt4TilingData& t) {
        c_ = c;
        t_ = t;
        groupList_ = groupList;
        layerIndex_ = layerIndex;
        status_ = status;
        x_.SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(x), uint64_t(c.m) * c.k);
        // int4 planes addressed as bytes: kSplit / 2 bytes a row.
        planes_.SetGlobalBuffer(reinterpret_cast<__gm__ int8_t*>(planes), uint64_t(c.m) * c.kSplit);
        const uint32_t n = t.chunk;
        pipe_.InitBuffer(inQue_, 2, UbBytes(n));
        pipe_.InitBuffer(xhBuf_, UbBytes(uint64_t(n) * 2));
        pipe_.InitBuffer(tBuf_, UbBytes(uint64_t(n) * 2));
        pipe_.InitBuffer(floorBuf_, UbBytes(uint64_t(n) * 2));
        pipe_.InitBuffer(hiQue_, 2, UbBytes(n / 2));
        pipe_.InitBuffer(loQue_, 2, UbBytes(n / 2));
    }

    __aicore__ inline void Process() {
        GmmDeviceArgs args;
        if (!GmmPrePass(layerIndex_, groupList_, c_.experts, c_.groups, c_.layers, c_.groupListType, c_.m, status_,
                        &args))
            return;
        const uint64_t block = AscendC::GetBlockIdx(), blocks = t_.blockDim;
        const uint64_t rowBegin = args.total * block / blocks, rowEnd = args.total * (block + 1) / blocks;
        for (uint64_t row = rowBegin; row < rowEnd; ++row)
            for (uint32_t col = 0; col < c_.kSplit; col += t_.chunk)
                Chunk(row, col, c_.kSplit - col < t_.chunk ? c_.kSplit - col : t_.chunk);
    }

private:
    __aicore__ inline void Chunk(uint64_t row, uint32_t col, uint32_t len) {
        const uint32_t valid = c_.k - col < len ? c_.k - col : len;  // >= 1: kSplit - K < 64 <= len
        // Columns past K split as 0 (they meet the packed weights' zero K padding): the copy pads its last 32-byte
        // block with zeros, the whole blocks after it are zeroed in half.
        const uint32_t copied = static_cast<uint32_t>(AlignUp(valid, kUbBlockBytes));
        AscendC::LocalTensor<int8_t> xb = inQue_.AllocTensor<int8_t>();
        AscendC::DataCopyPad(xb, x_[row * c_.k + col], {1, valid, 0, 0, 0},
                             {true, 0, static_cast<uint8_t>(copied - valid), int8_t(0)});
        inQue_.EnQue(xb);
        xb = inQue_.DeQue<int8_t>();
        AscendC::LocalTensor<half> xh = xhBuf_.Get<half>();
        AscendC::LocalTensor<half> t = tBuf_.Get<half>();
        AscendC::LocalTensor<int16_t> fl = floorBuf_.Get<int16_t>();
        const uint32_t castLen = copied < len ? copied : len;
        AscendC::Cast(xh, xb, AscendC::RoundMode::CAST_NONE, castLen);
        inQue_.FreeTensor(xb);
        if (castLen < len) AscendC::Duplicate(xh[castLen], half(0.0f), len - castLen);
        AscendC::Muls(t, xh, half(0.0625f), len);

        AscendC::LocalTensor<int4b_t> hi = hiQue_.AllocTensor<int4b_t>();
        AscendC::Cast(hi, t, AscendC::RoundMode::CAST_FLOOR, len);
        hiQue_.EnQue(hi);

        AscendC::Cast(fl, t, AscendC::RoundMode::CAST_FLOOR, len);
        AscendC::Cast(t, fl, AscendC::RoundMode::CAST_NONE, len);  // t = hi as half
        AscendC::Muls(t, t, half(-16.0f), len);
        AscendC::Add(t, t, xh, len);
        AscendC::Adds(t, t, half(-8.0f), len);
        AscendC::LocalTensor<int4b_t> lo = loQue_.AllocTensor<int4b_t>();
        AscendC::Cast(lo, t, AscendC::RoundMode::CAST_NONE, len);
        loQue_.EnQue(lo);

        const uint64_t off = (row * c_.kSplit + col) / 2;
        const uint64_t plane = uint64_t(c_.m) * c_.kSplit / 2;
        hi = hiQue_.DeQue<int4b_t>();
        AscendC::DataCopyPad(planes_[off], hi.ReinterpretCast<int8_t>(), {1, len / 2, 0, 0, 0});
        hiQue_.FreeTensor(hi);
        lo = loQue_.DeQue<int4b_t>();
        AscendC::DataCopyPad(planes_[plane + off], lo.ReinterpretCast<int8_t>(), {1, len / 2, 0, 0, 0});
        loQue_.FreeTensor(lo);
    }

    GmmCubeTilingData c_{};
    GmmSplitInt4TilingData t_{};
    GM_ADDR groupList_ = nullptr;
    GM_ADDR layerIndex_ = nullptr;
    GM_ADDR status_ = nullptr;
    AscendC::TPipe pipe_;
    AscendC::TQue<AscendC::TPosition::VECIN, 2> inQue_;
    AscendC::TQue<AscendC::TPosition::VECOUT, 2> hiQue_, loQue_;
    AscendC::TBuf<AscendC::TPosition::VECCALC> xhBuf_, tBuf_, floorBuf_;
    AscendC::GlobalTensor<int8_t> x_;
    AscendC::GlobalTensor<int8_t> planes_;
};

}  // namespace cam::kernels

extern "C" __global__ __aicore__ void cam_gmm_split_int4(GM_ADDR x, GM_ADDR groupList, GM_ADDR layerIndex,
                                                         GM_ADDR planes, GM_ADDR status,
                                                         cam::kernels::GmmCubeTilingData cube,
                                                         cam::kernels::GmmSplitInt4TilingData tiling) {
    cam::kernels::GmmSplitInt4 op;
    static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
    op.Init(x, groupList, layerIndex, planes, status, cube, tiling);
    op.Process();
}

#include "common/launch.h"

void cam::kernels::LaunchGmmSplitInt4(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* groupList,
                                      uint8_t* layerIndex, uint8_t* planes, uint8_t* status,
                                      const GmmCubeTilingData& cube, const GmmSplitInt4TilingData& tiling) {
    CAM_KERNEL_LAUNCH(cam_gmm_split_int4, blockDim, stream, x, groupList, layerIndex, planes, status, cube, tiling);
}
