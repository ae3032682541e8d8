// Waits on memory two processes map (twin/park.h, shared regions; docs/twin.md "Waiting"): a process parked on a
// line of a shared region is woken by another process's MTE write to that line (WakeParked), and by no write to
// other lines. One case per run (tests/test_twin_shared_park.py); the child process waits, the parent writes.
//   peer_write_wakes        the parent's writes end the child's parks: the child counts a wake-up (woken >= 1)
//   peer_neighbour_storm    2 KiB writes on both sides of the watched line wake nothing; then the watched writes do
//   pingpong [rounds]       not a test: prints the mean round trip of a signal each way between the processes
// The parent writes the watched word kRounds times, each after the child says it waits for it. One write can land
// in the few instructions between a park's end and the child's next poll (a preempted child, a loaded machine):
// the poll then sees it and no park counts it. That is a miss of one round, not of the mechanism, so the case
// wants a wake-up in at least one round; every round missing it by chance is what CI saw once with one round.
// With CAM_TWIN_SHARED_PARK=0 (the control) nothing is registered: every park there ends by its interval only, so
// the child counts no wake-up in any round, and still sees every write (the park is bounded).
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "twin/dcache.h"
#include "twin/park.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kParked = 300;  // past the eager polls and the interval's growth (ParkOn)
constexpr uint64_t kWindowBytes = 4096;

uint8_t* gSegment = nullptr;  // the park table, then the window (as the twin's ACL stand-ins lay out theirs)
int64_t* Window() { return reinterpret_cast<int64_t*>(gSegment + cam::twin::kSharedParkBytes); }
int64_t* Watched() { return Window() + 256; }  // the line at byte 2048
std::atomic<uint32_t>* Phase() { return reinterpret_cast<std::atomic<uint32_t>*>(Window() + 511); }  // last line

constexpr int64_t kRounds = 5;

// Phase words: 1 the child registered; (storm) 2 the storm is over, 3 the child took its count; 3 + r the child saw
// round r's write. The parent writes round r once the phase says the child waits for it.
uint32_t WaitingFor(int64_t round, bool storm) {
    return round == 1 ? (storm ? 3 : 1) : static_cast<uint32_t>(round + 2);
}

// The child: registers its wait, says so, then waits (bounded, 20 s a round) for each round's write. Exit code: 0
// when the count of woken parks matches `wantWoken` (1: at least one), 1 otherwise, 3 if it missed a write.
int Waiter(bool storm, bool wantWoken) {
    cam::twin::ParkOn(Watched(), 8, 0);
    Phase()->store(1, std::memory_order_seq_cst);
    const uint64_t before = cam::twin::SharedParkWakeupsThisThread();
    uint64_t stormWoken = 0;
    for (int64_t round = 1; round <= kRounds; ++round) {
        bool seen = false;
        const auto t0 = Clock::now();
        for (uint32_t i = 1; Clock::now() - t0 < std::chrono::seconds(20); ++i) {
            if (__atomic_load_n(Watched(), __ATOMIC_ACQUIRE) >= round) {
                seen = true;
                break;
            }
            if (storm && round == 1 && Phase()->load() == 2) {  // the storm is over: whatever woke us was a neighbour
                stormWoken = cam::twin::SharedParkWakeupsThisThread() - before;
                Phase()->store(3);
            }
            cam::twin::ParkOn(Watched(), 8, kParked + i);
        }
        if (!seen) return std::printf("round %lld's write was not seen within 20 s\n", static_cast<long long>(round)), 3;
        Phase()->store(static_cast<uint32_t>(3 + round), std::memory_order_seq_cst);
    }
    const uint64_t woken = cam::twin::SharedParkWakeupsThisThread() - before - stormWoken;
    if (stormWoken != 0) return std::printf("woken %llu times by writes to other lines\n",
                                            static_cast<unsigned long long>(stormWoken)), 1;
    if ((woken != 0) != wantWoken)
        return std::printf("woken %llu times by %lld watched writes, want %s\n", static_cast<unsigned long long>(woken),
                           static_cast<long long>(kRounds), wantWoken ? ">= 1" : "0"), 1;
    return 0;
}

// Waits (bounded, 20 s) until *word == want, as a data-plane wait does: ParkOn with a growing iteration.
bool WaitFor(const int64_t* word, int64_t want) {
    const auto t0 = Clock::now();
    for (uint32_t i = 0; __atomic_load_n(word, __ATOMIC_ACQUIRE) != want; ++i) {
        if (Clock::now() - t0 > std::chrono::seconds(20)) return false;
        cam::twin::ParkOn(word, 8, i);
    }
    return true;
}

// `rounds` round trips between the two processes, each side's signal an MTE-style write + WakeParked of its own
// line that the other side waits on. Not a test: the latency it prints is what a shm plane's signal costs
// (run it with CAM_TWIN_SHARED_PARK=1 and =0 to compare the process-shared parks with polling).
int PingPong(bool child, int rounds) {
    int64_t* ping = Window() + 128;  // byte 1024: the parent writes, the child waits
    int64_t* pong = Watched();       // byte 2048: the child writes, the parent waits
    const auto t0 = Clock::now();
    for (int64_t k = 1; k <= rounds; ++k) {
        int64_t* mine = child ? pong : ping;
        const int64_t* theirs = child ? ping : pong;
        if (child && !WaitFor(theirs, k)) return 3;
        __atomic_store_n(mine, k, __ATOMIC_RELEASE);
        cam::twin::WakeParked(mine, 8);
        if (!child && !WaitFor(theirs, k)) return 3;
    }
    if (!child)
        std::printf("round_trip_us %.2f\n",
                    std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / rounds);
    return 0;
}

bool WaitPhase(uint32_t want) {
    const auto t0 = Clock::now();
    while (Phase()->load() < want)
        if (Clock::now() - t0 > std::chrono::seconds(20)) return false;
        else std::this_thread::sleep_for(std::chrono::microseconds(100));
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2 && argc != 3) return std::fprintf(stderr, "usage: shared_park <case> [rounds]\n"), 2;
    const std::string c = argv[1];
    const bool storm = c == "peer_neighbour_storm";
    const bool pingpong = c == "pingpong";
    if (!storm && !pingpong && c != "peer_write_wakes") return std::fprintf(stderr, "unknown case %s\n", argv[1]), 2;
    const char* env = std::getenv("CAM_TWIN_SHARED_PARK");
    const bool enabled = !(env && std::strcmp(env, "0") == 0);
    const uint64_t bytes = cam::twin::kSharedParkBytes + kWindowBytes;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);  // zeroed
    if (p == MAP_FAILED) return std::printf("mmap failed\n"), 1;
    gSegment = static_cast<uint8_t*>(p);
    std::fflush(stdout);
    const pid_t child = fork();
    if (child < 0) return std::printf("fork failed\n"), 1;
    // Each process registers the region in its own registry, as each rank registers every window it maps.
    const bool registered = cam::twin::RegisterSharedRegion(Window(), kWindowBytes, gSegment);
    if (registered != enabled) return std::printf("registered %d, want %d\n", registered, enabled), 1;
    if (pingpong) {
        const int rounds = argc == 3 ? std::atoi(argv[2]) : 2000;
        const int rc = PingPong(child == 0, rounds > 0 ? rounds : 1);
        std::fflush(stdout);
        if (child == 0) _exit(rc);
        int status = 0;
        waitpid(child, &status, 0);  // the child's waits are bounded (20 s each)
        return rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ? 1 : 0;
    }
    if (child == 0) {
        const int rc = Waiter(storm, enabled);
        std::fflush(stdout);
        _exit(rc);
    }
    int rc = 0;
    if (!WaitPhase(1)) rc = (std::printf("the waiter never registered\n"), 1);
    if (rc == 0 && storm) {
        const auto t0 = Clock::now();
        while (Clock::now() - t0 < std::chrono::milliseconds(50)) {  // payload copies beside the watched line
            cam::twin::WakeParked(Window(), 2048);
            cam::twin::WakeParked(Window() + 264, 2048 - 128);
        }
        Phase()->store(2);
        if (!WaitPhase(3)) rc = (std::printf("the waiter never took the storm's count\n"), 1);
    }
    for (int64_t round = 1; round <= kRounds; ++round) {
        if (rc == 0 && !WaitPhase(WaitingFor(round, storm)))
            rc = (std::printf("the waiter never waited for round %lld\n", static_cast<long long>(round)), 1);
        if (rc == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the waiter is deep in its parks
        __atomic_store_n(Watched(), rc == 0 ? round : kRounds, __ATOMIC_RELEASE);  // on failure: let the waiter end
        cam::twin::WakeParked(Watched(), 8);
        if (rc != 0) break;
    }
    int status = 0;
    waitpid(child, &status, 0);  // the child's waits are bounded (20 s a round)
    if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        rc = (std::printf("waiter failed (status %d)\n", status), 1);
    cam::twin::UnregisterSharedRegion(Window());
    if (rc == 0) std::printf("OK\n");
    return rc;
}
