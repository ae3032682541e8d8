// Tiling of window_table, passed by value to the kernel. Filled by tiling/src/window_table_tiling.cpp.
#pragma once

#include <cstdint>

namespace cam::kernels {

// One block reads the whole context: the table is a few hundred bytes, written once per Comm.
// Bytes of the init tiling the kernel hands Hccl::Init: on Ascend the Mc2InitTiling the op framework provides for
// the op's group (asc-devkit HCCL Init/InitV2 docs; its layout is CANN's), on the twin a zeroed block the twin's
// client requires to be present and never reads.
constexpr uint64_t kWindowTableInitTilingBytes = 256;

// Ranks the A2 flat context can describe (windowsIn[HCCL_MAX_RANK_NUM] of the Hccl client's HcclCombineOpParam):
// the kernel refuses a larger world, since it cannot tell which layout it was given (docs/twin.md "HCCL context").
constexpr uint32_t kWindowTableFlatRanks = 32;

struct WindowTableTilingData {
    uint32_t worldSize;  // ranks of the plane (the topology's world size): the context's rank count must equal it
    uint32_t rank;       // this rank in the plane: the context's rank id must equal it
    uint32_t blockDim;   // 1
    uint32_t reserved;
};

}  // namespace cam::kernels
