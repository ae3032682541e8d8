// Ordering primitives. Within a block the twin runs every pipe in program order, so pipe flags and barriers only
// need to exist; across blocks SyncAll is a real barrier and a data-cache maintenance is a full fence.
#pragma once

#include <atomic>

#include "twin/tensor.h"

namespace AscendC {

// The system cycle counter (Platform::systemCycleHz ticks per second). Kernels measure timeouts with it, never
// with host time.
inline int64_t GetSystemCycle() { return cam::twin::SystemCycle(); }

template <bool hardSync = true>
void SyncAll(const std::source_location where = std::source_location::current()) {
    cam::twin::BlockBarrier(where);
}

template <pipe_t pipe>
void PipeBarrier() {}

template <HardEvent event>
void SetFlag(event_t) {}

template <HardEvent event>
void WaitFlag(event_t) {}

// On hardware this writes the scalar data cache back to / drops it from GM so a flag written or read with
// GetValue/SetValue is seen by other cores. The twin makes it a sequentially consistent fence.
template <typename T, CacheLine line = CacheLine::SINGLE_CACHE_LINE, DcciDst dst = DcciDst::CACHELINE_OUT>
void DataCacheCleanAndInvalid(const GlobalTensor<T>&) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace AscendC
