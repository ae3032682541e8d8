// dispatch_send's UB decision as its tiling makes it (tiling/src/dispatch_send_tiling.cpp) for a platform and a
// topology given on the command line.
// Usage: dispatch_send_tiling <aiv> <ub> <H> <E> <F> <K> <expert_slots> <tokens> <placed>
// Prints "blocks <n> cols <colsPerPass> tables_in_ub <0|1> place_ub_words <n>", then "OK"; the test
// (tests/test_dispatch_send_tiling.py) states what it expects on its own.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernel_operator.h"

#include "cam/tiling/dispatch_send_tiling.h"

int main(int argc, char** argv) {
    if (argc != 10) {
        std::fprintf(stderr, "usage: dispatch_send_tiling <aiv> <ub> <H> <E> <F> <K> <expert_slots> <tokens> <placed>\n");
        return 2;
    }
    auto num = [&](int i) { return std::strtoll(argv[i], nullptr, 10); };
    cam::tiling::PlatformInfo p{};
    p.aivCores = static_cast<uint32_t>(num(1));
    p.aicCores = p.aivCores / 2;
    p.ubBytes = static_cast<uint32_t>(num(2));
    cam::kernels::dp::CommArgs comm{};
    CamTopology& t = comm.topo;
    t.D = 1;
    t.P = 1;
    t.H = num(3);
    t.E = num(4);
    t.F = num(5);
    t.K = num(6);
    t.expert_slots = num(7);
    t.Bmax = num(8);
    t.L = 1;
    t.slots = 1;
    t.act_dtype_bytes = 2;
    t.quantized = 1;
    t.capacity = t.Bmax * t.K;
    cam::kernels::DispatchSendTilingData d{};
    uint64_t workspace = 0;
    std::string why;
    if (!cam::tiling::TileDispatchSend(p, comm, num(8), 0, true, num(9) != 0, &d, &workspace, &why)) {
        std::printf("FAIL: %s\n", why.c_str());
        return 1;
    }
    std::printf("blocks %u cols %u tables_in_ub %u place_ub_words %u\nOK\n", d.blockDim, d.colsPerPass, d.tablesInUb,
                d.placeUbWords);
    return 0;
}
