// The mixed W1 kernel's tiling decision as its code makes it: the W1 tiling (tiling/src/gmm_tiling.cpp) for a
// platform and shape given on the command line, then the row-tile walker the kernel's cores run
// (kernels/gmm_swiglu_quant_multi_layer/gmm_swiglu_row_tiles.h) over a group_list of counts, for every AI core.
// Usage: gmm_row_tiles <aic> <l1> <l0a> <l0b> <l0c> <ub> <M> <K> <N> <count>...
// Prints "tm <tm> tn <tn> tk <tk>", then one line "tile <core> <group> <row0> <rows>" per tile in each core's order
// (cores in turn), then "OK"; the test (tests/test_gmm_row_tiles.py) derives both on its own.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "twin/runtime.h"

#include "cam/tiling/gmm_tiling.h"
#include "gmm_swiglu_quant_multi_layer/gmm_swiglu_row_tiles.h"

int main(int argc, char** argv) {
    if (argc < 11) {
        std::fprintf(stderr, "usage: gmm_row_tiles <aic> <l1> <l0a> <l0b> <l0c> <ub> <M> <K> <N> <count>...\n");
        return 2;
    }
    auto num = [&](int i) { return std::strtoull(argv[i], nullptr, 10); };
    cam::tiling::PlatformInfo p{};
    p.aicCores = static_cast<uint32_t>(num(1));
    p.aivCores = 2 * p.aicCores;
    p.l1Bytes = static_cast<uint32_t>(num(2));
    p.l0aBytes = static_cast<uint32_t>(num(3));
    p.l0bBytes = static_cast<uint32_t>(num(4));
    p.l0cBytes = static_cast<uint32_t>(num(5));
    p.ubBytes = static_cast<uint32_t>(num(6));
    std::vector<int64_t> counts;
    for (int i = 10; i < argc; ++i) counts.push_back(std::strtoll(argv[i], nullptr, 10));
    cam::tiling::GmmShape shape{num(7), num(8), num(9), counts.size(), 1, cam::kernels::kGroupListCounts};
    cam::kernels::GmmSwigluQuantMultiLayerTilingData t{};
    std::string why;
    if (!cam::tiling::TileGmmSwigluQuantMultiLayer(p, shape, &t, &why)) {
        std::printf("FAIL: %s\n", why.c_str());
        return 1;
    }
    std::printf("tm %u tn %u tk %u tk1 %u tk1a %u resident %u\n", t.cube.tm, t.cube.tn, t.cube.tk, t.cube.tk1,
                t.cube.tk1a, t.cube.aResident);
    const uint32_t cores = t.cube.blockDim;
    try {
        cam::twin::RunLaunch("gmm_row_tiles", 1, [&] {
            for (uint32_t core = 0; core < cores; ++core) {
                cam::kernels::GmmSwigluRowTiles tiles;
                tiles.Init(reinterpret_cast<GM_ADDR>(counts.data()), t.cube.groups, t.cube.groupListType, 0,
                           t.cube.tm, core, cores);
                while (tiles.Next())
                    std::printf("tile %u %u %llu %u\n", core, tiles.Expert(),
                                static_cast<unsigned long long>(tiles.Row0()), tiles.Rows());
            }
        });
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    std::printf("OK\n");
    return 0;
}
