// Host-side entry of the twin: queue a kernel launch on a twin stream (aclrtStream is a twin::Stream*).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace cam::twin {

// What a launch asks of the runtime's scheduler: the schedule mode of its launch descriptor
// (kernels/common/launch_descriptor.h, which the Ascend configured launch puts in its schedule-mode attribute). A
// launch that asks for nothing gets what such a launch gets on Ascend, a <<<>>> launch or a configured one without
// the attribute: normal mode, its blocks started as cores come free, so with other streams' kernels on the cores
// some may start only after others wait in a barrier. A hard SyncAll therefore needs batchMode, in every launch
// (rule syncall-batch-mode, docs/twin.md).
struct LaunchSchedule {
    bool batchMode = false;  // all blocks start together or none does
};

void EnqueueLaunch(void* stream, const char* kernelName, uint32_t blockDim, std::function<void()> kernel,
                   LaunchSchedule schedule = {});

// The peer-accessible windows a data-plane launch sees: every rank's [base, base + bytes) and which one is the
// launching rank's own. With them the twin refuses a scalar store into a peer's window (peer-scalar-store):
// signals to peers go out by MTE, as production kernels send them.
struct LaunchWindows {
    std::vector<std::pair<uintptr_t, uint64_t>> windows;
    int64_t own = -1;
    // GM the host rewrites between launches (the Comm's peer table): every block must invalidate a line of it before
    // its first scalar read (rule dcache-table-not-invalidated, twin/dcache.h).
    std::vector<std::pair<uintptr_t, uint64_t>> hostTables;
    // Absolute ranges of the windows where an arrival tells the peer that the data written before it is complete
    // (ready and completion signals). A block's write there and another block's write into the same peer's window
    // with no SyncAll between them is a signal-order violation: nothing orders the other block's write first.
    std::vector<std::pair<uintptr_t, uint64_t>> signals;
    // Called once, on the failing block's thread, when a block of the launch breaks a twin rule (the violation's
    // message as argument), before the block ends and whichever rule it was (kernel body or block-end checks): a
    // data-plane launch aborts the plane with it, so peers end at once instead of at their timeout.
    std::function<void(const std::string& violation)> onViolation;
};
void EnqueueLaunch(void* stream, const char* kernelName, uint32_t blockDim, std::function<void()> kernel,
                   LaunchSchedule schedule, LaunchWindows windows);

// Queue host work in stream order (e.g. reading a kernel's status word after it ran). Throwing
// cam::twin::TaskError from `task` reports its code on the next synchronize. On Ascend this is a host callback
// on the stream (aclrtLaunchCallback) or a check after synchronize.
void EnqueueHostTask(void* stream, std::function<void()> task);

}  // namespace cam::twin
