#pragma once

#include <cstdint>
#include <string>

#include "window_table/window_table_tiling_data.h"

namespace cam::tiling {

// Fills `out` for rank `rank` of a plane of `worldSize` ranks. Returns false with *why set for a rank outside
// [0, worldSize) or a world larger than kWindowTableMaxRanks.
bool TileWindowTable(int64_t worldSize, int64_t rank, kernels::WindowTableTilingData* out, std::string* why);

// The most ranks one peer table holds: Atlas A2's one server (8 NPUs) and A3's super node both fit; the bound keeps
// the table and the kernel's loop small and known.
constexpr int64_t kWindowTableMaxRanks = 1024;

}  // namespace cam::tiling
