#include "twin/park.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <ctime>

#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace cam::twin {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free,
              "futex words are plain 32-bit words");

bool ParkWhileEqual(const std::atomic<uint32_t>& word, uint32_t seen, std::chrono::nanoseconds timeout) {
    if (word.load(std::memory_order_acquire) != seen) return true;
    if (timeout.count() <= 0) return false;
    timespec ts;
    ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
    ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
    // Relative timeout, private futex: the word lives in this process. EAGAIN (word changed), EINTR (a signal)
    // and a wake all return "maybe changed"; ETIMEDOUT is the only "no".
    const long rc = syscall(SYS_futex, reinterpret_cast<const uint32_t*>(&word), FUTEX_WAIT_PRIVATE, seen, &ts,
                            nullptr, 0);
    return !(rc == -1 && errno == ETIMEDOUT);
}

void UnparkAll(std::atomic<uint32_t>& word) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

int64_t SpinNs() {
    static const int64_t ns = [] {
        const char* env = std::getenv("CAM_TWIN_SPIN_NS");
        if (env && *env) {
            const long long v = std::atoll(env);
            if (v >= 0 && v <= 10000000) return static_cast<int64_t>(v);
        }
        return int64_t{0};
    }();
    return ns;
}

void TightenTimerSlack() { prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); }

}  // namespace cam::twin
