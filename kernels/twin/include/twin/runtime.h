// The twin's execution model: one launch runs blockDim blocks as threads of a pool; each block has its own UB arena.
// A broken hardware rule throws TwinViolation naming the kernel, the block and the kernel's call site.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <source_location>
#include <stdexcept>
#include <string>

#include "twin/launch.h"

namespace cam::twin {

// What the emulated chip looks like. Tiling reads the same numbers through the host backend, so a kernel never
// carries a core count or a UB size as a literal.
struct Platform {
    const char* name;
    uint32_t aivCores;   // vector cores
    uint32_t aicCores;   // cube cores; each pairs with aivCores / aicCores vector cores
    uint32_t ubBytes;    // unified buffer per vector core
    uint32_t l1Bytes;    // per cube core
    uint32_t l0aBytes;
    uint32_t l0bBytes;
    uint32_t l0cBytes;
    // Frequency of the system cycle counter GetSystemCycle() reads. Ascend's counter ticks at 50 MHz (public
    // Ascend C documentation: time_us = cycles / 50); the twin derives the same count from steady_clock so kernels
    // convert timeouts identically on both.
    uint64_t systemCycleHz;
    // Bytes at the top of L1 a kernel may not carve (reserved by the runtime), so tiling works with l1Bytes minus
    // this, never with the raw size.
    uint32_t l1ReservedBytes;
    // Bytes at the top of UB the Ascend C API keeps as its scratch (temporary buffers of vector instructions);
    // TPipe carves below it, and tiling works with ubBytes minus this.
    uint32_t ubReservedBytes;
    // Bytes a data-plane block should move at least before tiling gives a launch one more block (tiling's
    // PlatformInfo::minBlockBytes; 0: the row floor alone). On "twin" a block is an OS thread and every rank of a
    // plane is a thread of the same few host CPUs: one more block buys no parallelism there, it costs a thread
    // hand-off and its share of two SyncAlls (docs/twin.md, "Launch"). The Ascend descriptions keep 0: on the chip
    // a block is a core of its own.
    uint64_t minBlockBytes;
};

// Named descriptions: "twin" (default, small so many ranks fit on 2 CPUs), "ascend910b1".."ascend910b4",
// "ascend910b" (= ascend910b1) and "ascend910_93" (one die of an A3).
const Platform* FindPlatform(const char* name);
// The platform launches are checked against. Chosen by CAM_TWIN_PLATFORM at first use, or SetPlatform().
const Platform& ActivePlatform();
bool SetPlatform(const char* name);

class TwinViolation : public std::runtime_error {
public:
    explicit TwinViolation(const std::string& what) : std::runtime_error(what) {}
};

// Thrown inside a block when the launch was aborted because another block failed; never reported on its own.
class LaunchAborted : public std::runtime_error {
public:
    LaunchAborted() : std::runtime_error("launch aborted") {}
};

[[noreturn]] void Violation(const char* rule, const std::string& detail,
                            const std::source_location& where);

// "file:line" of a call site as violations print it (the file from the source tree's kernels/, tests/, ... on).
std::string CallSite(const std::source_location& where);

#define CAM_TWIN_CHECK(cond, rule, detail, where)            \
    do {                                                      \
        if (!(cond)) ::cam::twin::Violation(rule, detail, where); \
    } while (0)

// Which core a block runs on: a kernel is vector-only unless it declares itself cube-only (twin/cube.h).
enum class CoreKind : uint8_t { Vector = 0, Cube = 1 };

// What a block remembers between instructions so ordering rules can be checked: pending SetFlag events, the
// last Mmad's destination (for the PIPE_M rule), the DEQSCALE register and the scalar data cache.
constexpr int kHardEventCount = 32;  // > number of AscendC::HardEvent values
constexpr int kEventIds = 8;         // EVENT_ID0 .. EVENT_ID7

struct FlagSlot {
    int32_t pending = 0;
    std::source_location where{};
};

class DataCache;  // twin/dcache.h

struct BlockContext {
    const char* kernel = "";
    uint32_t blockIdx = 0;
    uint32_t blockNum = 1;
    uint8_t* ub = nullptr;       // arena of Platform::ubBytes, 32-byte aligned
    uint32_t ubUsed = 0;         // bytes handed out by TPipe::InitBuffer
    uint32_t ubHigh = 0;         // most bytes ever handed out in this launch: what the next one re-poisons
    uint8_t coreKind = 0;        // CoreKind
    uint32_t cubeUsed[4] = {};   // bytes handed out of L1, L0A, L0B, L0C (twin/cube.h)
    int kernelType = -1;         // KernelMetaType from KERNEL_TASK_TYPE_DEFAULT, -1 when not declared
    int livePipes = 0;           // TPipe objects alive in this block
    FlagSlot flags[kHardEventCount][kEventIds];
    const void* lastMmadC = nullptr;  // CO1 range written by the last Mmad since a PIPE_M barrier
    uint64_t lastMmadBytes = 0;
    bool deqScaleSet = false;    // SetDeqScale was called: int32 -> half Cast is defined
    float deqScale = 1.0f;
    DataCache* dcache = nullptr;
    struct LaunchState* launch = nullptr;
    // A 1:2 mixed kernel (twin/crosscore.h): the AI core's group, shared by its cube core and its two vector cores;
    // sub -1 on the cube core, 0 / 1 on the vector cores.
    struct MixGroup* mix = nullptr;
    int8_t sub = -1;
    uint32_t group = 0;
    // Rule gm-unordered-access (twin/gm_race.h): the launch's GM shadow (nullptr: off) and this core's clock.
    struct GmRaceLaunch* gmRace = nullptr;
    struct GmRaceCore* gmRaceCore = nullptr;
};

BlockContext& CurrentBlock();
bool InKernel();

// Runs kernel() as blockDim blocks at once, each on a thread of its own (twin/block_pool.h), and returns when all
// have ended. The first violation is rethrown (as TwinViolation) after every block has stopped; the others are
// woken from SyncAll so a failure never turns into a hang.
// `schedule`: what the launch asked of the scheduler (twin/launch.h); by default nothing, normal mode, as on Ascend.
void RunLaunch(const char* kernelName, uint32_t blockDim, const std::function<void()>& kernel,
               const LaunchWindows* windows = nullptr, LaunchSchedule schedule = {});

// A scalar store may only target the launching rank's own window (or memory that is no window at all).
void CheckScalarStoreTarget(const void* addr, const std::source_location& where);

// An MTE write into GM (the copy engines, through CheckMteWriteAgainstDirtyLines): a write into a peer's window is
// checked against the other blocks' writes into it since the last SyncAll (signal-order, LaunchWindows::signals).
void CheckPeerWriteOrder(const void* addr, uint64_t bytes, const std::source_location& where);

// Barrier across the blocks of the current launch (SyncAll); in a 1:2 mixed launch across every cube and vector
// core (isAIVOnly false, the only form defined there). Fails loudly when blockDim exceeds the vector cores (the
// hardware would deadlock) or when a core has left the kernel while others wait.
void BlockBarrier(bool isAIVOnly, const std::source_location& where);

// The launch of the calling block was aborted (another block broke a rule): a wait must end.
bool LaunchAbortedNow();

// Cycles of the platform's system counter since an arbitrary epoch (steady_clock based, monotonic).
int64_t SystemCycle();

// Seconds a block may wait in SyncAll before the twin calls it a deadlock; CAM_TWIN_SYNC_TIMEOUT_S overrides.
double SyncTimeoutSeconds();

}  // namespace cam::twin
