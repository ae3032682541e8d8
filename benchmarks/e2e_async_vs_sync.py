"""Async vs sync cam-run, alternated run by run so both see the same machine load; writes the medians and the
async/sync ratios. Usage: python benchmarks/e2e_async_vs_sync.py [--repeats 3] [--out results/e2e-summary.json]
[--figures results] [cam-run args...]  (default cam-run args: the imbalanced preset under the cost model, 3 replicas, 2 FFN ranks)."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

DEFAULT_ARGS = ["--preset", "imbalanced", "--cost-model", "--replicas", "3", "--ffn", "2"]


def main(argv=None, run=subprocess.run) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "e2e-summary.json"))
    parser.add_argument("--figures", metavar="DIR",
                        help="the first repeat of each mode also draws its --timeline as DIR/e2e-<preset>-<mode>.png "
                             "(its report goes into the summary, first_repeat_reports)")
    args, run_args = parser.parse_known_args(argv)
    if args.figures:  # made before the first run: cam-run refuses a --json or --timeline in a missing directory
        try:
            os.makedirs(args.figures, exist_ok=True)
        except OSError as e:
            parser.error(f"--figures {args.figures!r}: cannot create it ({e.strerror or e})")
    run_args = run_args or DEFAULT_ARGS
    preset = run_args[run_args.index("--preset") + 1] if "--preset" in run_args else "default"
    runs = {"async": [], "sync": []}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for mode in ("async", "sync"):
                path = os.path.join(tmp, f"{mode}-{i}.json")
                extra = []
                if args.figures and i == 0:
                    extra = ["--timeline", os.path.join(os.path.abspath(args.figures), f"e2e-{preset}-{mode}.png")]
                run([sys.executable, "-m", "cam.run.cli", "--mode", mode, "--quiet", "--json", path,
                                *extra, *run_args], check=True, timeout=600, stdout=subprocess.DEVNULL, cwd=tmp)
                with open(path) as f:
                    runs[mode].append(json.load(f))
    metrics = {"makespan_s": lambda r: r["makespan_s"], "ttft_mean_s": lambda r: r["ttft_s"]["mean"],
               "ttft_p90_s": lambda r: r["ttft_s"]["p90"], "ffn_idle_fraction": lambda r: r["ffn_idle_fraction"]}
    load.append(os.getloadavg()[0])
    summary = {"cam_run_args": run_args, "repeats": args.repeats, "load_average_1min_before_after": load,
               "median": {}, "async_over_sync": {},
               # the whole report of each mode's first repeat (the one --figures draws)
               "first_repeat_reports": {m: rs[0] for m, rs in runs.items()},
               "runs": {m: [{k: f(r) for k, f in metrics.items()} for r in rs] for m, rs in runs.items()}}
    for name, f in metrics.items():
        a = statistics.median(f(r) for r in runs["async"])
        s = statistics.median(f(r) for r in runs["sync"])
        summary["median"][name] = {"async": a, "sync": s}
        summary["async_over_sync"][name] = a / s if s else None
    print(f"{'metric':<18} {'async':>9} {'sync':>9} {'async/sync':>10}")
    for name in metrics:
        m = summary["median"][name]
        print(f"{name:<18} {m['async']:>9.3f} {m['sync']:>9.3f} {summary['async_over_sync'][name]:>10.3f}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
