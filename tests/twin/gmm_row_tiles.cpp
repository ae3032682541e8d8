// A mixed GMM kernel's tiling decision and dealing as its code makes them: the kernel's tiling
// (tiling/src/gmm_tiling.cpp) for a platform and shape given on the command line, then the walker the kernel's cores
// run over a group_list of counts, for every AI core: W1's row tiles
// (kernels/gmm_swiglu_quant_multi_layer/gmm_swiglu_row_tiles.h) or W2's units (kernels/common/gmm_groups.h,
// GmmTileUnits).
// Usage: gmm_row_tiles <w1|w2> <aic> <l1> <l0a> <l0b> <l0c> <ub> <M> <K> <N> <count>...
// Prints the tile sizes ("tm <tm> tn <tn> ..."), then one line per tile (w1: "tile <core> <group> <row0> <rows>") or
// unit (w2: "unit <core> <group> <row0> <rows> <n-tile> <first>") in each core's order (cores in turn), then "OK";
// the tests (tests/test_gmm_row_tiles.py, tests/test_gmm_w2_units.py) derive both on their own.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "twin/runtime.h"

#include "cam/tiling/gmm_tiling.h"
#include "common/gmm_groups.h"
#include "gmm_swiglu_quant_multi_layer/gmm_swiglu_row_tiles.h"

namespace {

void PrintW1(const cam::kernels::GmmSwigluQuantMultiLayerTilingData& t, GM_ADDR groupList) {
    std::printf("tm %u tn %u tk %u tk1 %u tk1a %u resident %u\n", t.cube.tm, t.cube.tn, t.cube.tk, t.cube.tk1,
                t.cube.tk1a, t.cube.aResident);
    for (uint32_t core = 0; core < t.cube.blockDim; ++core) {
        cam::kernels::GmmSwigluRowTiles tiles;
        tiles.Init(groupList, t.cube.groups, t.cube.groupListType, 0, t.cube.tm, core, t.cube.blockDim);
        while (tiles.Next())
            std::printf("tile %u %u %llu %u\n", core, tiles.Expert(), static_cast<unsigned long long>(tiles.Row0()),
                        tiles.Rows());
    }
}

void PrintW2(const cam::kernels::GmmMultiLayerTilingData& t, GM_ADDR groupList) {
    std::printf("tm %u tn %u ntiles %u\n", t.cube.tm, t.cube.tn, t.cube.nTiles);
    for (uint32_t core = 0; core < t.cube.blockDim; ++core) {
        cam::kernels::GmmTileUnits units;
        units.Init(groupList, t.cube.groups, t.cube.groupListType, 0, t.cube.tm, t.cube.nTiles, core,
                   t.cube.blockDim);
        while (units.Next())
            std::printf("unit %u %u %llu %u %u %d\n", core, units.Expert(),
                        static_cast<unsigned long long>(units.Row0()), units.Rows(), units.NTile(),
                        units.First() ? 1 : 0);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const bool w1 = argc >= 2 && std::strcmp(argv[1], "w1") == 0, w2 = argc >= 2 && std::strcmp(argv[1], "w2") == 0;
    if (argc < 12 || !(w1 || w2)) {
        std::fprintf(stderr, "usage: gmm_row_tiles <w1|w2> <aic> <l1> <l0a> <l0b> <l0c> <ub> <M> <K> <N> <count>...\n");
        return 2;
    }
    auto num = [&](int i) { return std::strtoull(argv[i], nullptr, 10); };
    cam::tiling::PlatformInfo p{};
    p.aicCores = static_cast<uint32_t>(num(2));
    p.aivCores = 2 * p.aicCores;
    p.l1Bytes = static_cast<uint32_t>(num(3));
    p.l0aBytes = static_cast<uint32_t>(num(4));
    p.l0bBytes = static_cast<uint32_t>(num(5));
    p.l0cBytes = static_cast<uint32_t>(num(6));
    p.ubBytes = static_cast<uint32_t>(num(7));
    std::vector<int64_t> counts;
    for (int i = 11; i < argc; ++i) counts.push_back(std::strtoll(argv[i], nullptr, 10));
    const cam::tiling::GmmShape shape{num(8), num(9), num(10), counts.size(), 1, cam::kernels::kGroupListCounts};
    GM_ADDR groupList = reinterpret_cast<GM_ADDR>(counts.data());
    cam::kernels::GmmSwigluQuantMultiLayerTilingData t1{};
    cam::kernels::GmmMultiLayerTilingData t2{};
    std::string why;
    if (w1 ? !cam::tiling::TileGmmSwigluQuantMultiLayer(p, shape, &t1, &why)
           : !cam::tiling::TileGmmMultiLayer(p, shape, &t2, &why)) {
        std::printf("FAIL: %s\n", why.c_str());
        return 1;
    }
    try {
        cam::twin::RunLaunch("gmm_row_tiles", 1, [&] { w1 ? PrintW1(t1, groupList) : PrintW2(t2, groupList); });
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    std::printf("OK\n");
    return 0;
}
