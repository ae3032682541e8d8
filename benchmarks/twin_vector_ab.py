"""A/B of the twin's vector paths on dynamic_quant: each configuration runs in its own subprocess (the
path is resolved once per process), configurations alternate round by round so machine load hits them alike, and
every subprocess also times a cold memcpy of the op's input bytes, so each row is a same-run ratio.

    python benchmarks/twin_vector_ab.py --rounds 3 [--python OTHER_INSTALL_PYTHON] [--json F.json] [--md F.md]

Configurations: CAM_TWIN_VECTOR=portable / avx2 / avx512 (those the CPU supports) on this install, plus, with
--python, the other install (for example main before this work) under its defaults. Run it from outside a checkout
so each python uses its installed cam. Also records the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import hashlib, json, os, statistics, sys, time
import torch, cam
sys.path.insert(0, sys.argv[1])
from common import ColdMemcpy, llc_bytes
rows, cols, calls = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
g = torch.Generator().manual_seed(0)
x = (torch.randn(rows, cols, generator=g) * 3).to(torch.bfloat16)
q = torch.empty(rows, cols, dtype=torch.int8)
s = torch.empty(rows, dtype=torch.float32)
for _ in range(3):
    cam.ops.dynamic_quant(x, out=(q, s))
ts = []
for _ in range(calls):
    t0 = time.perf_counter()
    cam.ops.dynamic_quant(x, out=(q, s))
    ts.append(time.perf_counter() - t0)
cold = ColdMemcpy(llc_bytes())
mem = cold.seconds(x.numel() * 2, 15)
digest = hashlib.sha256(q.numpy().tobytes() + s.numpy().tobytes()).hexdigest()[:16]
print(json.dumps({"op_s": statistics.median(ts), "memcpy_s": mem, "digest": digest}))
"""


def supported_paths(python: str) -> list[str]:
    """The vector paths the CPU supports, asked of the twin itself through a forced path per probe."""
    paths = []
    for path in ("portable", "avx2", "avx512"):
        env = dict(os.environ, CAM_TWIN_VECTOR=path)
        probe = "import torch, cam; cam.ops.dynamic_quant(torch.ones(1, 32, dtype=torch.bfloat16))"
        r = subprocess.run([python, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
        if r.returncode == 0:
            paths.append(path)
    return paths


def loadavg() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--cols", type=int, default=2048)
    ap.add_argument("--python", help="another install's python, run under its defaults as a baseline")
    ap.add_argument("--label", default="baseline install")
    ap.add_argument("--json")
    ap.add_argument("--md")
    args = ap.parse_args(argv)

    common_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "cam", "bench")
    configs = [(f"CAM_TWIN_VECTOR={p}", sys.executable, {"CAM_TWIN_VECTOR": p}) for p in supported_paths(sys.executable)]
    if args.python:
        configs.append((args.label, args.python, {}))
    load_before = loadavg()
    samples: dict[str, list[dict]] = {name: [] for name, _, _ in configs}
    for _ in range(args.rounds):
        for name, python, env in configs:
            r = subprocess.run([python, "-c", CHILD, common_dir, str(args.rows), str(args.cols), str(args.calls)],
                               env=dict(os.environ, **env), capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise SystemExit(f"{name} failed:\n{r.stderr[-2000:]}")
            samples[name].append(json.loads(r.stdout.strip().splitlines()[-1]))
    load_after = loadavg()

    rows = []
    for name, _, _ in configs:
        ss = samples[name]
        op = statistics.median(x["op_s"] for x in ss)
        ratios = [x["memcpy_s"] / x["op_s"] for x in ss]
        rows.append({"config": name, "op_ms": op * 1e3, "GBps": args.rows * args.cols * 2 / op / 1e9,
                     "ratio_vs_cold_memcpy": statistics.median(ratios), "ratios": ratios,
                     "digests": sorted({x["digest"] for x in ss})})
    base = rows[0]["op_ms"] if rows else 1.0
    lines = [f"dynamic_quant [{args.rows}, {args.cols}] bf16, {args.rounds} alternating rounds x {args.calls} calls; "
             f"load average {load_before} before, {load_after} after", "",
             "| configuration | median op time | input GB/s | op / cold memcpy (median of rounds) | speed-up vs first row | output digest |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['op_ms']:.3f} ms | {r['GBps']:.3f} | {r['ratio_vs_cold_memcpy']:.3f}x | "
                     f"{base / r['op_ms']:.2f}x | {' '.join(r['digests'])} |")
    text = "\n".join(lines)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load_before": load_before, "load_after": load_after, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
