#include "cam/tiling/window_table_tiling.h"

#include <cctype>

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

namespace {

bool StartsWithNoCase(const char* s, const char* prefix) {
    for (; *prefix != '\0'; ++s, ++prefix)
        if (*s == '\0' || std::tolower(static_cast<unsigned char>(*s)) != *prefix) return false;
    return true;
}

}  // namespace

bool TileWindowTableInit(const char* socName, kernels::WindowTableInitTiling* out, std::string* why) {
    const char* soc = socName != nullptr ? socName : "";
    uint8_t type = 0;
    if (StartsWithNoCase(soc, "ascend910_93")) {
        type = kernels::kHcclDeviceTypeA3;
    } else if (StartsWithNoCase(soc, "ascend910b") || std::string(soc) == "twin") {
        type = kernels::kHcclDeviceTypeA2;
    } else {
        *why = std::string("window_table: SoC '") + soc +
               "' has no known HCCL context layout (Ascend910B* reads the A2 flat one, Ascend910_93* the A3 one)";
        return false;
    }
    *out = {};
    out->deviceType = type;
    return true;
}

}  // namespace cam::tiling
