// Rule gm-unordered-access: a happens-before check over one launch's GM copies (twin/gm_race.h).
#include "twin/gm_race.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "twin/crosscore.h"
#include "twin/runtime.h"

namespace cam::twin {

namespace {

// One logged GM copy: bursts of `burst` bytes from `lo`, `pitch` apart; by core `core` in its epoch `epoch`.
struct Access {
    uintptr_t lo;
    uint64_t burst, bursts, pitch;
    uint32_t core, epoch;
    bool write;
    std::source_location where;
    uintptr_t Hi() const { return lo + (bursts - 1) * pitch + burst; }
};

}  // namespace

// A core of the launch. Its clock `vc` (one entry per core of the launch) holds, at its own index, the core's
// epoch: it moves on after the core released its clock (a set, a word write, a SyncAll) and at every acquire that
// taught it something, so every epoch has one clock, kept in `hist` for the end-of-launch comparison.
struct GmRaceCore {
    uint32_t idx = 0;
    uint32_t group = 0;
    int8_t slot = 0;  // 0: a block or a cube core; 1 / 2: vector core 0 / 1 of a mixed launch's AI core
    bool mixed = false;
    std::vector<uint32_t> vc;
    std::vector<uint32_t> hist;  // hist[(e - 1) * n .. e * n): the clock of epoch e
    bool released = false;       // the clock of the current epoch was handed out: the next access starts a new one
    int64_t snap = -1;           // the launch's snapshot of the current epoch's clock, once made
    uint32_t syncAlls = 0;
    uint32_t sets[2][kCrossCoreFlagIds] = {};
    uint32_t waits[2][kCrossCoreFlagIds] = {};
    std::vector<Access> log;

    uint32_t Epoch() const { return vc[idx]; }
    void Bump() {
        ++vc[idx];
        hist.insert(hist.end(), vc.begin(), vc.end());
        released = false;
        snap = -1;
    }
    // The epoch an access belongs to: a new one if this core released its clock since its last access.
    uint32_t AccessEpoch() {
        if (released) Bump();
        return Epoch();
    }
    void Join(const uint32_t* other) {
        bool learnt = false;
        for (size_t i = 0; i < vc.size(); ++i)
            if (other[i] > vc[i]) {
                vc[i] = other[i];
                learnt = true;
            }
        if (learnt) {
            // The joined entries are already in vc; the new epoch's clock is vc with its own entry moved on.
            ++vc[idx];
            hist.insert(hist.end(), vc.begin(), vc.end());
            released = false;
            snap = -1;
        }
    }
};

struct GmRaceLaunch {
    uint32_t blockDim = 0;
    uint32_t n = 0;  // clock entries: three per block (a mixed launch's cube core and two vector cores)
    std::mutex mutex;
    std::vector<std::unique_ptr<GmRaceCore>> cores;  // by index, made at a core's first use (under mutex)
    std::vector<uint32_t> barrier[2];                // SyncAll: the joined clocks of the arrivals, per parity
    std::deque<std::vector<uint32_t>> snaps;         // released clocks (a deque: references stay valid)
    std::unordered_map<uint64_t, uint32_t> words;    // GM word (address / 8) -> snapshot of its newest writer
    // Set (under mutex) at the first word write: until then a word read has nothing to acquire and takes no lock (a
    // kernel without GM-word hand-offs, the GMM's, pays one load per scalar fetch). A read that misses a write made
    // at the same time acquires nothing from it, as it could not have seen its value either.
    std::atomic<bool> anyWords{false};
    // Cross-core sets: (AI core, slot, mode, flag) -> the snapshot of each set, in the setter's order.
    std::map<std::tuple<uint32_t, int, int, int>, std::vector<uint32_t>> sets;
};

namespace {

GmRaceCore* Core() {
    if (!InKernel()) return nullptr;
    BlockContext& b = CurrentBlock();
    if (b.gmRace == nullptr) return nullptr;
    if (b.gmRaceCore != nullptr) {
        if (b.mix != nullptr) b.gmRaceCore->mixed = true;
        return b.gmRaceCore;
    }
    GmRaceLaunch& l = *b.gmRace;
    const int8_t slot = b.sub < 0 ? 0 : int8_t(1 + b.sub);
    const uint32_t group = b.sub < 0 ? b.blockIdx : b.group;
    const uint32_t idx = 3 * group + uint32_t(slot);
    auto core = std::make_unique<GmRaceCore>();
    core->idx = idx;
    core->group = group;
    core->slot = slot;
    core->mixed = b.mix != nullptr;
    core->vc.assign(l.n, 0);
    core->vc[idx] = 1;
    core->hist = core->vc;
    std::lock_guard<std::mutex> lock(l.mutex);
    if (idx >= l.cores.size()) return nullptr;  // a block index outside the launch: other rules report it
    l.cores[idx] = std::move(core);
    b.gmRaceCore = l.cores[idx].get();
    return b.gmRaceCore;
}

// The snapshot of the core's current clock (made once per epoch), and the next access starts a new epoch.
uint32_t Release(GmRaceLaunch& l, GmRaceCore& c) {
    c.released = true;
    if (c.snap < 0) {
        c.snap = int64_t(l.snaps.size());
        l.snaps.push_back(c.vc);
    }
    return uint32_t(c.snap);
}

void Acquire(GmRaceLaunch& l, GmRaceCore& c, uint32_t snap) {
    // Another core's snapshot is never the joining core's own vector: copy out under the lock the caller holds.
    c.Join(l.snaps[snap].data());
}

void WordRelease(GmRaceCore& c, uintptr_t lo, uint64_t bytes) {
    GmRaceLaunch& l = *CurrentBlock().gmRace;
    std::lock_guard<std::mutex> lock(l.mutex);
    const uint32_t s = Release(l, c);
    for (uint64_t w = lo >> 3; w <= (lo + bytes - 1) >> 3; ++w) l.words[w] = s;
    l.anyWords.store(true, std::memory_order_release);
}

void WordAcquire(GmRaceCore& c, uintptr_t lo, uint64_t bytes) {
    GmRaceLaunch& l = *CurrentBlock().gmRace;
    if (!l.anyWords.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(l.mutex);
    for (uint64_t w = lo >> 3; w <= (lo + bytes - 1) >> 3; ++w)
        if (auto it = l.words.find(w); it != l.words.end()) Acquire(l, c, it->second);
}

std::string Hex(uintptr_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

std::string CoreName(const GmRaceCore& c, bool mixed) {
    if (!mixed) return "block " + std::to_string(c.group);
    if (c.slot == 0) return "the cube core of AI core " + std::to_string(c.group);
    return "vector core " + std::to_string(c.slot - 1) + " of AI core " + std::to_string(c.group) + " (block " +
           std::to_string(2 * c.group + uint32_t(c.slot - 1)) + ")";
}

// The first byte range both copies touch ([*lo, *hi)); false if their bursts are disjoint.
bool BurstsOverlap(const Access& x, const Access& y, uintptr_t* lo, uintptr_t* hi) {
    const Access& a = x.bursts <= y.bursts ? x : y;  // walk the copy with fewer bursts
    const Access& b = x.bursts <= y.bursts ? y : x;
    for (uint64_t i = 0; i < a.bursts; ++i) {
        const uintptr_t s = a.lo + i * a.pitch, e = s + a.burst;
        if (e <= b.lo || s >= b.Hi()) continue;
        // b's bursts k with b.lo + k * pitch < e and b.lo + k * pitch + burst > s.
        uint64_t kFirst = 0, kLast = 0;
        if (b.bursts > 1 && b.pitch > 0) {
            const int64_t from = int64_t(s) - int64_t(b.lo) - int64_t(b.burst) + 1;  // k * pitch >= from
            kFirst = from <= 0 ? 0 : uint64_t((from + int64_t(b.pitch) - 1) / int64_t(b.pitch));
            kLast = std::min<uint64_t>(b.bursts - 1, uint64_t(int64_t(e) - 1 - int64_t(b.lo)) / b.pitch);
            if (kFirst > kLast) continue;
        }
        const uintptr_t bs = b.lo + kFirst * b.pitch;
        *lo = std::max(s, bs);
        *hi = std::min(e, bs + b.burst);
        return true;
    }
    return false;
}

}  // namespace

bool GmRaceEnabled() {
    static const bool on = [] {
        const char* env = std::getenv("CAM_TWIN_GM_RACE");
        return env != nullptr && env[0] == '1' && env[1] == '\0';
    }();
    return on;
}

GmRaceLaunch* GmRaceLaunchBegin(uint32_t blockDim) {
    if (!GmRaceEnabled()) return nullptr;
    auto* l = new GmRaceLaunch();
    l->blockDim = blockDim;
    l->n = 3 * blockDim;
    l->cores.resize(l->n);
    l->barrier[0].assign(l->n, 0);
    l->barrier[1].assign(l->n, 0);
    return l;
}

GmRaceCopy::GmRaceCopy(Pipe pipe, const void* gm, uint64_t burstBytes, uint64_t bursts, uint64_t pitch,
                       const std::source_location& where) {
    if (burstBytes == 0 || bursts == 0) return;
    GmRaceCore* c = Core();
    if (c == nullptr) return;
    const bool write = pipe != Pipe::MTE2;
    const auto lo = reinterpret_cast<uintptr_t>(gm);
    if (bursts == 1 && burstBytes <= kGmRaceWordBytes) {
        if (write) {
            WordRelease(*c, lo, burstBytes);
        } else {
            acquire_ = gm;
            bytes_ = burstBytes;
        }
        return;
    }
    if (bursts == 1) pitch = burstBytes;
    const uint32_t epoch = c->AccessEpoch();
    if (!c->log.empty()) {
        Access& last = c->log.back();
        if (last.epoch == epoch && last.write == write) {
            // A copy the core repeats in one epoch (a tile read again) orders and races exactly as the first one.
            if (last.lo == lo && last.burst == burstBytes && last.bursts == bursts && last.pitch == pitch) return;
            // A one-burst copy that continues the last one (a buffer streamed in chunks) is one access with it.
            if (last.bursts == 1 && bursts == 1 && last.lo + last.burst == lo) {
                last.burst += burstBytes;
                last.pitch = last.burst;
                return;
            }
        }
    }
    c->log.push_back(Access{lo, burstBytes, bursts, pitch, c->idx, epoch, write, where});
}

GmRaceCopy::~GmRaceCopy() {
    if (acquire_ == nullptr) return;
    if (GmRaceCore* c = Core()) WordAcquire(*c, reinterpret_cast<uintptr_t>(acquire_), bytes_);
}

void GmRaceWordRelease(const void* gm, uint64_t bytes) {
    if (bytes == 0) return;
    if (GmRaceCore* c = Core()) WordRelease(*c, reinterpret_cast<uintptr_t>(gm), bytes);
}

void GmRaceWordAcquire(const void* gm, uint64_t bytes) {
    if (bytes == 0) return;
    if (GmRaceCore* c = Core()) WordAcquire(*c, reinterpret_cast<uintptr_t>(gm), bytes);
}

// Two parities suffice: a core arrives at barrier k + 2 only after every core left barrier k + 1, so after every
// core read barrier k's entry; what is left there from barrier k is older than every clock that joins it again.
void GmRaceSyncAllArrive() {
    GmRaceCore* c = Core();
    if (c == nullptr) return;
    GmRaceLaunch& l = *CurrentBlock().gmRace;
    std::lock_guard<std::mutex> lock(l.mutex);
    c->released = true;
    std::vector<uint32_t>& b = l.barrier[c->syncAlls % 2];
    for (uint32_t i = 0; i < l.n; ++i) b[i] = std::max(b[i], c->vc[i]);
}

void GmRaceSyncAllLeave() {
    GmRaceCore* c = Core();
    if (c == nullptr) return;
    GmRaceLaunch& l = *CurrentBlock().gmRace;
    std::lock_guard<std::mutex> lock(l.mutex);
    c->Join(l.barrier[c->syncAlls % 2].data());
    ++c->syncAlls;
}

void GmRaceCrossSet(int mode, uint16_t flagId) {
    if (flagId >= kCrossCoreFlagIds || (mode != 1 && mode != 2)) return;  // refused by the cross-core rules
    GmRaceCore* c = Core();
    if (c == nullptr) return;
    GmRaceLaunch& l = *CurrentBlock().gmRace;
    std::lock_guard<std::mutex> lock(l.mutex);
    ++c->sets[mode - 1][flagId];
    l.sets[{c->group, c->slot, mode, flagId}].push_back(Release(l, *c));
}

// The j-th wait of a counter is satisfied by the j-th set of each core that raises it (twin/crosscore.h): mode 2 on
// a vector core, the cube core's; mode 2 on the cube core and mode 1, both vector cores'.
void GmRaceCrossWaited(int mode, uint16_t flagId) {
    if (flagId >= kCrossCoreFlagIds || (mode != 1 && mode != 2)) return;
    GmRaceCore* c = Core();
    if (c == nullptr) return;
    GmRaceLaunch& l = *CurrentBlock().gmRace;
    std::lock_guard<std::mutex> lock(l.mutex);
    const uint32_t j = ++c->waits[mode - 1][flagId];
    for (int src = 0; src < 3; ++src) {
        const bool raises = mode == 2 ? (c->slot == 0) == (src != 0) : src != 0;
        if (!raises) continue;
        auto it = l.sets.find({c->group, src, mode, flagId});
        if (it != l.sets.end() && it->second.size() >= j) Acquire(l, *c, it->second[j - 1]);
    }
}

std::string GmRaceLaunchEnd(GmRaceLaunch* launch, const char* kernel, bool failed) {
    std::unique_ptr<GmRaceLaunch> l(launch);
    if (l == nullptr || failed) return {};
    bool mixed = false;
    std::vector<const Access*> all;
    for (const auto& c : l->cores)
        if (c) {
            mixed = mixed || c->mixed;
            for (const Access& a : c->log) all.push_back(&a);
        }
    if (all.size() < 2) return {};
    // Address order, then core, then the core's own order: the first race found is the same in every run.
    std::stable_sort(all.begin(), all.end(), [](const Access* a, const Access* b) {
        return a->lo != b->lo ? a->lo < b->lo : a->core < b->core;
    });
    const uint32_t n = l->n;
    auto before = [&](const Access& a, const Access& b) {  // a happens before b
        const GmRaceCore& cb = *l->cores[b.core];
        return cb.hist[size_t(b.epoch - 1) * n + a.core] >= a.epoch;
    };
    // A sweep in address order: every access meets the earlier writes (and, a write, the earlier reads) whose span
    // reaches it; spans behind it leave the active lists as they are met.
    std::vector<const Access*> writes, reads;
    const Access *first = nullptr, *second = nullptr;
    uintptr_t rlo = 0, rhi = 0;
    auto meet = [&](std::vector<const Access*>& active, const Access& a) {
        for (size_t i = 0; i < active.size();) {
            const Access& b = *active[i];
            if (b.Hi() <= a.lo) {
                active[i] = active.back();
                active.pop_back();
                continue;
            }
            ++i;
            if (b.core == a.core || before(b, a) || before(a, b)) continue;
            uintptr_t lo, hi;
            if (!BurstsOverlap(a, b, &lo, &hi)) continue;
            first = &b;
            second = &a;
            rlo = lo;
            rhi = hi;
            return true;
        }
        return false;
    };
    for (const Access* a : all) {
        if (meet(writes, *a) || (a->write && meet(reads, *a))) break;
        (a->write ? writes : reads).push_back(a);
    }
    if (first == nullptr) return {};
    // Name the earlier site first when one is a write: "A wrote ... B read".
    const Access& w = first->write ? *first : *second;
    const Access& o = &w == first ? *second : *first;
    const GmRaceCore& cw = *l->cores[w.core];
    const GmRaceCore& co = *l->cores[o.core];
    return "twin: rule 'gm-unordered-access' broken in kernel " + std::string(kernel) + " at " + CallSite(o.where) +
           ": " + CoreName(cw, mixed) + " wrote GM [" + Hex(rlo) + ", " + Hex(rhi) + ") at " + CallSite(w.where) +
           " and " + CoreName(co, mixed) + (o.write ? " wrote" : " read") +
           " it with no SyncAll, cross-core flag or GM-word wait ordering the two (either may land first)";
}

}  // namespace cam::twin
