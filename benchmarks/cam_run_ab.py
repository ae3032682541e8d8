"""Alternated A/B of `cam-run --check` wall time and makespan between installs (docs/run.md, "Wall time").

Each round runs every labelled command once, in turn, from a scratch directory (outside any checkout, so each
install's own cam is used), and records the command's wall time (start to exit, measured here) and the run's own
makespan and wall-time profile from its --json report. Same-run ratios only: the machine's load is recorded with
every round (`/proc/loadavg`), and only pairs from one round are compared.

    python benchmarks/cam_run_ab.py --rounds 5 --json out.json \\
        base="$BASELINE_VENV/bin/cam-run" new="$VENV/bin/cam-run" -- --check --quiet
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("commands", nargs="+", metavar="LABEL=COMMAND", help="label=shell words of a cam-run command")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--timeout", type=float, default=300.0, help="bound of one cam-run (s)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    commands = []
    for c in args.commands:
        label, sep, cmd = c.partition("=")
        if not sep or not label or not cmd:
            p.error(f"expected LABEL=COMMAND, got {c!r}")
        commands.append((label, shlex.split(cmd)))
    rounds = []
    with tempfile.TemporaryDirectory(prefix="cam-run-ab-") as scratch:
        for n in range(args.rounds):
            row = {"round": n, "load_before": _load(), "runs": {}}
            for label, cmd in commands:
                report = os.path.join(scratch, f"{label}-{n}.json")
                t = time.perf_counter()
                r = subprocess.run(cmd + extra + ["--json", report], cwd=scratch, capture_output=True, text=True,
                                   timeout=args.timeout)
                wall = time.perf_counter() - t
                if r.returncode != 0:
                    print(r.stdout + r.stderr, file=sys.stderr)
                    raise SystemExit(f"{label}: exit code {r.returncode}")
                with open(report) as f:
                    rep = json.load(f)
                row["runs"][label] = {"wall_s": wall, "makespan_s": rep["makespan_s"],
                                      "check_ok": rep.get("check", {}).get("ok"), "profile": rep.get("wall_s")}
                print(f"round {n} {label:>8}: wall {wall:6.2f} s  makespan {rep['makespan_s']:.3f} s  "
                      f"(load {row['load_before']})", flush=True)
            rounds.append(row)
    summary = {}
    for label, _ in commands:
        walls = [r["runs"][label]["wall_s"] for r in rounds]
        spans = [r["runs"][label]["makespan_s"] for r in rounds]
        summary[label] = {"wall_median_s": statistics.median(walls), "wall_min_s": min(walls), "wall_max_s": max(walls),
                          "makespan_median_s": statistics.median(spans), "makespan_min_s": min(spans),
                          "makespan_max_s": max(spans)}
    ref = commands[0][0]
    for label, _ in commands[1:]:
        summary[label]["wall_ratio_vs_" + ref] = statistics.median(
            r["runs"][label]["wall_s"] / r["runs"][ref]["wall_s"] for r in rounds)
        summary[label]["makespan_ratio_vs_" + ref] = statistics.median(
            r["runs"][label]["makespan_s"] / r["runs"][ref]["makespan_s"] for r in rounds)
    for label, s in summary.items():
        print(f"{label:>8}: wall median {s['wall_median_s']:.2f} s ({s['wall_min_s']:.2f}-{s['wall_max_s']:.2f}), "
              f"makespan median {s['makespan_median_s']:.3f} s ({s['makespan_min_s']:.3f}-{s['makespan_max_s']:.3f})"
              + "".join(f", {k} {v:.3f}" for k, v in s.items() if "ratio" in k))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"extra_args": extra, "commands": {k: v for k, v in commands}, "rounds": rounds,
                       "summary": summary}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
