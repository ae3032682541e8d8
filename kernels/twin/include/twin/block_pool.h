// The threads blocks run on: a process-wide pool, so a launch costs a wake-up per block, not a thread creation.
#pragma once

#include <cstdint>
#include <functional>

namespace cam::twin {

// Runs body(i) for every i in [0, n) at the same time: block 0 on the calling thread (the stream's worker), the
// others each on a pool thread of their own, so every block of a launch is resident at once (SyncAll and
// cross-block flag waits need that, as on the hardware). Returns when every body has returned; body must not throw.
// The pool grows to the most blocks ever in flight at once; a thread idle for kIdleExit leaves it.
void RunBlocks(uint32_t n, const std::function<void(uint32_t)>& body);

// Pool threads alive and parked right now (tests: the pool is reused, and shrinks when idle).
uint32_t PoolThreads();
uint32_t PoolIdleThreads();

}  // namespace cam::twin
