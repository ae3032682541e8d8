// Tiling of window_table, passed by value to the kernel. Filled by tiling/src/window_table_tiling.cpp.
#pragma once

#include <cstdint>

namespace cam::kernels {

// One block reads the whole context: the table is a few hundred bytes, written once per Comm.
// Bytes of the workspace slot the init tiling goes in (the client's init tiling is 64 of them, below).
constexpr uint64_t kWindowTableInitTilingBytes = 256;

// The init tiling the kernel hands Hccl::Init: the 64-byte Mc2InitTiling the Ascend C Hccl client reads (opaque in
// kernel_tiling.h; its fields in the client's own Mc2InitTilingInner, asc-devkit impl/adv_api/detail/hccl). Init
// copies its device type, and every window lookup takes the A2 flat context when that byte is the client's
// HCCL_ASCEND910B (1) and the A3 per-rank records otherwise (impl/.../platform_v220/hccl_aicpu.h, GetWindowsInAddr):
// a zeroed tiling reads A3's layout on A2. cam sends no collective message, so only the device type matters; every
// other byte stays 0. Filled by tiling/src/window_table_tiling.cpp.
struct WindowTableInitTiling {
    uint8_t head[46];     // version, the message-tiling count and offsets, debug mode, queue and block counts: 0
    uint8_t deviceType;   // byte 46
    uint8_t tail[17];
};
static_assert(sizeof(WindowTableInitTiling) == 64, "the client's init tiling is 64 bytes");
static_assert(sizeof(WindowTableInitTiling) <= kWindowTableInitTilingBytes, "the workspace slot holds the tiling");
// The value the client tests for the A2 flat context, and the one sent for A3: the client only asks "A2 or not";
// 4 is HCCL's own device type of Ascend910_93 (HCCL's DevType, DEV_TYPE_910_93), so a reader of the byte sees A3.
constexpr uint8_t kHcclDeviceTypeA2 = 1;
constexpr uint8_t kHcclDeviceTypeA3 = 4;

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
