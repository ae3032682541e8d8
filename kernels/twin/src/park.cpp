#include "twin/park.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <utility>

#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace cam::twin {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free,
              "futex words are plain 32-bit words");

bool ParkWhileEqual(const std::atomic<uint32_t>& word, uint32_t seen, std::chrono::nanoseconds timeout, bool shared) {
    if (word.load(std::memory_order_acquire) != seen) return true;
    if (timeout.count() <= 0) return false;
    timespec ts;
    ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
    ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
    // Relative timeout. Private futex unless shared: without FUTEX_PRIVATE_FLAG the kernel keys the wait on the
    // shared page, so another process's wake reaches it. EAGAIN (word changed), EINTR (a signal) and a wake all
    // return "maybe changed"; ETIMEDOUT is the only "no".
    const long rc = syscall(SYS_futex, reinterpret_cast<const uint32_t*>(&word),
                            shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
    return !(rc == -1 && errno == ETIMEDOUT);
}

void UnparkAll(std::atomic<uint32_t>& word, bool shared) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
            nullptr, 0);
}

int64_t SpinNs() {
    static const int64_t ns = [] {
        const char* env = std::getenv("CAM_TWIN_SPIN_NS");
        if (env && *env) {
            const long long v = std::atoll(env);
            if (v >= 0 && v <= 10000000) return static_cast<int64_t>(v);
        }
        return int64_t{0};
    }();
    return ns;
}

void TightenTimerSlack() { prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); }

// ---------------------------------------------------------------- waits on shared regions (twin/park.h)

namespace {

// Lives in memory that several processes map: lock-free atomics only (they are address-free), and offsets, never
// pointers. A peer process can write any of it; nothing here is dereferenced, only compared, bumped and futex-woken,
// and the scan bound is clamped to the table.
struct SharedSlot {
    std::atomic<uint32_t> claimed;   // 0: free; else one waiting thread owns it
    std::atomic<uint32_t> word;      // futex word: bumped by every write to a watched line
    std::atomic<uint32_t> sleeping;  // the owner is (about to be) in the futex wait: writers must wake it
    uint32_t unused;
    std::atomic<uint64_t> first;     // the watched lines, as offset from the region's base + 1; first == 0: none
    std::atomic<uint64_t> last;
};
constexpr uint32_t kSharedSlots = (kSharedParkBytes - 64) / sizeof(SharedSlot);
struct SharedTable {
    std::atomic<uint32_t> used;  // slots [0, used) were ever claimed: the writers' scan bound
    uint32_t unused[15];
    SharedSlot slots[kSharedSlots];
};
static_assert(sizeof(SharedTable) <= kSharedParkBytes, "the park table fits its reserved bytes");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared park words are lock-free, hence address-free");

// Every shared region this process maps. Entries are written under gRegionsMutex and read without it. Any MTE
// write of the process looks the registry up (WakeLines), also one into unrelated memory while another thread
// unregisters a region, so a reader that uses an entry holds it (`users`) and re-checks it is still registered;
// UnregisterSharedRegion returns, and the transport unmaps, only once no reader holds it.
struct Region {
    std::atomic<uintptr_t> base{0};  // 0: free entry
    std::atomic<uint64_t> bytes{0};
    std::atomic<SharedTable*> table{nullptr};
    std::atomic<uint64_t> id{0};  // unique per registration: a thread's slot claim names its region by id
    std::atomic<uint32_t> users{0};
};
constexpr uint32_t kRegions = 256;  // windows one process maps: its own and every peer's, for a few Comms
Region gRegions[kRegions];
std::atomic<uint32_t> gRegionsUsed{0};  // entries [0, used) were ever taken
std::atomic<uint32_t> gRegionsLive{0};  // 0: no shared region, every wait is ParkOn's private one
std::mutex gRegionsMutex;
uint64_t gNextRegionId = 1;

// The registered region holding `a`, held (release with ~Held) so it stays mapped while it is used; or none.
class Held {
public:
    explicit Held(uintptr_t a) {
        if (gRegionsLive.load(std::memory_order_acquire) == 0) return;
        const uint32_t used = gRegionsUsed.load(std::memory_order_acquire);
        for (uint32_t i = 0; i < used; ++i) {
            Region& r = gRegions[i];
            const uintptr_t b = r.base.load(std::memory_order_acquire);
            if (b == 0 || a < b || a - b >= r.bytes.load(std::memory_order_relaxed)) continue;
            r.users.fetch_add(1, std::memory_order_seq_cst);
            // Pairs with UnregisterSharedRegion: it clears base, then waits for users; we count, then re-check.
            if (r.base.load(std::memory_order_seq_cst) == b) {
                region_ = &r;
                base_ = b;
                return;
            }
            r.users.fetch_sub(1, std::memory_order_release);
        }
    }
    ~Held() {
        if (region_) region_->users.fetch_sub(1, std::memory_order_release);
    }
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    Region* get() const { return region_; }
    uintptr_t base() const { return base_; }

private:
    Region* region_ = nullptr;
    uintptr_t base_ = 0;
};

bool RegionLive(uint64_t id) {  // under gRegionsMutex
    for (uint32_t i = 0; i < gRegionsUsed.load(std::memory_order_relaxed); ++i)
        if (gRegions[i].base.load(std::memory_order_relaxed) != 0 && gRegions[i].id.load(std::memory_order_relaxed) == id)
            return true;
    return false;
}

// A thread's slots in the regions it waited on (a block thread waits in its own rank's window: one is the rule).
struct SharedParker {
    uint64_t region = 0;  // the region's id; 0: unused
    SharedSlot* slot = nullptr;
    uint64_t first = 0, last = 0;  // what the slot is registered on
    uint32_t seen = 0;             // the slot's word when the wait last polled
};
struct SharedParkers {
    SharedParker parkers[4];
    SharedParker unclaimed;  // WaitStep's state for waits with no slot (they only ever take timed parks)
    uint64_t woken = 0;
    ~SharedParkers() {
        std::lock_guard<std::mutex> lock(gRegionsMutex);  // the region stays mapped while it is registered
        for (SharedParker& p : parkers) {
            if (p.slot == nullptr || !RegionLive(p.region)) continue;
            p.slot->first.store(0, std::memory_order_release);
            p.slot->claimed.store(0, std::memory_order_release);
        }
    }
};
thread_local SharedParkers tShared;

SharedParker* ClaimSharedSlot(const Region& r) {
    const uint64_t id = r.id.load(std::memory_order_acquire);
    SharedParker* spare = nullptr;
    for (SharedParker& p : tShared.parkers) {
        if (p.region == id) return p.slot ? &p : nullptr;
        if (p.region == 0 && spare == nullptr) spare = &p;
    }
    if (spare == nullptr) {  // reuse the entry of a region that is gone (a closed Comm)
        std::lock_guard<std::mutex> lock(gRegionsMutex);
        for (SharedParker& p : tShared.parkers) {
            if (!RegionLive(p.region)) {
                p = SharedParker{};
                spare = &p;
                break;
            }
        }
    }
    if (spare == nullptr) return nullptr;  // more live regions than a thread keeps slots in: timed parks there
    spare->region = id;
    SharedTable* t = r.table.load(std::memory_order_acquire);
    for (uint32_t i = 0; i < kSharedSlots; ++i) {
        uint32_t free = 0;
        if (!t->slots[i].claimed.compare_exchange_strong(free, 1, std::memory_order_acq_rel)) continue;
        uint32_t used = t->used.load(std::memory_order_relaxed);
        while (used < i + 1 && !t->used.compare_exchange_weak(used, i + 1, std::memory_order_acq_rel)) {
        }
        spare->slot = &t->slots[i];
        return spare;
    }
    return nullptr;  // a full table: this thread's waits there stay timed parks
}

// The lines of [a, a + bytes) in a region based at `base`, as the table stores them: offsets of line bases + 1.
std::pair<uint64_t, uint64_t> RegionLines(uintptr_t a, uint64_t bytes, uintptr_t base) {
    constexpr uint64_t kLineMask = ~uint64_t(63);  // the scalar cache's 64-byte lines (twin/dcache.h)
    return {((a - base) & kLineMask) + 1, ((a + bytes - 1 - base) & kLineMask) + 1};
}

}  // namespace

bool SharedParksEnabled() {
    static const bool enabled = [] {
        const char* env = std::getenv("CAM_TWIN_SHARED_PARK");
        return !(env && env[0] == '0' && env[1] == '\0');
    }();
    return enabled;
}

bool RegisterSharedRegion(const void* base, uint64_t bytes, void* table) {
    if (base == nullptr || bytes == 0 || table == nullptr || !SharedParksEnabled()) return false;
    std::lock_guard<std::mutex> lock(gRegionsMutex);
    for (uint32_t i = 0; i < kRegions; ++i) {
        Region& r = gRegions[i];
        // A just-unregistered entry may still have a reader leaving it: take another.
        if (r.base.load(std::memory_order_relaxed) != 0 || r.users.load(std::memory_order_acquire) != 0) continue;
        r.bytes.store(bytes, std::memory_order_relaxed);
        r.table.store(static_cast<SharedTable*>(table), std::memory_order_relaxed);
        r.id.store(gNextRegionId++, std::memory_order_relaxed);
        r.base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
        if (gRegionsUsed.load(std::memory_order_relaxed) < i + 1) gRegionsUsed.store(i + 1, std::memory_order_release);
        gRegionsLive.fetch_add(1, std::memory_order_acq_rel);
        return true;
    }
    return false;
}

void UnregisterSharedRegion(const void* base) {
    Region* gone = nullptr;
    {
        std::lock_guard<std::mutex> lock(gRegionsMutex);
        for (uint32_t i = 0; i < gRegionsUsed.load(std::memory_order_relaxed); ++i) {
            Region& r = gRegions[i];
            if (r.base.load(std::memory_order_relaxed) != reinterpret_cast<uintptr_t>(base)) continue;
            r.base.store(0, std::memory_order_seq_cst);
            r.id.store(0, std::memory_order_relaxed);
            gRegionsLive.fetch_sub(1, std::memory_order_acq_rel);
            gone = &r;
            break;
        }
    }
    // Outside the lock (a holder may take it to reuse a thread's slot entry). A holder keeps the region for one
    // scan or one park (at most 200 µs): no kernel waits on a window whose transport is being destroyed.
    while (gone != nullptr && gone->users.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

bool SharedParkOn(const void* watched, uint64_t bytes, uint32_t iteration) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(watched);
    const Held held(a);
    Region* r = held.get();
    if (r == nullptr) return false;
    const auto [first, last] = RegionLines(a, bytes ? bytes : 1, held.base());
    SharedParker* me = ClaimSharedSlot(*r);
    if (WaitStep(me ? me->slot : nullptr, me ? *me : tShared.unclaimed, first, last, iteration, true)) ++tShared.woken;
    return true;
}

void SharedWake(const void* addr, uint64_t bytes) {
    if (bytes == 0) return;
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    const Held held(a);
    Region* r = held.get();
    if (r == nullptr) return;
    SharedTable* t = r->table.load(std::memory_order_acquire);
    const auto [first, last] = RegionLines(a, bytes, held.base());
    // The caller's fence after its writes (WakeLines) pairs with SharedParkOn's registration.
    const uint32_t used = t->used.load(std::memory_order_acquire);
    // A peer can write the table: never scan past it.
    WakeSlots(t->slots, used < kSharedSlots ? used : kSharedSlots, first, last, true);
}

uint64_t SharedParkWakeupsThisThread() { return tShared.woken; }

}  // namespace cam::twin
