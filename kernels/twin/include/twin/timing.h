// The timing model (docs/twin.md, "Timing model"). Off unless CAM_TWIN_TIMING names a file (or SetTimingEnabled):
// then every block records what it issues (one record per instruction, flag, queue hand-off, barrier and SyncAll),
// and at the end of each launch the record is costed for each device of timing_constants.h (A2 and A3, each at
// both ends of the L2 bandwidth range) and, with a file named, appended to it as one JSON line. The model predicts;
// nothing it prints is a measurement. With timing off every hook is one test of a flag.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "twin/pipes.h"

namespace AscendC {
enum class HardEvent : uint8_t;
enum class TPosition : uint8_t;
}  // namespace AscendC

namespace cam::twin {

extern bool gTimingOn;  // set once before launches (CAM_TWIN_TIMING or SetTimingEnabled); read by every hook
inline bool TimingOn() { return gTimingOn; }

// Export of the pipe model's own tables, so the model and the timing read one mapping (pipes.cpp).
bool HardEventPipes(AscendC::HardEvent e, Pipe* src, Pipe* dst);
bool QueuePositionPipes(AscendC::TPosition pos, Pipe* producer, Pipe* consumer);

// Hooks: inline, so with timing off each is one test of gTimingOn where it is called (the *Record functions do
// the work).
// A copy with GM on one side (MTE2 reads, MTE3 / FIX writes): `bursts` bursts of `burstBytes` bytes each,
// `pitch` bytes apart in GM starting at `gm`.
void TimeGmCopyRecord(Pipe p, const void* gm, uint64_t burstBytes, uint64_t bursts, uint64_t pitch);
inline void TimeGmCopy(Pipe p, const void* gm, uint64_t burstBytes, uint64_t bursts, uint64_t pitch) {
    if (gTimingOn) TimeGmCopyRecord(p, gm, burstBytes, bursts, pitch);
}
void TimeLocalCopyRecord(Pipe p, uint64_t bytes);
inline void TimeLocalCopy(Pipe p, uint64_t bytes) {
    if (gTimingOn) TimeLocalCopyRecord(p, bytes);
}  // MTE1: L1 -> L0A/L0B
// A vector instruction's operand: "dst" starts the instruction; its other operands widen it to their bytes.
void TimeVectorOperandRecord(const char* role, uint64_t bytes);
inline void TimeVectorOperand(const char* role, uint64_t bytes) {
    if (gTimingOn) TimeVectorOperandRecord(role, bytes);
}
void TimeMmadRecord(uint32_t m, uint32_t n, uint32_t k, uint32_t elemBits);
inline void TimeMmad(uint32_t m, uint32_t n, uint32_t k, uint32_t elemBits = 8) {
    if (gTimingOn) TimeMmadRecord(m, n, k, elemBits);
}  // padded sizes; elemBits 8 (int8) or 4 (int4, charged at the int4 rate)
void TimeScalarRecord(bool gm);
inline void TimeScalar(bool gm) {
    if (gTimingOn) TimeScalarRecord(gm);
}                          // one scalar GetValue / SetValue
void TimeFlagSetRecord(AscendC::HardEvent e, int32_t id);
inline void TimeFlagSet(AscendC::HardEvent e, int32_t id) {
    if (gTimingOn) TimeFlagSetRecord(e, id);
}
void TimeFlagWaitRecord(AscendC::HardEvent e, int32_t id);
inline void TimeFlagWait(AscendC::HardEvent e, int32_t id) {
    if (gTimingOn) TimeFlagWaitRecord(e, id);
}
void TimeBarrierAllRecord();
inline void TimeBarrierAll() {
    if (gTimingOn) TimeBarrierAllRecord();
}
// A TQue event: EnQue (toConsumer, set) / DeQue (toConsumer, wait); FreeTensor (!toConsumer, set) / AllocTensor
// (!toConsumer, wait). The j-th DeQue waits for the j-th EnQue; the j-th AllocTensor of a queue of `buffers`
// buffers for its (j - buffers)-th FreeTensor (the buffers rotate, as Ascend C's queue events do).
void TimeQueueRecord(AscendC::TPosition pos, bool toConsumer, bool set, const void* queue, int buffers);
inline void TimeQueue(AscendC::TPosition pos, bool toConsumer, bool set, const void* queue, int buffers) {
    if (gTimingOn) TimeQueueRecord(pos, toConsumer, set, queue, buffers);
}
void TimeSyncAllRecord();
inline void TimeSyncAll() {
    if (gTimingOn) TimeSyncAllRecord();
}
// A bounded wait's poll `iteration` failed and the block is about to poll again (twin::ParkOn). The model keeps the
// records of the first poll and of the one that succeeds and drops the repeats between: how often the twin's thread
// re-polled says how the host CPUs were shared, not how long the wait lasts on the device (docs/twin.md).
void TimeWaitPollRecord(uint32_t iteration);
inline void TimeWaitPoll(uint32_t iteration) {
    if (gTimingOn) TimeWaitPollRecord(iteration);
}
void TimeBlockStartRecord();
inline void TimeBlockStart() {
    if (gTimingOn) TimeBlockStartRecord();
}
// group / sub: a 1:2 mixed launch's AI core and the core's place in it (-1: the cube core, 0 / 1: a vector core);
// group -1 outside mixed launches.
void TimeBlockEndRecord(uint32_t blockIdx, uint8_t coreKind, int32_t group, int8_t sub);
inline void TimeBlockEnd(uint32_t blockIdx, uint8_t coreKind, int32_t group = -1, int8_t sub = -1) {
    if (gTimingOn) TimeBlockEndRecord(blockIdx, coreKind, group, sub);
}
// A cross-core flag (twin/crosscore.h): set or wait, its mode, the pipe it is issued on and its id.
void TimeCrossCoreRecord(bool set, int mode, Pipe pipe, uint16_t flagId);
inline void TimeCrossCore(bool set, int mode, Pipe pipe, uint16_t flagId) {
    if (gTimingOn) TimeCrossCoreRecord(set, mode, pipe, flagId);
}
// After every block ended. `windows`: a data-plane launch's rank windows; a GM copy into or out of a window other
// than the launching rank's own crosses the peer link. Launches whose lifetimes overlap are costed together, in one
// virtual time, when the last of them ends (their signal words' landing times travel between them).
struct LaunchWindows;
void TimeLaunchEndRecord(const void* launch, const char* kernel, uint32_t blockDim, const LaunchWindows* windows);
inline void TimeLaunchEnd(const void* launch, const char* kernel, uint32_t blockDim, const LaunchWindows* windows) {
    if (gTimingOn) TimeLaunchEndRecord(launch, kernel, blockDim, windows);
}

// What one launch costs on one device.
struct LaunchCost {
    std::string kernel;
    std::string device;  // "a2" / "a3"
    std::string l2;      // "lo" / "hi": the end of the L2 bandwidth range
    uint32_t blockDim = 0;
    uint32_t cubeBlocks = 0;
    double seconds = 0;                     // launch fixed cost included
    double busy[static_cast<int>(Pipe::kCount)] = {};  // summed over cores, seconds
    double criticalBusy[static_cast<int>(Pipe::kCount)] = {};  // of the core that ends last
    uint32_t criticalCore = 0;
    std::map<std::string, double> stalls;  // seconds a pipe waited, summed over cores, by what it waited on
    double gmReadBytes = 0, gmWriteBytes = 0;
    double l2HitFraction = 0;  // of gmReadBytes, those the L2 policy hit (docs/twin.md, "L2 policy")
    double linkBytes = 0;  // copies to / from a peer's window
    double bandwidthFloorSeconds = 0;  // what the die's HBM / L2 alone would need (a segment floor when larger)
    uint64_t instructions = 0;
    uint64_t peerWaits = 0;  // bounded waits that polled more than once (each waits for the value it saw to land)
};

void SetTimingEnabled(bool on);
// A launch is costed on A2 and A3 at both L2 ends; a device whose cores run as another's did (the devices differ
// only in HBM, L2 and link figures, and the landings read are the same) takes the cost from that costing wherever
// every segment ends at the same cycle. The self-check costs every group a second time without that and counts the
// costs that differ (a test's switch: it doubles the costing).
void SetTimingSelfCheck(bool on);
struct TimingSharing {
    uint64_t derived = 0;     // launch costings taken from another device's
    uint64_t recosted = 0;    // launch costings run (the self-check's included)
    uint64_t mismatches = 0;  // self-check: costs that differ from the unshared costing's
};
TimingSharing TakeTimingSharing();  // since the last call
// Every launch costed since the last call (each launch: A2 lo, A2 hi, A3 lo, A3 hi), oldest first.
std::vector<LaunchCost> TakeLaunchCosts();
// One constant of timing_constants.h for a device ("a2" / "a3"); throws on an unknown name.
double TimingConstant(const char* name, const char* device);
std::string LaunchCostJson(const LaunchCost& c);

}  // namespace cam::twin
