// How a twin thread waits for another: optionally spin a little (SpinNs), then park in the kernel on a 32-bit word
// (Linux futex) until a writer bumps it or a timeout passes. Used by the block
// pool's hand-offs, SyncAll, launch completion and WaitPause (docs/twin.md, "Execution model").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace cam::twin {

// Parks while word == seen, at most `timeout`. Returns false on timeout; true when woken or the word already
// differs (a return may be spurious: callers re-check what they wait for). `shared`: the word lives in memory other
// processes map, and their UnparkAll(word, true) must reach this wait (a process-shared futex).
bool ParkWhileEqual(const std::atomic<uint32_t>& word, uint32_t seen, std::chrono::nanoseconds timeout,
                    bool shared = false);

// Wakes every thread parked on `word` (call after changing it); `shared` as for ParkWhileEqual.
void UnparkAll(std::atomic<uint32_t>& word, bool shared = false);

// Bumps `word` and wakes its parked threads: the one "something changed" signal.
inline void Signal(std::atomic<uint32_t>& word) {
    word.fetch_add(1, std::memory_order_acq_rel);
    UnparkAll(word);
}

// Linux lets a timed sleep end up to the thread's timer slack late (50 µs by default): a 20 µs park then lasts
// ~85 µs on these VMs. Block and stream threads set it to 1 µs so a timed park ends when asked.
void TightenTimerSlack();

// How long a waiting twin thread busy-polls before it parks: CAM_TWIN_SPIN_NS, default 0. On the shared 2-CPU
// machines this runs on, every spin measured made hand-offs slower (a 1-block launch + synchronize: 16-20 µs
// parking at once, 26-52 µs with a 1 µs spin, 130-180 µs with 5 µs): the spinner takes the CPU the thread it waits
// for needs. A machine with idle cores may set a few µs.
int64_t SpinNs();

// Polls done() for at most `spinNs` nanoseconds of busy waiting (a CPU pause between polls, no yield: on a loaded
// machine a yield can hand the core away for a whole time slice, far longer than the park it was meant to save);
// true as soon as it holds.
template <typename Done>
bool SpinUntil(Done&& done, int64_t spinNs) {
    if (done()) return true;
    if (spinNs <= 0) return false;
    const auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spinNs);
    for (;;) {
        for (int i = 0; i < 16; ++i) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#elif defined(__aarch64__)
            asm volatile("yield");
#endif
            if (done()) return true;
        }
        if (std::chrono::steady_clock::now() >= end) return done();
    }
}

// ---- a data-plane wait on lines of memory (ParkOn in twin/dcache.h; SharedParkOn below) ----
// A waiter registers the lines [first, last] it polls in a park slot (`first` == 0: none) and sleeps on the slot's
// word; a writer of those lines bumps the word and wakes the slot if it sleeps (WakeSlots). Slot: atomics `first`,
// `last` (64-bit), `word`, `sleeping` (32-bit). Parker: the waiting thread's own `first`, `last`, `seen`.

// The first polls of a wait re-poll at once (a signal about to arrive costs no park). No sched_yield: on a loaded
// machine a yield can give the CPU away for a whole time slice.
constexpr uint32_t kWaitEagerPolls = 16;

// Writers the twin sees wake the wait at once; the interval bounds the wait for writes it does not see (the host,
// a process without shared parks) and keeps the kernel's own deadline check running. It grows with the wait, so a
// long idle wait costs little CPU. Block threads run with a 1 µs timer slack, so the interval is what they sleep.
// A wait without a slot (WaitStep's `slot` null: the slot table was full, or CAM_TWIN_SHARED_PARK=0 on a window
// another process writes) has nothing but the interval to end its park: 50 µs, 200 µs after 256 polls.
inline std::chrono::microseconds WaitParkInterval(uint32_t iteration) {
    return std::chrono::microseconds(iteration < 256 ? 50 : 200);
}

// A wait with a slot is woken by every write of this process to its lines (and, through a shared region's table,
// of every process mapping it), so its interval serves only the writes the twin does not see (the host's abort
// word or weights epoch; a peer process's with CAM_TWIN_SHARED_PARK=0) and the deadline check: it doubles every
// kWatchedParkDoubling parks, from 50 µs to 1 ms. Each park that an
// interval ends costs two context switches on CPUs the producers need: at 50 µs a 30 ms wait (a combine_recv
// waiting for a round-trip's expert rows) parked about 320 times; this way about 60. A write the twin does not see
// is noticed at most 1 ms late (was 200 µs).
constexpr uint32_t kWatchedParkDoubling = 8;
inline std::chrono::microseconds WatchedParkInterval(uint32_t iteration) {
    const uint32_t parks = iteration < kWaitEagerPolls ? 0 : iteration - kWaitEagerPolls;
    const uint32_t doublings = parks / kWatchedParkDoubling;
    return std::chrono::microseconds(doublings >= 5 ? 1000 : 50u << doublings);
}

// One poll step of a wait through `slot` (nullptr: no slot to be had, a timed park). Returns true when it parked
// and a write to the watched lines ended the park (not the interval).
template <typename Slot, typename Parker>
bool WaitStep(Slot* slot, Parker& me, uint64_t first, uint64_t last, uint32_t iteration, bool shared) {
    if (slot != nullptr && (iteration == 0 || me.first != first || me.last != last)) {
        // A new wait (or one that moved to other lines): register, then let it poll once more. A write after this
        // point bumps the word; one before it is seen by that poll (the fence pairs with WakeSlots' caller's).
        slot->first.store(0, std::memory_order_seq_cst);
        slot->last.store(last, std::memory_order_seq_cst);
        slot->first.store(first, std::memory_order_seq_cst);
        me.first = first;
        me.last = last;
        std::atomic_thread_fence(std::memory_order_seq_cst);
        me.seen = slot->word.load(std::memory_order_seq_cst);
        return false;
    }
    if (iteration < kWaitEagerPolls) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (slot != nullptr) me.seen = slot->word.load(std::memory_order_seq_cst);
        return false;
    }
    if (slot == nullptr) {
        std::atomic<uint32_t> never{0};
        ParkWhileEqual(never, 0, WaitParkInterval(iteration));
        return false;
    }
    const auto interval = WatchedParkInterval(iteration);
    slot->sleeping.store(1, std::memory_order_seq_cst);
    // Returns at once if a write came since the last poll. A futex return without a timeout may be spurious (a
    // signal): only a changed word counts as woken.
    ParkWhileEqual(slot->word, me.seen, interval, shared);
    slot->sleeping.store(0, std::memory_order_relaxed);
    const bool woken = slot->word.load(std::memory_order_acquire) != me.seen;
    me.seen = slot->word.load(std::memory_order_seq_cst);
    return woken;
}

// Tells every slot in slots[0, used) registered on a line in [first, last] that something wrote it. The caller
// fences (seq_cst) between its writes and this scan: Dekker with WaitStep's registration, so either the writer
// sees the registration or the waiter's next poll sees the write.
template <typename Slot>
void WakeSlots(Slot* slots, uint32_t used, uint64_t first, uint64_t last, bool shared) {
    for (uint32_t i = 0; i < used; ++i) {
        Slot& s = slots[i];
        const uint64_t lo = s.first.load(std::memory_order_acquire);
        if (lo == 0 || lo > last || s.last.load(std::memory_order_relaxed) < first) continue;
        s.word.fetch_add(1, std::memory_order_seq_cst);
        if (s.sleeping.load(std::memory_order_seq_cst) != 0) UnparkAll(s.word, shared);
    }
}

// ---- waits on memory that several processes map (the shm plane's windows) ----
// A futex word of this process cannot be woken by a write from another process, so a data-plane wait on a window
// that a peer process writes would sleep its whole park interval (ParkOn). A shared region carries its own table of
// park slots, in the shared memory itself but outside the region's bytes (no kernel reaches it through a window
// address): a waiter registers the lines it watches there, as offsets from the region's base (each process maps
// the region at its own address), and parks on its slot's word with a process-shared futex; a writer of any process
// that maps the region bumps and wakes the slots registered on the lines it wrote. Deadlines and every rule stay
// with the kernels' bounded-wait helper: a park still ends after its interval.
constexpr uint64_t kSharedParkBytes = 8192;  // the table's size in a region's segment (two pages)

// Registers [base, base + bytes), whose park table (kSharedParkBytes, zeroed by whoever created the segment) is at
// `table`, for this process. false when the registry is full (waits there then stay timed parks). The mapping must
// stay until UnregisterSharedRegion(base) returned.
bool RegisterSharedRegion(const void* base, uint64_t bytes, void* table);
// On unless CAM_TWIN_SHARED_PARK=0 (A/B and diagnosis only: every wait on a shared region is then a timed park that
// only the interval ends, as before shared parks existed).
bool SharedParksEnabled();
void UnregisterSharedRegion(const void* base);

// ParkOn's and WakeParked's path for a shared region (twin/dcache.h documents the wait): SharedParkOn returns false,
// doing nothing, when `watched` lies in no registered region; SharedWake wakes the waiters of every process parked
// on a line of [addr, addr + bytes) if that range lies in a registered region; its caller has fenced (seq_cst)
// after writing them (WakeLines does, for both tables).
bool SharedParkOn(const void* watched, uint64_t bytes, uint32_t iteration);
void SharedWake(const void* addr, uint64_t bytes);

// Parks of the calling thread on a shared region that a write to a watched line ended (not the interval): tests.
uint64_t SharedParkWakeupsThisThread();

}  // namespace cam::twin
