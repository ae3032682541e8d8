// The scalar data cache model (twin/dcache.h, docs/twin.md "Scalar data cache").
#include "twin/dcache.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "twin/gm_race.h"
#include "twin/park.h"
#include "twin/pipes.h"
#include "twin/runtime.h"
#include "twin/timing.h"

namespace cam::twin {

namespace {

// Who holds a line dirty, and how often it was written back by a clean (its version). A block that filled a line
// at version v and stores into it after another core's clean made it v+1 holds a stale copy: its own clean would
// put the old bytes back.
struct LineState {
    const DataCache* owner = nullptr;
    uint64_t version = 0;
};

constexpr size_t kShards = 64;

// Line state is kept per launch: the blocks of one kernel are the cores that can share a line. Across launches
// (other ranks, other kernels) the host heap puts unrelated buffers into one 64-byte line, which device
// allocations never do, and peers' windows are reached by MTE only (peer-scalar-store), so the twin does not
// relate lines across launches.
struct LineKey {
    uintptr_t base;
    const void* launch;
    bool operator==(const LineKey& o) const { return base == o.base && launch == o.launch; }
};
struct LineKeyHash {
    size_t operator()(const LineKey& k) const {
        return std::hash<uintptr_t>()(k.base) ^ (std::hash<const void*>()(k.launch) * 31u);
    }
};

struct Shard {
    std::mutex mutex;
    std::unordered_map<LineKey, LineState, LineKeyHash> lines;
};

Shard gShards[kShards];
std::atomic<int64_t> gDirtyLines{0};

Shard& ShardOf(uintptr_t base) { return gShards[(base / kDcacheLineBytes) % kShards]; }

// ---- waits (ParkOn / WakeParked): a waiter is woken by a write to the very line it watches, nothing else ----
// A waiting thread registers the line it polls in a slot of this table for as long as it keeps waiting on it; a
// writer (an MTE write to GM, a clean) bumps the futex word of every slot registered on a line it wrote and wakes
// the slot's thread if it sleeps. An earlier version bumped one of 64 shards per written line: a 2 KiB payload row
// touches 32 consecutive lines, so every payload copy woke about half of all waiting blocks for nothing, and on 2
// CPUs those wake-ups took the CPU from the blocks doing the copies.
struct ParkSlot {
    std::atomic<uint32_t> claimed{0};    // owned by one thread (ParkerState) for its lifetime
    // The lines [first, last] its thread waits on now; first == 0 when none. Re-registration clears `first`, sets
    // `last`, then `first`: a writer reading a mixed pair only wakes for nothing or misses a write that the
    // waiter's next poll sees anyway (the fences in ParkOn and WakeLines).
    std::atomic<uintptr_t> first{0};
    std::atomic<uintptr_t> last{0};
    std::atomic<uint32_t> word{0};       // futex word: bumped by every write to `line`
    std::atomic<uint32_t> sleeping{0};   // the thread is (about to be) in the futex wait: writers must wake it
};
// Blocks of every rank of a process that wait at once: 4 ranks x 48 blocks on the largest platform fits.
constexpr uint32_t kParkSlots = 512;
ParkSlot gParkSlots[kParkSlots];
std::atomic<uint32_t> gParkSlotsUsed{0};  // slots [0, used) were ever claimed: the writers' scan bound

// This thread's slot, freed when the thread ends (pool threads leave after an idle time).
struct ParkerState {
    int32_t slot = -1;
    uintptr_t first = 0, last = 0;  // what the slot is registered on
    uint32_t seen = 0;   // the slot's word when this thread last let its wait poll
    uint64_t woken = 0;  // parks that ended because the watched line was written (ParkWakeupsThisThread)
    ~ParkerState() {
        if (slot < 0) return;
        gParkSlots[slot].first.store(0, std::memory_order_release);
        gParkSlots[slot].claimed.store(0, std::memory_order_release);
    }
};
thread_local ParkerState tParker;

ParkSlot* ClaimParkSlot() {
    if (tParker.slot >= 0) return &gParkSlots[tParker.slot];
    for (uint32_t i = 0; i < kParkSlots; ++i) {
        uint32_t free = 0;
        if (!gParkSlots[i].claimed.compare_exchange_strong(free, 1, std::memory_order_acq_rel)) continue;
        uint32_t used = gParkSlotsUsed.load(std::memory_order_relaxed);
        while (used < i + 1 && !gParkSlotsUsed.compare_exchange_weak(used, i + 1, std::memory_order_acq_rel)) {
        }
        tParker.slot = static_cast<int32_t>(i);
        return &gParkSlots[i];
    }
    return nullptr;  // more waiting threads than slots: this one falls back to timed parks
}

// Every registered waiter on a line in [first, last] (line bases) is told that something wrote it.
void WakeLines(uintptr_t first, uintptr_t last) {
    // Dekker with ParkOn's registration: the writer's stores, this fence, then its read of the slots; the waiter's
    // registration, a fence, then its poll. Either the writer sees the registration or the poll sees the write.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    SharedWake(reinterpret_cast<const void*>(first), last - first + kDcacheLineBytes);  // other processes' waiters
    WakeSlots(gParkSlots, gParkSlotsUsed.load(std::memory_order_acquire), first, last, false);
}

std::string Hex(uintptr_t v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

}  // namespace

bool DcacheEnabled() {
    static const bool enabled = [] {
        const char* env = std::getenv("CAM_TWIN_DCACHE");
        return !(env && std::strcmp(env, "0") == 0);
    }();
    return enabled;
}

bool DcacheAcrossLaunches() {
    static const bool enabled = [] {
        const char* env = std::getenv("CAM_TWIN_DCACHE_ACROSS_LAUNCHES");
        return env && std::strcmp(env, "1") == 0;
    }();
    return enabled;
}

namespace {

// What blocks held when their launches ended (DcacheAcrossLaunches): per line, the bytes of the last copy left.
struct HeldLine {
    uint64_t words[kDcacheLineBytes / 8];
    uint64_t valid = 0;
};
std::mutex gHeldMutex;
std::unordered_map<uintptr_t, HeldLine> gHeld;

}  // namespace

DataCache::~DataCache() { Drop(); }

namespace {

// Loads / stores `bytes` (1, 2, 4 or 8, naturally aligned) at addr atomically.
uint64_t AtomicLoadN(const uint8_t* addr, size_t bytes) {
    switch (bytes) {
        case 8: return __atomic_load_n(reinterpret_cast<const uint64_t*>(addr), __ATOMIC_ACQUIRE);
        case 4: return __atomic_load_n(reinterpret_cast<const uint32_t*>(addr), __ATOMIC_ACQUIRE);
        case 2: return __atomic_load_n(reinterpret_cast<const uint16_t*>(addr), __ATOMIC_ACQUIRE);
        default: return __atomic_load_n(addr, __ATOMIC_ACQUIRE);
    }
}

void AtomicStoreN(uint8_t* addr, uint64_t v, size_t bytes) {
    switch (bytes) {
        case 8: __atomic_store_n(reinterpret_cast<uint64_t*>(addr), v, __ATOMIC_RELEASE); break;
        case 4:
            __atomic_store_n(reinterpret_cast<uint32_t*>(addr), static_cast<uint32_t>(v), __ATOMIC_RELEASE);
            break;
        case 2:
            __atomic_store_n(reinterpret_cast<uint16_t*>(addr), static_cast<uint16_t>(v), __ATOMIC_RELEASE);
            break;
        default: __atomic_store_n(addr, static_cast<uint8_t>(v), __ATOMIC_RELEASE); break;
    }
}

// Bits [offset, offset + bytes) of a line's 64-bit byte mask.
uint64_t Mask(uintptr_t offset, size_t bytes) {
    return (bytes == 64 ? ~uint64_t(0) : ((uint64_t(1) << bytes) - 1)) << offset;
}

}  // namespace

DataCache::Line& DataCache::Fill(uintptr_t base) {
    auto it = lines_.find(base);
    if (it != lines_.end()) return it->second;
    touched_ = true;
    Line line;
    Shard& shard = ShardOf(base);
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto st = shard.lines.find(LineKey{base, launch_});
    line.fillVersion = st == shard.lines.end() ? 0 : st->second.version;
    return lines_.emplace(base, line).first->second;
}

// The hardware fetches the whole line; the twin fetches only bytes the kernel accesses, at their first access,
// because the rest of a 64-byte line may be host memory the kernel does not own. Once fetched a byte stays as it
// was until the line is invalidated, as on the hardware.
void DataCache::Load(const void* addr, void* out, size_t bytes, const std::source_location& where) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    const uintptr_t base = a & ~(kDcacheLineBytes - 1);
    CAM_TWIN_CHECK(a % bytes == 0, "scalar-align", "scalar GM read not aligned to its size", where);
    if (hostTables_ != nullptr && lines_.find(base) == lines_.end()) CheckTableFetch(a, base, where);
    Line& line = Fill(base);
    const uint64_t want = Mask(a - base, bytes);
    auto* cached = reinterpret_cast<uint8_t*>(line.words) + (a - base);
    if ((line.valid & want) != want) {
        const uint64_t v = AtomicLoadN(reinterpret_cast<const uint8_t*>(a), bytes);
        GmRaceWordAcquire(reinterpret_cast<const void*>(a), bytes);  // a word another core may have published
        if (DcacheAcrossLaunches() && !invalidatedAll_ && invalidated_.find(base) == invalidated_.end()) {
            std::lock_guard<std::mutex> lock(gHeldMutex);
            auto held = gHeld.find(base);
            if (held != gHeld.end() && (held->second.valid & want) == want) {
                uint64_t old = 0;
                std::memcpy(&old, reinterpret_cast<const uint8_t*>(held->second.words) + (a - base), bytes);
                CAM_TWIN_CHECK(old == v, "dcache-earlier-launch",
                               "scalar GM read of the line " + Hex(base) +
                                   " with no invalidate of it in this launch: an earlier launch left it cached, GM "
                                   "changed since, and the core running this block may still hold the old copy",
                               where);
            }
        }
        for (size_t i = 0; i < bytes; ++i) {
            // Bytes already in the line (fetched earlier or stored by this block) keep their value.
            if (!(line.valid & (uint64_t(1) << (a - base + i)))) cached[i] = reinterpret_cast<const uint8_t*>(&v)[i];
        }
        line.valid |= want;
    }
    std::memcpy(out, cached, bytes);
}

void DataCache::CheckTableFetch(uintptr_t addr, uintptr_t base, const std::source_location& where) const {
    if (invalidatedAll_ || invalidatedLines_.count(base) != 0) return;
    for (const auto& [start, bytes] : *hostTables_) {
        if (addr < start || addr >= start + bytes) continue;
        Violation("dcache-table-not-invalidated",
                  "scalar read of " + Hex(addr) + " in a table the host rewrites between launches (the peer table) "
                      "without invalidating its 64-byte line first in this launch: the core's scalar cache may still "
                      "hold that line from an earlier launch (an earlier Comm's table at the same address); "
                      "DataCacheCleanAndInvalid the table's lines before reading it",
                  where);
    }
}

void DataCache::Store(void* addr, const void* in, size_t bytes, const std::source_location& where) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    const uintptr_t base = a & ~(kDcacheLineBytes - 1);
    CAM_TWIN_CHECK(a % bytes == 0, "scalar-align", "scalar GM store not aligned to its size", where);
    Line& line = Fill(base);
    if (line.dirty == 0) {
        Shard& shard = ShardOf(base);
        std::lock_guard<std::mutex> lock(shard.mutex);
        LineState& st = shard.lines[LineKey{base, launch_}];
        CAM_TWIN_CHECK(st.owner == nullptr || st.owner == this, "dcache-shared-line",
                       "scalar store into the 64-byte GM line " + Hex(base) +
                           " while another core holds it dirty: whichever cleans last overwrites the other's bytes",
                       where);
        CAM_TWIN_CHECK(st.version == line.fillVersion, "dcache-stale-line",
                       "scalar store into the 64-byte GM line " + Hex(base) +
                           " cached before another core wrote it back: the clean would put back stale bytes "
                           "(invalidate the line before storing)",
                       where);
        st.owner = this;
        gDirtyLines.fetch_add(1, std::memory_order_relaxed);
    }
    std::memcpy(reinterpret_cast<uint8_t*>(line.words) + (a - base), in, bytes);
    line.lastStore = where;
    line.dirty |= Mask(a - base, bytes);
    line.valid |= Mask(a - base, bytes);
}

void DataCache::WriteBack(uintptr_t base, Line& line, const std::source_location& where, unsigned from) {
    const uint64_t part = from == 0 ? ~uint64_t(0) : ~((uint64_t(1) << from) - 1);
    const uint64_t dirty = line.dirty & part;
    if (dirty == 0) return;
    // A dcci does not wait for its write-back: a second clean's write-back may land before the first one's, so a
    // word published by the second could be seen before the data the first wrote back (DataSyncBarrier between).
    if (pendingClean_ != 0 && pendingClean_ != cleanCalls_)
        Violation("dcache-clean-no-dsb",
                  "a clean writes back the 64-byte GM line " + Hex(base) + " while the write-back of the clean at " +
                      CallSite(pendingWhere_) + " was never waited for: the two can land in either order (DataSyncBarrier<MemDsbT::ALL> "
                      "after a clean, as production kernels do)",
                  where);
    pendingClean_ = cleanCalls_;
    pendingWhere_ = where;
    // The write-back runs beside the MTEs until a full pipe barrier (twin/pipes.h): checked before any byte moves.
    const int first = __builtin_ctzll(dirty), last = 63 - __builtin_clzll(dirty);
    PipeCleanWrite(reinterpret_cast<const void*>(base + first), uint64_t(last - first + 1), where);
    GmRaceWordRelease(reinterpret_cast<const void*>(base + first), uint64_t(last - first + 1));
    Shard& shard = ShardOf(base);
    std::lock_guard<std::mutex> lock(shard.mutex);
    // Only the bytes this block stored, each run with the widest aligned atomic store it fills, so nothing outside
    // what the kernel wrote is touched.
    const auto* cached = reinterpret_cast<const uint8_t*>(line.words);
    for (size_t i = 0; i < kDcacheLineBytes;) {
        if (!(dirty & (uint64_t(1) << i))) {
            ++i;
            continue;
        }
        size_t n = 8;
        while (n > 1 && (i % n != 0 || i + n > kDcacheLineBytes || (dirty & Mask(i, n)) != Mask(i, n))) n /= 2;
        uint64_t v = 0;
        std::memcpy(&v, cached + i, n);
        AtomicStoreN(reinterpret_cast<uint8_t*>(base + i), v, n);
        i += n;
    }
    LineState& st = shard.lines[LineKey{base, launch_}];
    ++st.version;
    line.fillVersion = st.version;  // this block's own write-back leaves its copy current
    line.dirty &= ~part;
    if (line.dirty == 0) {
        st.owner = nullptr;
        gDirtyLines.fetch_sub(1, std::memory_order_relaxed);
    }
    WakeLines(base, base);
}

// SINGLE_CACHE_LINE: the line holding addr, but for an address not 64-byte aligned only the part from the address
// to the next 64-byte boundary (DataCacheCleanAndInvalid.md): bytes before it stay cached, dirty or not.
void DataCache::CleanInvalidate(const void* addr, const std::source_location& where) {
    ++cleanCalls_;
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    const uintptr_t base = a & ~(kDcacheLineBytes - 1);
    if (a == base) invalidatedLines_.insert(base);  // only a whole line counts: a partial one keeps its first bytes
    if (DcacheAcrossLaunches()) invalidated_[base] = true;
    auto it = lines_.find(base);
    if (it == lines_.end()) return;
    const unsigned from = static_cast<unsigned>(a - base);
    WriteBack(base, it->second, where, from);
    const uint64_t part = from == 0 ? ~uint64_t(0) : ~((uint64_t(1) << from) - 1);
    it->second.valid &= ~part;
    if (it->second.valid == 0 && it->second.dirty == 0) lines_.erase(it);
}

bool DataCache::FirstDirty(uintptr_t* base, std::source_location* where) const {
    for (const auto& [b, line] : lines_) {
        if (line.dirty == 0) continue;
        *base = b;
        *where = line.lastStore;
        return true;
    }
    return false;
}

void DataCache::CleanInvalidateAll(const std::source_location& where) {
    ++cleanCalls_;
    for (auto& [base, line] : lines_) WriteBack(base, line, where);
    lines_.clear();
    invalidatedAll_ = true;
}

void DataCache::Drop() {
    if (DcacheAcrossLaunches() && !lines_.empty()) {
        // What the block's core still holds when it is done with this launch.
        std::lock_guard<std::mutex> lock(gHeldMutex);
        for (const auto& [base, line] : lines_) {
            HeldLine& held = gHeld[base];
            auto* dst = reinterpret_cast<uint8_t*>(held.words);
            const auto* src = reinterpret_cast<const uint8_t*>(line.words);
            for (size_t i = 0; i < kDcacheLineBytes; ++i)
                if (line.valid & (uint64_t(1) << i)) dst[i] = src[i];
            held.valid |= line.valid;
        }
    }
    for (auto& [base, line] : lines_) {
        if (line.dirty == 0) continue;
        Shard& shard = ShardOf(base);
        std::lock_guard<std::mutex> lock(shard.mutex);
        shard.lines[LineKey{base, launch_}].owner = nullptr;
        gDirtyLines.fetch_sub(1, std::memory_order_relaxed);
    }
    lines_.clear();
}

void CheckMteWriteAgainstDirtyLines(const void* addr, uint64_t bytes, const std::source_location& where) {
    CheckPeerWriteOrder(addr, bytes, where);
    if (bytes == 0 || gDirtyLines.load(std::memory_order_relaxed) == 0 || !InKernel()) return;
    const void* launch = CurrentBlock().launch;
    const uintptr_t first = reinterpret_cast<uintptr_t>(addr) & ~(kDcacheLineBytes - 1);
    const uintptr_t last = (reinterpret_cast<uintptr_t>(addr) + bytes - 1) & ~(kDcacheLineBytes - 1);
    for (uintptr_t base = first; base <= last; base += kDcacheLineBytes) {
        Shard& shard = ShardOf(base);
        std::lock_guard<std::mutex> lock(shard.mutex);
        auto it = shard.lines.find(LineKey{base, launch});
        if (it == shard.lines.end() || it->second.owner == nullptr) continue;
        Violation("dcache-shared-line",
                  "MTE write into the 64-byte GM line " + Hex(base) +
                      " that a core holds dirty in its scalar cache: its clean will overwrite the copied bytes",
                  where);
    }
}

void ForgetLaunch(const void* launch) {
    for (Shard& shard : gShards) {
        std::lock_guard<std::mutex> lock(shard.mutex);
        for (auto it = shard.lines.begin(); it != shard.lines.end();) {
            if (it->first.launch == launch) {
                it = shard.lines.erase(it);
            } else {
                ++it;
            }
        }
    }
}

uint64_t ParkWakeupsThisThread() { return tParker.woken; }

void WakeParked(const void* addr, uint64_t bytes) {
    if (bytes == 0) return;
    WakeLines(reinterpret_cast<uintptr_t>(addr) & ~(kDcacheLineBytes - 1),
              (reinterpret_cast<uintptr_t>(addr) + bytes - 1) & ~(kDcacheLineBytes - 1));
}

void ParkOn(const void* watched, uint64_t bytes, uint32_t iteration) {
    TimeWaitPoll(iteration);
    if (SharedParkOn(watched, bytes, iteration)) return;  // a window other processes write (twin/park.h)
    const uintptr_t first = reinterpret_cast<uintptr_t>(watched) & ~(kDcacheLineBytes - 1);
    const uintptr_t last = (reinterpret_cast<uintptr_t>(watched) + (bytes ? bytes : 1) - 1) & ~(kDcacheLineBytes - 1);
    if (WaitStep(ClaimParkSlot(), tParker, first, last, iteration, false)) ++tParker.woken;
}

}  // namespace cam::twin
