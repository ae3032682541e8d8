// Waits of data-plane kernels (twin::ParkOn / WakeParked, docs/twin.md "Waiting"): a parked waiter is woken by a
// write to the line it watches and by nothing else, a write between its poll and its park is never lost, and a wait
// whose line is never written still ends (the park is bounded). One case per run (tests/test_twin_park.py).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include "twin/dcache.h"

namespace {

using Clock = std::chrono::steady_clock;

// A 4 KiB window: the watched word sits on the line at byte 2048, with 32 lines on either side.
alignas(4096) int64_t gWindow[512];
int64_t* Watched() { return gWindow + 256; }
constexpr uint32_t kParked = 300;  // an iteration past the eager polls and past the interval's growth

// The wait on `watchedBytes` from the watched word starts (iteration 0 registers), a write lands before the park:
// the park returns at once, woken, if the write touched a watched line; else it lasts its interval.
int WriteBeforePark(const void* written, uint64_t bytes, uint64_t wantWoken, uint64_t watchedBytes = 8) {
    cam::twin::ParkOn(Watched(), watchedBytes, 0);
    const uint64_t before = cam::twin::ParkWakeupsThisThread();
    cam::twin::WakeParked(written, bytes);
    cam::twin::ParkOn(Watched(), watchedBytes, kParked);
    const uint64_t woken = cam::twin::ParkWakeupsThisThread() - before;
    if (woken != wantWoken)
        return std::printf("woken %llu times, want %llu\n", static_cast<unsigned long long>(woken),
                           static_cast<unsigned long long>(wantWoken)), 1;
    return 0;
}

// Another thread writes the 2 KiB on both sides of the watched line, as payload copies do, many times while this
// thread parks: none of those writes may wake it. Then one write of the watched word must.
int NeighbourStorm() {
    std::atomic<int> phase{0};
    std::thread writer([&] {
        while (phase.load() == 0) {
            cam::twin::WakeParked(gWindow, 2048);
            cam::twin::WakeParked(gWindow + 264, 2048 - 64);
        }
        while (phase.load() == 1) std::this_thread::sleep_for(std::chrono::microseconds(100));
        __atomic_store_n(Watched(), 1, __ATOMIC_RELEASE);
        cam::twin::WakeParked(Watched(), 8);
    });
    cam::twin::ParkOn(Watched(), 0);
    const uint64_t before = cam::twin::ParkWakeupsThisThread();
    for (int i = 0; i < 100; ++i) cam::twin::ParkOn(Watched(), kParked);
    const uint64_t stormWoken = cam::twin::ParkWakeupsThisThread() - before;
    phase.store(1);
    // The wait proper: poll, park, until the word is set (bounded: 20 s, far past any park interval).
    const auto t0 = Clock::now();
    bool seen = false;
    phase.store(2);
    for (uint32_t i = 0; Clock::now() - t0 < std::chrono::seconds(20); ++i) {
        if (__atomic_load_n(Watched(), __ATOMIC_ACQUIRE) != 0) {
            seen = true;
            break;
        }
        cam::twin::ParkOn(Watched(), i == 0 ? 0 : kParked);
    }
    writer.join();
    if (stormWoken != 0)
        return std::printf("woken %llu times by writes to other lines\n", static_cast<unsigned long long>(stormWoken)), 1;
    if (!seen) return std::printf("the write of the watched word was not seen within 20 s\n"), 1;
    return 0;
}

// A wait with a slot that no write reaches for 60 ms (as combine_recv waits for a round's expert rows): its park
// interval grows to 1 ms, so it polls about 16 + 40 + 48 times where a fixed 50 µs / 200 µs schedule polled about
// 490 times, each timed wake-up two context switches on CPUs the producers need. Every park lasts at least its
// interval (or ends at the write), so the count is an upper bound whatever the load; the write still ends the wait.
int LongWaitPolls() {
    std::thread writer([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(60));
        __atomic_store_n(Watched(), 1, __ATOMIC_RELEASE);
        cam::twin::WakeParked(Watched(), 8);
    });
    const auto t0 = Clock::now();
    uint32_t polls = 0;
    bool seen = false;
    for (uint32_t i = 0; Clock::now() - t0 < std::chrono::seconds(20); ++i) {
        if (__atomic_load_n(Watched(), __ATOMIC_ACQUIRE) != 0) {
            seen = true;
            break;
        }
        cam::twin::ParkOn(Watched(), i);
        ++polls;
    }
    writer.join();
    if (!seen) return std::printf("the write of the watched word was not seen within 20 s\n"), 1;
    if (polls > 150) return std::printf("a 60 ms wait polled %u times (want at most 150)\n", polls), 1;
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) return std::fprintf(stderr, "usage: park <case>\n"), 2;
    const std::string c = argv[1];
    int rc = 2;
    if (c == "write_to_watched_line") rc = WriteBeforePark(Watched(), 8, 1);
    if (c == "write_to_same_line_other_word") rc = WriteBeforePark(Watched() + 7, 8, 1);
    if (c == "write_range_covering_line") rc = WriteBeforePark(gWindow, sizeof(gWindow), 1);
    if (c == "write_to_neighbour_lines") rc = WriteBeforePark(Watched() + 8, 2048 - 64, 0);
    if (c == "write_before_watched_line") rc = WriteBeforePark(gWindow, 2048, 0);
    if (c == "no_write") rc = WriteBeforePark(gWindow, 0, 0);
    // A wait on three signal lines (as combine_recv waits for done[s][f] of every FFN rank).
    if (c == "range_last_line") rc = WriteBeforePark(Watched() + 16, 8, 1, 3 * 64);
    if (c == "range_line_after") rc = WriteBeforePark(Watched() + 24, 8, 0, 3 * 64);
    if (c == "range_line_before") rc = WriteBeforePark(Watched() - 1, 8, 0, 3 * 64);
    if (c == "neighbour_storm") rc = NeighbourStorm();
    if (c == "long_wait_polls") rc = LongWaitPolls();
    if (rc == 2) return std::fprintf(stderr, "unknown case %s\n", argv[1]), 2;
    if (rc == 0) std::printf("OK\n");
    return rc;
}
