// How a twin thread waits for another: spin a little (a signal that is about to arrive costs no sleep), then park
// in the kernel on a 32-bit word (Linux futex) until a writer bumps it or a timeout passes. Used by the block
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

// Polls done() up to `spins` times, yielding between polls; true as soon as it holds.
template <typename Done>
bool SpinUntil(Done&& done, int spins) {
    for (int i = 0; i < spins; ++i) {
        if (done()) return true;
        std::this_thread::yield();
    }
    return done();
}

}  // namespace cam::twin
