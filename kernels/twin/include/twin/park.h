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
// differs (a return may be spurious: callers re-check what they wait for).
bool ParkWhileEqual(const std::atomic<uint32_t>& word, uint32_t seen, std::chrono::nanoseconds timeout);

// Wakes every thread parked on `word` (call after changing it).
void UnparkAll(std::atomic<uint32_t>& word);

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

}  // namespace cam::twin
