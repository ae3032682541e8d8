"""Async vs sync against the critical-path bound (docs/run.md §3), alternated run by run so both modes see the
same machine load. For each run: makespan, the bound from the cost model's service times, makespan / bound, and
where the Attention ranks' time went (per-phase totals from the run's spans). Also the async/sync ratio the
workload itself allows: bound / the simulator's sync makespan with the same service times.

Usage: python benchmarks/schedule_bound.py [--repeats 2] [--out results/schedule-imbalanced.json]
           [--traces DIR] [cam-run args...]
(default cam-run args: the imbalanced preset under the cost model, 3 replicas, 2 FFN ranks). Each cam-run is a
subprocess bounded by --run-timeout."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict

DEFAULT_ARGS = ["--preset", "imbalanced", "--cost-model", "--replicas", "3", "--ffn", "2"]
PHASES = ("attention", "emulated", "dense_mlp", "dispatch", "shared", "combine_wait", "gather", "barrier")


def phase_totals(keep: str, report: dict) -> dict:
    """Mean over Attention ranks of the seconds spent in each phase (``attention`` minus its ``emulated`` child is
    reported as ``attention_real``)."""
    ranks = report["topology"]["D"] * report["topology"]["P"]
    totals = defaultdict(float)
    for rank in range(ranks):
        with open(os.path.join(keep, f"result-{rank}.json")) as f:
            for s in json.load(f)["spans"]:
                if s["name"] in PHASES:
                    totals[s["name"]] += (s["end_s"] - s["start_s"]) / ranks
    totals["attention_real"] = totals["attention"] - totals["emulated"]
    return {k: round(v, 4) for k, v in sorted(totals.items())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                      "schedule-imbalanced.json"))
    parser.add_argument("--traces", help="keep the first repeat's Chrome trace of each mode in this directory")
    parser.add_argument("--run-timeout", type=float, default=900.0)
    args, run_args = parser.parse_known_args()
    run_args = run_args or DEFAULT_ARGS
    runs = {"async": [], "sync": []}
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for mode in ("async", "sync"):
                path, keep = os.path.join(tmp, f"{mode}-{i}.json"), os.path.join(tmp, f"{mode}-{i}")
                extra = []
                if args.traces and i == 0:
                    os.makedirs(args.traces, exist_ok=True)
                    stem = os.path.splitext(os.path.basename(args.out))[0]
                    extra = ["--trace", os.path.join(args.traces, f"{stem}-{mode}.trace.json")]
                for attempt in range(2):  # a failed run is recorded, then retried once
                    done = subprocess.run([sys.executable, "-m", "cam.run.cli", "--mode", mode, "--quiet", "--json",
                                           path, "--keep", keep, *extra, *run_args], timeout=args.run_timeout,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp)
                    if done.returncode == 0:
                        break
                    failures.append({"mode": mode, "repeat": i, "attempt": attempt, "code": done.returncode,
                                     "stderr_tail": done.stderr.splitlines()[-8:]})
                    print(f"{mode} {i}: cam-run failed ({done.returncode}):\n{done.stderr}", flush=True)
                else:
                    raise SystemExit(f"{mode} {i}: cam-run failed twice")
                with open(path) as f:
                    report = json.load(f)
                bound = report["bound"]
                runs[mode].append({"makespan_s": report["makespan_s"], "bound_s": bound["bound_s"],
                                   "makespan_over_bound": bound["makespan_over_bound"],
                                   "simulated_makespan_s": bound["simulated_makespan_s"],
                                   "ttft_mean_s": report["ttft_s"]["mean"], "phases_s": phase_totals(keep, report)})
                print(f"{mode} {i}: makespan {report['makespan_s']:.2f} s, bound {bound['bound_s']:.2f} s, "
                      f"makespan/bound {bound['makespan_over_bound']:.2f}", flush=True)
    first = runs["async"][0]
    summary = {
        "cam_run_args": run_args, "repeats": args.repeats,
        "bound_s": first["bound_s"],
        "simulated_makespan_s": {m: runs[m][0]["simulated_makespan_s"] for m in runs},
        # What the two schedules give with the service times alone (the simulator, same batches and costs).
        "ideal_async_over_sync": runs["async"][0]["simulated_makespan_s"] / runs["sync"][0]["simulated_makespan_s"],
        "median": {}, "runs": runs, "failed_runs": failures,
    }
    for key in ("makespan_s", "makespan_over_bound", "ttft_mean_s"):
        summary["median"][key] = {m: statistics.median(r[key] for r in runs[m]) for m in runs}
    summary["median_phases_s"] = {m: {p: statistics.median(r["phases_s"].get(p, 0.0) for r in runs[m])
                                      for p in sorted(runs[m][0]["phases_s"])} for m in runs}
    med = summary["median"]["makespan_s"]
    summary["async_over_sync_makespan"] = med["async"] / med["sync"]
    print(f"bound {summary['bound_s']:.2f} s; median makespan async {med['async']:.2f} s, sync {med['sync']:.2f} s, "
          f"async/sync {summary['async_over_sync_makespan']:.3f} (simulated: "
          f"{summary['ideal_async_over_sync']:.3f} with service times alone); makespan/bound async "
          f"{summary['median']['makespan_over_bound']['async']:.2f}, sync "
          f"{summary['median']['makespan_over_bound']['sync']:.2f}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
