#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kernel_operator.h"
#include "twin/block_pool.h"
#include "twin/crosscore.h"
#include "twin/gm_race.h"
#include "twin/launch.h"
#include "twin/park.h"
#include "twin/timing.h"

namespace cam::twin {

namespace {

// A2 / A3 numbers are from the public SoC descriptions (docs/twin.md, "Platform descriptions"): 910B1/B2 have
// 24 AI cores (48 vector), 910B3/B4 20 (40 vector), an A3 die 24 (48 vector); every one has 192 KiB UB of which
// the top 8 KiB are the API's scratch, 512 KiB L1 of which the top 128 bytes are not for kernels, 64/64/128 KiB
// L0A/L0B/L0C. "twin" keeps the buffers at the
// real sizes so tiling is exercised at hardware limits, with few cores so many ranks x blocks fit on 2 CPUs.
// "twin"'s byte floor per data-plane block (Platform::minBlockBytes): 4 MiB, so the 0.5-2 MiB data-plane ops of a
// 2-CPU machine run as one block each (measured: dispatch and combine stages 1.5-2x faster than with four blocks
// each, an A/B in git history) and only larger payloads are split.
constexpr uint64_t kTwinMinBlockBytes = uint64_t(4) << 20;

const Platform kPlatforms[] = {
    {"twin", 4, 2, 196608, 524288, 65536, 65536, 131072, 50000000, 128, 8192, kTwinMinBlockBytes},
    {"ascend910b", 48, 24, 196608, 524288, 65536, 65536, 131072, 50000000, 128, 8192, 0},  // = ascend910b1
    {"ascend910b1", 48, 24, 196608, 524288, 65536, 65536, 131072, 50000000, 128, 8192, 0},
    {"ascend910b2", 48, 24, 196608, 524288, 65536, 65536, 131072, 50000000, 128, 8192, 0},
    {"ascend910b3", 40, 20, 196608, 524288, 65536, 65536, 131072, 50000000, 128, 8192, 0},
    {"ascend910b4", 40, 20, 196608, 524288, 65536, 65536, 131072, 50000000, 128, 8192, 0},
    {"ascend910_93", 48, 24, 196608, 524288, 65536, 65536, 131072, 50000000, 128, 8192, 0},
};

std::mutex gPlatformMutex;
// Read on every launch, InitBuffer and cycle-counter read: an atomic pointer, so readers take no lock. Writers
// (first use, SetPlatform) still serialise on the mutex.
std::atomic<const Platform*> gActive{nullptr};

// Read by every instruction's checks (CurrentBlock, InKernel): initial-exec, a fixed offset from the thread pointer,
// instead of a __tls_get_addr call per access (the default model of a dlopen'd library's thread_local).
__attribute__((tls_model("initial-exec"))) thread_local BlockContext* tBlock = nullptr;

// A thread's UB arena, kept across the launches it runs blocks of. `dirty` bytes from the start were handed out
// to a kernel since the arena was last poisoned; the rest still holds the poison.
struct UbArena {
    struct Free {
        void operator()(uint8_t* p) const { std::free(p); }
    };
    std::unique_ptr<uint8_t, Free> bytes;
    uint32_t size = 0;
    uint32_t dirty = 0;
};
thread_local UbArena tUb;

// The UB a block starts with. Poison: the hardware leaves UB holding whatever the last kernel wrote; a kernel must
// not rely on zeros (or on what it left itself). Only the bytes the previous launch on this thread carved are
// re-poisoned: a kernel reaches UB only through carved buffers, so the rest never stopped being poison.
uint8_t* FreshUb(uint32_t ubBytes) {
    if (!tUb.bytes || tUb.size != ubBytes) {
        tUb.bytes.reset(static_cast<uint8_t*>(std::aligned_alloc(kUbAlign, ubBytes)));
        if (!tUb.bytes) throw std::bad_alloc();
        tUb.size = ubBytes;
        tUb.dirty = ubBytes;
    }
    std::memset(tUb.bytes.get(), 0xA5, tUb.dirty);
    tUb.dirty = 0;
    return tUb.bytes.get();
}

std::string ShortFile(const char* path) {
    std::string p(path ? path : "?");
    for (const char* root : {"/kernels/", "/tests/", "/host/", "/tiling/"}) {
        auto pos = p.rfind(root);
        if (pos != std::string::npos) return p.substr(pos + 1);
    }
    auto slash = p.rfind('/');
    return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

std::string CallSite(const std::source_location& where) {
    return ShortFile(where.file_name()) + ":" + std::to_string(where.line());
}

// One peer window's writes by this launch's blocks, for signal-order: the SyncAll interval (the barrier's
// generation + 1; 0: none) of each block's last write there, and of the last signal.
struct PeerWrites {
    std::vector<uint64_t> dataInterval;
    std::vector<std::source_location> dataWhere;
    uint64_t signalInterval = 0;
    uint32_t signalBlock = 0;
    std::source_location signalWhere{};
};

struct LaunchState {
    const char* kernel;
    uint32_t blockDim;
    std::mutex mutex;
    uint32_t arrived = 0;
    uint64_t generation = 0;
    uint32_t finished = 0;  // cores that left the kernel: blocks, and a mixed launch's vector cores
    std::string firstLeft;  // the first of them, as a syncall-exit message names it
    bool aborted = false;
    // Futex word of SyncAll waiters: bumped when the barrier opens, a block finishes or the launch is aborted.
    std::atomic<uint32_t> barrierEvent{0};
    std::string firstError;
    const LaunchWindows* windows = nullptr;
    LaunchSchedule schedule;
    // A block cached a GM line: the scalar cache's registry holds entries of this launch to forget at its end
    // (a sweep of every registry shard, which a launch without scalar GM access need not pay).
    std::atomic<bool> dcacheTouched{false};
    std::atomic<bool> violationReported{false};  // windows->onViolation ran
    std::unordered_map<int64_t, PeerWrites> peerWrites;  // by peer rank; under mutex
    // A 1:2 mixed kernel: the kernel function the vector cores run too, their threads (joined before the launch
    // ends) and the AI cores' groups (under mutex).
    const std::function<void()>* kernelFn = nullptr;
    std::vector<std::thread> vectorCores;
    std::vector<std::unique_ptr<MixGroup, void (*)(MixGroup*)>> groups;
    GmRaceLaunch* gmRace = nullptr;  // rule gm-unordered-access (twin/gm_race.h), freed by GmRaceLaunchEnd

    void Fail(const std::string& message) {
        std::lock_guard<std::mutex> lock(mutex);
        if (firstError.empty()) firstError = message;
        aborted = true;
        Signal(barrierEvent);
    }
};

const Platform* FindPlatform(const char* name) {
    if (!name) return nullptr;
    for (const auto& p : kPlatforms)
        if (std::strcmp(p.name, name) == 0) return &p;
    return nullptr;
}

const Platform& ActivePlatform() {
    if (const Platform* p = gActive.load(std::memory_order_acquire)) return *p;
    std::lock_guard<std::mutex> lock(gPlatformMutex);
    if (!gActive.load(std::memory_order_relaxed)) {
        const char* env = std::getenv("CAM_TWIN_PLATFORM");
        const Platform* p = FindPlatform(env && *env ? env : "twin");
        gActive.store(p ? p : &kPlatforms[0], std::memory_order_release);
    }
    return *gActive.load(std::memory_order_relaxed);
}

bool SetPlatform(const char* name) {
    const Platform* p = FindPlatform(name);
    if (!p) return false;
    std::lock_guard<std::mutex> lock(gPlatformMutex);
    gActive.store(p, std::memory_order_release);
    return true;
}

int64_t SystemCycle() {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now().time_since_epoch())
                        .count();
    const uint64_t hz = ActivePlatform().systemCycleHz;
    // ns * hz / 1e9 without overflowing for any realistic uptime: split whole seconds from the remainder
    const int64_t sec = ns / 1000000000, rem = ns % 1000000000;
    return sec * static_cast<int64_t>(hz) + rem * static_cast<int64_t>(hz) / 1000000000;
}

double SyncTimeoutSeconds() {
    const char* env = std::getenv("CAM_TWIN_SYNC_TIMEOUT_S");
    if (env && *env) {
        double v = std::atof(env);
        if (v > 0) return v;
    }
    return 120.0;
}

void Violation(const char* rule, const std::string& detail, const std::source_location& where) {
    std::string msg = "twin: rule '";
    msg += rule;
    msg += "' broken";
    if (tBlock) {
        msg += " in kernel ";
        msg += tBlock->kernel;
        if (tBlock->mix != nullptr && tBlock->sub >= 0) {
            msg += " block " + std::to_string(tBlock->blockIdx) + "/" + std::to_string(2 * tBlock->blockNum) +
                   " (vector core " + std::to_string(tBlock->sub) + " of AI core " + std::to_string(tBlock->group) +
                   ")";
        } else {
            msg += " block " + std::to_string(tBlock->blockIdx) + "/" + std::to_string(tBlock->blockNum);
            if (tBlock->mix != nullptr) msg += " (cube core of AI core " + std::to_string(tBlock->group) + ")";
        }
    }
    msg += " at " + CallSite(where);
    msg += ": " + detail;
    throw TwinViolation(msg);
}

BlockContext& CurrentBlock() {
    if (!tBlock) {
        static BlockContext outside;  // host code calling GetBlockIdx is a bug; make it visible, not a crash
        Violation("outside-kernel", "Ascend C API used outside a kernel launch", std::source_location::current());
        return outside;
    }
    return *tBlock;
}

bool InKernel() { return tBlock != nullptr; }

void BlockBarrier(bool isAIVOnly, const std::source_location& where) {
    BlockContext& block = CurrentBlock();
    const Platform& platform = ActivePlatform();
    // With other streams' kernels on the cores, blocks of a hard-SyncAll kernel scheduled one by one can wait in
    // the barrier for blocks that never get a core: the launch must ask for batch mode (SyncAll.md), whichever
    // launch it is. A launch that asked for nothing is in normal mode, as on Ascend (twin/launch.h LaunchSchedule).
    // The other blocks read what this one cleaned once the barrier opens: the write-back must have landed (a dcci
    // does not wait for it, and SyncAll is a pipe barrier and a cross-core flag, no dsb).
    std::source_location clean;
    if (block.dcache != nullptr && block.dcache->PendingWriteBack(&clean))
        Violation("dcache-clean-no-dsb",
                  "SyncAll while the write-back of the clean at " + CallSite(clean) + " was never waited for: the other blocks may read the line before it lands "
                      "(DataSyncBarrier<MemDsbT::ALL> after the clean)",
                  where);
    // In a 1:2 mixed launch SyncAll.md defines the hard barrier as isAIVOnly = false: the vector cores' all-core
    // sync, the cube cores', then the two joined, so every core of the launch takes part. The vector-only form is
    // defined for a pure vector kernel only; what it does with a mixed launch's cube cores is not said, so it is
    // refused, whichever core calls it.
    const bool mixed = block.mix != nullptr;
    CAM_TWIN_CHECK(!mixed || !isAIVOnly, "syncall-mix-aiv-only",
                   "SyncAll<isAIVOnly = true> in a 1:2 mixed launch (on a " +
                       std::string(block.sub >= 0 ? "vector" : "cube") +
                       " core): the docs define the vector-only barrier for a pure vector kernel; a mixed kernel's "
                       "barrier is SyncAll<false>, called by every cube and vector core",
                   where);
    CAM_TWIN_CHECK(block.launch != nullptr && block.launch->schedule.batchMode, "syncall-batch-mode",
                   "hard SyncAll in a launch not in batch scheduling mode: with other streams on the cores its "
                   "blocks may never all be resident (launch it asking for batch mode: CAM_BATCH_KERNEL_LAUNCH, "
                   "or CAM_DATAPLANE_LAUNCH's kDataPlaneLaunch)",
                   where);
    // Hard SyncAll uses cross-core flags that exist only in a mixed launch: a vector-only kernel must be declared
    // KERNEL_TYPE_MIX_AIV_1_0 (__mix__(0, 1)), otherwise the hardware barrier never completes.
    CAM_TWIN_CHECK(block.kernelType == KERNEL_TYPE_MIX_AIV_1_0 || block.kernelType == KERNEL_TYPE_MIX_AIC_1_1 ||
                       block.kernelType == KERNEL_TYPE_MIX_AIC_1_2,
                   "syncall-kernel-type",
                   "SyncAll in a kernel not declared mixed (KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0)): the "
                   "hardware barrier hangs",
                   where);
    // isAIVOnly must say what the launch is: a vector-only kernel waiting for cube cores that never arrive hangs,
    // a mixed kernel told it is vector-only synchronises only its vector cores.
    CAM_TWIN_CHECK(isAIVOnly == (block.kernelType == KERNEL_TYPE_MIX_AIV_1_0), "syncall-kernel-type",
                   std::string("SyncAll<isAIVOnly = ") + (isAIVOnly ? "true" : "false") + "> in a " +
                       (block.kernelType == KERNEL_TYPE_MIX_AIV_1_0 ? "vector-only (MIX_AIV_1_0)" : "cube+vector") +
                       " kernel",
                   where);
    // Every block the barrier waits for must be resident. A mixed launch's blocks are AI cores, whose count the
    // launch was already held to when it declared its kernel type (cube-cores).
    CAM_TWIN_CHECK(mixed || block.blockNum <= platform.aivCores, "syncall-cores",
                   "SyncAll with blockDim " + std::to_string(block.blockNum) + " > " +
                       std::to_string(platform.aivCores) + " vector cores of platform " + platform.name +
                       " (not all blocks can be resident: the hardware deadlocks)",
                   where);
    const uint32_t cores = mixed ? 3 * block.blockNum : block.blockNum;
    LaunchState& launch = *block.launch;
    std::unique_lock<std::mutex> lock(launch.mutex);
    if (launch.aborted) throw LaunchAborted();
    if (launch.finished > 0) {
        lock.unlock();
        Violation("syncall-exit", "SyncAll while " + launch.firstLeft + " already left the kernel (hardware deadlock)",
                  where);
    }
    const uint64_t generation = launch.generation;
    if (++launch.arrived == cores) {
        launch.arrived = 0;
        ++launch.generation;
        Signal(launch.barrierEvent);
        return;
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(SyncTimeoutSeconds());
    // Spin briefly (the last block is often about to arrive), then park on the event word; every change that
    // matters to a waiter (the barrier opening, a block leaving, an abort) bumps it.
    for (;;) {
        if (launch.generation != generation) return;
        if (launch.aborted) throw LaunchAborted();
        if (launch.finished > 0) {
            lock.unlock();
            Violation("syncall-exit",
                      launch.firstLeft + " left the kernel while this core waits in SyncAll (hardware deadlock)", where);
        }
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) {
            lock.unlock();
            Violation("syncall-timeout", "SyncAll waited past the twin's deadlock timeout", where);
        }
        const uint32_t seen = launch.barrierEvent.load(std::memory_order_acquire);
        lock.unlock();
        if (!SpinUntil([&] { return launch.barrierEvent.load(std::memory_order_acquire) != seen; }, SpinNs()))
            ParkWhileEqual(launch.barrierEvent, seen,
                           std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now));
        lock.lock();
    }
}

// A block that ends normally: every SetFlag must have met its WaitFlag (an unmatched flag stays set into the next
// kernel on hardware, an unmatched wait would have hung), and the scalar cache is written back (docs/twin.md).
void EndOfBlock(BlockContext& ctx) {
    for (int e = 0; e < kHardEventCount; ++e)
        for (int id = 0; id < kEventIds; ++id)
            if (ctx.flags[e][id].pending != 0)
                Violation("flag-pairs",
                          "SetFlag of event " + std::to_string(e) + " id " + std::to_string(id) +
                              " never met its WaitFlag before the block ended",
                          ctx.flags[e][id].where);
    // The hardware does not write a core's dirty lines back when the kernel ends: a scalar store never cleaned is
    // lost (DataCacheCleanAndInvalid.md; the twin never evicts).
    uintptr_t line = 0;
    std::source_location store{};
    if (DcacheEnabled() && ctx.dcache->FirstDirty(&line, &store)) {
        char hex[24];
        std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(line));
        Violation("dcache-dirty-at-exit",
                  std::string("a scalar GM store (this line) was never cleaned before the kernel ended: the line at ") +
                      hex + " stays in the core's data cache and GM never gets it (DataCacheCleanAndInvalid)",
                  store);
    }
}

void CheckScalarStoreTarget(const void* addr, const std::source_location& where) {
    const LaunchState* launch = CurrentBlock().launch;
    if (launch == nullptr || launch->windows == nullptr) return;
    const auto a = reinterpret_cast<uintptr_t>(addr);
    const auto& w = launch->windows->windows;
    for (size_t r = 0; r < w.size(); ++r) {
        if (a < w[r].first || a >= w[r].first + w[r].second) continue;
        CAM_TWIN_CHECK(static_cast<int64_t>(r) == launch->windows->own, "peer-scalar-store",
                       "scalar store into rank " + std::to_string(r) +
                           "'s window: signals to a peer go out from UB by MTE3 DataCopy after the payload",
                       where);
        return;
    }
}

namespace {

std::string Site(const std::source_location& where) {
    const char* file = where.file_name();
    const char* slash = std::strrchr(file, '/');
    return std::string(slash ? slash + 1 : file) + ":" + std::to_string(where.line());
}

}  // namespace

void CheckPeerWriteOrder(const void* addr, uint64_t bytes, const std::source_location& where) {
    if (!InKernel()) return;
    BlockContext& block = CurrentBlock();
    LaunchState* launch = block.launch;
    if (launch == nullptr || launch->windows == nullptr || launch->blockDim < 2 || bytes == 0) return;
    const LaunchWindows& desc = *launch->windows;
    const auto a = reinterpret_cast<uintptr_t>(addr);
    int64_t peer = -1;
    for (size_t r = 0; r < desc.windows.size(); ++r)
        if (a >= desc.windows[r].first && a < desc.windows[r].first + desc.windows[r].second) peer = int64_t(r);
    if (peer < 0 || peer == desc.own) return;
    bool signal = false;
    for (const auto& [begin, len] : desc.signals) signal = signal || (a >= begin && a + bytes <= begin + len);
    std::string broken;
    {
        std::lock_guard<std::mutex> lock(launch->mutex);
        const uint64_t interval = launch->generation + 1;
        PeerWrites& w = launch->peerWrites[peer];
        if (w.dataInterval.empty()) {
            w.dataInterval.assign(launch->blockDim, 0);
            w.dataWhere.resize(launch->blockDim);
        }
        if (signal) {
            for (uint32_t b = 0; b < launch->blockDim && broken.empty(); ++b) {
                if (b != block.blockIdx && w.dataInterval[b] == interval)
                    broken = "signal to rank " + std::to_string(peer) + " while block " + std::to_string(b) +
                             " wrote into that rank's window (" + Site(w.dataWhere[b]) +
                             ") with no SyncAll since: nothing orders that write before the signal";
            }
            w.signalInterval = interval;
            w.signalBlock = block.blockIdx;
            w.signalWhere = where;
        } else {
            if (w.signalInterval == interval && w.signalBlock != block.blockIdx)
                broken = "write into rank " + std::to_string(peer) + "'s window after block " +
                         std::to_string(w.signalBlock) + " signalled it (" + Site(w.signalWhere) +
                         ") with no SyncAll between: the peer may read before this write lands";
            w.dataInterval[block.blockIdx] = interval;
            w.dataWhere[block.blockIdx] = where;
        }
    }
    if (!broken.empty()) Violation("signal-order", broken, where);
}

namespace {

// One core of a launch: a block (sub -1), or a vector core `sub` of block idx's AI core in a mixed launch.
void RunBlock(LaunchState& launch, uint32_t idx, int sub, MixGroup* mix) {
    const Platform& platform = ActivePlatform();
    const LaunchWindows* windows = launch.windows;
    BlockContext ctx;
    ctx.kernel = launch.kernel;
    ctx.blockIdx = sub < 0 ? idx : 2 * idx + uint32_t(sub);
    ctx.blockNum = launch.blockDim;
    ctx.launch = &launch;
    ctx.mix = mix;
    ctx.sub = int8_t(sub);
    ctx.group = idx;
    ctx.gmRace = launch.gmRace;
    if (sub >= 0) ctx.kernelType = KERNEL_TYPE_MIX_AIC_1_2;
    DataCache dcache(&launch, launch.windows != nullptr ? &launch.windows->hostTables : nullptr);
    ctx.dcache = &dcache;
    try {
        ctx.ub = FreshUb(platform.ubBytes);
        tBlock = &ctx;
        PipeBlockStart();
        TimeBlockStart();
        (*launch.kernelFn)();
        EndOfBlock(ctx);
    } catch (const TwinViolation& e) {
        if (windows != nullptr && windows->onViolation &&
            !launch.violationReported.exchange(true, std::memory_order_relaxed))
            windows->onViolation(e.what());
        launch.Fail(e.what());
    } catch (const LaunchAborted&) {
    } catch (const std::exception& e) {
        launch.Fail(std::string("twin: kernel ") + launch.kernel + " block " + std::to_string(ctx.blockIdx) +
                    " threw: " + e.what());
    }
    if (ctx.mix != nullptr) {
        const std::string unmatched = CrossCoreBlockEnded(ctx);
        if (!unmatched.empty()) launch.Fail(unmatched);
    }
    tUb.dirty = std::max(tUb.dirty, ctx.ubHigh);
    dcache.Drop();  // after a failure: give up this block's lines without writing them back
    if (dcache.Touched()) launch.dcacheTouched.store(true, std::memory_order_relaxed);
    PipeBlockEnd();
    // The model's cores: blocks (AI cores) first, a mixed launch's vector cores after them.
    const uint32_t timingIdx = sub < 0 ? idx : launch.blockDim + 2 * idx + uint32_t(sub);
    TimeBlockEnd(timingIdx, ctx.coreKind, ctx.mix != nullptr ? int32_t(idx) : -1, int8_t(sub));
    tBlock = nullptr;
    std::lock_guard<std::mutex> lock(launch.mutex);
    if (launch.finished++ == 0)
        launch.firstLeft = sub < 0 ? (ctx.mix != nullptr ? "the cube core of AI core " : "block ") + std::to_string(idx)
                                   : "vector core " + std::to_string(sub) + " of AI core " + std::to_string(idx);
    // A SyncAll waiter learns a core left; a lone block has no waiter.
    if (launch.blockDim > 1 || !launch.groups.empty()) Signal(launch.barrierEvent);
}

}  // namespace

MixGroup* NewMixGroup();
void DeleteMixGroup(MixGroup* g);

void StartVectorCores(BlockContext& block) {
    LaunchState& launch = *block.launch;
    MixGroup* group = NewMixGroup();
    block.mix = group;
    block.group = block.blockIdx;
    std::lock_guard<std::mutex> lock(launch.mutex);
    launch.groups.emplace_back(group, DeleteMixGroup);
    for (int sub = 0; sub < 2; ++sub)
        launch.vectorCores.emplace_back(
            [&launch, idx = block.blockIdx, sub, group] { RunBlock(launch, idx, sub, group); });
}

bool LaunchAbortedNow() {
    if (tBlock == nullptr || tBlock->launch == nullptr) return false;
    std::lock_guard<std::mutex> lock(tBlock->launch->mutex);
    return tBlock->launch->aborted;
}

void RunLaunch(const char* kernelName, uint32_t blockDim, const std::function<void()>& kernel,
               const LaunchWindows* windows, LaunchSchedule schedule) {
    if (blockDim == 0) throw TwinViolation(std::string("twin: launch of ") + kernelName + " with blockDim 0");
    LaunchState launch;
    launch.kernel = kernelName;
    launch.blockDim = blockDim;
    launch.windows = windows;
    launch.schedule = schedule;

    launch.kernelFn = &kernel;
    launch.gmRace = GmRaceLaunchBegin(blockDim);
    auto body = [&](uint32_t idx) { RunBlock(launch, idx, -1, nullptr); };

    RunBlocks(blockDim, body);  // returns after every block ended: the flag's stores happen-before this load
    // A mixed launch's vector cores: every one was started before its cube core's block could end.
    for (std::thread& t : launch.vectorCores) t.join();
    TimeLaunchEnd(&launch, kernelName, blockDim, windows);
    if (launch.dcacheTouched.load(std::memory_order_relaxed)) ForgetLaunch(&launch);
    const std::string race = GmRaceLaunchEnd(launch.gmRace, kernelName, !launch.firstError.empty());
    if (!launch.firstError.empty()) throw TwinViolation(launch.firstError);
    if (!race.empty()) throw TwinViolation(race);
}

const char* StateName(BufferState s) {
    switch (s) {
        case BufferState::Free: return "free";
        case BufferState::Allocated: return "allocated";
        case BufferState::Enqueued: return "enqueued";
        case BufferState::Dequeued: return "dequeued";
        case BufferState::Calc: return "calc";
    }
    return "?";
}

void CheckBufferAccess(const BufferRecord* rec, Access access, const std::source_location& where) {
    using AscendC::TPosition;
    if (!rec || rec->state == BufferState::Calc) return;
    CAM_TWIN_CHECK(rec->state != BufferState::Free, "queue-discipline",
                   "access to a queue buffer after FreeTensor (or before AllocTensor)", where);
    CAM_TWIN_CHECK(rec->state != BufferState::Enqueued, "queue-discipline",
                   "access to a queue buffer between EnQue and DeQue (owned by the other pipe)", where);
    const bool compute = access == Access::Vector || access == Access::Scalar;
    if (rec->position == TPosition::VECIN && compute) {
        CAM_TWIN_CHECK(rec->state == BufferState::Dequeued, "queue-discipline",
                       "vector/scalar read of a VECIN buffer before EnQue+DeQue (races with the MTE2 copy-in)",
                       where);
    }
    if (rec->position == TPosition::VECOUT && access == Access::CopyOut) {
        CAM_TWIN_CHECK(rec->state == BufferState::Dequeued, "queue-discipline",
                       "copy-out of a VECOUT buffer before EnQue+DeQue (races with the vector unit)", where);
    }
    if (access == Access::CopyIn) {
        CAM_TWIN_CHECK(rec->state == BufferState::Allocated, "queue-discipline",
                       std::string("copy-in to a queue buffer in state ") + StateName(rec->state) +
                           " (copy into a freshly allocated buffer, then EnQue)",
                       where);
    }
}

}  // namespace cam::twin

namespace AscendC {

using cam::twin::BufferRecord;
using cam::twin::BufferState;
using cam::twin::kUbAlign;

namespace {

// UB for vector positions; L1 / L0 for cube positions (twin/cube.h).
uint8_t* CarveBuffer(TPosition pos, uint32_t len, const std::source_location& where) {
    if (cam::twin::IsCubePosition(pos)) return cam::twin::CarveCubeBuffer(pos, len, where);
    auto& block = cam::twin::CurrentBlock();
    CAM_TWIN_CHECK(block.coreKind != static_cast<uint8_t>(cam::twin::CoreKind::Cube), "core-kind",
                   "UB buffer requested by a cube-only kernel (the AIC has no unified buffer)", where);
    const auto& platform = cam::twin::ActivePlatform();
    const uint32_t aligned = (len + kUbAlign - 1) / kUbAlign * kUbAlign;
    const uint32_t usable = platform.ubBytes - platform.ubReservedBytes;  // the API scratch sits above
    CAM_TWIN_CHECK(len > 0, "ub-capacity", "InitBuffer of 0 bytes", where);
    CAM_TWIN_CHECK(static_cast<uint64_t>(block.ubUsed) + aligned <= usable, "ub-capacity",
                   "InitBuffer of " + std::to_string(aligned) + " bytes with " + std::to_string(block.ubUsed) +
                       " of " + std::to_string(usable) + " usable UB bytes already taken (platform " +
                       platform.name + ", " + std::to_string(platform.ubReservedBytes) +
                       " more at the top are the API's scratch)",
                   where);
    uint8_t* base = block.ub + block.ubUsed;
    block.ubUsed += aligned;
    block.ubHigh = std::max(block.ubHigh, block.ubUsed);
    return base;
}

}  // namespace

TPipe::TPipe(const std::source_location where) {
    if (!cam::twin::InKernel()) return;
    auto& block = cam::twin::CurrentBlock();
    // TPipe owns the block's buffers and event ids; a second live one would hand out the same UB and events.
    CAM_TWIN_CHECK(block.livePipes == 0, "one-tpipe",
                   "a second TPipe while another is alive in this kernel (one TPipe per kernel)", where);
    ++block.livePipes;
    live_ = true;
    ubStart_ = block.ubUsed;
    for (int i = 0; i < 4; ++i) cubeStart_[i] = block.cubeUsed[i];
}

TPipe::~TPipe() {
    if (!cam::twin::InKernel()) return;
    auto& block = cam::twin::CurrentBlock();
    if (live_) --block.livePipes;
    block.ubUsed = ubStart_;
    for (int i = 0; i < 4; ++i) block.cubeUsed[i] = cubeStart_[i];
}

void TPipe::Destroy() {
    if (!live_ || !cam::twin::InKernel()) return;
    --cam::twin::CurrentBlock().livePipes;
    live_ = false;
}

void TPipe::InitBuffer(cam::twin::TQueBase& que, uint8_t num, uint32_t len, const std::source_location where) {
    CAM_TWIN_CHECK(que.num_ == 0, "queue-discipline", "InitBuffer called twice on one queue", where);
    CAM_TWIN_CHECK(num >= 1 && num <= cam::twin::TQueBase::kMaxBuffers, "queue-discipline",
                   "queue buffer count " + std::to_string(num) + " outside [1, 8]", where);
    for (int i = 0; i < num; ++i) {
        BufferRecord& rec = que.records_[i];
        rec.base = CarveBuffer(que.position_, len, where);
        rec.bytes = len;
        rec.state = BufferState::Free;
        rec.position = que.position_;
    }
    que.num_ = num;
}

void TPipe::InitBuffer(cam::twin::TBufBase& buf, uint32_t len, const std::source_location where) {
    CAM_TWIN_CHECK(buf.record_.base == nullptr, "queue-discipline", "InitBuffer called twice on one TBuf", where);
    buf.record_.base = CarveBuffer(buf.record_.position, len, where);
    buf.record_.bytes = len;
    buf.record_.state = BufferState::Calc;
}

}  // namespace AscendC

namespace cam::twin {

using AscendC::TPosition;

bool TQueBase::Owns(const BufferRecord* rec) const {
    for (int i = 0; i < num_; ++i)
        if (&records_[i] == rec) return true;
    return false;
}

BufferRecord* TQueBase::TakeFree(const std::source_location& where) {
    CAM_TWIN_CHECK(num_ > 0, "queue-discipline", "AllocTensor on a queue without InitBuffer", where);
    for (int i = 0; i < num_; ++i) {
        if (records_[i].state == BufferState::Free) {
            records_[i].state = BufferState::Allocated;
            records_[i].lastAlloc = where;
            records_[i].initBegin = records_[i].initEnd = nullptr;  // what the last owner left is not ours
            // FreeTensor -> AllocTensor: the queue orders the consumer's last use before the producer's next.
            cam::twin::PipeQueueHandoff(position_, false, records_[i].base, records_[i].bytes);
            cam::twin::TimeQueue(position_, false, false, this, num_);
            return &records_[i];
        }
    }
    Violation("queue-discipline",
                         "AllocTensor with all " + std::to_string(num_) +
                             " buffers of the queue taken (FreeTensor missing: the hardware blocks forever)",
                         where);
}

void TQueBase::Push(BufferRecord* rec, const std::source_location& where) {
    CAM_TWIN_CHECK(rec && Owns(rec), "queue-discipline", "EnQue of a tensor that is not from this queue", where);
    CAM_TWIN_CHECK(rec->state == BufferState::Allocated, "queue-discipline",
                   std::string("EnQue of a buffer in state ") + cam::twin::StateName(rec->state), where);
    CAM_TWIN_CHECK(queued_ < depth_ || queued_ < num_, "queue-discipline", "EnQue past the queue depth", where);
    fifo_[(head_ + queued_) % kMaxBuffers] = rec;
    ++queued_;
    rec->state = BufferState::Enqueued;
    cam::twin::TimeQueue(rec->position, true, true, this, num_);
}

BufferRecord* TQueBase::Pop(const std::source_location& where) {
    CAM_TWIN_CHECK(queued_ > 0, "queue-discipline", "DeQue on an empty queue (the hardware blocks forever)", where);
    BufferRecord* rec = fifo_[head_];
    head_ = (head_ + 1) % kMaxBuffers;
    --queued_;
    rec->state = BufferState::Dequeued;
    cam::twin::PipeQueueHandoff(rec->position, true, rec->base, rec->bytes);
    cam::twin::TimeQueue(rec->position, true, false, this, num_);
    // Dequeuing an L0C buffer waits for the M pipe (the EnQue's M -> FIX event): every Mmad so far is complete.
    if (rec->position == TPosition::CO1) cam::twin::CurrentBlock().lastMmadC = nullptr;
    return rec;
}

void TQueBase::Release(BufferRecord* rec, const std::source_location& where) {
    CAM_TWIN_CHECK(rec && Owns(rec), "queue-discipline", "FreeTensor of a tensor that is not from this queue",
                   where);
    CAM_TWIN_CHECK(rec->state == BufferState::Dequeued || rec->state == BufferState::Allocated, "queue-discipline",
                   std::string("FreeTensor of a buffer in state ") + cam::twin::StateName(rec->state), where);
    rec->state = BufferState::Free;
    cam::twin::TimeQueue(rec->position, false, true, this, num_);
}

TQueBase::~TQueBase() noexcept(false) {
    if (!cam::twin::InKernel() || std::uncaught_exceptions() > 0) return;
    for (int i = 0; i < num_; ++i) {
        if (records_[i].state != BufferState::Free) {
            cam::twin::Violation("queue-discipline",
                                 std::string("queue buffer still ") + cam::twin::StateName(records_[i].state) +
                                     " at kernel exit (taken here, never freed)",
                                 records_[i].lastAlloc);
        }
    }
}

}  // namespace cam::twin
