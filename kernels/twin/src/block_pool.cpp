#include "twin/block_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <pthread.h>

#include "twin/park.h"

namespace cam::twin {

namespace {

using Clock = std::chrono::steady_clock;

// Idle pool threads leave after this long, so a process that ran many ranks once does not keep their threads.
constexpr auto kIdleExit = std::chrono::seconds(20);

struct Group {
    const std::function<void(uint32_t)>* body;
    std::atomic<uint32_t> remaining;  // futex word of the launching thread
};

struct Worker {
    std::atomic<uint32_t> seq{0};  // futex word: bumped for every job handed over
    Group* group = nullptr;
    uint32_t index = 0;
};

struct Pool {
    std::mutex mutex;
    std::vector<Worker*> idle;
    uint32_t threads = 0;
};

// Leaked on purpose: pool threads may still park on it while static destructors run at exit, and a forked child
// gets a fresh one (the parent's threads do not exist there).
Pool* gPool = new Pool;

void ForkChild() { gPool = new Pool; }

// Registered before main(): fork() from any thread leaves the child a pool of its own.
const bool gAtFork = [] {
    pthread_atfork(nullptr, nullptr, ForkChild);
    return true;
}();

void Finish(Group* group) {
    if (group->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) UnparkAll(group->remaining);
}

void WorkerLoop(Pool* pool, Worker* self) {
    TightenTimerSlack();
    uint32_t seen = 0;
    for (;;) {
        // Wait for the next job: spin briefly, then park; leave the pool after kIdleExit without one.
        const auto idleSince = Clock::now();
        for (;;) {
            if (SpinUntil([&] { return self->seq.load(std::memory_order_acquire) != seen; }, SpinNs())) break;
            const auto left = kIdleExit - (Clock::now() - idleSince);
            if (left > Clock::duration::zero()) {
                ParkWhileEqual(self->seq, seen, std::chrono::duration_cast<std::chrono::nanoseconds>(left));
                continue;
            }
            std::lock_guard<std::mutex> lock(pool->mutex);
            if (self->seq.load(std::memory_order_acquire) != seen) break;  // handed a job meanwhile
            // Still unclaimed, so still on the idle list (a job is handed out only together with removal).
            pool->idle.erase(std::find(pool->idle.begin(), pool->idle.end(), self));
            --pool->threads;
            delete self;
            return;
        }
        seen = self->seq.load(std::memory_order_acquire);
        Group* group = self->group;
        const uint32_t index = self->index;
        (*group->body)(index);
        {
            // Back to the idle list before reporting: the launcher's next launch then finds this thread.
            std::lock_guard<std::mutex> lock(pool->mutex);
            pool->idle.push_back(self);
        }
        Finish(group);  // the last access to group: the launcher may return and destroy it at once
    }
}

}  // namespace

void RunBlocks(uint32_t n, const std::function<void(uint32_t)>& body) {
    if (n == 0) return;
    if (n == 1) {  // one block runs on the launching thread: no pool thread, no lock, nothing to wait for
        body(0);
        return;
    }
    Group group{&body, {n}};
    Pool* pool = gPool;
    {
        std::lock_guard<std::mutex> lock(pool->mutex);
        // Every thread the launch needs exists before any block starts: if one cannot be created the launch fails
        // with nothing run, instead of stranding started blocks in a SyncAll.
        while (pool->idle.size() < n - 1) {
            auto* w = new Worker;
            try {
                std::thread(WorkerLoop, pool, w).detach();
            } catch (...) {
                delete w;
                throw;
            }
            ++pool->threads;
            pool->idle.push_back(w);
        }
        for (uint32_t i = 1; i < n; ++i) {
            Worker* w = pool->idle.back();
            pool->idle.pop_back();
            w->group = &group;
            w->index = i;
            Signal(w->seq);
        }
    }
    body(0);
    Finish(&group);
    for (;;) {
        const uint32_t left = group.remaining.load(std::memory_order_acquire);
        if (left == 0) break;
        if (SpinUntil([&] { return group.remaining.load(std::memory_order_acquire) == 0; }, SpinNs())) break;
        ParkWhileEqual(group.remaining, left, std::chrono::milliseconds(100));
    }
}

uint32_t PoolThreads() {
    std::lock_guard<std::mutex> lock(gPool->mutex);
    return gPool->threads;
}

uint32_t PoolIdleThreads() {
    std::lock_guard<std::mutex> lock(gPool->mutex);
    return static_cast<uint32_t>(gPool->idle.size());
}

}  // namespace cam::twin
