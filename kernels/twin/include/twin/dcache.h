// The scalar unit's data cache, as the twin models it (docs/twin.md, "Scalar data cache"). Scalar GM accesses
// (GlobalTensor::GetValue / SetValue) go through a per-block cache of 64-byte lines: a read fetches the bytes once
// and keeps returning that copy until DataCacheCleanAndInvalid drops the line; a store stays in the block's copy until a
// clean writes it back. MTE copies (DataCopy*) bypass it. So a flag protocol without the right cache maintenance
// reads stale values or publishes nothing, on the twin as on the hardware.
//
// The backing store stays race-free C++: bytes are fetched with atomic loads of the accessed size and written back
// with atomic stores of exactly the bytes the block stored, under a lock per write-back; nothing outside what the
// kernel accessed is touched (the rest of a line may be host memory the kernel does not own). Two cores holding dirty copies
// of one line (the documented hazard: whichever cleans last overwrites the other's bytes with its stale copy) is a
// violation, found through a registry of dirty lines of the launch, never by overwriting host memory the kernel
// does not own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "twin/gm_copy.h"  // GmRead / GmWrite: the GM side of the MTE copies that bypass this cache

namespace cam::twin {

constexpr uintptr_t kDcacheLineBytes = 64;

// On unless CAM_TWIN_DCACHE=0 (diagnosis only: it brings back "every scalar access goes straight to GM").
bool DcacheEnabled();

// GM ranges the host rewrites between launches (a Comm's peer table, written once per Comm at an address an earlier
// Comm's table may have had): a core's scalar cache is not emptied between kernel launches, so a line of such a range
// may still hold an earlier launch's bytes. A block must invalidate a line of it (DataCacheCleanAndInvalid of the line
// or of the entire cache) before its first scalar read in the launch (rule dcache-table-not-invalidated).
using HostTables = std::vector<std::pair<uintptr_t, uint64_t>>;
// CAM_TWIN_DCACHE_ACROSS_LAUNCHES=1 (off by default; the mutation suite and the cache tier turn it on): a line a
// block still held when its launch ended stays, in the model, on some core for every later launch, so a scalar read
// of it in a later launch without an invalidate of that line (or of the whole cache) first, while GM no longer holds
// those bytes, is a dcache-earlier-launch violation: on the hardware any core may still hold the old copy.
bool DcacheAcrossLaunches();

class DataCache {
public:
    explicit DataCache(const void* launch, const HostTables* hostTables = nullptr)
        : launch_(launch), hostTables_(hostTables) {}
    DataCache(const DataCache&) = delete;
    DataCache& operator=(const DataCache&) = delete;
    ~DataCache();

    void Load(const void* addr, void* out, size_t bytes, const std::source_location& where);
    void Store(void* addr, const void* in, size_t bytes, const std::source_location& where);
    // Writes the line holding addr back if this block stored into it, then drops it.
    void CleanInvalidate(const void* addr, const std::source_location& where);
    void CleanInvalidateAll(const std::source_location& where);
    // A line this block stored into and never cleaned (its address and the last store's site): false if none.
    bool FirstDirty(uintptr_t* base, std::source_location* where) const;
    // Forgets every line without writing anything back (a failed block).
    void Drop();
    // DataSyncBarrier<ALL|DDR>: every write-back of an earlier clean has landed.
    void WriteBacksDone() { pendingClean_ = 0; }
    // A clean whose write-back no DataSyncBarrier has waited for (its call site): false if none.
    bool PendingWriteBack(std::source_location* where) const {
        if (pendingClean_ == 0) return false;
        *where = pendingWhere_;
        return true;
    }
    // Whether this block ever cached a line: only then can the launch's line registry hold entries of it.
    bool Touched() const { return touched_; }

private:
    struct Line {
        uint64_t words[kDcacheLineBytes / 8];
        uint64_t valid = 0;        // bit i: byte i fetched from GM or stored by this block
        uint64_t dirty = 0;        // bit i: byte i stored by this block and not yet written back
        uint64_t fillVersion = 0;  // the line's write-back count when this block filled it
        std::source_location lastStore{};  // for dcache-dirty-at-exit
    };
    Line& Fill(uintptr_t base);
    // The dirty bytes from byte `from` of the line on (0: all of them).
    void WriteBack(uintptr_t base, Line& line, const std::source_location& where, unsigned from = 0);

    // Rule dcache-table-not-invalidated, at a read that fetches the line from GM.
    void CheckTableFetch(uintptr_t addr, uintptr_t base, const std::source_location& where) const;

    std::unordered_map<uintptr_t, Line> lines_;
    const void* launch_;  // the launch this block belongs to: lines are related within one launch only
    bool touched_ = false;
    const HostTables* hostTables_;
    std::unordered_set<uintptr_t> invalidatedLines_;  // whole lines this block invalidated in this launch
    bool invalidatedAll_ = false;                // an ENTIRE_DATA_CACHE clean-and-invalidate ran in this launch
    // Rule dcache-clean-no-dsb: the clean calls of this block (numbered from 1) and the one whose write-back is still
    // in flight (0: none), which a write-back of a later clean or a SyncAll must not overtake.
    uint64_t cleanCalls_ = 0;
    uint64_t pendingClean_ = 0;
    std::source_location pendingWhere_{};
    // Lines this block invalidated, in whole or from an address on, in this launch (DcacheAcrossLaunches): no
    // earlier launch's copy can be read there.
    std::unordered_map<uintptr_t, bool> invalidated_;
};

// Drops the line registry of a finished launch (every block has written back or dropped its lines).
void ForgetLaunch(const void* launch);

// An MTE write into GM bypasses the cache; if another block holds that line dirty, its later clean overwrites
// the copied bytes. The copy engines call this for every GM range they write.
void CheckMteWriteAgainstDirtyLines(const void* addr, uint64_t bytes, const std::source_location& where);

// After an MTE write to GM: wakes the blocks parked (ParkOn) on a line in [addr, addr + bytes), and no others.
void WakeParked(const void* addr, uint64_t bytes);

// A waiting block's back-off (cam::kernels::WaitPause). Iteration 0 (a new wait) registers the lines of
// [watched, watched + bytes) for this thread and returns; the next polls return at once; later ones park the thread
// until a write reaches one of those lines (an MTE write or a clean, from any block of this process; one that came
// since the previous poll ends the park at once) or a short interval passes (writes the twin cannot see: another
// process, the host), so a waiter neither burns a CPU, nor sleeps past the signal it waits for, nor wakes for
// other lines' writes.
void ParkOn(const void* watched, uint64_t bytes, uint32_t iteration);
inline void ParkOn(const void* watched, uint32_t iteration) { ParkOn(watched, 1, iteration); }

// Parks of the calling thread that a write to the watched line ended (not the interval): for tests.
uint64_t ParkWakeupsThisThread();

}  // namespace cam::twin
