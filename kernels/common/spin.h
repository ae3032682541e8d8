// Back-off for device-side spin loops (docs/protocol.md §9). On Ascend a spinning scalar unit has nothing to yield
// to, so this is a no-op there; on the twin every block is a host thread and many ranks share a few CPUs, so a
// spinning block must give its CPU to the threads it is waiting for.
#pragma once

#include <cstdint>

#if !defined(__CCE__)
#include <chrono>
#include <thread>
#endif

#ifndef __aicore__
#define __aicore__
#endif

namespace cam::kernels {

// `iteration` counts polls of the current wait from 0. The first polls only yield (a signal that is about to
// arrive is seen at once); later ones sleep briefly so dozens of waiting blocks do not starve the producers.
__aicore__ inline void SpinPause(uint32_t iteration) {
#if defined(__CCE__)
    (void)iteration;
#else
    if (iteration < 64) {
        std::this_thread::yield();
    } else {
        std::this_thread::sleep_for(std::chrono::microseconds(iteration < 1024 ? 20 : 100));
    }
#endif
}

}  // namespace cam::kernels
