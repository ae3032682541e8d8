// Back-off for device-side waits (docs/protocol.md §9). On Ascend a spinning scalar unit has nothing to yield to, so
// this is a no-op there; on the twin every block is a host thread and many ranks share a few CPUs, so a waiting
// block must give its CPU to the threads it is waiting for.
#pragma once

#include <cstdint>

#if !defined(__CCE__)
#include "twin/dcache.h"
#endif

#ifndef __aicore__
#define __aicore__
#endif
#ifndef __gm__
#define __gm__
#endif

namespace cam::kernels {

// Back-off of a wait polling GM words in [watched, watched + bytes) (the signal lines it waits for); `iteration`
// counts polls of the current wait from 0. On the twin the first polls return at once (a signal about to arrive is
// seen without a park); later ones park the block until something writes one of those lines or a short interval
// passes, so dozens of waiting blocks neither starve the producers nor sleep past the signal (docs/twin.md,
// execution model).
// `watched` keeps its __gm__ qualifier: under bisheng GM and the local memories are distinct address spaces, and a
// GM address passed as a plain pointer is a different (wrong) address.
__aicore__ inline void WaitPause(const __gm__ void* watched, uint64_t bytes, uint32_t iteration) {
#if defined(__CCE__)
    (void)watched;
    (void)bytes;
    (void)iteration;
#else
    ::cam::twin::ParkOn(watched, bytes, iteration);
#endif
}

// A wait on one word.
__aicore__ inline void WaitPause(const __gm__ void* watched, uint32_t iteration) { WaitPause(watched, 8, iteration); }

}  // namespace cam::kernels
