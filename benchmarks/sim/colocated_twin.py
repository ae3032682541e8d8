"""AFD against colocated at equal devices on the twin, measured by cam-run and predicted by cam-sim (docs/sim.md §8).

    python benchmarks/sim/colocated_twin.py --json benchmarks/sim/results/colocated-twin.json

Two devices each way: async AFD (one Attention replica + one FFN rank) and colocated (two devices, each an Attention
replica and an FFN rank). Calibrated on one run of each, then every preset measured ``--repeats`` times per
deployment (medians) against the prediction; the winner by mean TTFT, measured and predicted."""

from __future__ import annotations

import argparse
import sys

from _record import write_json  # benchmarks/sim/_record.py: the script's folder is on sys.path

from cam.sim.calibrate import equal_devices_validation


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", default="default,arrivals")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300.0, help="bound of each cam-run subprocess (s)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    out = equal_devices_validation([x for x in args.presets.split(",") if x], repeats=args.repeats,
                                   timeout_s=args.timeout, log=lambda s: print(s, flush=True))
    for row in out["configs"]:
        for name in ("afd", "colocated"):
            r = row[name]
            print(f"{row['preset']:9s} {name:9s} makespan median {r['measured_median']['makespan_s']:.3f} s pred "
                  f"{r['predicted']['makespan_s']:.3f} ({r['rel_error']['makespan_s']:+.1%}); TTFT mean median "
                  f"{r['measured_median']['ttft_mean_s']:.3f} s pred {r['predicted']['ttft_mean_s']:.3f} "
                  f"({r['rel_error']['ttft_mean_s']:+.1%})")
        print(f"{row['preset']:9s} winner (mean TTFT): measured {row['measured_winner']}, predicted "
              f"{row['predicted_winner']}")
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
