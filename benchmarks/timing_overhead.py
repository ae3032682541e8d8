"""What the twin's timing model costs a whole op: the same install with CAM_TWIN_TIMING on (record every instruction,
cost each launch for A2 and A3 at both L2 ends, append the costs to a file) and off, in alternated child processes
(the switch is read once per process). Process CPU seconds per call (all threads), medians over the children;
target: on / off <= 1.3 for every row. A benchmark row (benchmarks/README.md), not a test assertion.

    python benchmarks/timing_overhead.py --children 4 --json benchmarks/results/twin-timing-overhead.json
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROWS = {
    "dynamic_quant [4096, 7168]": "quant",
    "W1 M=2048 K=7168 N=4096 (8 experts)": "w1",
    "W2 M=2048 K=2048 N=7168 (8 experts)": "w2",
    # the four data-plane ops of an in-process plane (benchmarks/plane_ops.py's 2x1+2 E=16 K=4 H=2048 Bmax=128): a
    # plane phase's launches are costed together, re-costed until the landings their polls saw settle
    "data-plane round (4 ops, plane_ops.py)": "plane",
}

_CHILD = r"""
import os, sys, time, torch, cam
which, reps = sys.argv[1], int(sys.argv[2])
g = torch.Generator().manual_seed(0)
if which == "quant":
    x = torch.randn(4096, 7168, generator=g).to(torch.bfloat16)
    call = lambda: cam.ops.dynamic_quant(x)
else:
    E, M = 8, 2048
    K, N = (7168, 4096) if which == "w1" else (2048, 7168)
    x = torch.randint(-127, 128, (M, K), generator=g, dtype=torch.int8)
    xs = torch.rand(M, generator=g) * 1e-2 + 1e-3
    lw = cam.LayerWeights([torch.randint(-127, 128, (E, K, N), generator=g, dtype=torch.int8)],
                          [torch.rand(E, N, generator=g) * 1e-2])
    gl = torch.full((E,), M // E, dtype=torch.int64)
    li = torch.tensor([0], dtype=torch.int64)
    op = cam.ops.gmm_swiglu_quant_multi_layer if which == "w1" else cam.ops.gmm_multi_layer
    call = lambda: op(x, xs, lw, gl, li, 1)
call()
samples = []
for _ in range(reps):
    t0 = time.process_time()
    call()
    samples.append(time.process_time() - t0)
print(sorted(samples)[len(samples) // 2])
"""


def _plane_child(reps: int, env: dict, d: str) -> float:
    """The sum over the four ops of their median process CPU per call (plane_ops.py, 4 warm-up calls + reps)."""
    out = os.path.join(d, "plane.json")
    subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "plane_ops.py"),
                    str(4 + reps), "--json", out], env=env, capture_output=True, text=True, timeout=1800, check=True)
    with open(out) as f:
        ops = json.load(f)["ops"]
    return sum(o["cpu_median_s"] for o in ops.values())


def _child(which: str, reps: int, timing: bool, out: str) -> float:
    env = dict(os.environ, CAM_TWIN_PLATFORM="ascend910_93")
    env.pop("CAM_TWIN_TIMING", None)
    if timing:
        env["CAM_TWIN_TIMING"] = out
    if which == "plane":
        return _plane_child(reps, env, os.path.dirname(out))
    r = subprocess.run([sys.executable, "-c", _CHILD, which, str(reps)], env=env, capture_output=True, text=True,
                       timeout=1800, check=True)
    return float(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--children", type=int, default=4, help="children per mode and row, alternated")
    ap.add_argument("--reps", type=int, default=3, help="timed calls per child")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    if args.children < 1 or args.reps < 1:
        ap.error("--children and --reps must be >= 1")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for label, which in ROWS.items():
            on, off = [], []
            for i in range(args.children):
                for timing in ((True, False) if i % 2 == 0 else (False, True)):
                    t = _child(which, args.reps, timing, os.path.join(d, "t.jsonl"))
                    (on if timing else off).append(t)
            ratio = statistics.median(on) / statistics.median(off)
            rows.append({"row": label, "on_cpu_s": statistics.median(on), "off_cpu_s": statistics.median(off),
                         "on_over_off": ratio, "children": args.children, "reps": args.reps})
            print(f"{label:40s} on {statistics.median(on):.4f} s  off {statistics.median(off):.4f} s  "
                  f"on/off {ratio:.3f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "twin timing model overhead", "target": "on / off <= 1.3", "rows": rows}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
