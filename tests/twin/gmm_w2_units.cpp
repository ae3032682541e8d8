// The mixed W2 kernel's dealing as its code makes it: the W2 tiling (tiling/src/gmm_tiling.cpp) for a platform and
// shape given on the command line, then the unit walker the kernel's cores run (kernels/common/gmm_groups.h,
// GmmTileUnits) over a group_list of counts, for every AI core.
// Usage: gmm_w2_units <aic> <l1> <l0a> <l0b> <l0c> <ub> <M> <K> <N> <count>...
// Prints "tm <tm> tn <tn> ntiles <n-tiles>", then one line "unit <core> <group> <row0> <rows> <n-tile> <first>" per
// unit in each core's order (cores in turn), then "OK"; the test (tests/test_gmm_w2_units.py) derives both on its own.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "twin/runtime.h"

#include "cam/tiling/gmm_tiling.h"
#include "common/gmm_groups.h"

int main(int argc, char** argv) {
    if (argc < 11) {
        std::fprintf(stderr, "usage: gmm_w2_units <aic> <l1> <l0a> <l0b> <l0c> <ub> <M> <K> <N> <count>...\n");
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
    cam::kernels::GmmMultiLayerTilingData t{};
    std::string why;
    if (!cam::tiling::TileGmmMultiLayer(p, shape, &t, &why)) {
        std::printf("FAIL: %s\n", why.c_str());
        return 1;
    }
    std::printf("tm %u tn %u ntiles %u\n", t.cube.tm, t.cube.tn, t.cube.nTiles);
    const uint32_t cores = t.cube.blockDim;
    try {
        cam::twin::RunLaunch("gmm_w2_units", 1, [&] {
            for (uint32_t core = 0; core < cores; ++core) {
                cam::kernels::GmmTileUnits units;
                units.Init(reinterpret_cast<GM_ADDR>(counts.data()), t.cube.groups, t.cube.groupListType, 0,
                           t.cube.tm, t.cube.nTiles, core, cores);
                while (units.Next())
                    std::printf("unit %u %u %llu %u %u %d\n", core, units.Expert(),
                                static_cast<unsigned long long>(units.Row0()), units.Rows(), units.NTile(),
                                units.First() ? 1 : 0);
            }
        });
    } catch (const cam::twin::TwinViolation& e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    std::printf("OK\n");
    return 0;
}
