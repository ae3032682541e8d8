"""cam-run --assign on the twin: the three request-assignment policies alternated run by run, measured against the
simulator's prediction of each (docs/run.md §8).

    python benchmarks/sim/assign_twin.py --json benchmarks/sim/results/assign-twin.json

For each configuration (preset, mode) every policy runs once per round, ``--repeats`` rounds (so the machine's
load drifts over all of them alike); the record holds every run's figures, the medians, each run's assignment, and
what ``cam-sim`` predicts for the same requests under the same policy, with twin costs fitted first
(``cam.sim.calibrate.fit``) on one round-robin run of the default preset per mode, at the same ``--attention-cost``
(or a cost file given with ``--costs``, fitted at that attention cost)."""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from _record import write_json  # benchmarks/sim/_record.py: the script's folder is on sys.path

from cam.sim import CostModel
from cam.sim.calibrate import DEFAULT_ATTENTION_COST, RunSpec, fit, predict, run_cam_run

POLICIES = ("round-robin", "fewest-tokens", "shortest-queue")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", default="skewed:async,skewed:sync,arrivals:async,arrivals:colocated",
                   help="comma-separated preset:mode pairs")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--costs", help="a fitted cost file instead of calibrating first")
    p.add_argument("--attention-cost", type=float, nargs=3, default=DEFAULT_ATTENTION_COST, metavar=("A", "B", "C"))
    p.add_argument("--timeout", type=float, default=300.0, help="bound of each cam-run subprocess (s)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats must be >= 1, got {args.repeats}")
    pairs = [(x.partition(":")[0], x.partition(":")[2] or "async") for x in args.configs.split(",") if x]
    attention = tuple(args.attention_cost)
    calibration = []
    if args.costs:
        costs = CostModel.load(args.costs)
    else:
        for mode in sorted({m for _, m in pairs}):
            spec = RunSpec(preset="default", mode=mode, attention_cost=attention)
            calibration.append(run_cam_run(spec, timeout_s=args.timeout))
            print(f"calibration: default:{mode} makespan {calibration[-1]['report']['makespan_s']:.3f} s", flush=True)
        costs = fit(calibration)
    configs = []
    for preset, mode in pairs:
        specs = {a: RunSpec(preset=preset, mode=mode, assign=a, attention_cost=attention) for a in POLICIES}
        runs = {a: [] for a in POLICIES}
        for i in range(args.repeats):
            for a in POLICIES:  # alternated: every policy once per round
                rep = run_cam_run(specs[a], timeout_s=args.timeout)["report"]
                runs[a].append({"makespan_s": rep["makespan_s"], "ttft_mean_s": rep["ttft_s"]["mean"],
                                "ttft_p90_s": rep["ttft_s"]["p90"], "assignment": rep["assignment"],
                                "load_average": os.getloadavg()[0]})
                print(f"{preset}:{mode} round {i + 1} {a:14s} makespan {rep['makespan_s']:.3f} s, TTFT mean "
                      f"{rep['ttft_s']['mean']:.3f} s", flush=True)
        row = {"preset": preset, "mode": mode, "policies": {}}
        for a in POLICIES:
            med = {k: statistics.median(r[k] for r in runs[a]) for k in ("makespan_s", "ttft_mean_s", "ttft_p90_s")}
            pred = predict(specs[a], costs)["predicted"]
            row["policies"][a] = {"spec": specs[a].argv(), "measured_median": med, "predicted": pred,
                                  "rel_error": {k: pred[k] / med[k] - 1.0 for k in pred},
                                  "runs": runs[a]}
        base = row["policies"]["round-robin"]
        for a in POLICIES[1:]:
            r = row["policies"][a]
            r["over_round_robin"] = {
                "measured": {k: r["measured_median"][k] / base["measured_median"][k] for k in ("makespan_s",
                                                                                               "ttft_mean_s")},
                "predicted": {k: r["predicted"][k] / base["predicted"][k] for k in ("makespan_s", "ttft_mean_s")}}
        configs.append(row)
        for a in POLICIES:
            r = row["policies"][a]
            print(f"{preset}:{mode} {a:14s} makespan median {r['measured_median']['makespan_s']:.3f} s pred "
                  f"{r['predicted']['makespan_s']:.3f} ({r['rel_error']['makespan_s']:+.1%}); TTFT mean median "
                  f"{r['measured_median']['ttft_mean_s']:.3f} s pred {r['predicted']['ttft_mean_s']:.3f} "
                  f"({r['rel_error']['ttft_mean_s']:+.1%})")
    write_json(args.json, {"repeats": args.repeats, "attention_cost": list(attention), "costs": costs.to_dict(),
                           "calibration": [{"spec": c["spec"], "makespan_s": c["report"]["makespan_s"]}
                                           for c in calibration], "configs": configs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
