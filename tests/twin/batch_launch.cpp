// A hard SyncAll needs batch scheduling in every launch, not only in the data plane's (rule syncall-batch-mode,
// docs/twin.md): a compute kernel launched through CAM_KERNEL_LAUNCH (kernels/common/launch.h, no batch mode, as a
// <<<>>> launch on Ascend) that calls one is refused; the same kernel launched through CAM_BATCH_KERNEL_LAUNCH runs.
// Each kernel is an exchange: every vector core writes a value to GM, all cores meet at the barrier, every vector
// core then copies its right neighbour's value to its output row, which the host checks. Cases:
//   vector_kernel_launch   SyncAll<true> in a vector-only (KERNEL_TYPE_MIX_AIV_1_0) kernel, CAM_KERNEL_LAUNCH
//   vector_batch_launch    the same kernel, CAM_BATCH_KERNEL_LAUNCH (control)
//   mixed_kernel_launch    SyncAll<false> in a 1:2 mixed (KERNEL_TYPE_MIX_AIC_1_2) kernel, CAM_KERNEL_LAUNCH
//   mixed_batch_launch     the same kernel, CAM_BATCH_KERNEL_LAUNCH (control)
// Prints the stream's error or "OK" (exit 1 on an error, 3 on a wrong exchange, 0 otherwise).
#include <cstdio>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "twin/stream.h"
#include "common/launch.h"

using namespace AscendC;

namespace {

constexpr uint32_t kRowFloats = 8;  // one 32-byte block per vector core

float ValueOf(uint32_t vectorCore) { return float(vectorCore * 3 + 1); }

// The vector cores' half of the exchange, around the kernel's own barrier.
template <typename Barrier>
void Exchange(GM_ADDR slotsGm, GM_ADDR outGm, uint32_t vectorCores, Barrier barrier) {
    const uint32_t me = static_cast<uint32_t>(GetBlockIdx());
    GlobalTensor<float> slots, out;
    slots.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(slotsGm), vectorCores * kRowFloats);
    out.SetGlobalBuffer(reinterpret_cast<__gm__ float*>(outGm), vectorCores * kRowFloats);
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    TQue<TPosition::VECOUT, 1> o;
    pipe.InitBuffer(in, 1, kRowFloats * sizeof(float));
    pipe.InitBuffer(o, 1, kRowFloats * sizeof(float));
    LocalTensor<float> mine = o.AllocTensor<float>();
    Duplicate(mine, ValueOf(me), kRowFloats);
    o.EnQue(mine);
    mine = o.DeQue<float>();
    DataCopy(slots[me * kRowFloats], mine, kRowFloats);
    o.FreeTensor(mine);
    PipeBarrier<PIPE_ALL>();  // the row has left this core before the barrier (SyncAll orders cores, not pipes)
    barrier();
    LocalTensor<float> theirs = in.AllocTensor<float>();
    DataCopy(theirs, slots[(me + 1) % vectorCores * kRowFloats], kRowFloats);
    in.EnQue(theirs);
    theirs = in.DeQue<float>();
    LocalTensor<float> row = o.AllocTensor<float>();
    Adds(row, theirs, 0.0f, kRowFloats);
    in.FreeTensor(theirs);
    o.EnQue(row);
    row = o.DeQue<float>();
    DataCopy(out[me * kRowFloats], row, kRowFloats);
    o.FreeTensor(row);
}

}  // namespace

extern "C" __global__ __aicore__ void cam_test_vector_exchange(GM_ADDR slots, GM_ADDR out) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);  // a vector-only kernel with a hard SyncAll
    Exchange(slots, out, GetBlockNum(), [] {
        SyncAll<true>();  // @case:vector_kernel_launch
    });
}

extern "C" __global__ __aicore__ void cam_test_mixed_exchange(GM_ADDR slots, GM_ADDR out) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    if (ASCEND_IS_AIC) {
        SyncAll<false>();  // @case:mixed_kernel_launch
        return;
    }
    Exchange(slots, out, GetBlockNum() * GetTaskRation(), [] {
        SyncAll<false>();  // @case:mixed_kernel_launch
    });
}

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    const std::string c = argv[1];
    const bool mixed = c.rfind("mixed_", 0) == 0;
    const bool batch = c == "vector_batch_launch" || c == "mixed_batch_launch";
    if (!batch && c != "vector_kernel_launch" && c != "mixed_kernel_launch") return 2;
    // The "twin" platform: 4 vector cores, or 2 AI cores of one cube and two vector cores each.
    const uint32_t blockDim = mixed ? 2 : 4;
    const uint32_t vectorCores = 4;
    std::vector<float> slots(vectorCores * kRowFloats, -1.0f), out(vectorCores * kRowFloats, -1.0f);
    auto* s = reinterpret_cast<GM_ADDR>(slots.data());
    auto* o = reinterpret_cast<GM_ADDR>(out.data());
    cam::twin::Stream stream;
    if (mixed && batch) CAM_BATCH_KERNEL_LAUNCH(cam_test_mixed_exchange, blockDim, &stream, s, o);
    else if (mixed) CAM_KERNEL_LAUNCH(cam_test_mixed_exchange, blockDim, &stream, s, o);
    else if (batch) CAM_BATCH_KERNEL_LAUNCH(cam_test_vector_exchange, blockDim, &stream, s, o);
    else CAM_KERNEL_LAUNCH(cam_test_vector_exchange, blockDim, &stream, s, o);
    cam::twin::StreamError err;
    if (!stream.Synchronize(30.0, &err)) return std::printf("synchronize timed out\n"), 1;
    if (err.code != 0) return std::printf("%s\n", err.message.c_str()), 1;
    for (uint32_t v = 0; v < vectorCores; ++v)
        for (uint32_t i = 0; i < kRowFloats; ++i)
            if (out[v * kRowFloats + i] != ValueOf((v + 1) % vectorCores))
                return std::printf("vector core %u wrote %g, want %g\n", v, out[v * kRowFloats + i],
                                   ValueOf((v + 1) % vectorCores)),
                       3;
    std::printf("OK\n");
    return 0;
}
