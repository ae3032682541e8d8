// Test-only kernels, each breaking one hardware rule the twin must enforce, plus correct controls.
// Usage: violations <case>. Prints "OK" and exits 0 when the launch succeeds, prints the twin's error and
// exits 1 when it fails. Lines marked "@case:<name>" are where each violation must be reported.
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "twin/launch.h"
#include "twin/runtime.h"
#include "twin/stream.h"

#include <atomic>
#include <chrono>
#include <thread>

using namespace AscendC;

namespace {

constexpr uint32_t kElems = 256;

// The cases' launches ask for batch scheduling, as a launch of a hard-SyncAll kernel must, so that each is refused
// for its own rule; syncall_no_batch_mode alone launches bare (syncall-batch-mode).
constexpr cam::twin::LaunchSchedule kBatch{.batchMode = true};

// Control: copy-in, vector op, copy-out with proper queue use. Must pass.
void GoodCopy(GM_ADDR src, GM_ADDR dst) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);  // SyncAll below
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    TQue<TPosition::VECOUT, 1> out;
    pipe.InitBuffer(in, 1, kElems * sizeof(float));
    pipe.InitBuffer(out, 1, kElems * sizeof(float));
    GlobalTensor<float> s, d;
    s.SetGlobalBuffer(reinterpret_cast<float*>(src) + GetBlockIdx() * kElems, kElems);
    d.SetGlobalBuffer(reinterpret_cast<float*>(dst) + GetBlockIdx() * kElems, kElems);
    LocalTensor<float> a = in.AllocTensor<float>();
    DataCopy(a, s, kElems);
    in.EnQue(a);
    a = in.DeQue<float>();
    LocalTensor<float> b = out.AllocTensor<float>();
    Muls(b, a, 2.0f, kElems);
    in.FreeTensor(a);
    out.EnQue(b);
    b = out.DeQue<float>();
    DataCopy(d, b, kElems);
    out.FreeTensor(b);
    SyncAll();
}

void UbOverflow(GM_ADDR, GM_ADDR) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> big, more;
    const auto& platform = cam::twin::ActivePlatform();
    pipe.InitBuffer(big, platform.ubBytes - platform.ubReservedBytes - 1024);
    pipe.InitBuffer(more, 2048);  // @case:ub_overflow
}

// Fits the raw 192 KiB but not below the API scratch at the top of UB.
void UbApiScratch(GM_ADDR, GM_ADDR) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> big;
    const uint32_t ub = cam::twin::ActivePlatform().ubBytes;
    pipe.InitBuffer(big, ub - 4096);  // @case:ub_api_scratch
}

void CopyLength(GM_ADDR src, GM_ADDR) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    GlobalTensor<float> s;
    s.SetGlobalBuffer(reinterpret_cast<float*>(src), kElems);
    LocalTensor<float> t = buf.Get<float>();
    DataCopy(t, s, 12);  // @case:copy_length   48 bytes: not a multiple of 32
}

void CopyUbAddress(GM_ADDR src, GM_ADDR) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    GlobalTensor<float> s;
    s.SetGlobalBuffer(reinterpret_cast<float*>(src), kElems);
    LocalTensor<float> t = buf.Get<float>();
    DataCopy(t[3], s, 8);  // @case:copy_ub_address   UB address 12 bytes into a block
}

void VectorMisaligned(GM_ADDR, GM_ADDR) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    LocalTensor<float> t = buf.Get<float>();
    Duplicate(t, 0.0f, 64);
    Adds(t[1], t[1], 1.0f, 8);  // @case:vector_misaligned
}

void ReadBeforeDeque(GM_ADDR src, GM_ADDR) {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    TBuf<TPosition::VECCALC> tmp;
    pipe.InitBuffer(in, 1, kElems * sizeof(float));
    pipe.InitBuffer(tmp, kElems * sizeof(float));
    GlobalTensor<float> s;
    s.SetGlobalBuffer(reinterpret_cast<float*>(src), kElems);
    LocalTensor<float> a = in.AllocTensor<float>();
    DataCopy(a, s, kElems);
    Abs(tmp.Get<float>(), a, kElems);  // @case:read_before_deque   MTE2 may still be writing a
    in.FreeTensor(a);
}

void DequeEmpty(GM_ADDR, GM_ADDR) {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 256);
    LocalTensor<float> a = in.DeQue<float>();  // @case:deque_empty
    in.FreeTensor(a);
}

void AllocExhausted(GM_ADDR, GM_ADDR) {
    TPipe pipe;
    TQue<TPosition::VECOUT, 2> out;
    pipe.InitBuffer(out, 2, 256);
    LocalTensor<float> a = out.AllocTensor<float>();
    LocalTensor<float> b = out.AllocTensor<float>();
    LocalTensor<float> c = out.AllocTensor<float>();  // @case:alloc_exhausted
    out.FreeTensor(a);
    out.FreeTensor(b);
    out.FreeTensor(c);
}

void UseAfterFree(GM_ADDR, GM_ADDR dst) {
    TPipe pipe;
    TQue<TPosition::VECOUT, 1> out;
    pipe.InitBuffer(out, 1, 256);
    LocalTensor<float> a = out.AllocTensor<float>();
    Duplicate(a, 1.0f, 64);
    out.EnQue(a);
    a = out.DeQue<float>();
    out.FreeTensor(a);
    GlobalTensor<float> d;
    d.SetGlobalBuffer(reinterpret_cast<float*>(dst), kElems);
    DataCopy(d, a, 64);  // @case:use_after_free
}

void Leak(GM_ADDR, GM_ADDR) {
    TPipe pipe;
    TQue<TPosition::VECOUT, 1> out;
    pipe.InitBuffer(out, 1, 256);
    LocalTensor<float> a = out.AllocTensor<float>();  // @case:leak
    Duplicate(a, 1.0f, 64);
}

void SyncAllEarlyExit(GM_ADDR, GM_ADDR) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    if (GetBlockIdx() == 0) return;  // block 0 never reaches the barrier the others wait in
    SyncAll();  // @case:syncall_exit
}

void GmBounds(GM_ADDR src, GM_ADDR) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 2048);
    GlobalTensor<float> s;
    s.SetGlobalBuffer(reinterpret_cast<float*>(src), kElems);
    DataCopy(buf.Get<float>(), s[kElems - 8], 16);  // @case:gm_bounds
}

// ---- cube path (twin/cube.h): one 16 x 64 by 64 x 32 int8 matmul through L1 / L0A / L0B / L0C.

constexpr uint32_t kCubeM = 16, kCubeK = 64, kCubeN = 32;

// Control: A (ND in GM) -> L1 NZ -> L0A ZZ; B (NZ in GM, K rows of 32 bytes) -> L1 -> L0B ZN via the transposing
// load; Mmad; Fixpipe NZ -> ND. Must pass and give the integer product.
void GoodCube(GM_ADDR a, GM_ADDR b, GM_ADDR c) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);  // @case:cube_cores
    TPipe pipe;
    TQue<TPosition::A1, 1> a1;
    TQue<TPosition::B1, 1> b1;
    TQue<TPosition::A2, 1> a2;
    TQue<TPosition::B2, 1> b2;
    TQue<TPosition::CO1, 1> co1;
    pipe.InitBuffer(a1, 1, kCubeM * kCubeK);
    pipe.InitBuffer(b1, 1, kCubeK * kCubeN);
    pipe.InitBuffer(a2, 1, kCubeM * kCubeK);
    pipe.InitBuffer(b2, 1, kCubeK * kCubeN);
    pipe.InitBuffer(co1, 1, kCubeM * kCubeN * 4);
    GlobalTensor<int8_t> ga, gb;
    GlobalTensor<int32_t> gc;
    ga.SetGlobalBuffer(reinterpret_cast<int8_t*>(a), kCubeM * kCubeK);
    gb.SetGlobalBuffer(reinterpret_cast<int8_t*>(b), kCubeK * kCubeN);
    gc.SetGlobalBuffer(reinterpret_cast<int32_t*>(c) + GetBlockIdx() * kCubeM * kCubeN, kCubeM * kCubeN);

    LocalTensor<int8_t> ta = a1.AllocTensor<int8_t>();
    Nd2NzParams nd;
    nd.nValue = kCubeM;
    nd.dValue = kCubeK;
    nd.srcDValue = kCubeK;
    nd.dstNzC0Stride = kCubeM;
    DataCopy(ta, ga, nd);
    a1.EnQue(ta);
    LocalTensor<int8_t> tb = b1.AllocTensor<int8_t>();
    DataCopyParams burst;
    burst.blockLen = kCubeK;  // K rows of one 32-column block, 32 bytes each
    DataCopy(tb, gb, burst);
    b1.EnQue(tb);

    ta = a1.DeQue<int8_t>();
    LocalTensor<int8_t> la = a2.AllocTensor<int8_t>();
    LoadData2DParams ld;
    ld.repeatTimes = kCubeK / 32;
    ld.srcStride = kCubeM / 16;
    LoadData(la, ta, ld);
    a2.EnQue(la);
    a1.FreeTensor(ta);
    tb = b1.DeQue<int8_t>();
    LocalTensor<int8_t> lb = b2.AllocTensor<int8_t>();
    LoadData2dTransposeParams lt;
    lt.repeatTimes = kCubeK / 32;
    lt.srcStride = 1;
    lt.dstGap = kCubeN / 16 - 1;
    LoadDataWithTranspose(lb, tb, lt);
    b2.EnQue(lb);
    b1.FreeTensor(tb);

    la = a2.DeQue<int8_t>();
    lb = b2.DeQue<int8_t>();
    LocalTensor<int32_t> lc = co1.AllocTensor<int32_t>();
    MmadParams mm;
    mm.m = kCubeM;
    mm.n = kCubeN;
    mm.k = kCubeK;
    Mmad(lc, la, lb, mm);
    a2.FreeTensor(la);
    b2.FreeTensor(lb);
    co1.EnQue(lc);
    lc = co1.DeQue<int32_t>();
    FixpipeParamsV220 fp;
    fp.nSize = kCubeN;
    fp.mSize = kCubeM;
    fp.srcStride = kCubeM;
    fp.dstStride = kCubeN;
    Fixpipe<int32_t, int32_t, CFG_ROW_MAJOR>(gc, lc, fp);
    co1.FreeTensor(lc);
}

void GoodCubeKernel(GM_ADDR src, GM_ADDR dst) { GoodCube(src, src + kCubeM * kCubeK, dst); }

void L0aOverflow(GM_ADDR, GM_ADDR) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TQue<TPosition::A2, 2> a2;
    pipe.InitBuffer(a2, 2, cam::twin::ActivePlatform().l0aBytes / 2 + 512);  // @case:l0a_overflow
}

void CubeBufferInVectorKernel(GM_ADDR, GM_ADDR) {
    TPipe pipe;
    TQue<TPosition::A1, 1> a1;
    pipe.InitBuffer(a1, 1, 512);  // @case:cube_buffer_in_vector_kernel
}

void UbInCubeKernel(GM_ADDR, GM_ADDR) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);  // @case:ub_in_cube_kernel
}

void VectorInCubeKernel(GM_ADDR, GM_ADDR) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TBuf<TPosition::A1> l1;
    pipe.InitBuffer(l1, 1024);
    Duplicate(l1.Get<float>(), 0.0f, 64);  // @case:vector_in_cube_kernel
}

void MmadEnqueuedOperand(GM_ADDR, GM_ADDR) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TQue<TPosition::A2, 1> a2;
    TQue<TPosition::B2, 1> b2;
    TQue<TPosition::CO1, 1> co1;
    pipe.InitBuffer(a2, 1, 16 * 32);
    pipe.InitBuffer(b2, 1, 32 * 16);
    pipe.InitBuffer(co1, 1, 16 * 16 * 4);
    LocalTensor<int8_t> la = a2.AllocTensor<int8_t>();
    LocalTensor<int8_t> lb = b2.AllocTensor<int8_t>();
    LocalTensor<int32_t> lc = co1.AllocTensor<int32_t>();
    a2.EnQue(la);
    b2.EnQue(lb);
    lb = b2.DeQue<int8_t>();
    MmadParams mm;
    mm.m = 16;
    mm.n = 16;
    mm.k = 32;
    Mmad(lc, la, lb, mm);  // @case:mmad_enqueued_operand   A still belongs to the MTE1 -> M hand-off
    la = a2.DeQue<int8_t>();
    a2.FreeTensor(la);
    b2.FreeTensor(lb);
    co1.FreeTensor(lc);
}

void MmadL0Bounds(GM_ADDR, GM_ADDR) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TBuf<TPosition::A2> a2;
    TBuf<TPosition::B2> b2;
    TBuf<TPosition::CO1> co1;
    pipe.InitBuffer(a2, 16 * 32);
    pipe.InitBuffer(b2, 64 * 16);
    pipe.InitBuffer(co1, 16 * 16 * 4);
    MmadParams mm;
    mm.m = 16;
    mm.n = 16;
    mm.k = 64;  // A holds only k = 32
    Mmad(co1.Get<int32_t>(), a2.Get<int8_t>(), b2.Get<int8_t>(), mm);  // @case:mmad_l0_bounds
}

// ---- rules from the review of the kernels against the Ascend C docs ----

// ReduceMax with the work size of one partial per repeat: the hardware writes (value, index) pairs.
void ReduceMaxWork(GM_ADDR, GM_ADDR) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> src, dst, work;
    constexpr uint32_t n = 7168;  // H of the review: 112 repeats of 64 floats
    pipe.InitBuffer(src, n * 4);
    pipe.InitBuffer(dst, 32);
    pipe.InitBuffer(work, 112 * 4);  // one float per repeat: half of what the hardware writes
    Duplicate(src.Get<float>(), 1.0f, n);
    ReduceMax(dst.Get<float>(), src.Get<float>(), work.Get<float>(), n);  // @case:reduce_max_work
}

void CastWithoutDeqScale(GM_ADDR, GM_ADDR) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 256);
    pipe.InitBuffer(b, 256);
    Duplicate(a.Get<int32_t>(), int32_t(3), 64);
    Cast(b.Get<half>(), a.Get<int32_t>(), RoundMode::CAST_NONE, 64);  // @case:cast_without_deqscale
}

void CastUnsupported(GM_ADDR, GM_ADDR) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 256);
    pipe.InitBuffer(b, 256);
    Duplicate(a.Get<float>(), 3.0f, 64);
    Cast(b.Get<int8_t>(), a.Get<float>(), RoundMode::CAST_RINT, 64);  // @case:cast_unsupported   no fp32 -> int8
}

// Control for the vector rules: ReduceMax with the documented work size, int32 -> half after SetDeqScale,
// matched flags. Writes max and the converted value so the harness can check them.
void GoodVector(GM_ADDR, GM_ADDR dst) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> src, red, work, ints, halves;
    constexpr uint32_t n = 7168;
    pipe.InitBuffer(src, n * 4);
    pipe.InitBuffer(red, 32);
    pipe.InitBuffer(work, 224 * 4);
    pipe.InitBuffer(ints, 256);
    pipe.InitBuffer(halves, 256);
    LocalTensor<float> x = src.Get<float>();
    Duplicate(x, 1.0f, n);
    x.SetValue(5000, 42.0f);
    ReduceMax(red.Get<float>(), x, work.Get<float>(), n);
    SetFlag<HardEvent::V_S>(EVENT_ID1);
    WaitFlag<HardEvent::V_S>(EVENT_ID1);
    Duplicate(ints.Get<int32_t>(), int32_t(-127), 64);
    SetDeqScale(static_cast<half>(1.0f));
    Cast(halves.Get<half>(), ints.Get<int32_t>(), RoundMode::CAST_NONE, 64);
    GlobalTensor<float> out;
    out.SetGlobalBuffer(reinterpret_cast<float*>(dst), 2);
    out.SetValue(0, red.Get<float>().GetValue(0));
    out.SetValue(1, static_cast<float>(halves.Get<half>().GetValue(63)));
    DataCacheCleanAndInvalid<float, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(out);  // or it is lost
}

void SyncAllNotMixed(GM_ADDR, GM_ADDR) {
    SyncAll();  // @case:syncall_not_mixed
}

void SyncAllNotAivOnly(GM_ADDR, GM_ADDR) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    SyncAll<false>();  // @case:syncall_not_aiv_only   vector-only kernel: the barrier would wait for cube cores
}

void TwoPipes(GM_ADDR, GM_ADDR) {
    TPipe pipe;
    TPipe other;  // @case:two_pipes
}

void WaitWithoutSet(GM_ADDR, GM_ADDR) {
    WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);  // @case:wait_without_set
}

void SetNeverWaited(GM_ADDR, GM_ADDR) {
    SetFlag<HardEvent::V_MTE3>(EVENT_ID2);  // @case:set_never_waited
}

void CopyPadRange(GM_ADDR src, GM_ADDR) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 4096 * 32 + 32);
    GlobalTensor<float> s;
    s.SetGlobalBuffer(reinterpret_cast<float*>(src));
    DataCopyPad(buf.Get<float>(), s, {4096, 4, 0, 0, 0}, {false, 0, 0, 0.0f});  // @case:copy_pad_range
}

// Control: a pad-less DataCopyPad leaves the rest of the 32-byte block unspecified: never the old bytes.
void PadTailPoisoned(GM_ADDR src, GM_ADDR dst) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 32);
    GlobalTensor<float> s, d;
    s.SetGlobalBuffer(reinterpret_cast<float*>(src), 1);
    d.SetGlobalBuffer(reinterpret_cast<float*>(dst), 8);
    LocalTensor<float> t = buf.Get<float>();
    Duplicate(t, 0.0f, 8);  // old bytes the copy must not be trusted to keep
    SetFlag<HardEvent::V_MTE2>(EVENT_ID0);  // a TBuf has no queue hand-off: V's write is ordered by hand
    WaitFlag<HardEvent::V_MTE2>(EVENT_ID0);
    DataCopyPad(t, s, {1, 4, 0, 0, 0}, {false, 0, 0, 0.0f});
    for (uint32_t i = 0; i < 8; ++i) d.SetValue(i, t.GetValue(i));
    DataCacheCleanAndInvalid<float, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(d);  // or it is lost
}

// The pipe-ordering model (docs/twin.md, "Pipe ordering"). The signal word of SignalPort: sent by MTE3, then the
// next poll lands in the same UB word by MTE2. A PIPE_MTE3 barrier orders MTE3 against itself only.
template <bool kFlag>
void SignalWord(GM_ADDR src, GM_ADDR dst) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 32);
    GlobalTensor<int64_t> s, d;
    s.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(src), 1);
    d.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(dst), 1);
    LocalTensor<int64_t> w = buf.Get<int64_t>();
    w.SetValue(0, 7);  // S -> MTE3 on UB: the compiler's automatic sync
    DataCopyPad(d, w, {1, 8, 0, 0, 0});
    if constexpr (kFlag) {
        SetFlag<HardEvent::MTE3_MTE2>(EVENT_ID0);
        WaitFlag<HardEvent::MTE3_MTE2>(EVENT_ID0);
    } else {
        PipeBarrier<PIPE_MTE3>();
    }
    DataCopyPad(w, s, {1, 8, 0, 0, 0}, {false, 0, 0, 0});  // @case:pipe_mte3_then_mte2
    (void)w.GetValue(0);
}

// A scalar store, its clean, then an MTE2 read of the same bytes: the write-back is ordered only by a full barrier.
template <bool kBarrier>
void CleanThenCopy(GM_ADDR, GM_ADDR dst) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 64);
    GlobalTensor<int64_t> d;
    d.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t*>(dst), 8);
    d.SetValue(0, 5);
    DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(d);
    if constexpr (kBarrier) PipeBarrier<PIPE_ALL>();
    DataCopyPad(buf.Get<int64_t>(), d, {1, 8, 0, 0, 0}, {false, 0, 0, 0});  // @case:pipe_clean_then_mte2
}

// GM -> UB -> GM through a VECIN queue: EnQue/DeQue orders MTE2 before V, not before the MTE3 copy-out.
template <bool kFlag>
void MoverThroughVecin(GM_ADDR src, GM_ADDR dst) {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, kElems * sizeof(float));
    GlobalTensor<float> s, d;
    s.SetGlobalBuffer(reinterpret_cast<float*>(src), kElems);
    d.SetGlobalBuffer(reinterpret_cast<float*>(dst), kElems);
    LocalTensor<float> b = q.AllocTensor<float>();
    DataCopy(b, s, kElems);
    q.EnQue(b);
    b = q.DeQue<float>();
    if constexpr (kFlag) {
        SetFlag<HardEvent::MTE2_MTE3>(EVENT_ID1);
        WaitFlag<HardEvent::MTE2_MTE3>(EVENT_ID1);
    }
    DataCopy(d, b, kElems);  // @case:pipe_vecin_to_mte3
    SetFlag<HardEvent::MTE3_MTE2>(EVENT_ID1);
    WaitFlag<HardEvent::MTE3_MTE2>(EVENT_ID1);
    q.FreeTensor(b);
}

// A vector write into a TBuf, then an MTE3 copy-out of it with no flag: no queue, so nothing orders V before MTE3.
template <bool kFlag>
void VectorThenCopyOut(GM_ADDR, GM_ADDR dst) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, kElems * sizeof(float));
    GlobalTensor<float> d;
    d.SetGlobalBuffer(reinterpret_cast<float*>(dst), kElems);
    Duplicate(buf.Get<float>(), 3.0f, kElems);
    if constexpr (kFlag) {
        SetFlag<HardEvent::V_MTE3>(EVENT_ID2);
        WaitFlag<HardEvent::V_MTE3>(EVENT_ID2);
    }
    DataCopy(d, buf.Get<float>(), kElems);  // @case:pipe_v_then_mte3
}

// Two gather buffers side by side in UB (dp::RowBatch): each is refilled by MTE2 after a WaitFlag<MTE3_MTE2> of its
// own event only, so the other buffer's MTE3 read, issued after that event was set and adjacent in UB, runs on. The
// flag orders the first buffer's read alone; without the wait the refill meets that read.
template <bool kWait>
void PingPongAdjacent(GM_ADDR src, GM_ADDR dst) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 2 * kElems * sizeof(float));
    GlobalTensor<float> s, d;
    s.SetGlobalBuffer(reinterpret_cast<float*>(src), kElems);
    d.SetGlobalBuffer(reinterpret_cast<float*>(dst), 2 * kElems);
    LocalTensor<float> b0 = buf.Get<float>(), b1 = buf.Get<float>()[kElems];
    DataCopy(b0, s, kElems);
    SetFlag<HardEvent::MTE2_MTE3>(EVENT_ID1);
    WaitFlag<HardEvent::MTE2_MTE3>(EVENT_ID1);
    DataCopy(d, b0, kElems);
    SetFlag<HardEvent::MTE3_MTE2>(EVENT_ID4);
    DataCopy(b1, s, kElems);
    SetFlag<HardEvent::MTE2_MTE3>(EVENT_ID1);
    WaitFlag<HardEvent::MTE2_MTE3>(EVENT_ID1);
    DataCopy(d[kElems], b1, kElems);
    SetFlag<HardEvent::MTE3_MTE2>(EVENT_ID5);
    if constexpr (kWait) WaitFlag<HardEvent::MTE3_MTE2>(EVENT_ID4);
    DataCopy(b0, s, kElems);  // @case:pipe_pingpong_adjacent
    if constexpr (!kWait) WaitFlag<HardEvent::MTE3_MTE2>(EVENT_ID4);
    WaitFlag<HardEvent::MTE3_MTE2>(EVENT_ID5);
}

// 40 vector writes to separate 32-byte slices of a TBuf (64 bytes apart, so none touches another), then an MTE3
// copy-out of the first: a V op 40 ops back is still pending unless a flag orders V before MTE3 (the model keeps
// every V op on UB until it is ordered, up to 64; it used to keep 16 per pipe and would have forgotten this one).
template <bool kFlag>
void VectorDeepThenCopyOut(GM_ADDR, GM_ADDR dst) {
    constexpr uint32_t kSlices = 40, kStride = 16, kSlice = 8;
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, kSlices * kStride * sizeof(float));
    GlobalTensor<float> d;
    d.SetGlobalBuffer(reinterpret_cast<float*>(dst), kSlice);
    for (uint32_t i = 0; i < kSlices; ++i) Duplicate(buf.Get<float>()[i * kStride], float(i), kSlice);
    if constexpr (kFlag) {
        SetFlag<HardEvent::V_MTE3>(EVENT_ID2);
        WaitFlag<HardEvent::V_MTE3>(EVENT_ID2);
    }
    DataCopy(d, buf.Get<float>(), kSlice);  // @case:pipe_v_deep_then_mte3
}

// An in-place vector instruction (Muls(x, x, ...)) on a TBuf, then an MTE2 copy into the same bytes with no flag:
// the model keeps the instruction's write (its source read is the same bytes), so the copy still meets it.
template <bool kFlag>
void InPlaceVectorThenCopyIn(GM_ADDR src, GM_ADDR) {
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, kElems * sizeof(float));
    GlobalTensor<float> s;
    s.SetGlobalBuffer(reinterpret_cast<float*>(src), kElems);
    Duplicate(buf.Get<float>(), 1.0f, kElems);
    SetFlag<HardEvent::V_MTE2>(EVENT_ID4);  // the Duplicate is ordered: only the Muls can meet the copy
    WaitFlag<HardEvent::V_MTE2>(EVENT_ID4);
    Muls(buf.Get<float>(), buf.Get<float>(), 2.0f, kElems);
    if constexpr (kFlag) {
        SetFlag<HardEvent::V_MTE2>(EVENT_ID3);
        WaitFlag<HardEvent::V_MTE2>(EVENT_ID3);
    }
    DataCopy(buf.Get<float>(), s, kElems);  // @case:pipe_inplace_v_then_mte2
}

void L1Reserved(GM_ADDR, GM_ADDR) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TBuf<TPosition::A1> l1;
    pipe.InitBuffer(l1, cam::twin::ActivePlatform().l1Bytes);  // @case:l1_reserved   the top 128 bytes are not ours
}

void LoadDataMisaligned(GM_ADDR, GM_ADDR) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TBuf<TPosition::A1> l1;
    TBuf<TPosition::A2> l0a;
    pipe.InitBuffer(l1, 2048);
    pipe.InitBuffer(l0a, 2048);
    LoadData2DParams ld;
    ld.repeatTimes = 1;
    LoadData(l0a.Get<int8_t>()[256], l1.Get<int8_t>(), ld);  // @case:loaddata_misaligned
}

void MmadGemv(GM_ADDR, GM_ADDR) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TBuf<TPosition::A2> a2;
    TBuf<TPosition::B2> b2;
    TBuf<TPosition::CO1> co1;
    pipe.InitBuffer(a2, 16 * 32);
    pipe.InitBuffer(b2, 32 * 16);
    pipe.InitBuffer(co1, 16 * 16 * 4);
    MmadParams mm;
    mm.m = 1;
    mm.n = 16;
    mm.k = 32;
    Mmad(co1.Get<int32_t>(), a2.Get<int8_t>(), b2.Get<int8_t>(), mm);  // @case:mmad_gemv
}

void MmadTooLarge(GM_ADDR, GM_ADDR) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TBuf<TPosition::A2> a2;
    TBuf<TPosition::B2> b2;
    TBuf<TPosition::CO1> co1;
    pipe.InitBuffer(a2, 16 * 32);
    pipe.InitBuffer(b2, 32 * 16);
    pipe.InitBuffer(co1, 16 * 16 * 4);
    MmadParams mm;
    mm.m = 16;
    mm.n = 16;
    mm.k = 4096;
    Mmad(co1.Get<int32_t>(), a2.Get<int8_t>(), b2.Get<int8_t>(), mm);  // @case:mmad_too_large
}

// Two accumulating 16 x 16 Mmads into one L0C tile: (m/16)*(n/16) = 1 < 10, so PIPE_M must separate them.
void MmadTwice(bool barrier) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TBuf<TPosition::A2> a2;
    TBuf<TPosition::B2> b2;
    TBuf<TPosition::CO1> co1;
    pipe.InitBuffer(a2, 16 * 32);
    pipe.InitBuffer(b2, 32 * 16);
    pipe.InitBuffer(co1, 16 * 16 * 4);
    MmadParams mm;
    mm.m = 16;
    mm.n = 16;
    mm.k = 32;
    Mmad(co1.Get<int32_t>(), a2.Get<int8_t>(), b2.Get<int8_t>(), mm);
    mm.cmatrixInitVal = false;
    if (barrier) PipeBarrier<PIPE_M>();
    Mmad(co1.Get<int32_t>(), a2.Get<int8_t>(), b2.Get<int8_t>(), mm);  // @case:mmad_no_barrier
}
// Two tiles through one L0C queue slot, each two accumulating 16 x 16 Mmads. The slot keeps the first tile's sums
// when it is taken again, so each tile's first Mmad must initialise (cmatrixInitVal); firstInits: whether that
// Mmad of tile 0 / tile 1 does.
void MmadTiles(bool tile0Inits, bool tile1Inits) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TBuf<TPosition::A2> a2;
    TBuf<TPosition::B2> b2;
    TQue<TPosition::CO1, 1> co1;
    pipe.InitBuffer(a2, 16 * 32);
    pipe.InitBuffer(b2, 32 * 16);
    pipe.InitBuffer(co1, 1, 16 * 16 * 4);
    for (int tile = 0; tile < 2; ++tile) {
        LocalTensor<int32_t> c = co1.AllocTensor<int32_t>();
        MmadParams mm;
        mm.m = 16;
        mm.n = 16;
        mm.k = 32;
        mm.cmatrixInitVal = tile == 0 ? tile0Inits : tile1Inits;
        Mmad(c, a2.Get<int8_t>(), b2.Get<int8_t>(), mm);  // @case:mmad_uninit @case:mmad_uninit_second_tile
        PipeBarrier<PIPE_M>();
        mm.cmatrixInitVal = false;
        Mmad(c, a2.Get<int8_t>(), b2.Get<int8_t>(), mm);
        co1.EnQue(c);
        c = co1.DeQue<int32_t>();
        co1.FreeTensor(c);
    }
}
void MmadUninit(GM_ADDR, GM_ADDR) { MmadTiles(false, false); }
void MmadUninitSecondTile(GM_ADDR, GM_ADDR) { MmadTiles(true, false); }
void GoodMmadInit(GM_ADDR, GM_ADDR) { MmadTiles(true, true); }

void MmadNoBarrier(GM_ADDR, GM_ADDR) { MmadTwice(false); }
void GoodMmadBarrier(GM_ADDR, GM_ADDR) { MmadTwice(true); }

void FixpipeMSize(GM_ADDR, GM_ADDR dst) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TBuf<TPosition::CO1> co1;
    pipe.InitBuffer(co1, 16 * 16 * 4);
    GlobalTensor<int32_t> g;
    g.SetGlobalBuffer(reinterpret_cast<int32_t*>(dst));
    FixpipeParamsV220 fp;
    fp.nSize = 16;
    fp.mSize = 8208;
    fp.srcStride = 8208;
    fp.dstStride = 16;
    Fixpipe<int32_t, int32_t, CFG_ROW_MAJOR>(g, co1.Get<int32_t>(), fp);  // @case:fixpipe_msize
}

// Fixpipe NZ -> ND of one 16 x 32 L0C tile with the given nSize and dstStride (elements per destination row).
void FixpipeN(GM_ADDR dst, uint16_t nSize, uint32_t dstStride) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
    TPipe pipe;
    TQue<TPosition::CO1, 1> co1;
    pipe.InitBuffer(co1, 1, 16 * 32 * 4);
    GlobalTensor<int32_t> g;
    g.SetGlobalBuffer(reinterpret_cast<int32_t*>(dst), 16 * 32);
    LocalTensor<int32_t> c = co1.AllocTensor<int32_t>();
    co1.EnQue(c);
    c = co1.DeQue<int32_t>();
    FixpipeParamsV220 fp;
    fp.nSize = nSize;
    fp.mSize = 16;
    fp.srcStride = 16;
    fp.dstStride = dstStride;
    Fixpipe<int32_t, int32_t, CFG_ROW_MAJOR>(g, c, fp);  // @case:fixpipe_nsize_zero @case:fixpipe_nsize_past_row
    co1.FreeTensor(c);
}
void FixpipeNSizeZero(GM_ADDR, GM_ADDR dst) { FixpipeN(dst, 0, 32); }
void FixpipeNSizePastRow(GM_ADDR, GM_ADDR dst) { FixpipeN(dst, 32, 20); }
// Control: with NZ2ND any nSize in [1, 4095] is documented, a multiple of 16 or not (a 20-column tail tile).
void GoodFixpipeOddN(GM_ADDR, GM_ADDR dst) { FixpipeN(dst, 20, 20); }

// ---- scalar data cache (twin/dcache.h) ----

// Word 0 of dst is a flag block 0 raises for block 1; block 1 polls it (invalidating first when `invalidate`)
// for a bounded time and writes 1 to word 16 (another line) when it saw the flag, 2 when it gave up.
void FlagHandOff(GM_ADDR dst, bool clean, bool invalidate, bool readEarly) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    GlobalTensor<int64_t> flag, result;
    flag.SetGlobalBuffer(reinterpret_cast<int64_t*>(dst), 1);
    result.SetGlobalBuffer(reinterpret_cast<int64_t*>(dst) + 16, 1);
    if (GetBlockIdx() == 1 && readEarly) (void)flag.GetValue(0);  // the line is now in block 1's cache
    SyncAll();
    if (GetBlockIdx() == 0) {
        flag.SetValue(0, 1);
        if (clean) DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(flag);
        // Keep the block alive past the reader's deadline, so the reader's whole wait runs while an uncleaned store
        // sits in this block's cache (and the block's end, which writes nothing back, comes after it).
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
        return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    int64_t seen = 2;
    while (std::chrono::steady_clock::now() < deadline) {
        if (invalidate) DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(flag);
        if (flag.GetValue(0) == 1) {
            seen = 1;
            break;
        }
        std::this_thread::yield();
    }
    result.SetValue(0, seen);
    DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(result);
}

void DcacheSharedLine(GM_ADDR, GM_ADDR dst) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    GlobalTensor<int64_t> words;
    words.SetGlobalBuffer(reinterpret_cast<int64_t*>(dst), 8);  // one 64-byte line (dst is 64-byte aligned)
    if (GetBlockIdx() == 0) words.SetValue(0, 7);
    SyncAll();
    if (GetBlockIdx() == 1) words.SetValue(1, 9);  // @case:dcache_shared_line   block 0 still holds the line dirty
    SyncAll();
    DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(words);
}

void DcacheStaleLine(GM_ADDR, GM_ADDR dst) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    GlobalTensor<int64_t> words;
    words.SetGlobalBuffer(reinterpret_cast<int64_t*>(dst), 8);  // one 64-byte line
    if (GetBlockIdx() == 1) (void)words.GetValue(1);  // block 1 caches the line
    SyncAll();
    if (GetBlockIdx() == 0) {
        words.SetValue(0, 7);
        DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(words);
        DataSyncBarrier<MemDsbT::ALL>();
    }
    SyncAll();
    if (GetBlockIdx() == 1) words.SetValue(1, 9);  // @case:dcache_stale_line   its copy predates block 0's clean
    SyncAll();
    DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(words);
}

void ScalarMisaligned(GM_ADDR, GM_ADDR dst) {
    GlobalTensor<int64_t> w;
    w.SetGlobalBuffer(reinterpret_cast<int64_t*>(dst + 4), 1);
    (void)w.GetValue(0);  // @case:scalar_misaligned
}

// Control for one-tpipe: a pipe released with Destroy may be followed by another.
void PipeDestroyThenNew(GM_ADDR, GM_ADDR) {
    TPipe first;
    first.Destroy();
    TPipe second;
    TBuf<TPosition::VECCALC> buf;
    second.InitBuffer(buf, 256);
}

void MteIntoDirtyLine(GM_ADDR, GM_ADDR dst) {
    TPipe pipe;
    TQue<TPosition::VECOUT, 1> out;
    pipe.InitBuffer(out, 1, 64);
    GlobalTensor<int64_t> words;
    words.SetGlobalBuffer(reinterpret_cast<int64_t*>(dst), 8);
    words.SetValue(0, 5);  // dirty in this block's cache, never cleaned
    LocalTensor<int64_t> t = out.AllocTensor<int64_t>();
    Duplicate(t.ReinterpretCast<float>(), 0.0f, 16);
    out.EnQue(t);
    t = out.DeQue<int64_t>();
    DataCopy(words, t, 4);  // @case:mte_into_dirty_line
    out.FreeTensor(t);
}

// Runs GoodCube on blockDim cube blocks and checks every block's C against the integer product.
int CubeCase(uint32_t blockDim) {
    std::vector<int8_t> ab(kCubeM * kCubeK + kCubeK * kCubeN);
    for (size_t i = 0; i < ab.size(); ++i) ab[i] = static_cast<int8_t>((i * 37 + 11) % 255 - 127);
    const int8_t* a = ab.data();
    const int8_t* b = ab.data() + kCubeM * kCubeK;  // NZ with one 32-column block: (k, n) at k * 32 + n
    std::vector<int32_t> c(blockDim * kCubeM * kCubeN, 0);
    try {
        cam::twin::RunLaunch("good_cube", blockDim, [&] {
            GoodCube(reinterpret_cast<GM_ADDR>(ab.data()), reinterpret_cast<GM_ADDR>(ab.data() + kCubeM * kCubeK),
                     reinterpret_cast<GM_ADDR>(c.data()));
        });
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return 1;
    }
    for (uint32_t blk = 0; blk < blockDim; ++blk)
        for (uint32_t m = 0; m < kCubeM; ++m)
            for (uint32_t n = 0; n < kCubeN; ++n) {
                int32_t want = 0;
                for (uint32_t k = 0; k < kCubeK; ++k) want += int32_t(a[m * kCubeK + k]) * int32_t(b[k * 32 + n]);
                if (c[(blk * kCubeM + m) * kCubeN + n] != want) {
                    std::printf("wrong cube result at block %u (%u, %u)\n", blk, m, n);
                    return 3;
                }
            }
    std::printf("OK\n");
    return 0;
}

// Two words published one after the other by scalar store + clean, the other blocks reading them after SyncAll: a
// dcci does not wait for its write-back, so without DataSyncBarrier the second can land first (or after SyncAll).
template <int kCase>  // 0: no dsb between the cleans, 1: none before SyncAll, 2: dsb after each clean (control)
void CleanThenPublish(GM_ADDR, GM_ADDR dst) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    GlobalTensor<int64_t> words;
    words.SetGlobalBuffer(reinterpret_cast<int64_t*>(dst), 16);  // two 64-byte lines
    if (GetBlockIdx() == 0) {
        words.SetValue(0, 7);
        DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(words);
        if (kCase != 0) DataSyncBarrier<MemDsbT::ALL>();
        words.SetValue(8, 1);
        DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(words[8]);  // @case:clean_no_dsb
        if (kCase == 2) DataSyncBarrier<MemDsbT::DDR>();
    }
    SyncAll();  // @case:syncall_clean_no_dsb
}

struct Case {
    const char* name;
    void (*kernel)(GM_ADDR, GM_ADDR);
    uint32_t blockDim;
};

const Case kCases[] = {
    {"good_copy", GoodCopy, 4},
    {"pipe_mte3_then_mte2", SignalWord<false>, 1},
    {"good_pipe_mte3_then_mte2", SignalWord<true>, 1},
    {"pipe_clean_then_mte2", CleanThenCopy<false>, 1},
    {"good_pipe_clean_then_mte2", CleanThenCopy<true>, 1},
    {"pipe_vecin_to_mte3", MoverThroughVecin<false>, 1},
    {"good_pipe_vecin_to_mte3", MoverThroughVecin<true>, 1},
    {"pipe_v_then_mte3", VectorThenCopyOut<false>, 1},
    {"good_pipe_v_then_mte3", VectorThenCopyOut<true>, 1},
    {"pipe_v_deep_then_mte3", VectorDeepThenCopyOut<false>, 1},
    {"good_pipe_v_deep_then_mte3", VectorDeepThenCopyOut<true>, 1},
    {"pipe_pingpong_adjacent", PingPongAdjacent<false>, 1},
    {"good_pipe_pingpong_adjacent", PingPongAdjacent<true>, 1},
    {"pipe_inplace_v_then_mte2", InPlaceVectorThenCopyIn<false>, 1},
    {"good_pipe_inplace_v_then_mte2", InPlaceVectorThenCopyIn<true>, 1},
    {"good_copy_48_cores", GoodCopy, 48},  // legal once the platform has 48 vector cores
    {"syncall_cores", GoodCopy, 8},        // same kernel, more blocks than the 4-core twin has
    {"syncall_cores_910b3", GoodCopy, 48},  // 48 blocks: fine on 910B1, 8 more than 910B3's 40 vector cores
    {"ub_overflow", UbOverflow, 2},
    {"ub_api_scratch", UbApiScratch, 1},
    {"copy_length", CopyLength, 1},
    {"copy_ub_address", CopyUbAddress, 1},
    {"vector_misaligned", VectorMisaligned, 1},
    {"read_before_deque", ReadBeforeDeque, 1},
    {"deque_empty", DequeEmpty, 1},
    {"alloc_exhausted", AllocExhausted, 1},
    {"use_after_free", UseAfterFree, 1},
    {"leak", Leak, 1},
    {"syncall_exit", SyncAllEarlyExit, 3},
    {"gm_bounds", GmBounds, 1},
    {"cube_cores", GoodCubeKernel, 3},  // the twin platform has 2 cube cores
    {"l0a_overflow", L0aOverflow, 1},
    {"cube_buffer_in_vector_kernel", CubeBufferInVectorKernel, 1},
    {"ub_in_cube_kernel", UbInCubeKernel, 1},
    {"vector_in_cube_kernel", VectorInCubeKernel, 1},
    {"mmad_enqueued_operand", MmadEnqueuedOperand, 1},
    {"mmad_l0_bounds", MmadL0Bounds, 1},
    {"reduce_max_work", ReduceMaxWork, 1},
    {"cast_without_deqscale", CastWithoutDeqScale, 1},
    {"cast_unsupported", CastUnsupported, 1},
    {"good_vector", GoodVector, 1},
    {"syncall_not_mixed", SyncAllNotMixed, 2},
    {"syncall_not_aiv_only", SyncAllNotAivOnly, 2},
    {"two_pipes", TwoPipes, 1},
    {"wait_without_set", WaitWithoutSet, 1},
    {"set_never_waited", SetNeverWaited, 1},
    {"copy_pad_range", CopyPadRange, 1},
    {"pad_tail_poisoned", PadTailPoisoned, 1},
    {"l1_reserved", L1Reserved, 1},
    {"loaddata_misaligned", LoadDataMisaligned, 1},
    {"mmad_gemv", MmadGemv, 1},
    {"mmad_too_large", MmadTooLarge, 1},
    {"mmad_no_barrier", MmadNoBarrier, 1},
    {"good_mmad_barrier", GoodMmadBarrier, 1},
    {"mmad_uninit", MmadUninit, 1},
    {"mmad_uninit_second_tile", MmadUninitSecondTile, 1},
    {"good_mmad_init", GoodMmadInit, 1},
    {"fixpipe_msize", FixpipeMSize, 1},
    {"fixpipe_nsize_zero", FixpipeNSizeZero, 1},
    {"fixpipe_nsize_past_row", FixpipeNSizePastRow, 1},
    {"good_fixpipe_odd_n", GoodFixpipeOddN, 1},
    {"dcache_shared_line", DcacheSharedLine, 2},
    {"mte_into_dirty_line", MteIntoDirtyLine, 1},
    {"dcache_stale_line", DcacheStaleLine, 2},
    {"clean_no_dsb", CleanThenPublish<0>, 2},
    {"syncall_clean_no_dsb", CleanThenPublish<1>, 2},
    {"good_clean_dsb", CleanThenPublish<2>, 2},
    {"scalar_misaligned", ScalarMisaligned, 1},
    {"pipe_destroy_then_new", PipeDestroyThenNew, 1},
};

// A scalar store into another rank's window (the launch knows every window and its own rank's).
void PeerScalarStore(GM_ADDR peerWindow) {
    GlobalTensor<int64_t> w;
    w.SetGlobalBuffer(reinterpret_cast<int64_t*>(peerWindow), 8);
    w.SetValue(0, 1);  // @case:peer_scalar_store
    DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(w);
}

int PeerStoreCase(bool intoPeer) {
    alignas(64) static int64_t windows[2][64];
    cam::twin::LaunchWindows lw;
    lw.windows = {{reinterpret_cast<uintptr_t>(windows[0]), sizeof(windows[0])},
                  {reinterpret_cast<uintptr_t>(windows[1]), sizeof(windows[1])}};
    lw.own = 0;
    try {
        cam::twin::RunLaunch(intoPeer ? "peer_scalar_store" : "own_scalar_store", 1, [&] {
            PeerScalarStore(reinterpret_cast<GM_ADDR>(windows[intoPeer ? 1 : 0]));
        }, &lw);
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return 1;
    }
    std::printf("OK\n");
    return 0;
}

// A read of a table the host rewrites between launches (the peer table): invalidate its line first, or the core
// may read what an earlier launch left in its scalar cache.
void ReadHostTable(GM_ADDR table, GM_ADDR out, bool invalidate) {
    GlobalTensor<int64_t> t;
    t.SetGlobalBuffer(reinterpret_cast<int64_t*>(table), 8);
    if (invalidate) DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(t);
    const int64_t v = t.GetValue(3);  // @case:table_not_invalidated
    GlobalTensor<int64_t> o;
    o.SetGlobalBuffer(reinterpret_cast<int64_t*>(out), 8);
    o.SetValue(0, v);
    DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(o);
}

int HostTableCase(bool invalidate) {
    alignas(64) static int64_t table[8] = {0, 0, 0, 42, 0, 0, 0, 0};
    alignas(64) static int64_t out[8];
    cam::twin::LaunchWindows lw;
    lw.hostTables = {{reinterpret_cast<uintptr_t>(table), sizeof(table)}};
    try {
        cam::twin::RunLaunch(invalidate ? "good_table_invalidated" : "table_not_invalidated", 1, [&] {
            ReadHostTable(reinterpret_cast<GM_ADDR>(table), reinterpret_cast<GM_ADDR>(out), invalidate);
        }, &lw);
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return 1;
    }
    if (out[0] != 42) return std::printf("read %lld\n", static_cast<long long>(out[0])), 3;
    std::printf("OK\n");
    return 0;
}

// Two blocks each write 64 bytes into a peer's window, then block 0 signals the peer (one word by MTE3 from UB, into
// the window's signal line). Only a SyncAll between the writes and the signal orders block 1's write before it.
void PeerSignal(GM_ADDR peer, bool syncFirst) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIV_1_0);
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 64);
    LocalTensor<int64_t> words = buf.Get<int64_t>();
    for (uint32_t i = 0; i < 8; ++i) words.SetValue(i, GetBlockIdx() + 1);
    GlobalTensor<int64_t> data, signal;
    data.SetGlobalBuffer(reinterpret_cast<int64_t*>(peer) + GetBlockIdx() * 8, 8);
    signal.SetGlobalBuffer(reinterpret_cast<int64_t*>(peer) + 32, 1);
    SetFlag<HardEvent::S_MTE3>(EVENT_ID0);
    WaitFlag<HardEvent::S_MTE3>(EVENT_ID0);
    DataCopy(data, words, 8);  // @site:peer_data
    PipeBarrier<PIPE_ALL>();
    if (syncFirst) SyncAll();
    if (GetBlockIdx() == 0) DataCopyPad(signal, words, {1, 8, 0, 0, 0});  // @site:peer_signal
}

int PeerSignalCase(bool syncFirst) {
    alignas(64) static int64_t windows[2][64];
    cam::twin::LaunchWindows lw;
    lw.windows = {{reinterpret_cast<uintptr_t>(windows[0]), sizeof(windows[0])},
                  {reinterpret_cast<uintptr_t>(windows[1]), sizeof(windows[1])}};
    lw.own = 0;
    for (const auto* w : {windows[0], windows[1]}) lw.signals.emplace_back(reinterpret_cast<uintptr_t>(w + 32), 64);
    try {
        cam::twin::RunLaunch(syncFirst ? "good_signal_after_syncall" : "signal_before_syncall", 2,
                             [&] { PeerSignal(reinterpret_cast<GM_ADDR>(windows[1]), syncFirst); }, &lw, kBatch);
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return 1;
    }
    if (windows[1][0] != 1 || windows[1][8] != 2 || windows[1][32] != 1) return std::printf("wrong words\n"), 3;
    std::printf("OK\n");
    return 0;
}

// Two launches of one block each: the first reads word 0 (its line is still cached when the launch ends), the host
// changes the word, the second reads it again, invalidating the line first or not.
int EarlierLaunchCase(bool invalidate) {
    alignas(64) static int64_t words[8];
    words[0] = 1;
    int64_t seen = 0;
    const auto read = [&] {
        GlobalTensor<int64_t> g;
        g.SetGlobalBuffer(reinterpret_cast<int64_t*>(words), 8);
        if (invalidate) DataCacheCleanAndInvalid<int64_t, CacheLine::SINGLE_CACHE_LINE, DcciDst::CACHELINE_OUT>(g);
        seen = g.GetValue(0);  // @case:dcache_earlier_launch
    };
    try {
        cam::twin::RunLaunch("first_launch", 1, read);
        words[0] = 2;
        cam::twin::RunLaunch(invalidate ? "good_dcache_later_launch" : "dcache_earlier_launch", 1, read);
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return 1;
    }
    if (seen != 2) return std::printf("read %lld\n", static_cast<long long>(seen)), 3;
    std::printf("OK\n");
    return 0;
}

// The flag hand-off under the data cache: prints "seen" or "stale" (exit 0 either way unless the launch failed).
int FlagCase(bool clean, bool invalidate, bool readEarly) {
    alignas(64) static int64_t words[32];
    for (auto& w : words) w = 0;
    try {
        cam::twin::RunLaunch("flag_hand_off", 2, [&] {
            FlagHandOff(reinterpret_cast<GM_ADDR>(words), clean, invalidate, readEarly);
        }, nullptr, kBatch);
    } catch (const cam::twin::TwinViolation& e) {
        // What GM holds after the refused launch: a store never cleaned must not have reached it.
        std::printf("%s\nflag in GM after the kernel: %lld\n", e.what(), static_cast<long long>(words[0]));
        return 1;
    }
    std::printf("%s\n", words[16] == 1 ? "seen" : words[16] == 2 ? "stale" : "no result");
    return 0;
}

}  // namespace

// Stream semantics: launch returns at once, work runs in order on the worker, synchronize waits with a bound and
// reports the first kernel error, work queued after a failure is skipped, and the stream is usable afterwards.
int StreamSemantics() {
    using clock = std::chrono::steady_clock;
    cam::twin::Stream stream;
    std::atomic<int> order{0};
    std::vector<float> src(4 * kElems, 1.0f), dst(4 * kElems);
    auto* s = reinterpret_cast<GM_ADDR>(src.data());
    auto* d = reinterpret_cast<GM_ADDR>(dst.data());
    const auto t0 = clock::now();
    cam::twin::EnqueueLaunch(&stream, "slow", 1, [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        int expected = 0;
        order.compare_exchange_strong(expected, 1);
    });
    cam::twin::EnqueueHostTask(&stream, [&] {
        int expected = 1;
        order.compare_exchange_strong(expected, 2);
    });
    if (clock::now() - t0 > std::chrono::milliseconds(150)) return std::printf("launch blocked the host\n"), 1;
    cam::twin::StreamError error;
    if (stream.Synchronize(0.02, &error)) return std::printf("synchronize ignored its timeout\n"), 1;
    if (!stream.Synchronize(30, &error) || error.code != 0) return std::printf("synchronize failed\n"), 1;
    if (order.load() != 2) return std::printf("stream ran out of order\n"), 1;

    bool ranAfterFailure = false;
    cam::twin::EnqueueLaunch(&stream, "copy_length", 1, [&] { CopyLength(s, d); });
    cam::twin::EnqueueHostTask(&stream, [&] { ranAfterFailure = true; });
    if (!stream.Synchronize(30, &error)) return std::printf("synchronize timed out\n"), 1;
    if (error.code != cam::twin::kTaskFault || error.message.find("copy-align") == std::string::npos)
        return std::printf("kernel error not reported: %d %s\n", error.code, error.message.c_str()), 1;
    if (ranAfterFailure) return std::printf("work after a failure was not skipped\n"), 1;
    if (!stream.Synchronize(30, &error) || error.code != 0) return std::printf("error reported twice\n"), 1;

    cam::twin::EnqueueLaunch(&stream, "good_copy", 4, [&] { GoodCopy(s, d); }, kBatch);
    if (!stream.Synchronize(30, &error) || error.code != 0) return std::printf("stream unusable after error\n"), 1;
    std::printf("OK\n");
    return 0;
}

// A hard-SyncAll kernel launched asking for batch mode, or launched bare: a launch that asks for nothing is in
// normal mode, as a <<<>>> launch is on Ascend, and is refused.
int BatchModeCase(bool batchMode) {
    std::vector<float> src(4 * kElems, 1.5f), dst(4 * kElems, 0.0f);
    const auto kernel = [&] { GoodCopy(reinterpret_cast<GM_ADDR>(src.data()), reinterpret_cast<GM_ADDR>(dst.data())); };
    try {
        if (batchMode) cam::twin::RunLaunch("good_syncall_batch_mode", 4, kernel, nullptr, kBatch);
        else cam::twin::RunLaunch("syncall_no_batch_mode", 4, kernel);
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return 1;
    }
    std::printf("OK\n");
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 2 && std::strcmp(argv[1], "stream") == 0) return StreamSemantics();
    if (argc == 2 && std::strcmp(argv[1], "syncall_no_batch_mode") == 0) return BatchModeCase(false);
    if (argc == 2 && std::strcmp(argv[1], "good_syncall_batch_mode") == 0) return BatchModeCase(true);
    if (argc == 2 && std::strcmp(argv[1], "good_cube") == 0) return CubeCase(2);
    if (argc == 2 && std::strcmp(argv[1], "peer_scalar_store") == 0) return PeerStoreCase(true);
    if (argc == 2 && std::strcmp(argv[1], "own_scalar_store") == 0) return PeerStoreCase(false);
    if (argc == 2 && std::strcmp(argv[1], "table_not_invalidated") == 0) return HostTableCase(false);
    if (argc == 2 && std::strcmp(argv[1], "good_table_invalidated") == 0) return HostTableCase(true);
    if (argc == 2 && std::strcmp(argv[1], "signal_before_syncall") == 0) return PeerSignalCase(false);
    if (argc == 2 && std::strcmp(argv[1], "dcache_earlier_launch") == 0) return EarlierLaunchCase(false);
    if (argc == 2 && std::strcmp(argv[1], "good_dcache_later_launch") == 0) return EarlierLaunchCase(true);
    if (argc == 2 && std::strcmp(argv[1], "good_signal_after_syncall") == 0) return PeerSignalCase(true);
    if (argc == 2 && std::strcmp(argv[1], "flag_clean_invalidate") == 0) return FlagCase(true, true, true);
    if (argc == 2 && std::strcmp(argv[1], "flag_missing_clean") == 0) return FlagCase(false, true, true);
    if (argc == 2 && std::strcmp(argv[1], "flag_missing_invalidate") == 0) return FlagCase(true, false, true);
    if (argc != 2) {
        std::fprintf(stderr, "usage: violations <case>\n");
        return 2;
    }
    for (const Case& c : kCases) {
        if (std::strcmp(c.name, argv[1]) != 0) continue;
        if (std::strcmp(c.name, "good_copy_48_cores") == 0) cam::twin::SetPlatform("ascend910b1");
        if (std::strcmp(c.name, "syncall_cores_910b3") == 0) cam::twin::SetPlatform("ascend910b3");
        std::vector<float> src(48 * kElems, 1.5f);
        alignas(64) static float dstStore[48 * kElems];
        std::fill(dstStore, dstStore + 48 * kElems, 0.0f);
        float* dst = dstStore;
        auto* s = reinterpret_cast<GM_ADDR>(src.data());
        auto* d = reinterpret_cast<GM_ADDR>(dst);
        try {
            cam::twin::RunLaunch(c.name, c.blockDim, [&] { c.kernel(s, d); }, nullptr, kBatch);
        } catch (const cam::twin::TwinViolation& e) {
            std::printf("%s\n", e.what());
            return 1;
        }
        for (uint32_t i = 0; i < c.blockDim * kElems && c.kernel == GoodCopy; ++i) {
            if (dst[i] != 3.0f) {
                std::printf("wrong result at %u\n", i);
                return 3;
            }
        }
        if (c.kernel == GoodVector && (dst[0] != 42.0f || dst[1] != -127.0f)) {
            std::printf("wrong vector result %g %g\n", dst[0], dst[1]);
            return 3;
        }
        if (c.kernel == PadTailPoisoned) {
            if (dst[0] != 1.5f) return std::printf("pad-less copy lost its data\n"), 3;
            for (int i = 1; i < 8; ++i) {
                uint32_t bits;
                std::memcpy(&bits, &dst[i], 4);
                if (bits != 0xA5A5A5A5u) return std::printf("pad-less copy kept old bytes at %d\n", i), 3;
            }
        }
        std::printf("OK\n");
        return 0;
    }
    std::fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
