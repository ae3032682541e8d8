// How a kernel is put on a stream. bisheng compiles the triple-chevron launch, or for a kernel that needs a launch
// configuration (batch scheduling mode) the configured launch by function handle; g++ hands the same kernel to the
// twin, which runs it on the stream's worker thread as blockDim block threads. Each op's .cpp wraps its launch in a
// plain C++ function so host code never sees either form.
#pragma once

#include "common/launch_descriptor.h"

namespace cam::kernels {
// Every launch states its schedule mode in a launch descriptor; on Ascend a batch-mode descriptor goes to the
// configured launch, which sets the runtime's schedule mode from it, and on the twin every launch hands its mode to
// SyncAll's check (rule syncall-batch-mode). A kernel that calls a hard SyncAll needs batch mode: in normal mode,
// with other streams' kernels on the cores, its blocks may wait in the barrier for blocks that never start
// (asc-devkit api/同步控制/核间同步/SyncAll.md).

// CAM_KERNEL_LAUNCH and CAM_MC2_LAUNCH: no batch mode. On Ascend they are <<<>>> launches, which set no schedule
// mode, and the runtime's default is normal mode; a kernel launched so must not call a hard SyncAll.
inline constexpr LaunchDescriptor kKernelLaunch{ScheduleMode::Normal};

// CAM_BATCH_KERNEL_LAUNCH: a compute kernel that calls a hard SyncAll asks for batch mode.
inline constexpr LaunchDescriptor kBatchKernelLaunch{ScheduleMode::Batch};

// What a data-plane launch must ask of the runtime: its kernels are mixed (KERNEL_TYPE_MIX_AIV_1_0) and call a hard
// SyncAll, so the launch needs batch scheduling mode. Both launches of CAM_DATAPLANE_LAUNCH take it from one launch
// descriptor (kDataPlaneLaunch below).
inline constexpr bool kDataPlaneLaunchNeedsBatchMode = true;

// The data-plane launches' descriptor: on Ascend the configured launch sets the runtime's schedule mode from it.
inline constexpr LaunchDescriptor kDataPlaneLaunch{kDataPlaneLaunchNeedsBatchMode ? ScheduleMode::Batch
                                                                                  : ScheduleMode::Normal};
}  // namespace cam::kernels

#if defined(__CCE__)
// kKernelLaunch's normal mode is what a <<<>>> launch gets: it sets no schedule mode.
#define CAM_KERNEL_LAUNCH(kernel, blockDim, stream, ...) kernel<<<blockDim, nullptr, stream>>>(__VA_ARGS__)

namespace cam::kernels {

// The bytes of the argument block LaunchWithDescriptor builds for these parameter types.
template <typename... Args>
constexpr size_t ArgumentBlockBytes() {
    size_t end = 0;
    ((end = (end + alignof(Args) - 1) / alignof(Args) * alignof(Args) + sizeof(Args)), ...);
    return (end + 7) / 8 * 8;
}

// The argument block of a kernel launched by handle: every parameter in declaration order at its natural alignment,
// as the parameters of a C struct (the block a <<<>>> stub builds from the same list).
template <typename... Args>
inline void LaunchWithDescriptor(const void* kernelSymbol, const char* kernelName, uint32_t blockDim, void* stream,
                                 const LaunchDescriptor& launch, const Args&... args) {
    constexpr size_t kBytes = ArgumentBlockBytes<Args...>();
    alignas(8) uint8_t block[kBytes] = {};
    size_t at = 0;
    ((at = (at + alignof(Args) - 1) / alignof(Args) * alignof(Args),
      __builtin_memcpy(block + at, &args, sizeof(Args)), at += sizeof(Args)),
     ...);
    LaunchConfigured(kernelSymbol, kernelName, blockDim, stream, block, kBytes, launch);
}

}  // namespace cam::kernels

// Every kernel that calls SyncAll: through the configured launch with its descriptor, never a <<<>>> launch, which
// carries no schedule mode (tests/test_ascend_build.py checks every such kernel's translation unit as bisheng's host
// pass sees it).
#define CAM_CONFIGURED_LAUNCH(descriptor, kernel, blockDim, stream, ...)                                   \
    ::cam::kernels::LaunchWithDescriptor(reinterpret_cast<const void*>(&kernel), #kernel, blockDim, stream, \
                                         descriptor, __VA_ARGS__)
#define CAM_BATCH_KERNEL_LAUNCH(kernel, blockDim, stream, ...) \
    CAM_CONFIGURED_LAUNCH(::cam::kernels::kBatchKernelLaunch, kernel, blockDim, stream, __VA_ARGS__)
// Data-plane kernels: the data-plane descriptor.
#define CAM_DATAPLANE_LAUNCH(comm, peers, kernel, blockDim, stream, ...) \
    CAM_CONFIGURED_LAUNCH(::cam::kernels::kDataPlaneLaunch, kernel, blockDim, stream, __VA_ARGS__)
// MC2 ops (window_table): on Ascend the HCCL context comes from the op framework, which binds the op's group to
// the launch (docs/ascend.md §5); a <<<>>> launch like this one gets none, so this form is a placeholder.
#define CAM_MC2_LAUNCH(hcclContext, kernel, blockDim, stream, ...) kernel<<<blockDim, nullptr, stream>>>(__VA_ARGS__)
#else
#include <cstdint>
#include <string>

#include "common/dataplane_args.h"
#include "twin/hccl.h"
#include "twin/launch.h"

namespace cam::kernels {
// The twin's form of a launch descriptor's schedule mode: every twin launch macro passes its descriptor through
// here, so SyncAll checks the mode the Ascend launch of the same macro asks for.
inline ::cam::twin::LaunchSchedule TwinSchedule(const LaunchDescriptor& launch) {
    return {launch.scheduleMode == ScheduleMode::Batch};
}
}  // namespace cam::kernels

#define CAM_TWIN_LAUNCH(descriptor, kernel, blockDim, stream, ...)                      \
    ::cam::twin::EnqueueLaunch(stream, #kernel, blockDim, [=]() { kernel(__VA_ARGS__); }, \
                               ::cam::kernels::TwinSchedule(descriptor))
#define CAM_KERNEL_LAUNCH(kernel, blockDim, stream, ...) \
    CAM_TWIN_LAUNCH(::cam::kernels::kKernelLaunch, kernel, blockDim, stream, __VA_ARGS__)
#define CAM_BATCH_KERNEL_LAUNCH(kernel, blockDim, stream, ...) \
    CAM_TWIN_LAUNCH(::cam::kernels::kBatchKernelLaunch, kernel, blockDim, stream, __VA_ARGS__)
// The twin also gets every rank's window range and which one is the launching rank's, so it can refuse a scalar
// store into a peer's window.
// A twin violation in a block aborts the plane before it is reported (LaunchWindows::onViolation, run by the twin
// for a rule broken anywhere in the block, its end-of-block checks included): every rank's abort word is raised (by
// this rank, as Plane::Fail does), with the broken rule beside it, so the peers' waits end at once and their errors
// can name the rule (TwinAbortReason); the violation itself (rule, kernel, block, call site) is this rank's error.
#define CAM_DATAPLANE_LAUNCH(comm, peers, kernel, blockDim, stream, ...)                    \
    ::cam::twin::EnqueueLaunch(stream, #kernel, blockDim, [=]() { kernel(__VA_ARGS__); },  \
                               ::cam::kernels::TwinSchedule(::cam::kernels::kDataPlaneLaunch), \
                               ::cam::kernels::dp::TwinWindows(comm, peers))
// The twin binds the HCCL context to every block thread of the launch, where the runtime binds it on Ascend. The
// description is copied when the launch is queued, so a group unregistered afterwards cannot pull memory from
// under the kernel.
#define CAM_MC2_LAUNCH(hcclContext, kernel, blockDim, stream, ...)                                               \
    ::cam::twin::EnqueueLaunch(                                                                                 \
        stream, #kernel, blockDim,                                                                              \
        [=, context_ = std::make_shared<const ::cam::twin::HcclContext>(                                        \
                *static_cast<const ::cam::twin::HcclContext*>(hcclContext))]() {                                \
            ::cam::twin::HcclContextBinding binding_(context_.get());                                           \
            kernel(__VA_ARGS__);                                                                                \
        },                                                                                                      \
        ::cam::kernels::TwinSchedule(::cam::kernels::kKernelLaunch))

namespace cam::kernels::dp {

// Twin only: the control area's reason lines (window_layout.h kAbortReasonOff) carry, NUL-terminated,
// "<rule> in <kernel> on rank <r>" of the violation that raised the abort word, then " block <b>/<n>" and
// " at <file>:<line>" (the call site's file name), each as long as the whole still fits (the slot is sized for the
// longest kernel and file names), so every rank's error names the rule its peer broke and where (the host appends
// TwinAbortReason to the abort sentence).
inline constexpr int64_t kTwinAbortReasonOff = kAbortReasonOff;
inline constexpr int64_t kTwinAbortReasonBytes = kAbortReasonBytes;

// The reason's text from a twin violation's message ("twin: rule 'R' broken in kernel K block B/N at F:L: ..."): R
// and K, then the block and the call site (F's file name) while they fit.
inline std::string TwinReasonText(const std::string& violation, int64_t rank) {
    std::string rule = "?", kernel = "?", block, site;
    const size_t r0 = violation.find("rule '");
    if (r0 != std::string::npos) {
        const size_t r1 = violation.find('\'', r0 + 6);
        if (r1 != std::string::npos) rule = violation.substr(r0 + 6, r1 - r0 - 6);
    }
    const size_t k0 = violation.find(" in kernel ");
    if (k0 != std::string::npos) {
        const size_t k1 = violation.find(' ', k0 + 11);
        kernel = violation.substr(k0 + 11, k1 == std::string::npos ? std::string::npos : k1 - k0 - 11);
        const size_t b0 = violation.find(" block ", k0 + 11);
        if (b0 != std::string::npos) block = violation.substr(b0 + 7, violation.find(' ', b0 + 7) - b0 - 7);
    }
    const size_t s0 = violation.find(" at ");
    if (s0 != std::string::npos) {
        const size_t s1 = violation.find(": ", s0 + 4);
        site = violation.substr(s0 + 4, s1 == std::string::npos ? std::string::npos : s1 - s0 - 4);
        const size_t slash = site.rfind('/');
        if (slash != std::string::npos) site = site.substr(slash + 1);
    }
    const size_t room = static_cast<size_t>(kTwinAbortReasonBytes) - 1;  // the NUL
    std::string text = rule + " in " + kernel + " on rank " + std::to_string(rank);
    for (const std::string& more : {block.empty() ? block : " block " + block, site.empty() ? site : " at " + site}) {
        if (!more.empty() && text.size() + more.size() <= room) text += more;
    }
    if (text.size() > room) text.resize(room);
    return text;
}

// Raises every rank's abort word that is still 0 to 1 + this rank, as the protocol's Fail does (docs/protocol.md
// §9), from host code on the failing block's thread: the kernel broke a rule and stopped, so nothing of it writes
// any more. The reason goes in first, word by word (a peer may read the line meanwhile: no word is torn), and the
// abort word's seq_cst exchange publishes it; it wakes the waiters parked on those words.
inline void TwinAbortPlane(const CommArgs& comm, const int64_t* bases, const std::string& violation) {
    const int64_t world = layout::world_size(comm.topo);
    int64_t reason[kTwinAbortReasonBytes / 8] = {};
    const std::string text = TwinReasonText(violation, comm.rank);
    __builtin_memcpy(reason, text.data(), text.size());
    for (int64_t r = 0; r < world; ++r) {
        if (bases[r] == 0) continue;
        auto* word = reinterpret_cast<int64_t*>(static_cast<uintptr_t>(bases[r]) + kAbortOff);
        if (__atomic_load_n(word, __ATOMIC_SEQ_CST) != 0) continue;  // raised before: its reason stays
        auto* slot = reinterpret_cast<int64_t*>(static_cast<uintptr_t>(bases[r]) + kTwinAbortReasonOff);
        for (int64_t i = 0; i < kTwinAbortReasonBytes / 8; ++i) __atomic_store_n(&slot[i], reason[i], __ATOMIC_RELAXED);
        int64_t expected = 0;
        __atomic_compare_exchange_n(word, &expected, 1 + comm.rank, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        ::cam::twin::WakeParked(word, sizeof(int64_t));
    }
}

// The twin's reason for an abort word, from a copy of the window's control area (empty when none was written:
// an abort raised by a kernel's Fail, the host or the liveness watchdog).
inline std::string TwinAbortReason(const uint8_t* control) {
    char text[kTwinAbortReasonBytes + 1] = {};
    __builtin_memcpy(text, control + kTwinAbortReasonOff, kTwinAbortReasonBytes);
    return text;
}

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
        // The words whose arrival publishes a round's data: ready[a][s] of an FFN window, the completion signals
        // of an Attention window (signal-order).
        const bool attn = r < layout::attention_ranks(t);
        const int64_t begin = attn ? layout::attn_completion_off(t) : layout::ffn_ready_off(t);
        const int64_t end = attn ? layout::attn_seals_off(t) : layout::ffn_data_off(t);
        w.signals.emplace_back(static_cast<uintptr_t>(bases[r] + begin), static_cast<uint64_t>(end - begin));
    }
    w.own = comm.rank;
    w.hostTables = {{reinterpret_cast<uintptr_t>(peers), static_cast<uint64_t>(world) * sizeof(int64_t)}};
    w.onViolation = [comm, bases](const std::string& violation) { TwinAbortPlane(comm, bases, violation); };
    return w;
}

}  // namespace cam::kernels::dp
#endif
