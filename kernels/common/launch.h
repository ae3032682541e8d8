// How a kernel is put on a stream. bisheng compiles the triple-chevron launch; g++ hands the same kernel to the
// twin, which runs it on the stream's worker thread as blockDim block threads. Each op's .cpp wraps its launch
// in a plain C++ function so host code never sees either form.
#pragma once

#if defined(__CCE__)
#define CAM_KERNEL_LAUNCH(kernel, blockDim, stream, ...) kernel<<<blockDim, nullptr, stream>>>(__VA_ARGS__)
// Data-plane kernels: on Ascend the launch itself is the same (the launch requirements, a mixed kernel type and
// batch scheduling mode, are in docs/protocol.md).
#define CAM_DATAPLANE_LAUNCH(comm, peers, kernel, blockDim, stream, ...) \
    kernel<<<blockDim, nullptr, stream>>>(__VA_ARGS__)
// MC2 ops (window_table): on Ascend the HCCL context comes from the op framework, which binds the op's group to
// the launch (docs/ascend.md §5); a <<<>>> launch like this one gets none, so this form is a placeholder.
#define CAM_MC2_LAUNCH(hcclContext, kernel, blockDim, stream, ...) kernel<<<blockDim, nullptr, stream>>>(__VA_ARGS__)
#else
#include <cstdint>

#include "common/dataplane_args.h"
#include "twin/hccl.h"
#include "twin/launch.h"
#define CAM_KERNEL_LAUNCH(kernel, blockDim, stream, ...) \
    ::cam::twin::EnqueueLaunch(stream, #kernel, blockDim, [=]() { kernel(__VA_ARGS__); })
// The twin also gets every rank's window range and which one is the launching rank's, so it can refuse a scalar
// store into a peer's window.
#define CAM_DATAPLANE_LAUNCH(comm, peers, kernel, blockDim, stream, ...)                               \
    ::cam::twin::EnqueueLaunch(stream, #kernel, blockDim, [=]() { kernel(__VA_ARGS__); }, \
                               ::cam::kernels::dp::TwinWindows(comm, peers))
// The twin binds the HCCL context to every block thread of the launch, where the runtime binds it on Ascend.
#define CAM_MC2_LAUNCH(hcclContext, kernel, blockDim, stream, ...)                                          \
    ::cam::twin::EnqueueLaunch(stream, #kernel, blockDim, [=]() {                                          \
        ::cam::twin::HcclContextBinding binding_(static_cast<const ::cam::twin::HcclContext*>(hcclContext)); \
        kernel(__VA_ARGS__);                                                                                \
    })

namespace cam::kernels::dp {

// Host side, twin only: the peer table is host memory written once at Comm creation.
inline ::cam::twin::LaunchWindows TwinWindows(const CommArgs& comm, const uint8_t* peers) {
    ::cam::twin::LaunchWindows w;
    const CamTopology& t = comm.topo;
    const int64_t world = layout::world_size(t);
    const auto* bases = reinterpret_cast<const int64_t*>(peers);
    for (int64_t r = 0; r < world; ++r) {
        const int64_t bytes =
            r < layout::attention_ranks(t) ? layout::attn_window_bytes(t) : layout::ffn_window_bytes(t);
        w.windows.emplace_back(static_cast<uintptr_t>(bases[r]), static_cast<uint64_t>(bytes));
    }
    w.own = comm.rank;
    return w;
}

}  // namespace cam::kernels::dp
#endif
