"""Per-call cost of validating once (issue 12, "validation once per call"), same run, same process, alternated.

Each op's direct body (``Op.register_direct``: the C API validates, Python only words a refusal) against the body it
replaced (the op's registered kernel function: the Python checks, then the same C call, which checks again), on
tiny calls whose kernels do next to nothing: W1 and W2 on one row, and combine_send of an empty work item on an
in-process plane (a no-op the C API still validates and launches). Also the Python check alone, which is what the
direct body no longer runs. Run from outside a checkout so the installed cam is measured:

    python benchmarks/validate_once.py [--json F.json] [--rounds 5] [--repeat 2000]
"""

import argparse
import importlib
import json
import os
import platform
import statistics
import time
import uuid

import torch

import cam

# The op modules (cam.ops re-exports each op's function under its module's name).
cs_mod = importlib.import_module("cam.ops.combine_send")
gmm_mod = importlib.import_module("cam.ops.gmm")


def per_call(fn, repeat):
    for _ in range(20):
        fn()
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def ab(op, call, rounds, repeat):
    """Median per-call seconds with the old body (Python checks + C API) and the new one (C API alone),
    alternated ``rounds`` times."""
    new = op._direct
    old, cur = [], []
    try:
        for _ in range(rounds):
            op._direct = op._fn
            old.append(per_call(call, repeat))
            op._direct = new
            cur.append(per_call(call, repeat))
    finally:
        op._direct = new
    return statistics.median(old), statistics.median(cur)


def gmm_case(rounds, repeat):
    m, k, n, e = 1, 16, 32, 1
    g = torch.Generator().manual_seed(0)
    w = torch.randint(-127, 128, (e, k, n), generator=g, dtype=torch.int8)
    lw = cam.LayerWeights([w], [torch.rand(e, n, generator=g)])
    x = torch.randint(-127, 128, (m, k), generator=g, dtype=torch.int8)
    xs = torch.rand(m, generator=g)
    gl = torch.tensor([m], dtype=torch.int64)
    li = torch.zeros(1, dtype=torch.int64)
    y, ys = torch.empty(m, n // 2, dtype=torch.int8), torch.empty(m)
    out = torch.empty(m, n, dtype=torch.bfloat16)
    ws, ss = list(lw.weights), list(lw.scales)
    rows = []
    w1 = lambda: cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, gl, li, out=(y, ys))  # noqa: E731
    w2 = lambda: cam.ops.gmm_multi_layer(y, ys, lw, gl, li, out=out)  # noqa: E731
    for name, op, call, check in (
        ("W1 gmm_swiglu_quant_multi_layer [1,16]x[16,32]", gmm_mod._gmm_swiglu_quant_multi_layer, w1,
         lambda: gmm_mod._check_w1(x, xs, ws, ss, gl, li, 1, y, ys)),
        ("W2 gmm_multi_layer [1,16]x[16,32]", gmm_mod._gmm_multi_layer, w2,
         lambda: gmm_mod._check_w2(y, ys, ws, ss, gl, li, 1, out)),
    ):
        before, after = ab(op, call, rounds, repeat)
        rows.append({"case": name, "before_s": before, "after_s": after,
                     "python_check_s": statistics.median(per_call(check, repeat) for _ in range(rounds))})
    return rows


def plane_case(rounds, repeat):
    topo = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=32, Bmax=1, L=1)
    group = f"v1-{uuid.uuid4().hex[:8]}"
    import threading

    result, errors = {}, []
    ready = threading.Event()
    done = threading.Event()

    def attention():
        try:
            with cam.Comm(topo, 0, group=group, dtype=torch.bfloat16):
                ready.wait(600)
                done.wait(600)
        except BaseException as ex:  # noqa: BLE001
            errors.append(ex)

    t = threading.Thread(target=attention, daemon=True)
    t.start()
    try:
        with cam.Comm(topo, 1, group=group, dtype=torch.bfloat16, idle_poll_s=0.05) as comm:
            ready.set()
            _, _, _, wi = cam.ops.dispatch_recv(comm)  # nothing sent: an empty work item after idle_poll_s
            assert int(wi[0]) == 0, "expected an empty work item"
            eo = torch.zeros(topo.recv_rows, topo.H, dtype=torch.bfloat16)
            call = lambda: cam.ops.combine_send(comm, eo, wi)  # noqa: E731
            before, after = ab(cs_mod._combine_send, call, rounds, repeat)
            check = lambda: cs_mod._check(comm, eo, wi)  # noqa: E731
            result = {"case": "combine_send of an empty work item (A=1, F=1, H=32)", "before_s": before,
                      "after_s": after,
                      "python_check_s": statistics.median(per_call(check, repeat) for _ in range(rounds))}
    finally:
        done.set()
        t.join(60)
    if errors:
        raise errors[0]
    return [result]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=2000)
    a = p.parse_args()
    rows = gmm_case(a.rounds, a.repeat) + plane_case(a.rounds, a.repeat)
    print(f"{'case':55} {'before µs':>10} {'after µs':>10} {'after/before':>13} {'py check µs':>12}")
    for r in rows:
        r["after_over_before"] = r["after_s"] / r["before_s"]
        print(f"{r['case']:55} {r['before_s'] * 1e6:10.1f} {r['after_s'] * 1e6:10.1f} {r['after_over_before']:13.2f} "
              f"{r['python_check_s'] * 1e6:12.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"what": "per-call seconds, median of alternated rounds, same process", "rounds": a.rounds,
                       "repeat": a.repeat, "load": os.getloadavg(), "cpus": os.cpu_count(),
                       "machine": platform.processor() or platform.machine(), "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
