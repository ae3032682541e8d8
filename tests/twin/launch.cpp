// The twin's execution model (docs/twin.md, "Execution model"): blocks on a reused thread pool,
// waits that park instead of sleeping, deadlines kept. Usage: launch <case>; prints "OK" and exits 0 when the
// case holds, prints what went wrong and exits 1 otherwise (a violation's message for the negative cases).
#include <unistd.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "kernel_operator.h"
#include "kernels/common/spin.h"
#include "twin/block_pool.h"
#include "twin/launch.h"
#include "twin/runtime.h"
#include "twin/stream.h"

using namespace AscendC;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kBytes = 1024;

// The kernels here meet at a hard SyncAll, so their launches ask for batch scheduling (syncall-batch-mode).
constexpr cam::twin::LaunchSchedule kBatch{.batchMode = true};

// Two SyncAlls around nothing: all four blocks must be resident at once.
void Barriers() {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    SyncAll();
    SyncAll();
}

// Block 0 arrives at the barrier only after `lateMs`; the others wait there (syncall-timeout when too long).
int gLateMs = 0;
void LateBarrier() {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    if (GetBlockIdx() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(gLateMs));
    SyncAll();
}

// Fills a UB buffer with zeros and copies it out.
void WriteZerosToUb(GM_ADDR dst) {
    TPipe pipe;
    TQue<TPosition::VECOUT, 1> out;
    pipe.InitBuffer(out, 1, kBytes);
    LocalTensor<float> b = out.AllocTensor<float>();
    Duplicate(b, 0.0f, kBytes / sizeof(float));
    out.EnQue(b);
    b = out.DeQue<float>();
    GlobalTensor<float> d;
    d.SetGlobalBuffer(reinterpret_cast<float*>(dst), kBytes / sizeof(float));
    DataCopy(d, b, kBytes / sizeof(float));
    out.FreeTensor(b);
}

// Copies a UB buffer out without writing it first: what the block finds there.
void CopyOutUnwrittenUb(GM_ADDR dst) {
    TPipe pipe;
    TQue<TPosition::VECOUT, 1> out;
    pipe.InitBuffer(out, 1, kBytes);
    LocalTensor<float> b = out.AllocTensor<float>();
    out.EnQue(b);
    b = out.DeQue<float>();
    GlobalTensor<float> d;
    d.SetGlobalBuffer(reinterpret_cast<float*>(dst), kBytes / sizeof(float));
    DataCopy(d, b, kBytes / sizeof(float));
    out.FreeTensor(b);
}

// Block 1 polls a GM word with the kernels' back-off until it is set or `deadline` passes; block 0 sets it by MTE
// after `delayMs` (never when delayMs < 0). Reports how block 1's wait ended.
std::atomic<int> gWaitEnd{0};  // 1 seen, 2 expired
int gDelayMs = 0;
int64_t gDeadlineCycles = 0;
void FlagWait(GM_ADDR flag, GM_ADDR src) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    if (GetBlockIdx() == 0) {
        if (gDelayMs >= 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(gDelayMs));
            TPipe pipe;
            TQue<TPosition::VECIN, 1> q;
            pipe.InitBuffer(q, 1, 32);
            GlobalTensor<int64_t> s, f;
            s.SetGlobalBuffer(reinterpret_cast<int64_t*>(src), 4);
            f.SetGlobalBuffer(reinterpret_cast<int64_t*>(flag), 4);
            LocalTensor<int64_t> t = q.AllocTensor<int64_t>();
            DataCopy(t, s, 4);
            q.EnQue(t);
            t = q.DeQue<int64_t>();
            SetFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);  // the VECIN hand-off orders MTE2 before V, not MTE3
            WaitFlag<HardEvent::MTE2_MTE3>(EVENT_ID0);
            DataCopy(f, t, 4);
            q.FreeTensor(t);
        }
    } else if (GetBlockIdx() == 1) {
        GlobalTensor<int64_t> f;
        f.SetGlobalBuffer(reinterpret_cast<int64_t*>(flag), 4);
        const int64_t deadline = GetSystemCycle() + gDeadlineCycles;
        for (uint32_t i = 0;; ++i) {
            DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(f);
            if (f.GetValue(0) != 0) {
                gWaitEnd = 1;
                break;
            }
            if (GetSystemCycle() > deadline) {
                gWaitEnd = 2;
                break;
            }
            cam::kernels::WaitPause(flag, i);
        }
    }
    SyncAll();
}

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int Fail(const char* what) {
    std::printf("%s\n", what);
    return 1;
}

// 200 launches of 4 blocks reuse the same 3 pool threads (block 0 runs on the caller).
int PoolReuse() {
    for (int i = 0; i < 200; ++i) cam::twin::RunLaunch("barriers", 4, [] { Barriers(); }, nullptr, kBatch);
    const uint32_t threads = cam::twin::PoolThreads();
    if (threads != 3) return std::printf("pool has %u threads after 200 launches of 4 blocks, want 3\n", threads), 1;
    cam::twin::RunLaunch("barriers", 2, [] { Barriers(); }, nullptr, kBatch);
    if (cam::twin::PoolThreads() != 3) return Fail("a smaller launch changed the pool");
    return 0;
}

// Two streams launching at the same time: each launch gets its own threads (the pool grows to 6), and both
// complete.
int ConcurrentStreams() {
    cam::twin::Stream a, b;
    for (int i = 0; i < 50; ++i) {
        cam::twin::EnqueueLaunch(&a, "barriers", 4, [] { Barriers(); }, kBatch);
        cam::twin::EnqueueLaunch(&b, "barriers", 4, [] { Barriers(); }, kBatch);
    }
    cam::twin::StreamError ea, eb;
    if (!a.Synchronize(60, &ea) || !b.Synchronize(60, &eb)) return Fail("streams did not drain");
    if (ea.code || eb.code) return std::printf("%s %s\n", ea.message.c_str(), eb.message.c_str()), 1;
    if (cam::twin::PoolThreads() > 6) return std::printf("pool has %u threads\n", cam::twin::PoolThreads()), 1;
    return 0;
}

// The UB poison holds on a reused thread: a block that reads UB it never wrote sees 0xA5, not the zeros the
// previous launch on that thread left.
int UbPoisonAfterReuse() {
    alignas(64) static float out[kBytes / sizeof(float)];
    cam::twin::RunLaunch("write_zeros", 1, [] { WriteZerosToUb(reinterpret_cast<GM_ADDR>(out)); });
    if (out[0] != 0.0f) return Fail("control: zeros not written");
    cam::twin::RunLaunch("copy_unwritten", 1, [] { CopyOutUnwrittenUb(reinterpret_cast<GM_ADDR>(out)); });
    for (float v : out) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        if (bits != 0xA5A5A5A5u) return std::printf("UB held %08x, not the poison\n", bits), 1;
    }
    return 0;
}

// SyncAll's deadline survives parking: with CAM_TWIN_SYNC_TIMEOUT_S=1 a block 3 s late is reported as
// syncall-timeout; a block 0.2 s late is not (the control).
int SyncTimeout(int lateMs) {
    gLateMs = lateMs;
    const auto t0 = Clock::now();
    try {
        cam::twin::RunLaunch("late_barrier", 4, [] { LateBarrier(); }, nullptr, kBatch);
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return Seconds(t0) < 30 ? 1 : Fail("timeout reported far too late");
    }
    return 0;
}

// A parked waiter sees an MTE write (the write wakes it), and a wait whose word is never written still ends at its
// deadline, not before and not long after: parking keeps the kernel's deadline.
int FlagWaitCase(int delayMs, double deadlineS, int wantEnd) {
    alignas(64) static int64_t flag[8] = {0};
    alignas(64) static int64_t src[4] = {7, 0, 0, 0};
    gDelayMs = delayMs;
    gDeadlineCycles = static_cast<int64_t>(deadlineS * cam::twin::ActivePlatform().systemCycleHz);
    gWaitEnd = 0;
    const auto t0 = Clock::now();
    cam::twin::RunLaunch("flag_wait", 2, [] {
        FlagWait(reinterpret_cast<GM_ADDR>(flag), reinterpret_cast<GM_ADDR>(src));
    }, nullptr, kBatch);
    const double took = Seconds(t0);
    if (gWaitEnd != wantEnd) return std::printf("wait ended %d, want %d\n", gWaitEnd.load(), wantEnd), 1;
    // The deadline is the kernel's: the wait ends after it, and within a park interval plus scheduling of it.
    if (wantEnd == 2 && (took < deadlineS || took > deadlineS + 5)) return std::printf("took %.3f s\n", took), 1;
    return 0;
}

// A forked child gets a pool of its own: the parent's pool threads do not exist there.
int ForkChild() {
    cam::twin::RunLaunch("barriers", 4, [] { Barriers(); }, nullptr, kBatch);  // the parent's pool has threads now
    const pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        cam::twin::RunLaunch("barriers", 4, [] { Barriers(); }, nullptr, kBatch);
        _exit(cam::twin::PoolThreads() == 3 ? 0 : 4);
    }
    const auto t0 = Clock::now();
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (Seconds(t0) > 90) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return Fail("forked child hung");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::printf("child status %d\n", status), 1;
    return 0;
}

// A caller that synchronizes at once runs its task itself while the stream is idle (RunHereScope): on its own
// thread, counted; the control without the scope runs on the worker.
int RunHere() {
    cam::twin::Stream stream;
    cam::twin::StreamError error;
    std::thread::id ran;
    const uint64_t before = cam::twin::Stream::RunHereCount();
    stream.Enqueue([&] { ran = std::this_thread::get_id(); });  // control: no scope
    if (!stream.Synchronize(10, &error) || error.code != 0) return Fail("control task did not finish");
    if (ran == std::this_thread::get_id()) return Fail("without a scope the task ran on the caller");
    {
        cam::twin::RunHereScope here(&stream);
        stream.Enqueue([&] { ran = std::this_thread::get_id(); });
        if (ran != std::this_thread::get_id()) return Fail("idle stream in a scope: the task did not run here");
    }
    if (cam::twin::Stream::RunHereCount() != before + 1) return Fail("run-here count is not one more");
    cam::twin::RunHereScope elsewhere(nullptr);  // a scope for another stream does not apply to this one
    stream.Enqueue([&] { ran = std::this_thread::get_id(); });
    if (!stream.Synchronize(10, &error)) return Fail("task did not finish");
    if (ran == std::this_thread::get_id()) return Fail("a scope for another stream ran the task here");
    return 0;
}

// Stream order survives: with work queued, a scoped task waits its turn on the worker; a task a caller runs keeps
// the worker off the queue until it ends.
int RunHereKeepsOrder() {
    cam::twin::Stream stream;
    cam::twin::StreamError error;
    std::atomic<int> step{0};
    int seenBySecond = -1, seenByThird = -1;
    stream.Enqueue([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        step = 1;
    });
    {
        cam::twin::RunHereScope here(&stream);
        stream.Enqueue([&] { seenBySecond = step.load(); step = 2; });  // busy stream: queued, not run here
    }
    if (!stream.Synchronize(10, &error) || error.code != 0) return Fail("queued tasks did not finish");
    if (seenBySecond != 1) return Fail("a scoped task on a busy stream ran before the task queued ahead of it");
    // A caller runs a slow task; another thread's task enqueued meanwhile must run after it.
    std::thread other;
    {
        cam::twin::RunHereScope here(&stream);
        stream.Enqueue([&] {
            other = std::thread([&] { stream.Enqueue([&] { seenByThird = step.load(); }); });
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            step = 3;
        });
    }
    other.join();
    if (!stream.Synchronize(10, &error) || error.code != 0) return Fail("tasks did not finish");
    if (seenByThird != 3) return Fail("the worker ran a task while a caller still ran an earlier one");
    return 0;
}

// Errors poison the stream as on the worker: the first failure is reported by Synchronize, later tasks are skipped
// until then (a scoped task on a poisoned stream is queued and skipped, not run); a capture records instead.
int RunHerePoisonAndCapture() {
    cam::twin::Stream stream;
    cam::twin::StreamError error;
    bool laterRan = false;
    {
        cam::twin::RunHereScope here(&stream);
        stream.Enqueue([] { throw cam::twin::TaskError(7, "first failure"); });
        stream.Enqueue([&] { laterRan = true; });
    }
    if (!stream.Synchronize(10, &error)) return Fail("poisoned stream did not drain");
    if (error.code != 7 || error.message != "first failure") return Fail("the run-here failure was not reported");
    if (laterRan) return Fail("a task after a failure ran before the failure was reported");
    int recorded = 0;
    bool ran = false;
    stream.SetCaptureSink([&](std::function<void()>) { ++recorded; });
    {
        cam::twin::RunHereScope here(&stream);
        stream.Enqueue([&] { ran = true; });
    }
    stream.SetCaptureSink({});
    if (recorded != 1 || ran) return Fail("a capturing stream ran a scoped task instead of recording it");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) return std::fprintf(stderr, "usage: launch <case>\n"), 2;
    const std::string c = argv[1];
    int rc = 2;
    if (c == "pool_reuse") rc = PoolReuse();
    if (c == "concurrent_streams") rc = ConcurrentStreams();
    if (c == "ub_poison_after_reuse") rc = UbPoisonAfterReuse();
    if (c == "syncall_timeout") rc = SyncTimeout(3000);
    if (c == "syncall_late_within_timeout") rc = SyncTimeout(200);
    if (c == "flag_wait_woken") rc = FlagWaitCase(50, 30.0, 1);
    if (c == "flag_wait_deadline") rc = FlagWaitCase(-1, 0.3, 2);
    if (c == "fork_child") rc = ForkChild();
    if (c == "run_here") rc = RunHere();
    if (c == "run_here_keeps_order") rc = RunHereKeepsOrder();
    if (c == "run_here_poison_and_capture") rc = RunHerePoisonAndCapture();
    if (rc == 2) return std::fprintf(stderr, "unknown case %s\n", argv[1]), 2;
    if (rc == 0) std::printf("OK\n");
    return rc;
}
