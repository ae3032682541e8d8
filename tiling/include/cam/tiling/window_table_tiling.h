#pragma once

#include <cstdint>
#include <string>

#include "window_table/window_table_tiling_data.h"

namespace cam::tiling {

// Fills `out` for rank `rank` of a plane of `worldSize` ranks. Returns false with *why set for a rank outside
// [0, worldSize) or a world larger than kWindowTableMaxRanks.
bool TileWindowTable(int64_t worldSize, int64_t rank, kernels::WindowTableTilingData* out, std::string* why);

// Fills the init tiling the Hccl client reads for the SoC named `socName` (the runtime's SoC name on Ascend, the
// platform description's name on the twin, either case): Ascend910_93* gets the A3 device type; Ascend910B* and the
// twin's "twin" description (an A2-class chip with fewer cores) get A2's. Returns false with *why set for any other
// SoC, whose HCCL context layout cam does not know.
bool TileWindowTableInit(const char* socName, kernels::WindowTableInitTiling* out, std::string* why);

// The most ranks one peer table holds: the windows of the Atlas A2 flat HCCL context the client reads
// (HcclCombineOpParam's windowsIn[HCCL_MAX_RANK_NUM], HCCL_MAX_RANK_NUM = 32 in the Ascend C Hccl client's
// definitions). A3's context keeps one record per rank and holds more, but the host cannot tell the kernel which
// layout it gets yet (docs/ascend.md §5), so every plane is held to the flat layout's bound: a larger world would
// read other fields as windows on A2.
constexpr int64_t kWindowTableMaxRanks = 32;
// The host's world cap and the kernel's flat-layout bound are one number written twice: the tiling must never pass
// a world the kernel would refuse, nor cap below what the kernel can describe.
static_assert(kWindowTableMaxRanks == static_cast<int64_t>(kernels::kWindowTableFlatRanks),
              "kWindowTableMaxRanks (host world cap) and kWindowTableFlatRanks (kernel A2 flat layout) differ");

}  // namespace cam::tiling
