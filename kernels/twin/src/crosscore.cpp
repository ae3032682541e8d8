// Cross-core flags of a 1:2 mixed launch (twin/crosscore.h, docs/twin.md "Mixed kernels and cross-core flags").
#include "twin/crosscore.h"

#include <chrono>
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "twin/timing.h"

namespace cam::twin {

// One AI core of a mixed launch: its three cores' flag counts and the GM hand-offs between them.
struct MixGroup {
    std::mutex mutex;
    std::condition_variable changed;
    // Sets and waits per flag id. Mode 2: the cube's sets reach both vector cores' counters; a vector core's set
    // reaches the cube's counter once both vector cores have set. Mode 1: a vector core's wait passes once both
    // vector cores have set.
    uint32_t cubeSets[kCrossCoreFlagIds] = {};
    uint32_t cubeWaits[kCrossCoreFlagIds] = {};
    uint32_t vecSets[2][kCrossCoreFlagIds] = {};
    uint32_t vecWaits[2][kCrossCoreFlagIds] = {};
    uint32_t vecPairSets[2][kCrossCoreFlagIds] = {};   // mode 1
    uint32_t vecPairWaits[2][kCrossCoreFlagIds] = {};  // mode 1
    bool ended[3] = {};  // cube, vector 0, vector 1
    bool unmatchedReported = false;
    // GM the cube wrote (published by its next mode-2 set: flag, ordinal) and GM a vector core read of those bytes
    // (published by that core's next mode-2 set).
    struct Access {
        uintptr_t lo, hi;
        int flag = -1;          // -1: no set after it yet
        uint32_t ordinal = 0;   // the set that publishes it (1-based count of that core's sets of `flag`)
        int sub = -1;           // the vector core that read (reads only)
        Pipe pipe = Pipe::FIX;  // the pipe that wrote (writes only): a set on another pipe does not wait for it
        std::source_location where;
    };
    std::vector<Access> writes;  // by the cube
    std::vector<Access> reads;   // by the vector cores, of bytes the cube wrote
    std::vector<std::pair<uintptr_t, uintptr_t>> shared;  // every range the cube wrote in this launch
};

MixGroup* NewMixGroup() { return new MixGroup(); }
void DeleteMixGroup(MixGroup* g) { delete g; }

namespace {

int Slot(const BlockContext& b) { return b.sub < 0 ? 0 : 1 + b.sub; }

std::string Site(const std::source_location& where) { return CallSite(where); }

void CheckFlag(int mode, Pipe pipe, uint16_t flagId, const BlockContext& block, const std::source_location& where) {
    CAM_TWIN_CHECK(flagId < kCrossCoreFlagIds, "cross-core-flag-id",
                   "flag id " + std::to_string(flagId) + " outside 0.." + std::to_string(kCrossCoreFlagIds - 1) +
                       " (A2/A3)",
                   where);
    CAM_TWIN_CHECK(pipe != Pipe::S && pipe != Pipe::kCount, "cross-core-pipe",
                   "cross-core flag issued on PIPE_S or PIPE_ALL", where);
    CAM_TWIN_CHECK(block.mix != nullptr, "cross-core-kernel-type",
                   "cross-core flag in a kernel not declared KERNEL_TYPE_MIX_AIC_1_2 (no cube and vector cores to "
                   "pair)",
                   where);
    CAM_TWIN_CHECK(mode == 1 || mode == 2, "cross-core-mode",
                   "cross-core flag mode " + std::to_string(mode) +
                       ": the twin models mode 1 (the vector cores of one AI core) and mode 2 (cube and vector cores "
                       "of one AI core) only",
                   where);
    CAM_TWIN_CHECK(mode != 1 || block.sub >= 0, "cross-core-mode", "mode 1 (between vector cores) on a cube core",
                   where);
}

// The launch's lock is never taken under a group's.
bool LaunchAbortedNowLocked(std::unique_lock<std::mutex>& lock) {
    lock.unlock();
    const bool aborted = LaunchAbortedNow();
    lock.lock();
    return aborted;
}

bool Overlaps(uintptr_t lo, uintptr_t hi, uintptr_t a, uintptr_t b) { return lo < b && a < hi; }

}  // namespace

void CrossCoreSet(int mode, Pipe pipe, uint16_t flagId, const std::source_location& where) {
    BlockContext& block = CurrentBlock();
    CheckFlag(mode, pipe, flagId, block, where);
    MixGroup& g = *block.mix;
    std::string broken;
    {
        std::lock_guard<std::mutex> lock(g.mutex);
        if (mode == 1) {
            ++g.vecPairSets[block.sub][flagId];
        } else if (block.sub < 0) {
            for (int v = 0; v < 2; ++v)
                if (g.cubeSets[flagId] - g.vecWaits[v][flagId] >= uint32_t(kCrossCoreCounterMax))
                    broken = "vector core " + std::to_string(v) + "'s counter of flag " + std::to_string(flagId) +
                             " already holds " + std::to_string(kCrossCoreCounterMax) + " sets not waited for";
            if (broken.empty()) {
                const uint32_t ordinal = ++g.cubeSets[flagId];
                for (auto& w : g.writes)
                    if (w.flag < 0 && w.pipe == pipe) {
                        w.flag = flagId;
                        w.ordinal = ordinal;
                    }
            }
        } else {
            const int v = block.sub;
            if (g.vecSets[v][flagId] - g.cubeWaits[flagId] >= uint32_t(kCrossCoreCounterMax))
                broken = "the cube core's counter of flag " + std::to_string(flagId) + " already holds " +
                         std::to_string(kCrossCoreCounterMax) + " sets of this vector core not waited for";
            if (broken.empty()) {
                const uint32_t ordinal = ++g.vecSets[v][flagId];
                for (auto& r : g.reads)
                    if (r.sub == v && r.flag < 0) {
                        r.flag = flagId;
                        r.ordinal = ordinal;
                    }
            }
        }
    }
    if (!broken.empty()) Violation("cross-core-counter", broken, where);
    g.changed.notify_all();
    TimeCrossCore(true, mode, pipe, flagId);
}

void CrossCoreWait(int mode, Pipe pipe, uint16_t flagId, const std::source_location& where) {
    BlockContext& block = CurrentBlock();
    CheckFlag(mode, pipe, flagId, block, where);
    MixGroup& g = *block.mix;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(SyncTimeoutSeconds());
    std::unique_lock<std::mutex> lock(g.mutex);
    for (;;) {
        // Whether the counter is non-zero, and whether the cores that could still raise it have all ended.
        bool ready, hopeless;
        if (mode == 1) {
            const int v = block.sub;
            const uint32_t both = std::min(g.vecPairSets[0][flagId], g.vecPairSets[1][flagId]);
            ready = both > g.vecPairWaits[v][flagId];
            // A vector core that ended can add no set: hopeless once an ended one's sets are all taken.
            hopeless = (g.ended[1] && g.vecPairSets[0][flagId] <= g.vecPairWaits[v][flagId]) ||
                       (g.ended[2] && g.vecPairSets[1][flagId] <= g.vecPairWaits[v][flagId]);
            if (ready) ++g.vecPairWaits[v][flagId];
        } else if (block.sub < 0) {
            const uint32_t both = std::min(g.vecSets[0][flagId], g.vecSets[1][flagId]);
            ready = both > g.cubeWaits[flagId];
            hopeless = (g.ended[1] && g.vecSets[0][flagId] <= g.cubeWaits[flagId]) ||
                       (g.ended[2] && g.vecSets[1][flagId] <= g.cubeWaits[flagId]);
            if (ready) ++g.cubeWaits[flagId];
        } else {
            ready = g.cubeSets[flagId] > g.vecWaits[block.sub][flagId];
            hopeless = g.ended[0];
            if (ready) {
                ++g.vecWaits[block.sub][flagId];
                // Publications every vector core has now waited for order every later access: drop them.
                std::erase_if(g.writes, [&](const MixGroup::Access& w) {
                    return w.flag >= 0 && g.vecWaits[0][w.flag] >= w.ordinal && g.vecWaits[1][w.flag] >= w.ordinal;
                });
            }
        }
        if (ready) {
            if (block.sub < 0)
                std::erase_if(g.reads, [&](const MixGroup::Access& r) {
                    return r.flag >= 0 && g.cubeWaits[r.flag] >= r.ordinal;
                });
            break;
        }
        if (hopeless) {
            lock.unlock();
            Violation("cross-core-wait-unmatched",
                      "CrossCoreWaitFlag of flag " + std::to_string(flagId) + " (mode " + std::to_string(mode) +
                          ") with its counter at 0 and every core that could set it ended: the hardware waits "
                          "forever",
                      where);
        }
        if (std::chrono::steady_clock::now() > deadline) {
            lock.unlock();
            Violation("cross-core-wait-timeout",
                      "CrossCoreWaitFlag of flag " + std::to_string(flagId) + " (mode " + std::to_string(mode) +
                          ") still at 0 after " + std::to_string(SyncTimeoutSeconds()) +
                          " s (CAM_TWIN_SYNC_TIMEOUT_S): no core sets it",
                      where);
        }
        g.changed.wait_for(lock, std::chrono::milliseconds(20));
        if (LaunchAbortedNowLocked(lock)) throw LaunchAborted();
    }
    lock.unlock();
    TimeCrossCore(false, mode, pipe, flagId);
}

std::string CrossCoreBlockEnded(BlockContext& block) {
    MixGroup& g = *block.mix;
    std::string left;
    {
        std::lock_guard<std::mutex> lock(g.mutex);
        g.ended[Slot(block)] = true;
        // The last of the AI core's cores to end: a counter still above 0 holds a set no wait took, which the next
        // kernel on these cores would see (every set must be matched by a wait).
        if (g.ended[0] && g.ended[1] && g.ended[2] && !g.unmatchedReported) {
            for (int f = 0; f < kCrossCoreFlagIds && left.empty(); ++f) {
                const uint32_t toCube = std::min(g.vecSets[0][f], g.vecSets[1][f]) - g.cubeWaits[f];
                const uint32_t toVec0 = g.cubeSets[f] - g.vecWaits[0][f], toVec1 = g.cubeSets[f] - g.vecWaits[1][f];
                if (toCube != 0 || toVec0 != 0 || toVec1 != 0)
                    left = "flag " + std::to_string(f) + " ends the kernel with sets not waited for (cube core's "
                           "counter " + std::to_string(toCube) + ", vector cores' " + std::to_string(toVec0) + " and " +
                           std::to_string(toVec1) + "): the next kernel on these cores starts with them";
            }
            g.unmatchedReported = true;
        }
    }
    g.changed.notify_all();
    if (left.empty()) return left;
    return "twin: rule 'cross-core-unmatched-set' broken in kernel " + std::string(block.kernel) + " AI core " +
           std::to_string(block.group) + " at its end: " + left;
}

void CrossCoreGmTouch(Pipe pipe, const void* addr, uint64_t bytes, bool write, const std::source_location& where) {
    if (bytes == 0 || !InKernel()) return;
    BlockContext& block = CurrentBlock();
    if (block.mix == nullptr) return;
    MixGroup& g = *block.mix;
    const auto lo = reinterpret_cast<uintptr_t>(addr), hi = lo + bytes;
    std::string broken;
    {
        std::lock_guard<std::mutex> lock(g.mutex);
        if (block.sub < 0) {
            if (!write) return;
            for (const auto& r : g.reads) {
                if (!Overlaps(lo, hi, r.lo, r.hi)) continue;
                const bool freed = r.flag >= 0 && g.cubeWaits[r.flag] >= r.ordinal;
                if (!freed) {
                    broken = "cube write over GM that vector core " + std::to_string(r.sub) + " read (" +
                             Site(r.where) + ") " +
                             (r.flag < 0 ? std::string("and has not flagged free since")
                                         : "and flagged free with flag " + std::to_string(r.flag) +
                                               ", which this core has not waited for");
                    break;
                }
            }
            if (broken.empty()) {
                g.writes.push_back({lo, hi, -1, 0, -1, pipe, where});
                bool merged = false;
                for (auto& s : g.shared)
                    if (lo <= s.second && s.first <= hi) {
                        s.first = std::min(s.first, lo);
                        s.second = std::max(s.second, hi);
                        merged = true;
                        break;
                    }
                if (!merged) g.shared.push_back({lo, hi});
            }
        } else {
            if (write) return;
            bool sharedBytes = false;
            for (const auto& s : g.shared) sharedBytes = sharedBytes || Overlaps(lo, hi, s.first, s.second);
            if (!sharedBytes) return;
            for (const auto& w : g.writes) {
                if (!Overlaps(lo, hi, w.lo, w.hi)) continue;
                const bool published = w.flag >= 0 && g.vecWaits[block.sub][w.flag] >= w.ordinal;
                if (!published) {
                    broken = "vector core read of GM its cube core wrote (" + Site(w.where) + ") " +
                             (w.flag < 0 ? std::string("with no cross-core flag set on the writing pipe (") +
                                               PipeName(w.pipe) + ") after that write"
                                         : "before waiting for the cube's flag " + std::to_string(w.flag) +
                                               " that publishes it");
                    break;
                }
            }
            if (broken.empty()) g.reads.push_back({lo, hi, -1, 0, block.sub, pipe, where});
        }
    }
    if (!broken.empty())
        Violation(block.sub < 0 ? "cross-core-write-before-free" : "cross-core-read-before-flag", broken, where);
}

bool CoreIsAiv() {
    if (!InKernel()) return true;
    return CurrentBlock().coreKind != static_cast<uint8_t>(CoreKind::Cube);
}

int64_t TaskRation() {
    if (!InKernel()) return 1;
    const BlockContext& b = CurrentBlock();
    return b.mix != nullptr && b.sub >= 0 ? 2 : 1;
}

}  // namespace cam::twin
