// Rule gm-unordered-access (docs/twin.md, "GM accesses no synchronization orders"): within one launch, two cores'
// MTE accesses of overlapping GM bytes, at least one a write, that no synchronization the kernel uses orders are a
// race. On Ascend the cores run unsynchronized, so such a pair reads or leaves whichever bytes land first: silent
// data corruption that the twin's host threads may or may not happen to show.
//
// The twin judges it by a happens-before relation, never by which host thread ran first. Every core of a launch
// (each block of a vector launch; the cube core and both vector cores of every AI core of a 1:2 mixed launch)
// carries a vector clock; the edges that order cores are the ones the kernels use:
//   - SyncAll: every core of the launch joins every other's clock;
//   - CrossCoreSetFlag -> the CrossCoreWaitFlag it satisfies (the j-th wait of a counter takes the j-th set of the
//     cores that raise it);
//   - GM words: a write of a word (an MTE copy of one burst of at most kGmRaceWordBytes, or a scalar write-back)
//     releases the writer's clock on its 8-byte words; a read of such a word (the same kind of copy, or a scalar
//     load) acquires the clock of the newest write logged there. Word accesses are the synchronization itself
//     (flags, counters, decisions polled in a loop) and are not checked against each other.
// Every other GM copy (DataCopy / DataCopyPad GM<->UB/L1, the cube's GM->L1 copies, Fixpipe L0C->GM) is logged by
// its core with its epoch, exact burst structure and call site, and the launch's logs are compared when it ends:
// the pairs then depend only on what each core accessed and on the sync edges, not on the interleaving. A word
// read that acquires a write newer than the one it saw only orders more pairs (never refuses a correct kernel).
// Program order inside a core (its pipes and flags) is the pipe-order rules' job, not this one's.
//
// On with CAM_TWIN_GM_RACE=1, which tests/conftest.py sets for every test: its logging costs the GMM kernels a few
// per cent of the twin's CPU time (docs/twin.md), which benchmarks and predictions need not pay.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>

#include "twin/pipes.h"

namespace cam::twin {

// One burst of at most this many bytes is a GM word access: the same size the timing model takes a signal word
// copy to be (the data plane's ready / done words travel as 8-byte copies).
inline constexpr uint64_t kGmRaceWordBytes = 64;

struct GmRaceLaunch;

// Resolved once from CAM_TWIN_GM_RACE (on only when "1").
bool GmRaceEnabled();

// RunLaunch: the launch's shadow (nullptr when the check is off), and at its end the first race found ("" if
// none), which also frees the shadow. `failed`: the launch already failed (nothing is compared then).
GmRaceLaunch* GmRaceLaunchBegin(uint32_t blockDim);
std::string GmRaceLaunchEnd(GmRaceLaunch* launch, const char* kernel, bool failed);

// A GM copy of `bursts` bursts of `burstBytes` bytes, `pitch` bytes from the start of one to the next. Declared as
// an object in the copy before its bytes move: a write of a word releases at once, a read of a word acquires when
// the object goes out of scope (after the bytes moved); any other copy is logged.
class GmRaceCopy {
public:
    GmRaceCopy(Pipe pipe, const void* gm, uint64_t burstBytes, uint64_t bursts, uint64_t pitch,
               const std::source_location& where);
    ~GmRaceCopy();
    GmRaceCopy(const GmRaceCopy&) = delete;
    GmRaceCopy& operator=(const GmRaceCopy&) = delete;

private:
    const void* acquire_ = nullptr;  // a word read: acquire its writers' clocks at scope exit
    uint64_t bytes_ = 0;
};

// Scalar GM words (the data cache, twin/dcache.h): a write-back releases, a load from GM acquires (after it read).
void GmRaceWordRelease(const void* gm, uint64_t bytes);
void GmRaceWordAcquire(const void* gm, uint64_t bytes);

// SyncAll: arrive before the barrier, leave after it opened.
void GmRaceSyncAllArrive();
void GmRaceSyncAllLeave();

// A cross-core flag set (before its counter moves) and a wait that returned.
void GmRaceCrossSet(int mode, uint16_t flagId);
void GmRaceCrossWaited(int mode, uint16_t flagId);

}  // namespace cam::twin
