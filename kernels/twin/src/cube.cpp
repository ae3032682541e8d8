// Cube-core memories and the int8 matrix unit of the twin (see twin/cube.h and docs/twin.md "Cube path").
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "kernel_operator.h"
#include "twin/crosscore.h"

namespace cam::twin {

namespace {

struct ArenaFree {
    void operator()(uint8_t* p) const { std::free(p); }
};

// Each block is its own thread, so a thread's arenas are exactly one block's L1 and L0 buffers; they go away
// with the thread at the end of the launch.
thread_local std::unique_ptr<uint8_t, ArenaFree> tCubeArena[4];

const char* MemoryName(int mem) {
    static const char* names[] = {"L1", "L0A", "L0B", "L0C"};
    return names[mem];
}

int MemoryOf(AscendC::TPosition pos) {
    using AscendC::TPosition;
    switch (pos) {
        case TPosition::A2: return kL0A;
        case TPosition::B2: return kL0B;
        case TPosition::CO1: return kL0C;
        default: return kL1;  // A1, B1, C1
    }
}

uint32_t Capacity(const Platform& p, int mem) {
    switch (mem) {
        case kL0A: return p.l0aBytes;
        case kL0B: return p.l0bBytes;
        case kL0C: return p.l0cBytes;
        default: return p.l1Bytes - p.l1ReservedBytes;
    }
}

}  // namespace

uint8_t* CarveCubeBuffer(AscendC::TPosition pos, uint32_t len, const std::source_location& where) {
    BlockContext& block = CurrentBlock();
    const Platform& platform = ActivePlatform();
    CAM_TWIN_CHECK(block.coreKind == static_cast<uint8_t>(CoreKind::Cube), "core-kind",
                   "L1/L0 buffer requested by a vector kernel (declare KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY))",
                   where);
    CAM_TWIN_CHECK(len > 0, "cube-capacity", "InitBuffer of 0 bytes", where);
    const int mem = MemoryOf(pos);
    const uint32_t capacity = Capacity(platform, mem);
    const uint32_t aligned = (len + kFractalBytes - 1) / kFractalBytes * kFractalBytes;
    CAM_TWIN_CHECK(uint64_t(block.cubeUsed[mem]) + aligned <= capacity, "cube-capacity",
                   "InitBuffer of " + std::to_string(aligned) + " bytes with " + std::to_string(block.cubeUsed[mem]) +
                       " of " + std::to_string(capacity) + " " + MemoryName(mem) + " bytes already taken (platform " +
                       platform.name + ")",
                   where);
    if (!tCubeArena[mem]) {
        const size_t arenaBytes = (capacity + kFractalBytes - 1) / kFractalBytes * kFractalBytes;
        tCubeArena[mem].reset(static_cast<uint8_t*>(std::aligned_alloc(kFractalBytes, arenaBytes)));
        // Poison, as for UB: the hardware leaves whatever the previous kernel wrote.
        std::memset(tCubeArena[mem].get(), 0xA5, arenaBytes);
    }
    uint8_t* base = tCubeArena[mem].get() + block.cubeUsed[mem];
    block.cubeUsed[mem] += aligned;
    return base;
}

void CheckMmadInit(BufferRecord* rec, const void* c, uint64_t bytes, bool init, const std::source_location& where) {
    const auto* begin = static_cast<const uint8_t*>(c);
    const uint8_t* end = begin + bytes;
    if (init) {
        rec->initBegin = rec->initBegin == nullptr ? begin : std::min(rec->initBegin, begin);
        rec->initEnd = std::max(rec->initEnd, end);
        return;
    }
    // L0C keeps whatever the previous tile or kernel left in it: accumulating into bytes nothing initialised adds
    // to that.
    CAM_TWIN_CHECK(rec->initBegin != nullptr && rec->initBegin <= begin && end <= rec->initEnd, "mmad-init",
                   "Mmad with cmatrixInitVal = false into L0C bytes no initialising Mmad wrote since the buffer was "
                   "taken (the first Mmad into a fresh L0C must set cmatrixInitVal)",
                   where);
}

uint8_t* CopyStaging(uint32_t bytes) {
    thread_local std::unique_ptr<uint8_t[]> buffer;
    thread_local uint32_t capacity = 0;
    if (capacity < bytes) {
        buffer.reset(new uint8_t[bytes]);
        capacity = bytes;
    }
    return buffer.get();
}

void DeclareKernelType(int type, const std::source_location& where) {
    BlockContext& block = CurrentBlock();
    if (block.sub >= 0) {
        // A vector core of a 1:2 mixed launch runs the kernel function from its start too: it is what it was made.
        CAM_TWIN_CHECK(type == KERNEL_TYPE_MIX_AIC_1_2, "core-kind", "kernel type declared twice, differently", where);
        return;
    }
    block.kernelType = type;
    if (type == KERNEL_TYPE_MIX_AIC_1_2) {
        // blockDim counts AI cores: each is one cube core and two vector cores (GetTaskRation).
        const Platform& platform = ActivePlatform();
        CAM_TWIN_CHECK(block.blockNum <= platform.aicCores, "cube-cores",
                       "1:2 mixed kernel launched with blockDim " + std::to_string(block.blockNum) + " > " +
                           std::to_string(platform.aicCores) + " AI cores of platform " + platform.name,
                       where);
        CAM_TWIN_CHECK(block.ubUsed == 0, "core-kind", "kernel type declared after UB buffers were carved", where);
        block.coreKind = static_cast<uint8_t>(CoreKind::Cube);
        PipeCoreKind(true);
        StartVectorCores(block);
        return;
    }
    if (type != KERNEL_TYPE_AIC_ONLY) {
        block.coreKind = static_cast<uint8_t>(CoreKind::Vector);
        return;
    }
    const Platform& platform = ActivePlatform();
    CAM_TWIN_CHECK(block.blockNum <= platform.aicCores, "cube-cores",
                   "cube-only kernel launched with blockDim " + std::to_string(block.blockNum) + " > " +
                       std::to_string(platform.aicCores) + " AIC cores of platform " + platform.name,
                   where);
    CAM_TWIN_CHECK(block.ubUsed == 0, "core-kind", "kernel type declared after UB buffers were carved", where);
    block.coreKind = static_cast<uint8_t>(CoreKind::Cube);
    PipeCoreKind(true);
}

void CheckCubeOperand(const BufferRecord* rec, AscendC::TPosition expected, bool write, const char* role,
                      const std::source_location& where) {
    CAM_TWIN_CHECK(rec != nullptr && rec->base != nullptr, "cube-position",
                   std::string(role) + " operand was never allocated", where);
    CAM_TWIN_CHECK(rec->position == expected, "cube-position",
                   std::string(role) + " operand is not in the buffer position the instruction reads/writes", where);
    CAM_TWIN_CHECK(rec->state != BufferState::Free, "queue-discipline",
                   std::string(role) + " operand is a freed queue buffer", where);
    CAM_TWIN_CHECK(rec->state != BufferState::Enqueued, "queue-discipline",
                   std::string(role) + " operand is between EnQue and DeQue (owned by the other pipe)", where);
    if (write) {
        CAM_TWIN_CHECK(rec->state == BufferState::Allocated || rec->state == BufferState::Calc, "queue-discipline",
                       std::string(role) + " written after it was dequeued (allocate a fresh buffer)", where);
    }
    // The instruction's pipe from its name: LoadData* on MTE1, Mmad on M, Fixpipe on FIX.
    const Pipe pipe = role[0] == 'L' ? Pipe::MTE1 : role[0] == 'M' ? Pipe::M : Pipe::FIX;
    PipeTouch(pipe, CubeSpace(rec->position), rec->base, rec->bytes, write, where);
}

}  // namespace cam::twin
