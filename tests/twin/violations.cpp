// Test-only kernels, each breaking one hardware rule the twin must enforce, plus correct controls.
// Usage: violations <case>. Prints "OK" and exits 0 when the launch succeeds, prints the twin's error and
// exits 1 when it fails. Lines marked "@case:<name>" are where each violation must be reported.
#include <cstdio>
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

// Control: copy-in, vector op, copy-out with proper queue use. Must pass.
void GoodCopy(GM_ADDR src, GM_ADDR dst) {
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
    const uint32_t ub = cam::twin::ActivePlatform().ubBytes;
    pipe.InitBuffer(big, ub - 1024);
    pipe.InitBuffer(more, 2048);  // @case:ub_overflow
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

struct Case {
    const char* name;
    void (*kernel)(GM_ADDR, GM_ADDR);
    uint32_t blockDim;
};

const Case kCases[] = {
    {"good_copy", GoodCopy, 4},
    {"good_copy_48_cores", GoodCopy, 48},  // legal once the platform has 48 vector cores
    {"syncall_cores", GoodCopy, 8},        // same kernel, more blocks than the 4-core twin has
    {"ub_overflow", UbOverflow, 2},
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
};

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

    cam::twin::EnqueueLaunch(&stream, "good_copy", 4, [&] { GoodCopy(s, d); });
    if (!stream.Synchronize(30, &error) || error.code != 0) return std::printf("stream unusable after error\n"), 1;
    std::printf("OK\n");
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 2 && std::strcmp(argv[1], "stream") == 0) return StreamSemantics();
    if (argc != 2) {
        std::fprintf(stderr, "usage: violations <case>\n");
        return 2;
    }
    for (const Case& c : kCases) {
        if (std::strcmp(c.name, argv[1]) != 0) continue;
        if (std::strcmp(c.name, "good_copy_48_cores") == 0) cam::twin::SetPlatform("ascend910b");
        std::vector<float> src(48 * kElems, 1.5f), dst(48 * kElems, 0.0f);
        auto* s = reinterpret_cast<GM_ADDR>(src.data());
        auto* d = reinterpret_cast<GM_ADDR>(dst.data());
        try {
            cam::twin::RunLaunch(c.name, c.blockDim, [&] { c.kernel(s, d); });
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
        std::printf("OK\n");
        return 0;
    }
    std::fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
