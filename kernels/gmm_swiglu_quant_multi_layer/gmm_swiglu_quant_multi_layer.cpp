// gmm_swiglu_quant_multi_layer (W1): one mixed kernel (KERNEL_TYPE_MIX_AIC_1_2, docs/gmm.md §5): each AI core's
// cube core computes the int32 accumulator of one row tile (at most tm rows of one group, all N columns; tiles sized
// to their group and dealt expert-major: gmm_swiglu_row_tiles.h) at a time into a slot of its own two-slot GM ring
// and sets "full"; its two vector cores wait for it, run the epilogue (dequant, SwiGLU, per-token quant:
// gmm_swiglu_epilogue.h) over half the tile's rows each, and set "free"; the cube computes the next tile into the
// other slot meanwhile. With scale groups along K the cube hands over one unit (the row tile's rows x one n-tile) at
// a time in a compact slot instead; the vector cores dequantize and add its groups into their rows of the AI core's
// fp32 row tile buffer, and after the row tile's last unit run the SwiGLU and quant from there. W4A8 (cube.int4,
// docs/gmm.md §9): x arrives split into int4 hi / lo planes (the gmm_split_int4 launch before this one), a slot holds
// each K group's hi and lo planes, and the epilogue recombines them (GmmRecombineInt4) before the same dequant.
#include "kernel_operator.h"

#include "common/kernel_frame.h"

#include "common/gmm_cube.h"
#include "common/gmm_ring.h"
#include "gmm_swiglu_quant_multi_layer/gmm_swiglu_epilogue.h"
#include "gmm_swiglu_quant_multi_layer/gmm_swiglu_quant_multi_layer.h"
#include "gmm_swiglu_quant_multi_layer/gmm_swiglu_row_tiles.h"

namespace cam::kernels {

// One AI core's fp32 row tile buffer (GmmSwigluRingBytes: after every core's slots).
__aicore__ inline GM_ADDR GmmSwigluRowBuf(GM_ADDR ring, const GmmCubeTilingData& c, uint32_t core) {
    return ring + uint64_t(c.blockDim) * kGmmRingSlots * GmmSwigluSlotBytes(c) + core * GmmSwigluRowBufBytes(c);
}

class GmmSwigluQuantMultiLayerCube : public GmmMixedCube<GmmSwigluQuantMultiLayerCube, GmmSwigluUnits> {
public:
    // GmmMixedCube's hooks: the walker from the accepted layer, and the n-th unit into its slot.
    __aicore__ inline void Start(int64_t layer) {
        units_.Init(groupList_, c_->groups, c_->groupListType, layer, c_->tm, GmmSwigluUnitsPerTile(*c_), core_,
                    c_->blockDim);
    }
    __aicore__ inline void Compute(uint32_t n) {
        GM_ADDR slot = GmmRingSlot(ring_, GmmSwigluSlotBytes(*c_), core_, n);
        if (GmmSwigluByUnits(*c_)) {
            cube_.UseSlot(slot, units_.Row0(), units_.NTile() * c_->tn, c_->tn);
            cube_.ComputeTile(units_.Layer(), units_.Expert(), units_.Row0(), units_.Rows(), units_.NTile(), true);
        } else {
            cube_.UseSlot(slot, units_.Row0(), 0, c_->n);
            cube_.ComputeRows(units_.Layer(), units_.Expert(), units_.Row0(), units_.Rows());
        }
    }
};

class GmmSwigluQuantMultiLayerVector {
public:
    __aicore__ inline void Run(GM_ADDR xScale, GM_ADDR groupList, GM_ADDR layerIndex, GM_ADDR table, GM_ADDR ring,
                               GM_ADDR y, GM_ADDR yScale, GM_ADDR status, const GmmSwigluQuantMultiLayerTilingData& t) {
        const GmmCubeTilingData& c = t.cube;
        epilogue_.Init(xScale, table, y, yScale, t);
        GmmDeviceArgs args;
        if (!GmmPrePass(layerIndex, groupList, c.experts, c.groups, c.layers, c.groupListType, c.m, status, &args,
                        false))
            return;
        const uint32_t ratio = static_cast<uint32_t>(AscendC::GetTaskRation());
        const uint32_t core = static_cast<uint32_t>(AscendC::GetBlockIdx()) / ratio;
        const uint32_t sub = static_cast<uint32_t>(AscendC::GetBlockIdx()) % ratio;
        const bool byUnits = GmmSwigluByUnits(c);
        if (byUnits) epilogue_.UseRowBuf(GmmSwigluRowBuf(ring, c, core));
        GmmSwigluUnits units;
        units.Init(groupList, c.groups, c.groupListType, args.layer, c.tm, GmmSwigluUnitsPerTile(c), core,
                   c.blockDim);
        for (uint32_t n = 0; units.Next(); ++n) {
            GmmRingWaitFull();
            // Whole rows per vector core (the row's amax needs no other core): the first half of the tile's rows on
            // vector core 0, the rest on 1.
            const uint32_t rows = units.Rows(), first = (rows + 1) / 2;
            const uint32_t begin = sub == 0 ? 0 : first, count = sub == 0 ? first : rows - first;
            GM_ADDR slot = GmmRingSlot(ring, GmmSwigluSlotBytes(c), core, n);
            if (byUnits) {
                // The unit's K groups dequantized and added into this vector core's rows of the row tile buffer:
                // the first ceil(tm / 2) rows are vector core 0's, the rest 1's, whatever the tile's split, so one
                // core's next tile never writes rows the other is still reading.
                const uint64_t bufRow = sub == 0 ? 0 : (c.tm + 1) / 2;
                epilogue_.UseUnit(slot);
                if (count > 0)
                    epilogue_.SumUnit(units.Layer(), units.Expert(), units.Row0() + begin, begin, bufRow, count,
                                      units.NTile());
                // After the unit's last copy-out into the buffer, which comes after every read of the slot.
                GmmRingRelease();
                if (units.Last() && count > 0)
                    epilogue_.Rows(units.Layer(), units.Expert(), units.Row0() + begin, bufRow, count);
                continue;
            }
            epilogue_.UseAcc(slot, uint64_t(c.tm) * c.n);
            if (count > 0) epilogue_.Rows(units.Layer(), units.Expert(), units.Row0() + begin, begin, count);
            // After the last y copy-out, which comes after every read of the slot (its spill included).
            GmmRingRelease();
        }
        epilogue_.Finish();
    }

private:
    GmmSwigluQuantMultiLayerEpilogue epilogue_;
};

}  // namespace cam::kernels

extern "C" __global__ __aicore__ void cam_gmm_swiglu_quant_multi_layer(
    GM_ADDR x, GM_ADDR xScale, GM_ADDR groupList, GM_ADDR layerIndex, GM_ADDR table, GM_ADDR ring, GM_ADDR y,
    GM_ADDR yScale, GM_ADDR status, cam::kernels::GmmSwigluQuantMultiLayerTilingData tiling) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    if ASCEND_IS_AIC {
        cam::kernels::GmmSwigluQuantMultiLayerCube op;
        static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
        op.Run(x, groupList, layerIndex, table, ring, status, tiling.cube);
    } else {
        cam::kernels::GmmSwigluQuantMultiLayerVector op;
        static_assert(cam::kernels::FitsKernelFrame<decltype(op)>(), "op object over the kernel frame budget");
        op.Run(xScale, groupList, layerIndex, table, ring, y, yScale, status, tiling);
    }
}

#include "common/launch.h"

void cam::kernels::LaunchGmmSwigluQuantMultiLayer(uint32_t blockDim, void* stream, uint8_t* x, uint8_t* xScale,
                                                  uint8_t* groupList, uint8_t* layerIndex, uint8_t* table,
                                                  uint8_t* ring, uint8_t* y, uint8_t* yScale, uint8_t* status,
                                                  const GmmSwigluQuantMultiLayerTilingData& tiling) {
    CAM_KERNEL_LAUNCH(cam_gmm_swiglu_quant_multi_layer, blockDim, stream, x, xScale, groupList, layerIndex, table,
                      ring, y, yScale, status, tiling);
}
