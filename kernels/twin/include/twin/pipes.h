// The pipe-ordering model (docs/twin.md, "Pipe ordering"). On the hardware S, V, MTE1, MTE2, MTE3, M and FIX are
// queues that run in parallel; the twin runs every instruction in program order, so a missing flag between two
// pipes cannot show as corrupted data here. Instead each block keeps every pipe's pending operations (the bytes of
// UB, L1, L0 and GM they read or write) and an operation on one pipe that touches bytes another pipe has pending
// (read after write, write after read, write after write) is a violation naming both call sites, unless something
// documented orders them: a SetFlag/WaitFlag pair from the first pipe to the second (transitively), a
// PipeBarrier<PIPE_ALL>, a TQue hand-off of that buffer between exactly those pipes, or a row of kAutoSync.
#pragma once

#include <cstdint>
#include <source_location>

namespace AscendC {
enum class HardEvent : uint8_t;
enum class TPosition : uint8_t;
}  // namespace AscendC

namespace cam::twin {

// Same order as pipe_t (twin/types.h).
enum class Pipe : uint8_t { S, V, M, MTE1, MTE2, MTE3, FIX, kCount };
enum class Space : uint8_t { UB, L1, L0A, L0B, L0C, GM, kCount };

const char* PipeName(Pipe p);

// Who orders a pair of pipes without a flag in the kernel source.
enum class SyncBy : uint8_t {
    Compiler,  // bisheng --cce-auto-sync: inserted for every LocalTensor (UB) dependency between the two pipes
    TQue,      // EnQue/DeQue (producer -> consumer) and FreeTensor/AllocTensor (consumer -> producer) of a queue
               // buffer of the given position; only that buffer's bytes
};

struct AutoSyncRow {
    Pipe a;
    Pipe b;  // both directions
    SyncBy by;
    Space space;
    AscendC::TPosition position;  // TQue rows: the queue position; Compiler rows: unused (VECCALC)
};

// The option that makes the Compiler rows true. cmake/CamAscend.cmake passes exactly this string to bisheng and
// tests/test_ascend_build.py checks the two agree.
inline constexpr const char kAutoSyncCompilerOption[] = "--cce-auto-sync";

// The one table of documented automatic syncs (docs/twin.md "Pipe ordering" lists the same rows with their sources;
// tests/test_twin_pipes.py checks that the two agree). The model reads nothing else.
extern const AutoSyncRow kAutoSync[];
extern const int kAutoSyncRows;

// An operation of pipe p on [addr, addr + bytes) of space s. Throws pipe-order (or dcache-clean-barrier, when the
// pending operation is a cache clean's write-back) if another pipe's pending operation on those bytes conflicts.
void PipeTouch(Pipe p, Space s, const void* addr, uint64_t bytes, bool write, const std::source_location& where);
// A scalar load from GM: checked like PipeTouch, not kept pending (the scalar unit waits for its own load).
void PipeScalarGmLoad(const void* addr, uint64_t bytes, const std::source_location& where);
// A data-cache clean wrote dirty bytes [addr, addr + bytes) back to GM: pending on S until a PipeBarrier<PIPE_ALL>
// (what production kernels put after DataCacheCleanAndInvalid before an MTE touches those bytes).
void PipeCleanWrite(const void* addr, uint64_t bytes, const std::source_location& where);
void PipeFlagSet(AscendC::HardEvent event, int32_t id);
void PipeFlagWait(AscendC::HardEvent event, int32_t id);
void PipeBarrierAll();
// A TQue buffer of `position` changes hands: DeQue (toConsumer) or AllocTensor after FreeTensor (!toConsumer).
void PipeQueueHandoff(AscendC::TPosition position, bool toConsumer, const void* addr, uint64_t bytes);
// A block starts: nothing is pending; it runs on a vector core until PipeCoreKind says otherwise.
void PipeBlockStart();
// The block ended (normally or not): nothing is checked or kept on this thread until the next PipeBlockStart.
void PipeBlockEnd();
// The block's core kind (KERNEL_TASK_TYPE_DEFAULT): which pipes exist to be ordered against.
void PipeCoreKind(bool cube);

}  // namespace cam::twin
