// The mixed GMM kernels' hand-off (KERNEL_TYPE_MIX_AIC_1_2): each AI core's cube writes a unit of int32
// accumulators into a slot of its own GM ring and says "full"; its vector cores read the unit and say "free". Units
// take the kGmmRingSlots slots in turn, so the cube fills one slot while the vector cores read another; the cube
// writes a slot again only after the vector cores freed it, and waits for every outstanding "free" before it ends
// (no flag outlives the kernel). The flag counters are per core pair, so one ring rule serves W1 and W2.
#pragma once

#include "kernel_operator.h"

#include "common/gmm_cube.h"
#include "common/gmm_cube_tiling_data.h"
#include "common/gmm_groups.h"

namespace cam::kernels {

constexpr uint16_t kGmmRingFull = 0;  // cube -> vector cores: a unit is in the next slot
constexpr uint16_t kGmmRingFree = 1;  // vector cores -> cube: the oldest slot is read

// The slot of a core's n-th unit.
__aicore__ inline GM_ADDR GmmRingSlot(GM_ADDR ring, uint64_t slotBytes, uint32_t core, uint32_t n) {
    return ring + (uint64_t(core) * kGmmRingSlots + n % kGmmRingSlots) * slotBytes;
}

// The cube side: Acquire before a unit's first write into its slot, Publish after the unit's last Fixpipe, Drain
// before the kernel ends.
class GmmRingProducer {
public:
    __aicore__ inline uint32_t Unit() const { return n_; }
    __aicore__ inline void Acquire() {
        if (n_ >= kGmmRingSlots) AscendC::CrossCoreWaitFlag<2, PIPE_FIX>(kGmmRingFree);
    }
    __aicore__ inline void Publish() {
        AscendC::CrossCoreSetFlag<2, PIPE_FIX>(kGmmRingFull);
        ++n_;
    }
    __aicore__ inline void Drain() {
        for (uint32_t i = 0; i < n_ && i < kGmmRingSlots; ++i) AscendC::CrossCoreWaitFlag<2, PIPE_FIX>(kGmmRingFree);
    }

private:
    uint32_t n_ = 0;
};

// The vector side: wait before a unit's first read from its slot; release after the last copy-out that comes after
// every read of the slot.
__aicore__ inline void GmmRingWaitFull() { AscendC::CrossCoreWaitFlag<2, PIPE_MTE2>(kGmmRingFull); }
__aicore__ inline void GmmRingRelease() { AscendC::CrossCoreSetFlag<2, PIPE_MTE3>(kGmmRingFree); }

// The cube side of a mixed GMM kernel, written once for W1 and W2 (CRTP: `Kernel` derives from
// GmmMixedCube<Kernel, Walker>): the cube's Init and the pre-pass (a refused launch writes nothing), then
// `Kernel::Start(layer)` readies the core's walker `units_` from the accepted layer, and while `units_.Next()`,
// `Kernel::Compute(n)` computes the core's n-th unit into its slot between the ring's Acquire and Publish; the
// outstanding frees are waited before the end. The kernel gives only those two hooks (device code takes no lambdas).
template <typename Kernel, typename Walker>
class GmmMixedCube {
public:
    __aicore__ inline void Run(GM_ADDR x, GM_ADDR groupList, GM_ADDR layerIndex, GM_ADDR table, GM_ADDR ring,
                               GM_ADDR status, const GmmCubeTilingData& c) {
        c_ = &c;
        groupList_ = groupList;
        ring_ = ring;
        core_ = static_cast<uint32_t>(AscendC::GetBlockIdx());
        cube_.Init(x, table, c);
        GmmDeviceArgs args;
        if (!GmmPrePass(layerIndex, groupList, c.experts, c.groups, c.layers, c.groupListType, c.m, status, &args))
            return;
        Kernel& kernel = *static_cast<Kernel*>(this);
        kernel.Start(args.layer);
        GmmRingProducer slots;
        while (units_.Next()) {
            slots.Acquire();
            kernel.Compute(slots.Unit());
            slots.Publish();
        }
        slots.Drain();
        cube_.Finish();
    }

protected:
    GmmCube cube_;
    Walker units_;
    const GmmCubeTilingData* c_ = nullptr;
    GM_ADDR groupList_ = nullptr;
    GM_ADDR ring_ = nullptr;
    uint32_t core_ = 0;
};

}  // namespace cam::kernels
