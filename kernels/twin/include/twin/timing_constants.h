// The timing model's constants (docs/twin.md, "Timing model"): the ONE table the model reads, for the two devices
// it predicts. Each row is either a figure with a public source, whose citation quotes the figure (the docs test
// checks that the value appears in the citation, so a value changed without its citation fails), or an assumption,
// whose citation starts with "assumption" and states a range [lo, hi] the value lies in (also checked).
// tests/test_twin_timing.py checks docs/twin.md's table against these rows, row by row.
#pragma once

#include <cstdint>

namespace cam::twin::timing {

struct Constant {
    const char* name;
    double a2;
    double a3;
    double lo;  // assumptions: the stated range (both devices); sourced figures: equal to the value's bounds
    double hi;
    const char* unit;
    const char* citation;
};

// clang-format off
// ROWS: begin
inline constexpr Constant kConstants[] = {
    {"core_clock_hz", 1.8e9, 1.8e9, 1.8e9, 1.8e9, "Hz",
     "cube_freq 1800 MHz: Ascend910B2.ini [AICoreSpec] as quoted in anchors-4.md section 2; A3 uses the same core"},
    {"aic_per_die", 24, 24, 24, 24, "cores",
     "24 AIC / 48 AIV per device (910B1/B2) and per A3 die: CANN platform .ini values as quoted in anchors-4.md section 2"},
    {"aiv_per_die", 48, 48, 48, 48, "cores",
     "24 AIC / 48 AIV per device (910B1/B2) and per A3 die: CANN platform .ini values as quoted in anchors-4.md section 2"},
    {"cube_int8_macs_per_cycle", 8192, 8192, 8192, 8192, "MAC/cycle/AIC",
     "int8 fractal 16x32x16 = 8192 MACs per cycle per core: asc-devkit Mmad docs as quoted in anchors-4.md section 2"},
    {"cube_int4_macs_per_cycle", 16384, 16384, 16384, 16384, "MAC/cycle/AIC",
     "int4 fractal 16x64x16 = 16384 MACs per cycle per core, twice int8's: asc-devkit Mmad docs (A2/A3 int4b_t x "
     "int4b_t, K granule 64 where int8 has 32, 512-byte fractals either way), docs/gmm.md section 9.1 [W1]"},
    {"vector_bytes_per_repeat", 256, 256, 256, 256, "B",
     "2048-bit vector unit, 256 B per repeat: Hot Chips 31 DaVinci, platform .ini vec_calc_size, anchors-4.md section 2"},
    {"hbm_bytes_per_s_die", 1.6e12, 1.6e12, 1.2e12, 1.6e12, "B/s",
     "A3: 1.6 TB/s per die (3.2 TB/s per package), arXiv 2506.12708 CloudMatrix384; A2: no primary source found "
     "(anchors-4.md section 2), assumption: the A3 die's figure, range [1.2e12, 1.6e12]"},
    {"l2_bytes", 192.0 * 1024 * 1024, 192.0 * 1024 * 1024, 192.0 * 1024 * 1024, 192.0 * 1024 * 1024, "B",
     "L2 192 MiB (910B1/B2): anchors-4.md section 2, which names catlass arch.hpp (the arch.hpp read for this "
     "table, include/catlass/arch/arch.hpp, lists UB/L1/L0 sizes but no L2 field); A3 not found, the A2 die's 192 MiB"},
    {"link_bytes_per_s_rank", 56e9, 196e9, 56e9, 392e9, "B/s",
     "assumption, range [56e9, 392e9]: raw per-rank peer bandwidth. A2: one HCCS link of the 8-card mesh, 56 GB/s; "
     "A3: UB 196 GB/s per NPU (chinaresearchcollective CloudMatrix 384 analysis); high end 392 GB/s "
     "(7 HCCS links x 56 GB/s on A2)"},
    {"mte2_bytes_per_cycle", 128, 128, 64, 256, "B/cycle/core",
     "assumption, range [64, 256]: per-core GM read bandwidth of MTE2 (no public figure found)"},
    {"mte3_bytes_per_cycle", 128, 128, 64, 256, "B/cycle/core",
     "assumption, range [64, 256]: per-core GM write bandwidth of MTE3 (no public figure found)"},
    {"mte1_bytes_per_cycle", 256, 256, 128, 512, "B/cycle/AIC",
     "assumption, range [128, 512]: L1 to L0A/L0B bandwidth of MTE1 (no public figure found)"},
    {"fixpipe_bytes_per_cycle", 128, 128, 64, 256, "B/cycle/AIC",
     "assumption, range [64, 256]: L0C to GM bandwidth of FIXPIPE (no public figure found)"},
    {"mte_latency_cycles", 500, 500, 200, 1000, "cycles",
     "assumption, range [200, 1000]: fixed cost of one GM DataCopy instruction (first byte latency)"},
    {"mte_burst_cycles", 8, 8, 2, 32, "cycles",
     "assumption, range [2, 32]: extra cost of each burst of a strided DataCopy after its first"},
    {"vector_cycles_per_repeat", 1, 1, 1, 2, "cycles",
     "assumption, range [1, 2]: issue rate of an elementwise vector instruction, one 256 B repeat per cycle"},
    {"vector_startup_cycles", 20, 20, 10, 60, "cycles",
     "assumption, range [10, 60]: pipeline fill of one vector instruction"},
    {"cube_startup_cycles", 30, 30, 10, 60, "cycles",
     "assumption, range [10, 60]: pipeline fill of one Mmad, LoadData or Fixpipe instruction"},
    {"scalar_issue_cycles", 2, 2, 1, 4, "cycles",
     "assumption, range [1, 4]: scalar-unit cycles to issue one instruction to a pipe"},
    {"scalar_ub_access_cycles", 4, 4, 1, 10, "cycles",
     "assumption, range [1, 10]: one scalar UB access with its surrounding arithmetic (least certain term)"},
    {"scalar_gm_access_cycles", 40, 40, 10, 200, "cycles",
     "assumption, range [10, 200]: one scalar GM access through the data cache (least certain term)"},
    {"l2_bytes_per_s_die_lo", 3.2e12, 3.2e12, 3.2e12, 6.4e12, "B/s",
     "assumption, range [3.2e12, 6.4e12]: L2 read bandwidth per die, low end (2x HBM); no public figure found"},
    {"l2_bytes_per_s_die_hi", 6.4e12, 6.4e12, 3.2e12, 6.4e12, "B/s",
     "assumption, range [3.2e12, 6.4e12]: L2 read bandwidth per die, high end (4x HBM); no public figure found"},
    {"syncall_cycles", 2000, 2000, 500, 5000, "cycles",
     "assumption, range [500, 5000]: one SyncAll after its last core arrives (cross-core flags)"},
    {"launch_seconds", 5e-6, 5e-6, 2e-6, 20e-6, "s",
     "assumption, range [2e-6, 20e-6]: fixed device-side cost of one kernel launch"},
    {"poll_latency_cycles", 1000, 1000, 200, 4000, "cycles",
     "assumption, range [200, 4000]: from a signal word landing to the poll that sees it completing (half a poll "
     "loop's period plus one MTE2 read's latency); no public figure found"},
    {"crosscore_flag_cycles", 200, 200, 50, 1000, "cycles",
     "assumption, range [50, 1000]: from a CrossCoreSetFlag on its pipe to the paired core's CrossCoreWaitFlag "
     "releasing, within one AI core; no public figure found, taken as a tenth of syncall_cycles, which crosses "
     "every core of the die"},
};
// ROWS: end
// clang-format on
inline constexpr int kConstantCount = sizeof(kConstants) / sizeof(kConstants[0]);

}  // namespace cam::twin::timing
