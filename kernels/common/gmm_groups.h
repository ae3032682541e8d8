// Device-side reading of the GMM's device-resident arguments: layer_index and group_list. Every core of both
// GMM kernels runs the same pre-pass before touching any output, so all reach the same verdict without a
// barrier; block 0 alone records a failure in the status record (common/device_status.h).
#pragma once

#include "kernel_operator.h"

#include "common/device_status_write.h"

namespace cam::kernels {

constexpr uint32_t kGroupListCumsum = 0;
constexpr uint32_t kGroupListCounts = 1;

// Walks group_list expert by expert, giving each expert's row range [start, end).
class GroupCursor {
public:
    __aicore__ inline void Init(GM_ADDR groupList, uint32_t experts, uint32_t type) {
        gl_.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(groupList), experts);
        experts_ = experts;
        type_ = type;
        Reset();
    }
    __aicore__ inline void Reset() {
        expert_ = 0;
        start_ = 0;
        end_ = 0;
    }
    // Advances to the next expert; false past the last one. Valid only after the pre-pass accepted group_list.
    __aicore__ inline bool Next() {
        if (expert_ >= experts_) return false;
        start_ = end_;
        const int64_t v = gl_.GetValue(expert_);
        end_ = type_ == kGroupListCounts ? start_ + static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
        ++expert_;
        return true;
    }
    __aicore__ inline uint32_t Expert() const { return expert_ - 1; }
    __aicore__ inline uint64_t Start() const { return start_; }
    __aicore__ inline uint64_t End() const { return end_; }
    __aicore__ inline int64_t Raw(uint32_t e) const { return gl_.GetValue(e); }

private:
    AscendC::GlobalTensor<int64_t> gl_;
    uint32_t experts_ = 0;
    uint32_t type_ = kGroupListCounts;
    uint32_t expert_ = 0;
    uint64_t start_ = 0;
    uint64_t end_ = 0;
};

struct GmmDeviceArgs {
    int64_t layer;   // accepted layer index
    uint64_t total;  // rows covered by the groups (<= capacity)
};

// Checks layer_index in [0, layers) and group_list (counts >= 0, cumsum non-decreasing from >= 0, total <=
// capacity). Returns false on the first violation, which block 0 records; nothing has been written then.
__aicore__ inline bool GmmPrePass(GM_ADDR layerIndex, GM_ADDR groupList, uint32_t experts, uint32_t layers,
                                  uint32_t type, uint64_t capacity, GM_ADDR status, GmmDeviceArgs* out) {
    const bool report = AscendC::GetBlockIdx() == 0;
    AscendC::GlobalTensor<int64_t> li;
    li.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(layerIndex), 1);
    const int64_t layer = li.GetValue(0);
    if (layer < 0 || layer >= static_cast<int64_t>(layers)) {
        if (report) WriteDeviceStatus(status, kDeviceStatusOutOfRange, kDeviceArgLayerIndex, -1, layer, layers);
        return false;
    }
    AscendC::GlobalTensor<int64_t> gl;
    gl.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(groupList), experts);
    int64_t end = 0;
    for (uint32_t e = 0; e < experts; ++e) {
        const int64_t v = gl.GetValue(e);
        int64_t next;
        if (type == kGroupListCounts) {
            if (v < 0) {
                if (report) WriteDeviceStatus(status, kDeviceStatusNegative, kDeviceArgGroupList, e, v, 0);
                return false;
            }
            // Compare before adding so a huge count cannot wrap the running total.
            if (v > static_cast<int64_t>(capacity) - end) {
                if (report)
                    WriteDeviceStatus(status, kDeviceStatusTotalExceeds, kDeviceArgGroupList, e,
                                      v > INT64_MAX - end ? INT64_MAX : end + v, static_cast<int64_t>(capacity));
                return false;
            }
            next = end + v;
        } else {
            if (v < end) {
                if (report)
                    WriteDeviceStatus(status, v < 0 ? kDeviceStatusNegative : kDeviceStatusDecreasing,
                                      kDeviceArgGroupList, e, v, end);
                return false;
            }
            if (v > static_cast<int64_t>(capacity)) {
                if (report)
                    WriteDeviceStatus(status, kDeviceStatusTotalExceeds, kDeviceArgGroupList, e, v,
                                      static_cast<int64_t>(capacity));
                return false;
            }
            next = v;
        }
        end = next;
    }
    out->layer = layer;
    out->total = static_cast<uint64_t>(end);
    return true;
}

// The GM address of layer `layer`'s tensor from a device-resident table of per-layer base addresses.
template <typename T>
__aicore__ inline __gm__ T* LayerAddress(GM_ADDR table, uint32_t slot) {
    AscendC::GlobalTensor<uint64_t> t;
    t.SetGlobalBuffer(reinterpret_cast<__gm__ uint64_t*>(table));
    return reinterpret_cast<__gm__ T*>(static_cast<uintptr_t>(t.GetValue(slot)));
}

}  // namespace cam::kernels
