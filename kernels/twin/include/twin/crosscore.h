// The mixed kernel type KERNEL_TYPE_MIX_AIC_1_2 and the cross-core flags (docs/twin.md, "Mixed kernels and
// cross-core flags"). A launch of blockDim blocks of a 1:2 mixed kernel runs blockDim AI cores, each one cube core
// (AIC) and its two vector cores (AIV): the twin runs the block's thread as the AIC and starts two more threads
// running the same kernel function as the AIVs. CrossCoreSetFlag / CrossCoreWaitFlag are the only ordering between
// them: every flag id is a counter per core, a set adds one to the counters it targets, a wait takes one or blocks
// while the counter is 0. GM that the cube writes and its vector cores read (a workspace tile) is ordered only by
// such a flag: a read before it is refused (rule cross-core-read-before-flag), and so is a cube write over a tile
// a vector core read and has not flagged free (rule cross-core-write-before-free).
#pragma once

#include <cstdint>
#include <source_location>
#include <string>

#include "twin/pipes.h"

namespace cam::twin {

struct BlockContext;

// Flag ids 0..10 on A2/A3; a counter holds at most 16 sets not yet waited for.
inline constexpr int kCrossCoreFlagIds = 11;
inline constexpr int kCrossCoreCounterMax = 16;

// DeclareKernelType(KERNEL_TYPE_MIX_AIC_1_2) on a launch's block: the block becomes its AI core's cube core and the
// two vector cores start (runtime.cpp runs them).
void StartVectorCores(BlockContext& block);
// The mixed group's bookkeeping after one of its cores ended (normally or not): waits on it stop. After the last of
// the AI core's three, a counter still above 0 is returned as a cross-core-unmatched-set violation's message.
std::string CrossCoreBlockEnded(BlockContext& block);

void CrossCoreSet(int mode, Pipe pipe, uint16_t flagId, const std::source_location& where);
void CrossCoreWait(int mode, Pipe pipe, uint16_t flagId, const std::source_location& where);
// A GM access by `pipe` of a core of a mixed group (called for every GM touch; returns at once outside one).
void CrossCoreGmTouch(Pipe pipe, const void* addr, uint64_t bytes, bool write, const std::source_location& where);

// The core the caller runs on in a mixed launch: true on a vector core (also outside mixed launches, where every
// kernel not declared cube-only runs on vector cores).
bool CoreIsAiv();
// GetTaskRation(): cores of the caller's kind in its AI core (2 for an AIV of a 1:2 kernel, otherwise 1).
int64_t TaskRation();

}  // namespace cam::twin
