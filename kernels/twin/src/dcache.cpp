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

#include "twin/park.h"
#include "twin/runtime.h"

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
    // Parking (ParkOn): the futex word bumped on every write to a line of this shard; parked blocks wait for a
    // change. `parked` spares writers the wake-up system call when nobody waits.
    std::atomic<uint32_t> epoch{0};
    std::atomic<int32_t> parked{0};
};

Shard gShards[kShards];
std::atomic<int64_t> gDirtyLines{0};

Shard& ShardOf(uintptr_t base) { return gShards[(base / kDcacheLineBytes) % kShards]; }

void Wake(Shard& shard) {
    // ParkOn counts itself in (seq_cst) before it reads the epoch it waits on. If this load sees nobody counted in,
    // every parker's epoch read comes later in the seq_cst order, so a bump here would only be folded into the value
    // that parker waits on: skipping it changes nothing a parker can observe, and spares every copy out a locked RMW
    // per line it wrote. A parker seen here gets the bump after it counted itself in, and the wake-up.
    if (shard.parked.load(std::memory_order_seq_cst) == 0) return;
    shard.epoch.fetch_add(1, std::memory_order_seq_cst);
    UnparkAll(shard.epoch);
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
    Line& line = Fill(base);
    const uint64_t want = Mask(a - base, bytes);
    auto* cached = reinterpret_cast<uint8_t*>(line.words) + (a - base);
    if ((line.valid & want) != want) {
        const uint64_t v = AtomicLoadN(reinterpret_cast<const uint8_t*>(a), bytes);
        for (size_t i = 0; i < bytes; ++i) {
            // Bytes already in the line (fetched earlier or stored by this block) keep their value.
            if (!(line.valid & (uint64_t(1) << (a - base + i)))) cached[i] = reinterpret_cast<const uint8_t*>(&v)[i];
        }
        line.valid |= want;
    }
    std::memcpy(out, cached, bytes);
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
    line.dirty |= Mask(a - base, bytes);
    line.valid |= Mask(a - base, bytes);
}

void DataCache::WriteBack(uintptr_t base, Line& line, const std::source_location& where) {
    (void)where;
    if (line.dirty == 0) return;
    Shard& shard = ShardOf(base);
    std::lock_guard<std::mutex> lock(shard.mutex);
    // Only the bytes this block stored, each run with the widest aligned atomic store it fills, so nothing outside
    // what the kernel wrote is touched.
    const auto* cached = reinterpret_cast<const uint8_t*>(line.words);
    for (size_t i = 0; i < kDcacheLineBytes;) {
        if (!(line.dirty & (uint64_t(1) << i))) {
            ++i;
            continue;
        }
        size_t n = 8;
        while (n > 1 && (i % n != 0 || i + n > kDcacheLineBytes || (line.dirty & Mask(i, n)) != Mask(i, n))) n /= 2;
        uint64_t v = 0;
        std::memcpy(&v, cached + i, n);
        AtomicStoreN(reinterpret_cast<uint8_t*>(base + i), v, n);
        i += n;
    }
    LineState& st = shard.lines[LineKey{base, launch_}];
    st.owner = nullptr;
    ++st.version;
    line.dirty = 0;
    gDirtyLines.fetch_sub(1, std::memory_order_relaxed);
    Wake(shard);
}

void DataCache::CleanInvalidate(const void* addr, const std::source_location& where) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(addr) & ~(kDcacheLineBytes - 1);
    auto it = lines_.find(base);
    if (it == lines_.end()) return;
    WriteBack(base, it->second, where);
    lines_.erase(it);
}

void DataCache::CleanInvalidateAll(const std::source_location& where) {
    for (auto& [base, line] : lines_) WriteBack(base, line, where);
    lines_.clear();
}

void DataCache::Drop() {
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

void WakeParked(const void* addr, uint64_t bytes) {
    if (bytes == 0) return;
    const uintptr_t first = reinterpret_cast<uintptr_t>(addr) & ~(kDcacheLineBytes - 1);
    const uintptr_t last = (reinterpret_cast<uintptr_t>(addr) + bytes - 1) & ~(kDcacheLineBytes - 1);
    for (uintptr_t base = first; base <= last && base - first < kShards * kDcacheLineBytes; base += kDcacheLineBytes)
        Wake(ShardOf(base));
}

void ParkOn(const void* watched, uint32_t iteration) {
    // The first polls of a wait re-poll at once (a signal about to arrive costs no sleep). No sched_yield: on a
    // loaded machine a yield can give the CPU away for a whole time slice.
    if (iteration < 16) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        return;
    }
    // In-process writers (MTE copies, cleans) wake the block at once; the timeout bounds the wait for writes the
    // twin does not see (a peer process, the host) and keeps the kernel's own deadline check running. It grows with
    // the wait: a block waking every 20 µs for nothing takes the CPU from the producers it waits for (many blocks
    // share 2 CPUs here). Block threads run with a 1 µs timer slack (twin/park.h), so the interval is what the block
    // sleeps; 200 µs is about what the old 100 µs sleeps really lasted with the default slack.
    const auto interval = std::chrono::microseconds(iteration < 256 ? 50 : 200);
    Shard& shard = ShardOf(reinterpret_cast<uintptr_t>(watched) & ~(kDcacheLineBytes - 1));
    shard.parked.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = shard.epoch.load(std::memory_order_seq_cst);
    ParkWhileEqual(shard.epoch, seen, interval);
    shard.parked.fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace cam::twin
