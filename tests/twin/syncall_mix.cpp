// Test-only 1:2 mixed kernels for the hard SyncAll of a mixed launch (docs/twin.md, "Mixed kernels and cross-core
// flags"): every vector core writes one 32-byte block of its own value to a GM slot, every core of the launch (cube
// and vector) meets at SyncAll<false>, and every vector core then reads the slots of all vector cores, of its own
// AI core and of the others, and writes their maximum out (a row amax handed between vector cores of different AI
// cores). Usage: syncall_mix <case> [timing]. Prints "OK" and exits 0 when the launch succeeds and every vector core
// wrote the maximum, prints the twin's error and exits 1 when it fails. Lines marked "@case:<name>" are where each
// violation must be reported.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "kernel_operator.h"
#include "twin/launch.h"
#include "twin/runtime.h"
#include "twin/timing.h"

using namespace AscendC;
using cam::twin::TimingConstant;

namespace {

constexpr uint32_t kAiCores = 2;     // the "twin" platform's two AI cores
constexpr uint32_t kBlockFloats = 8;  // one 32-byte block per vector core
constexpr uint32_t kExtra = 50;       // the timing case's extra Adds on one vector core
constexpr uint32_t kElems = 4096;

enum class Case { Good, VectorAivOnly, CubeAivOnly, VectorSkips, CubeSkips, Stuck, TooManyAiCores, NoBatchMode, Join };
Case gCase = Case::Good;

float ValueOf(uint32_t vectorCore) { return float((vectorCore * 7 + 3) % 11) - 4.0f; }

void Vector(const GlobalTensor<float>& slots, const GlobalTensor<float>& out, uint32_t vectorCores) {
    const uint32_t me = static_cast<uint32_t>(GetBlockIdx());
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    TQue<TPosition::VECOUT, 1> o;
    pipe.InitBuffer(in, 1, vectorCores * kBlockFloats * 4);
    pipe.InitBuffer(o, 1, kBlockFloats * 4);
    LocalTensor<float> mine = o.AllocTensor<float>();
    Duplicate(mine, ValueOf(me), kBlockFloats);
    o.EnQue(mine);
    mine = o.DeQue<float>();
    DataCopy(slots[me * kBlockFloats], mine, kBlockFloats);
    o.FreeTensor(mine);
    PipeBarrier<PIPE_ALL>();  // the write has left this core before the barrier (SyncAll orders cores, not pipes)
    switch (gCase) {
        case Case::VectorAivOnly:
            SyncAll<true>();  // @case:vector_aiv_only
            break;
        case Case::VectorSkips:
            if (me == 1) return;  // vector core 1 of AI core 0 skips the barrier its sibling enters
            SyncAll<false>();
            break;
        default:
            SyncAll<false>();  // @case:no_batch_mode
    }
    LocalTensor<float> all = in.AllocTensor<float>();
    DataCopy(all, slots, vectorCores * kBlockFloats);
    in.EnQue(all);
    all = in.DeQue<float>();
    LocalTensor<float> m = o.AllocTensor<float>();
    Adds(m, all, 0.0f, kBlockFloats);
    for (uint32_t v = 1; v < vectorCores; ++v) Max(m, m, all[v * kBlockFloats], kBlockFloats);
    in.FreeTensor(all);
    o.EnQue(m);
    m = o.DeQue<float>();
    DataCopy(out[me * kBlockFloats], m, kBlockFloats);
    o.FreeTensor(m);
}

void Kernel(GM_ADDR slotsGm, GM_ADDR outGm) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);  // @case:too_many_ai_cores
    const uint32_t vectorCores = GetBlockNum() * GetTaskRation();
    GlobalTensor<float> slots, out;
    slots.SetGlobalBuffer(reinterpret_cast<float*>(slotsGm), vectorCores * kBlockFloats);
    out.SetGlobalBuffer(reinterpret_cast<float*>(outGm), vectorCores * kBlockFloats);
    if (ASCEND_IS_AIC) {
        if (gCase == Case::CubeAivOnly) {
            SyncAll<true>();  // @case:cube_aiv_only
        } else if (gCase == Case::Stuck && GetBlockIdx() == 1) {
            // Test scaffolding, not a kernel idiom: the cube core of AI core 1 neither reaches the barrier nor
            // leaves the kernel (a core stuck elsewhere) until the launch is aborted, bounded on the host.
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
            while (!cam::twin::LaunchAbortedNow() && std::chrono::steady_clock::now() < deadline)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
        } else if (gCase != Case::CubeSkips || GetBlockIdx() != 1) {
            SyncAll<false>();  // @case:no_batch_mode
        }
        return;
    }
    Vector(slots, out, vectorCores);
}

// Vector core 3 (vector core 1 of AI core 1) does kExtra more Adds before the barrier; every vector core then does
// one: the launch ends at the late core's arrival plus the SyncAll plus one Adds, the cube cores included in the
// barrier and adding nothing of their own.
void JoinKernel() {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    if (ASCEND_IS_AIC) {
        SyncAll<false>();
        return;
    }
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, kElems * 4);
    LocalTensor<float> t = buf.Get<float>();
    Adds(t, t, 1.0f, kElems);
    if (GetBlockIdx() == 3)
        for (uint32_t i = 0; i < kExtra; ++i) Adds(t, t, 1.0f, kElems);
    SyncAll<false>();
    Adds(t, t, 1.0f, kElems);
}

int Join() {
    cam::twin::SetTimingEnabled(true);
    cam::twin::TakeLaunchCosts();
    try {
        cam::twin::RunLaunch("join", kAiCores, [] { JoinKernel(); }, nullptr, {.batchMode = true});
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return 1;
    }
    for (const auto& c : cam::twin::TakeLaunchCosts()) {
        if (c.device != "a3" || c.l2 != "lo") continue;
        auto K = [](const char* name) { return TimingConstant(name, "a3"); };
        const double got = (c.seconds - K("launch_seconds")) * K("core_clock_hz");
        // The closed form the vector-only join (tests/twin/timing.cpp, syncall_join) is checked against, with the
        // same constants.
        const double add = K("vector_startup_cycles") + kElems * 4 / K("vector_bytes_per_repeat");
        const double issue = K("scalar_issue_cycles");
        const double want = issue + (1 + kExtra) * add + K("syncall_cycles") + issue + add;
        const bool stalled = c.stalls.count("SyncAll") != 0;
        std::printf("predicted %.3f closed %.3f stall %d cube %u\n", got, want, stalled ? 1 : 0, c.cubeBlocks);
        if (std::abs(got - want) > 1e-9 * want || !stalled) return 1;
        std::printf("OK\n");
        return 0;
    }
    std::printf("no cost recorded\n");
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: syncall_mix <case>\n");
        return 2;
    }
    const std::string name = argv[1];
    const struct {
        const char* name;
        Case c;
    } cases[] = {{"good_exchange", Case::Good},           {"vector_aiv_only", Case::VectorAivOnly},
                 {"cube_aiv_only", Case::CubeAivOnly},     {"vector_skips", Case::VectorSkips},
                 {"cube_skips", Case::CubeSkips},          {"stuck", Case::Stuck},          {"too_many_ai_cores", Case::TooManyAiCores},
                 {"no_batch_mode", Case::NoBatchMode},     {"join", Case::Join}};
    bool found = false;
    for (const auto& c : cases)
        if (name == c.name) {
            gCase = c.c;
            found = true;
        }
    if (!found) {
        std::fprintf(stderr, "unknown case %s\n", name.c_str());
        return 2;
    }
    if (gCase == Case::Join) return Join();
    const uint32_t blocks = gCase == Case::TooManyAiCores ? kAiCores + 1 : kAiCores;
    const uint32_t vectorCores = 2 * blocks;
    std::vector<float> slots(vectorCores * kBlockFloats, -100.0f), out(vectorCores * kBlockFloats, -100.0f);
    // Every case but no_batch_mode asks for batch scheduling, as a launch of a hard-SyncAll kernel must.
    const cam::twin::LaunchSchedule schedule{.batchMode = gCase != Case::NoBatchMode};
    try {
        cam::twin::RunLaunch(
            name.c_str(), blocks,
            [&] { Kernel(reinterpret_cast<GM_ADDR>(slots.data()), reinterpret_cast<GM_ADDR>(out.data())); }, nullptr,
            schedule);
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("%s\n", e.what());
        return 1;
    }
    float want = ValueOf(0);
    for (uint32_t v = 1; v < vectorCores; ++v) want = std::max(want, ValueOf(v));
    for (uint32_t i = 0; i < out.size(); ++i)
        if (out[i] != want) {
            std::printf("vector core %u wrote %g, the maximum is %g\n", i / kBlockFloats, out[i], want);
            return 3;
        }
    std::printf("OK\n");
    return 0;
}
