// Tiling of window_table, passed by value to the kernel. Filled by tiling/src/window_table_tiling.cpp.
#pragma once

#include <cstdint>

namespace cam::kernels {

// One block reads the whole context: the table is a few hundred bytes, written once per Comm.
// Bytes of the init tiling the kernel hands Hccl::Init: on Ascend the Mc2InitTiling the op framework provides for
// the op's group (asc-devkit HCCL Init/InitV2 docs; its layout is CANN's), on the twin a zeroed block the twin's
// client requires to be present and never reads.
constexpr uint64_t kWindowTableInitTilingBytes = 256;

struct WindowTableTilingData {
    uint32_t worldSize;  // ranks of the plane (the topology's world size): the context's rank count must equal it
    uint32_t rank;       // this rank in the plane: the context's rank id must equal it
    uint32_t blockDim;   // 1
    uint32_t reserved;
};

}  // namespace cam::kernels
