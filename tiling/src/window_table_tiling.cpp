#include "cam/tiling/window_table_tiling.h"

namespace cam::tiling {

bool TileWindowTable(int64_t worldSize, int64_t rank, kernels::WindowTableTilingData* out, std::string* why) {
    if (worldSize < 1 || worldSize > kWindowTableMaxRanks) {
        *why = "window_table: world size " + std::to_string(worldSize) + " outside [1, " +
               std::to_string(kWindowTableMaxRanks) + "]";
        return false;
    }
    if (rank < 0 || rank >= worldSize) {
        *why = "window_table: rank " + std::to_string(rank) + " outside [0, " + std::to_string(worldSize) + ")";
        return false;
    }
    *out = {};
    out->worldSize = static_cast<uint32_t>(worldSize);
    out->rank = static_cast<uint32_t>(rank);
    out->blockDim = 1;
    return true;
}

}  // namespace cam::tiling
