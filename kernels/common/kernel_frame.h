// The stack budget of a kernel entry. bisheng refuses a function whose stack frame exceeds 16,000 bytes, and an AI
// Core's default stack is 32 KiB (MindStudio operator-tool FAQ; docs/twin.md "Rule -> public source"). An entry's
// frame is mostly its op object: queues, tensors, the tiling copy and the op's own arrays (a RowBatch's destination
// list, a table window). Each entry asserts its op object against kKernelOpBudgetBytes, which leaves the rest of the
// limit to the entry's other locals, spills and whatever the compiler inlines into it. The assertion measures the op
// as the compiler at hand lays it out: under bisheng the real Ascend C types, under g++ the twin's (whose TPipe and
// queues carry bookkeeping the hardware's do not, so there the figure is an upper bound, not the device's).
#pragma once

#include <cstdint>

namespace cam::kernels {

inline constexpr uint32_t kKernelFrameLimitBytes = 16000;
inline constexpr uint32_t kKernelOpBudgetBytes = 12000;

template <typename Op>
constexpr bool FitsKernelFrame() {
    return sizeof(Op) <= kKernelOpBudgetBytes;
}

}  // namespace cam::kernels
