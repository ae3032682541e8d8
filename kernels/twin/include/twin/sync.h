// Ordering primitives. Within a block the twin runs every pipe in program order, so pipe flags and barriers order
// nothing here; they are checked for what the hardware needs (matched SetFlag/WaitFlag pairs per (event, id),
// PipeBarrier<PIPE_M> between dependent Mmads). Across blocks SyncAll is a real barrier, and the scalar data cache
// (twin/dcache.h) makes DataCacheCleanAndInvalid the only way a scalar GM access meets other cores.
#pragma once

#include <atomic>

#include "twin/crosscore.h"
#include "twin/gm_race.h"
#include "twin/tensor.h"

namespace cam::twin {

inline FlagSlot& FlagOf(AscendC::HardEvent event, int32_t id, const std::source_location& where) {
    CAM_TWIN_CHECK(id >= 0 && id < kEventIds, "flag-pairs",
                   "event id " + std::to_string(id) + " outside EVENT_ID0..EVENT_ID7", where);
    return CurrentBlock().flags[static_cast<int>(event)][id];
}

}  // namespace cam::twin

namespace AscendC {

// The system cycle counter (Platform::systemCycleHz ticks per second). Kernels measure timeouts with it, never
// with host time.
inline int64_t GetSystemCycle() { return cam::twin::SystemCycle(); }

// Hard SyncAll. isAIVOnly as in the Ascend C header: true for a vector-only (KERNEL_TYPE_MIX_AIV_1_0) kernel, false
// for a mixed kernel (every cube and vector core of the launch meets).
template <bool isAIVOnly = true>
void SyncAll(const std::source_location where = std::source_location::current()) {
    cam::twin::TimeSyncAll();
    cam::twin::GmRaceSyncAllArrive();
    cam::twin::BlockBarrier(isAIVOnly, where);
    cam::twin::GmRaceSyncAllLeave();
}

template <pipe_t pipe>
void PipeBarrier() {
    // A PIPE_M (or PIPE_ALL) barrier completes every Mmad issued so far: the next one may read their results.
    if constexpr (pipe == PIPE_M || pipe == PIPE_ALL) {
        if (cam::twin::InKernel()) cam::twin::CurrentBlock().lastMmadC = nullptr;
    }
    // PIPE_ALL waits for every pipe (clean write-backs included); a one-pipe barrier orders that pipe against
    // itself only, which the model already assumes.
    if constexpr (pipe == PIPE_ALL) cam::twin::PipeBarrierAll();
}

// A WaitFlag with no SetFlag before it waits forever on hardware; a SetFlag never waited for leaks into whatever
// runs next on the core. Both are violations (the second one when the block ends).
template <HardEvent event>
void SetFlag(int32_t eventID, const std::source_location where = std::source_location::current()) {
    cam::twin::FlagSlot& slot = cam::twin::FlagOf(event, eventID, where);
    CAM_TWIN_CHECK(slot.pending == 0, "flag-pairs", "SetFlag of an event id already set and not yet waited for",
                   where);
    slot.pending = 1;
    slot.where = where;
    cam::twin::PipeFlagSet(event, eventID);
}

template <HardEvent event>
void WaitFlag(int32_t eventID, const std::source_location where = std::source_location::current()) {
    cam::twin::FlagSlot& slot = cam::twin::FlagOf(event, eventID, where);
    CAM_TWIN_CHECK(slot.pending == 1, "flag-pairs", "WaitFlag without a matching SetFlag (the hardware waits forever)",
                   where);
    slot.pending = 0;
    cam::twin::PipeFlagWait(event, eventID);
}

// Cross-core flags (KERNEL_TYPE_MIX_AIC_1_2, twin/crosscore.h), with the Ascend C signature: modeId 0..2 (0: all
// cores of a kind, 1: the vector cores of one AI core, 2: the cube and vector cores of one AI core), the pipe the
// instruction is issued on (not PIPE_S or PIPE_ALL), flag id 0..10. A set on a pipe happens after that pipe's earlier
// instructions: the pipe a GM write went out on is the one whose set publishes it.
template <uint8_t modeId, pipe_t pipe>
void CrossCoreSetFlag(uint16_t flagId, const std::source_location where = std::source_location::current()) {
    static_assert(modeId <= 2, "CrossCoreSetFlag modeId is 0..2");
    cam::twin::GmRaceCrossSet(modeId, flagId);
    cam::twin::CrossCoreSet(modeId, static_cast<cam::twin::Pipe>(pipe), flagId, where);
}

template <uint8_t modeId, pipe_t pipe>
void CrossCoreWaitFlag(uint16_t flagId, const std::source_location where = std::source_location::current()) {
    static_assert(modeId <= 2, "CrossCoreWaitFlag modeId is 0..2");
    cam::twin::CrossCoreWait(modeId, static_cast<cam::twin::Pipe>(pipe), flagId, where);
    cam::twin::GmRaceCrossWaited(modeId, flagId);
}

// Cores of the caller's kind per AI core: 2 on a vector core of a 1:2 mixed kernel, otherwise 1.
inline int64_t GetTaskRation() { return cam::twin::TaskRation(); }

// Writes this block's cached copy of the tensor's line (or of every line) back to GM and drops it, so the next
// scalar read fetches what other cores and the MTEs wrote, and this block's scalar stores reach GM.
// Every template argument is required, as in the Ascend C header (no defaults): the <T, entireType, dcciDst> form,
// and the <T, entireType> form that keeps GM consistent (DataCacheCleanAndInvalid.md).
template <typename T, CacheLine line, DcciDst dst>
void DataCacheCleanAndInvalid(const GlobalTensor<T>& t,
                              const std::source_location where = std::source_location::current()) {
    if (cam::twin::InKernel() && cam::twin::DcacheEnabled()) {
        auto* cache = cam::twin::CurrentBlock().dcache;
        if constexpr (line == CacheLine::ENTIRE_DATA_CACHE) {
            cache->CleanInvalidateAll(where);
        } else {
            cache->CleanInvalidate(t.GetPhyAddr(), where);
        }
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

template <typename T, CacheLine line>
void DataCacheCleanAndInvalid(const GlobalTensor<T>& t,
                              const std::source_location where = std::source_location::current()) {
    DataCacheCleanAndInvalid<T, line, DcciDst::CACHELINE_OUT>(t, where);
}

// Which memory accesses DataSyncBarrier waits for (DataSyncBarrier(ISASI) page): ALL, DDR (GM), UB, SEQ.
enum class MemDsbT : uint8_t { ALL = 0, DDR, UB, SEQ };

// Blocks until the earlier memory accesses of the kind named have finished. A clean's write-back to GM is one
// (DataCacheCleanAndInvalid is a bare dcci that does not wait for it): ALL or DDR completes it, so a later clean or
// a SyncAll can no longer overtake it (rule dcache-clean-no-dsb).
template <MemDsbT arg>
void DataSyncBarrier(const std::source_location where = std::source_location::current()) {
    (void)where;
    if constexpr (arg == MemDsbT::ALL || arg == MemDsbT::DDR) {
        if (cam::twin::InKernel() && cam::twin::DcacheEnabled()) cam::twin::CurrentBlock().dcache->WriteBacksDone();
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace AscendC

// Which core the code runs on: on Ascend each is a compile-time constant of the AIC or the AIV build of a mixed
// kernel; the twin runs both builds from one and answers per thread.
#define ASCEND_IS_AIV (::cam::twin::CoreIsAiv())
#define ASCEND_IS_AIC (!::cam::twin::CoreIsAiv())
