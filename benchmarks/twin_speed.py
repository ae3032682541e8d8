"""The twin's speed table: each cam op against a baseline measured in the same run, using only public cam
API so it runs against any install (``python benchmarks/twin_speed.py --json out.json`` with that install's python).

Rows, each a ratio against its same-run baseline (the machines differ from day to day; only these ratios compare):

- dispatch / combine: one in-process plane (ranks are threads), median stage time, effective bytes (what the stage
  delivers: dispatch the int8 rows + scales on the FFN ranks, combine the expert rows written back) against a
  **cold** single-threaded memcpy of the same bytes (source and destination cycle through pools of twice the
  last-level cache each, so every copy reads and writes memory, not cache);
- dynamic_quant [512, 2048] bf16: input bytes against the cold memcpy, and against torch's own per-token quant; and
  at [4096, 7168] bf16 (a DeepSeek-V3 hidden size, the shape issue 26 sets its target at) against the cold memcpy;
- W1 / W2 (balanced groups): 2*rows*K*N against ``torch._int_mm`` on the same groups with the same torch thread count
  (the int8 matmul alone, no epilogue: the yardstick the issue names);
- round trip: dispatch_send -> dispatch_recv -> combine_send -> combine_recv at D2 F2 E16 K4 H4096 B1024 through the
  public API, ranks as threads of one process, both stages' bytes against the cold memcpy of them;
- a one-block zero-work call (dynamic_quant on a [1, 32] tensor) against ``torch.abs`` on the same tiny tensor;
- the first cam op in a fresh process (what importing cam and the first dispatch cost), in a subprocess.

Also the absolute cold memcpy GB/s, the LLC size read from sysfs and the CPU flags that matter to the twin.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch


# ----------------------------------------------------------------------------------------------- machine + baselines

def _load_common():
    """cam/bench/common.py of this checkout, loaded by path: the cold-memcpy baseline is written once, and this script
    still runs against an install whose cam.bench predates it."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "cam", "bench", "common.py")
    spec = importlib.util.spec_from_file_location("_cam_bench_common", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_common = _load_common()
llc_bytes, cpu_flags, ColdMemcpy = _common.llc_bytes, _common.cpu_flags, _common.ColdMemcpy


def timed(fn, *, warmup: int, repeat: int, budget_s: float) -> float:
    """Median wall seconds of fn() (common.time_call)."""
    return statistics.median(_common.time_call(fn, warmup=warmup, repeat=repeat, budget_s=budget_s))


def cpu_per_call(fn, calls: int) -> float:
    """Process CPU seconds per call of fn() (all threads: the twin's blocks run on its pool). Beside the wall-time
    ratios, which other load on a shared machine moves by tens of percent: what the twin's own work costs."""
    fn()
    c0 = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - c0) / calls


# ----------------------------------------------------------------------------------------------- the rows

def bench_plane(cold, rounds: int) -> list[dict]:
    import cam

    D, P, F, E, K, H, B = 2, 1, 2, 16, 4, 2048, 128
    topo = cam.Topology(D=D, P=P, F=F, E=E, K=K, H=H, Bmax=B, L=1, slots=2, quantized=True)
    c0 = time.process_time()
    dispatch_s, combine_s, ids = _common.run_plane(topo, rounds, torch.bfloat16)
    cpu_round_s = (time.process_time() - c0) / rounds  # Comm set-up included, all threads
    rows = sum(int((i != -1).sum()) for i in ids)
    out = []
    for stage, samples, nbytes in (("dispatch", dispatch_s, rows * (H + 4)), ("combine", combine_s, rows * H * 2)):
        op_s = statistics.median(samples[1:])  # the first round warms up
        mem_s = cold.seconds(nbytes, 15)
        out.append({"op": stage, "case": f"{D}x{P}+{F} E={E} K={K} H={H} B={B} int8 wire", "bytes": nbytes,
                    "op_s": op_s, "op_GBps": nbytes / op_s / 1e9, "baseline": "cold memcpy of the same bytes",
                    "baseline_s": mem_s, "ratio": mem_s / op_s, "target": 0.2 if stage == "dispatch" else 0.5,
                    "round_cpu_s": cpu_round_s})
    return out


def bench_round_trip(cold, rounds: int) -> list[dict]:
    """One round trip as a user runs it (dispatch_send -> dispatch_recv -> combine_send -> combine_recv, public API,
    ranks as threads of this process) at the issue's shape, against a cold memcpy of the bytes both stages deliver."""
    import cam

    D, P, F, E, K, H, B = 2, 1, 2, 16, 4, 4096, 1024
    topo = cam.Topology(D=D, P=P, F=F, E=E, K=K, H=H, Bmax=B, L=1, slots=2, quantized=True)
    c0 = time.process_time()
    dispatch_s, combine_s, ids = _common.run_plane(topo, rounds, torch.bfloat16)
    cpu_round_s = (time.process_time() - c0) / rounds  # Comm set-up included, all threads
    rows = sum(int((i != -1).sum()) for i in ids)
    nbytes = rows * (H + 4) + rows * H * 2  # int8 rows + scales to the FFN ranks, bf16 expert rows back
    op_s = statistics.median(d + c for d, c in zip(dispatch_s[1:], combine_s[1:]))  # the first round warms up
    # ~100 MB, more than the shared pools hold: pools of its own, twice the copy each (ColdMemcpy's rule), so each
    # copy still reads and writes memory.
    mem_s = (cold if nbytes <= cold.pool // 2 else ColdMemcpy(nbytes)).seconds(nbytes, 7)
    return [{"op": "round trip", "case": f"{D}x{P}+{F} E={E} K={K} H={H} B={B} int8 wire, dispatch + combine",
             "bytes": nbytes, "op_s": op_s, "op_GBps": nbytes / op_s / 1e9, "baseline": "cold memcpy of the same bytes",
             "baseline_s": mem_s, "ratio": mem_s / op_s, "target": 0.2, "round_cpu_s": cpu_round_s}]


def bench_quant(cold, budget: float) -> list[dict]:
    import cam

    x = torch.randn(512, 2048).to(torch.bfloat16)
    q = torch.empty(512, 2048, dtype=torch.int8)
    s = torch.empty(512)
    op_s = timed(lambda: cam.ops.dynamic_quant(x, out=(q, s)), warmup=2, repeat=30, budget_s=budget)
    nbytes = x.numel() * 2
    mem_s = cold.seconds(nbytes, 15)
    tq_s = timed(lambda: _common.torch_quant(x), warmup=2, repeat=30, budget_s=budget)
    cpu_s = cpu_per_call(lambda: cam.ops.dynamic_quant(x, out=(q, s)), 20)
    case = "[512, 2048] bf16"
    rows = [
        {"op": "dynamic_quant", "case": case, "bytes": nbytes, "op_s": op_s, "op_GBps": nbytes / op_s / 1e9,
         "baseline": "cold memcpy of the input bytes", "baseline_s": mem_s, "ratio": mem_s / op_s, "target": 0.4,
         "op_cpu_s": cpu_s},
        {"op": "dynamic_quant", "case": case, "bytes": nbytes, "op_s": op_s, "op_GBps": nbytes / op_s / 1e9,
         "baseline": "torch per-token quant (vectorized torch ops)", "baseline_s": tq_s, "ratio": tq_s / op_s,
         "target": None},
    ]
    # The issue's shape: 56 MiB in, more than the shared cold pools hold, so pools of its own (ColdMemcpy's rule).
    x = torch.randn(4096, 7168).to(torch.bfloat16)
    q = torch.empty(4096, 7168, dtype=torch.int8)
    s = torch.empty(4096)
    op_s = timed(lambda: cam.ops.dynamic_quant(x, out=(q, s)), warmup=1, repeat=10, budget_s=budget)
    cpu_s = cpu_per_call(lambda: cam.ops.dynamic_quant(x, out=(q, s)), 4)
    nbytes = x.numel() * 2
    mem_s = (cold if nbytes <= cold.pool // 2 else ColdMemcpy(nbytes)).seconds(nbytes, 7)
    rows.append({"op": "dynamic_quant", "case": "[4096, 7168] bf16", "bytes": nbytes, "op_s": op_s,
                 "op_GBps": nbytes / op_s / 1e9, "baseline": "cold memcpy of the input bytes", "baseline_s": mem_s,
                 "ratio": mem_s / op_s, "target": 0.4, "op_cpu_s": cpu_s})
    return rows


def bench_gmm(budget: float) -> list[dict]:
    import cam

    hidden, inter, experts, layers, rows = 1024, 256, 8, 2, 512
    counts = [rows // experts] * experts
    g = torch.Generator().manual_seed(1)
    out = []
    for name, k, n in (("W1", hidden, 2 * inter), ("W2", inter, hidden)):
        x = torch.randint(-128, 128, (rows, k), generator=g, dtype=torch.int8)
        xs = torch.rand(rows, generator=g) * 1e-2 + 1e-3
        ws = [torch.randint(-128, 128, (experts, k, n), generator=g, dtype=torch.int8) for _ in range(layers)]
        ss = [torch.rand(experts, n, generator=g) * 1e-2 + 1e-3 for _ in range(layers)]
        lw = cam.LayerWeights(ws, ss)
        gl = torch.tensor(counts, dtype=torch.int64)
        li = torch.tensor([1], dtype=torch.int64)
        if name == "W1":
            y, ysc = torch.empty(rows, n // 2, dtype=torch.int8), torch.empty(rows)
            op = lambda: cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, gl, li, 1, out=(y, ysc))  # noqa: E731
        else:
            o = torch.empty(rows, n, dtype=torch.bfloat16)
            op = lambda: cam.ops.gmm_multi_layer(x, xs, lw, gl, li, 1, out=o)  # noqa: E731
        int_mm = lambda: _common.int_mm_groups(x, ws[1], counts)  # noqa: E731

        op_s = timed(op, warmup=1, repeat=10, budget_s=budget)
        mm_s = timed(int_mm, warmup=1, repeat=10, budget_s=budget)
        cpu_s = cpu_per_call(op, 5)
        work = 2.0 * rows * k * n
        out.append({"op": name, "case": f"M={rows} K={k} N={n} E_local={experts} balanced", "work_ops": work,
                    "op_s": op_s, "op_GOPs": work / op_s / 1e9, "op_cpu_s": cpu_s,
                    "baseline": f"torch._int_mm per group, {torch.get_num_threads()} torch threads",
                    "baseline_s": mm_s, "baseline_GOPs": work / mm_s / 1e9, "ratio": mm_s / op_s, "target": 0.3})
    return out


def bench_fixed(budget: float) -> list[dict]:
    return [_common.fixed_cost(budget)]


_FIRST_OP = """
import time, sys
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import cam
t2 = time.perf_counter()
x = torch.randn(1, 32).to(torch.bfloat16)
cam.ops.dynamic_quant(x)
t3 = time.perf_counter()
cam.ops.dynamic_quant(x)
t4 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, t4 - t3, int("torch._dynamo" in sys.modules))
"""


def bench_first_op(runs: int) -> list[dict]:
    samples = []
    for _ in range(runs):
        res = subprocess.run([sys.executable, "-c", _FIRST_OP], capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            raise RuntimeError(f"first-op probe failed:\n{res.stderr}")
        samples.append([float(v) for v in res.stdout.split()])
    med = [statistics.median(s[i] for s in samples) for i in range(5)]
    return [{"op": "first op in a process", "case": "import cam, then dynamic_quant on [1, 32]",
             "import_torch_s": med[0], "import_cam_s": med[1], "first_op_s": med[2], "second_op_s": med[3],
             "dynamo_imported": bool(med[4]), "runs": runs}]


# ----------------------------------------------------------------------------------------------- the pipe model's cost

# Read by the twin at each block's start (kernels/twin/src/pipes.cpp); only this A/B sets it.
PIPE_MODEL_OFF_ENV = "CAM_TWIN_PIPE_MODEL_BENCH_OFF"


def _cost_ops() -> list[tuple[str, object, int]]:
    """(row, one call, calls per sample): the table's cam ops alone, without their baselines."""
    import cam

    ops = []
    x1 = torch.randn(1, 32).to(torch.bfloat16)
    q1, s1 = torch.empty(1, 32, dtype=torch.int8), torch.empty(1)
    ops.append(("fixed cost (dynamic_quant [1, 32])", lambda: cam.ops.dynamic_quant(x1, out=(q1, s1)), 200))
    x = torch.randn(512, 2048).to(torch.bfloat16)
    q, sc = torch.empty(512, 2048, dtype=torch.int8), torch.empty(512)
    ops.append(("dynamic_quant [512, 2048] bf16", lambda: cam.ops.dynamic_quant(x, out=(q, sc)), 5))
    hidden, inter, experts, rows = 1024, 256, 8, 512
    g = torch.Generator().manual_seed(1)
    gl = torch.tensor([rows // experts] * experts, dtype=torch.int64)
    li = torch.tensor([1], dtype=torch.int64)
    for name, k, n in (("W1", hidden, 2 * inter), ("W2", inter, hidden)):
        a = torch.randint(-128, 128, (rows, k), generator=g, dtype=torch.int8)
        a_s = torch.rand(rows, generator=g) * 1e-2 + 1e-3
        lw = cam.LayerWeights([torch.randint(-128, 128, (experts, k, n), generator=g, dtype=torch.int8)] * 2,
                              [torch.rand(experts, n, generator=g) * 1e-2 + 1e-3] * 2)
        if name == "W1":
            y, ys = torch.empty(rows, n // 2, dtype=torch.int8), torch.empty(rows)
            op = (lambda a=a, a_s=a_s, lw=lw, y=y, ys=ys:
                  cam.ops.gmm_swiglu_quant_multi_layer(a, a_s, lw, gl, li, 1, out=(y, ys)))
        else:
            o = torch.empty(rows, n, dtype=torch.bfloat16)
            op = lambda a=a, a_s=a_s, lw=lw, o=o: cam.ops.gmm_multi_layer(a, a_s, lw, gl, li, 1, out=o)  # noqa: E731
        ops.append((f"{name} M={rows} K={k} N={n} E_local={experts}", op, 2))
    topo = cam.Topology(D=2, P=1, F=2, E=16, K=4, H=2048, Bmax=128, L=1, slots=2, quantized=True)
    ops.append(("plane: 4 rounds of dispatch + combine, 2x1+2 H=2048 B=128 (Comm set-up included)",
                lambda: _common.run_plane(topo, 4, torch.bfloat16), 1))
    return ops


def measure_pipe_model_cost(rounds: int) -> dict:
    """Process CPU seconds per call of each row's op (all threads: the blocks run on the twin's pool), the pipe
    model on and off alternated in this process, the order flipped every round. CPU time, not wall time, because
    the shared machine's load moves wall times by more than the effect measured."""
    out = {}
    for name, op, calls in _cost_ops():
        samples = {"on": [], "off": []}
        for arm in ("on", "off"):  # warm both
            _set_pipe_model(arm)
            op()
        for rnd in range(rounds):
            for arm in (("on", "off") if rnd % 2 == 0 else ("off", "on")):
                _set_pipe_model(arm)
                c0 = time.process_time()
                for _ in range(calls):
                    op()
                samples[arm].append((time.process_time() - c0) / calls)
        _set_pipe_model("on")
        out[name] = samples
    return out


def _set_pipe_model(arm: str) -> None:
    if arm == "off":
        os.environ[PIPE_MODEL_OFF_ENV] = "1"
    else:
        os.environ.pop(PIPE_MODEL_OFF_ENV, None)


def _write_outputs(args, doc: dict, lines: list[str]) -> int:
    """Prints the table and writes --json / --md."""
    text = "\n".join(lines) + "\n"
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    return 0


def _base_description(args) -> str:
    """The older install's command, without machine paths (records are tracked files): the interpreter's name and
    each --base-env variable's name."""
    if not args.base_python:
        return ""
    names = [kv.split("=", 1)[0] + "=<older install>" for kv in args.base_env]
    return " ".join([os.path.basename(args.base_python), *names])


def _cost_child(python: str, rounds: int, env: dict) -> dict:
    res = subprocess.run([python, os.path.abspath(__file__), "--pipe-model-ab", str(rounds), "--cost-child"], env=env,
                         capture_output=True, text=True, timeout=3600)
    if res.returncode != 0:
        raise RuntimeError(f"{python}'s run failed:\n{res.stderr[-4000:]}")
    return json.loads(res.stdout)


def pipe_model_ab(args) -> int:
    """The model's cost per row: CPU time with the model on over off, alternated in one process. With
    `--base-python`, an older install (before) and this one (after) each measure that way in child processes,
    `--ab-reps` children each, alternated (order flipped every rep), samples pooled per install: the before/after
    of a change to the model, in the same run."""
    if args.cost_child:
        json.dump(measure_pipe_model_cost(args.pipe_model_ab), sys.stdout)
        return 0
    base = None
    if args.base_python:
        env_here = {k: v for k, v in os.environ.items() if k != PIPE_MODEL_OFF_ENV}
        env_base = dict(env_here, **dict(kv.split("=", 1) for kv in args.base_env))
        arms = {"here": (sys.executable, env_here), "base": (args.base_python, env_base)}
        pooled = {"here": {}, "base": {}}
        for rep in range(args.ab_reps):
            for arm in (("base", "here") if rep % 2 == 0 else ("here", "base")):
                python, env = arms[arm]
                for name, smp in _cost_child(python, args.pipe_model_ab, env).items():
                    row = pooled[arm].setdefault(name, {"on": [], "off": []})
                    row["on"] += smp["on"]
                    row["off"] += smp["off"]
        here, base = pooled["here"], pooled["base"]
    else:
        here = measure_pipe_model_cost(args.pipe_model_ab)
    rows = []
    for name, smp in here.items():
        off = statistics.median(smp["off"])
        row = {"row": name, "off_s": off, "on_s": statistics.median(smp["on"]),
               "on_over_off_per_round": [a / b for a, b in zip(smp["on"], smp["off"])], "samples": smp}
        row["on_over_off"] = row["on_s"] / off
        # Each round's on and off ran back to back: the median of their ratios is the paired estimate, which load
        # drifting between rounds or children moves less than the ratio of the pooled medians.
        row["on_over_off_paired"] = statistics.median(row["on_over_off_per_round"])
        if base is not None:
            b = base[name]
            row["base_off_s"] = statistics.median(b["off"])
            row["base_on_s"] = statistics.median(b["on"])
            row["base_on_over_off"] = row["base_on_s"] / row["base_off_s"]
            row["base_on_over_off_paired"] = statistics.median(a / c for a, c in zip(b["on"], b["off"]))
            row["on_over_base_on"] = row["on_s"] / row["base_on_s"]
            row["base_samples"] = b
        rows.append(row)
    doc = {"label": args.label, "rounds": args.pipe_model_ab, "host": platform.platform(), "cpus": os.cpu_count(),
           "torch_threads": torch.get_num_threads(), "load_avg_after": os.getloadavg(),
           "base": _base_description(args), "rows": rows}
    reps = f"{args.ab_reps} children of {args.pipe_model_ab} rounds per install, alternated, " if base else ""
    lines = [f"# the twin's pipe-ordering model: its cost{': ' + args.label if args.label else ''}", "",
             f"Process CPU seconds per call (all threads), the model on and off (`{PIPE_MODEL_OFF_ENV}=1`, set only "
             f"by this benchmark) alternated in one process, {args.pipe_model_ab} rounds, order flipped every round; "
             "on ÷ off is the ratio of the medians, `paired` the median of each round's on ÷ off. " + (f"`before`: an older install ({reps}samples pooled), measured the same way as this one "
                            "(`after`). " if base else "") +
             f"{os.cpu_count()} CPUs, torch {torch.get_num_threads()} threads, load average after the run "
             f"{os.getloadavg()[0]:.1f}.", ""]
    if base:
        lines += ["| row | before: on ÷ off | after: on ÷ off | before, paired | after, paired | after on ÷ before on | "
                  "after off ÷ before off |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['row']} | {r['base_on_over_off']:.2f} | **{r['on_over_off']:.2f}** | "
                         f"{r['base_on_over_off_paired']:.2f} | **{r['on_over_off_paired']:.2f}** | "
                         f"{r['on_over_base_on']:.2f} | {r['off_s'] / r['base_off_s']:.2f} |")
    else:
        lines += ["| row | off | on | on ÷ off | paired | per round |", "|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['row']} | {r['off_s'] * 1e3:.3f} ms | {r['on_s'] * 1e3:.3f} ms | "
                         f"**{r['on_over_off']:.2f}** | {r['on_over_off_paired']:.2f} | "
                         f"{', '.join(f'{v:.2f}' for v in r['on_over_off_per_round'])} |")
    return _write_outputs(args, doc, lines)


# ----------------------------------------------------------------------------------------------- report

def fmt_row(r: dict) -> str:
    if r["op"] == "first op in a process":
        return (f"| first op in a process | import cam {r['import_cam_s'] * 1e3:.0f} ms, first call "
                f"{r['first_op_s'] * 1e3:.0f} ms, second {r['second_op_s'] * 1e6:.0f} µs | — | torch._dynamo imported: "
                f"{'yes' if r['dynamo_imported'] else 'no'} | — |")
    if r["op"] == "fixed cost":
        return (f"| fixed cost ({r['case']}) | {r['op_s'] * 1e6:.1f} µs | torch.abs {r['baseline_s'] * 1e6:.2f} µs | "
                f"{r['op_over_baseline']:.1f}× torch.abs | ≤ 10× |")
    speed = f"{r['op_GBps']:.3f} GB/s" if "op_GBps" in r else f"{r['op_GOPs']:.1f} GOP/s"
    target = f"≥ {r['target']}×" if r.get("target") else "—"
    return (f"| {r['op']} ({r['case']}) | {speed} | {r['baseline']}: {r['baseline_s'] * 1e3:.3f} ms | "
            f"{r['ratio']:.4f}× | {target} |")


def _row_key(r: dict) -> str:
    return f"{r['op']} ({r['case']}) vs {r.get('baseline', '-')}"


def _table_child(python: str, args, env: dict) -> dict:
    cmd = [python, os.path.abspath(__file__), "--table-child", "--rounds", str(args.rounds), "--round-trip-rounds",
           str(args.round_trip_rounds), "--budget", str(args.budget), "--first-op-runs", str(args.first_op_runs)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if res.returncode != 0:
        raise RuntimeError(f"{python}'s run failed:\n{res.stderr[-4000:]}")
    return json.loads(res.stdout)


def table_ab(args) -> int:
    """The table's ratios before (an older install, --base-python / --base-env) and after (this one), each measured
    by `--ab-reps` child processes per install, alternated (order flipped every rep): the same-run before/after of a
    change. Each row's ratio is the median over its install's children."""
    env_here = dict(os.environ)
    env_base = dict(env_here, **dict(kv.split("=", 1) for kv in args.base_env))
    arms = {"here": (sys.executable, env_here), "base": (args.base_python, env_base)}
    docs = {"here": [], "base": []}
    for rep in range(args.ab_reps):
        for arm in (("base", "here") if rep % 2 == 0 else ("here", "base")):
            python, env = arms[arm]
            docs[arm].append(_table_child(python, args, env))
    doc = {"label": args.label, "ab_reps": args.ab_reps, "base": _base_description(args),
           "host": platform.platform(), "cpus": os.cpu_count(), "load_avg_after": os.getloadavg(),
           "rows": _ab_rows(docs), "children": docs}
    return _write_outputs(args, doc, _ab_lines(doc))


def _ab_rows(docs: dict) -> list[dict]:
    """Per row of the table: each install's ratios (one per child) and medians, and after ÷ before of the op's own
    wall time and process CPU time (medians over the children)."""

    def values(arm, key, field):
        return [x[field] for d in docs[arm] for x in d["results"] if _row_key(x) == key and field in x]

    rows = []
    for r in docs["here"][0]["results"]:
        if r["op"] == "first op in a process":
            continue
        key = _row_key(r)
        field = "op_over_baseline" if r["op"] == "fixed cost" else "ratio"
        got = {arm: values(arm, key, field) or [float("nan")] for arm in docs}
        row = {"row": key, "field": field, "target": r.get("target"), "here": got["here"], "base": got["base"],
               "here_median": statistics.median(got["here"]), "base_median": statistics.median(got["base"])}
        op = {arm: values(arm, key, "op_s") for arm in docs}
        if op["here"] and op["base"]:
            row["op_after_over_before"] = statistics.median(op["here"]) / statistics.median(op["base"])
        cpu_field = "op_cpu_s" if "op_cpu_s" in r else "round_cpu_s" if "round_cpu_s" in r else None
        if cpu_field:
            cpu = {arm: values(arm, key, cpu_field) for arm in docs}
            if cpu["here"] and cpu["base"]:
                row["cpu_field"] = cpu_field
                row["cpu_after_over_before"] = statistics.median(cpu["here"]) / statistics.median(cpu["base"])
        rows.append(row)
    return rows


def _ab_lines(doc: dict) -> list[str]:
    reps = doc["ab_reps"]
    lines = [f"# twin speed, before and after{': ' + doc['label'] if doc['label'] else ''}", "",
             f"Each install ran the table in {reps} child processes, alternated with the other's (order flipped "
             f"every rep); each ratio cell is the median over that install's children of the row's same-run ratio "
             f"(baseline time / op time; for the fixed cost, op time / torch.abs time, lower is better). `before`: "
             f"`{doc['base']}`. {doc['cpus']} CPUs (shared), load average after the run "
             f"{doc['load_avg_after'][0]:.1f}.", "",
             "`op time` is the op's own wall time, `CPU` its process CPU time (all threads) per call, or per plane "
             "round for the plane rows (Comm set-up included), each after ÷ before over the children's medians: "
             "the baselines themselves move with the machine's other load (torch's 2-thread `_int_mm` by up to 100× "
             "between children), the op's own times far less.", "",
             "| row | before | after | after ÷ before | op time after ÷ before | CPU after ÷ before | target | "
             "after, per child |", "|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        if r["field"] == "op_over_baseline":
            target = "≤ 10× torch.abs"
            fmt = lambda v: f"{v:.1f}× torch.abs"  # noqa: E731
        else:
            target = f"≥ {r['target']}×" if r["target"] else "—"
            fmt = lambda v: f"{v:.4f}×"  # noqa: E731
        op = f"{r['op_after_over_before']:.2f}" if "op_after_over_before" in r else "—"
        cpu = f"{r['cpu_after_over_before']:.2f}" if "cpu_after_over_before" in r else "—"
        lines.append(f"| {r['row']} | {fmt(r['base_median'])} | **{fmt(r['here_median'])}** | "
                     f"{r['here_median'] / r['base_median']:.2f} | {op} | {cpu} | {target} | "
                     f"{', '.join(f'{v:.3g}' for v in r['here'])} |")
    return lines


def render_ab(args) -> int:
    """Re-renders a recorded before/after (its children's results) with this script's rows and table."""
    with open(args.render_ab) as f:
        doc = json.load(f)
    doc["rows"] = _ab_rows(doc["children"])
    return _write_outputs(args, doc, _ab_lines(doc))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")
    p.add_argument("--md", metavar="PATH", help="write the table as markdown")
    p.add_argument("--label", default="", help="what was measured (e.g. 'this branch')")
    p.add_argument("--rounds", type=int, default=8, help="plane rounds (the first warms up)")
    p.add_argument("--round-trip-rounds", type=int, default=9,
                   help="round-trip rounds (the first warms up; the median outvotes the next few, which still "
                        "fault in fresh window slots)")
    p.add_argument("--budget", type=float, default=2.0, help="seconds per timed case")
    p.add_argument("--first-op-runs", type=int, default=3, help="fresh processes for the first-op row")
    p.add_argument("--pipe-model-ab", type=int, default=0, metavar="ROUNDS",
                   help="instead of the table: the twin's pipe model on against off, ROUNDS alternated samples")
    p.add_argument("--cost-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--table-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--render-ab", metavar="JSON", help="re-render a recorded --base-python run (its children) as the "
                                                       "table, to --md / --json")
    p.add_argument("--base-python", help="also alternate this python's install (an older build) with this one: the "
                                         "table's before/after, or with --pipe-model-ab the model's cost's")
    p.add_argument("--base-env", nargs="*", default=[], metavar="K=V", help="environment of the --base-python arm")
    p.add_argument("--ab-reps", type=int, default=6, help="with --base-python: children per install, alternated")
    args = p.parse_args(argv)
    if args.render_ab:
        return render_ab(args)
    if args.pipe_model_ab:
        return pipe_model_ab(args)
    if args.base_python and not args.table_child:
        return table_ab(args)

    import cam

    llc = llc_bytes()
    cold = ColdMemcpy(llc)
    big = min(cold.pool // 4, 256 << 20)
    started = time.perf_counter()
    results = []
    results += bench_fixed(args.budget)
    results += bench_quant(cold, args.budget)
    results += bench_gmm(args.budget)
    results += bench_plane(cold, args.rounds)
    results += bench_round_trip(cold, args.round_trip_rounds)
    results += bench_first_op(args.first_op_runs)
    doc = {
        "label": args.label,
        "cam_version": getattr(cam, "__version__", "?"),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "host": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu_flags": cpu_flags(),
        "llc_bytes": llc,
        "cold_memcpy": {"bytes": big, "GBps": cold.gbps(), "pool_bytes_each_side": cold.pool},
        "seconds": time.perf_counter() - started,
        "results": results,
    }
    if args.table_child:
        json.dump(doc, sys.stdout)
        return 0
    lines = [f"# twin speed{': ' + args.label if args.label else ''}", "",
             f"cold memcpy {doc['cold_memcpy']['GBps']:.2f} GB/s single thread ({big >> 20} MiB, pools of "
             f"{cold.pool >> 20} MiB per side; LLC {llc >> 20} MiB), {doc['cpus']} CPUs, flags "
             f"{' '.join(doc['cpu_flags']) or '-'}, torch {torch.__version__} with {doc['torch_threads']} threads.",
             "", "| op | measured | same-run baseline | ratio (baseline time / op time) | target |",
             "|---|---|---|---|---|"]
    lines += [fmt_row(r) for r in results]
    return _write_outputs(args, doc, lines)


if __name__ == "__main__":
    sys.exit(main())
