"""Batched FFN serving on a short-prompt workload, batching on vs off in the same run: many replicas (default 6)
send prompts of 4-64 tokens over 2 layers to one FFN rank of an in-process plane, which serves them either one work
item per iteration (dispatch_recv -> W1 -> W2 -> combine_send) or one snapshot batch per iteration
(dispatch_recv(row_budget) -> W1/W2 over the group table -> combine_send of the batch). Reports, per mode, the
grouped-matmul launches (W1 + W2, counted by cam.h camGetLaunchCount) per served token, the work items per
iteration, the FFN busy fraction (wall of the iterations that served work over the FFN's wall from its first poll
to its last combine; and the part of that wall spent in W1 + W2) and the makespan; modes alternate run by run. Every Attention output is checked bit for bit
against the first one-by-one run. Public cam API only (benchmarks/README.md, "FFN batching").

    python benchmarks/ffn_batching.py [--replicas 6] [--rounds 4] [--repeats 2] [--json PATH]
"""

import argparse
import json
import statistics
import sys
import threading
import time
import uuid

import torch

import cam

GMM_OPS = ("gmm_swiglu_quant_multi_layer", "gmm_multi_layer")


def _launches() -> int:
    return sum(cam._C.launch_count(op) for op in GMM_OPS)


def _weights(t, inter, seed=5):
    g = torch.Generator().manual_seed(seed)
    return (cam.LayerWeights.random(t.R, t.L, t.H, 2 * inter, g), cam.LayerWeights.random(t.R, t.L, inter, t.H, g))


def _workload(t, rounds, seed):
    """rounds[a] = [(layer, x, ids, w)]: prompts of 4-64 tokens, layers alternating."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(t.A):
        rs = []
        for r in range(rounds):
            b = int(torch.randint(4, 65, (1,), generator=g))
            x = (torch.randn((b, t.H), generator=g) * 2).to(torch.bfloat16)
            ids = torch.randint(0, t.E, (b, t.K), generator=g, dtype=torch.int32)
            rs.append((r % t.L, x, ids, torch.rand((b, t.K), generator=g)))
        out.append(rs)
    return out


def _run(t, work, w1, w2, batched: bool):
    group = f"ffn-batching-{uuid.uuid4().hex[:8]}"
    results, errors = {}, {}
    tokens = sum(int(x.shape[0]) for rs in work for _, x, _, _ in rs)
    budget = t.D * t.recv_rows
    start = threading.Barrier(t.world_size, timeout=120)
    finished = threading.Semaphore(0)
    all_done = threading.Event()

    def attention(comm):
        outs = []
        start.wait()
        for layer, x, ids, w in work[comm.rank]:
            cam.ops.dispatch_send(comm, x, ids, layer)
            outs.append(cam.ops.combine_recv(comm, ids, w))
        finished.release()
        return outs

    def ffn(comm):
        start.wait()
        t0 = last = time.perf_counter()
        busy, gmm, iters, items_served = 0.0, 0.0, 0, 0
        launches = 0
        deadline = t0 + 600
        while not all_done.is_set():  # every combine_recv returned: every round was served
            if time.perf_counter() > deadline:
                raise RuntimeError("the FFN rank did not serve every round within 600 s")
            s, l0 = time.perf_counter(), _launches()
            if batched:
                ex, sc, groups, _, items = cam.ops.dispatch_recv(comm, row_budget=budget)
                g0 = time.perf_counter()
                y, ys = cam.ops.gmm_swiglu_quant_multi_layer(ex, sc, w1, groups, None, cam.ops.gmm.GROUP_TABLE)
                out = cam.ops.gmm_multi_layer(y, ys, w2, groups, None, cam.ops.gmm.GROUP_TABLE)
                g1 = time.perf_counter()
                cam.ops.combine_send(comm, out, items)
                n = sum(int(items[i, 0]) == 1 for i in range(items.shape[0]))
            else:
                ex, sc, cnt, wi = cam.ops.dispatch_recv(comm)
                g0 = time.perf_counter()
                y, ys = cam.ops.gmm_swiglu_quant_multi_layer(ex, sc, w1, cnt, wi[2:3])
                out = cam.ops.gmm_multi_layer(y, ys, w2, cnt, wi[2:3])
                g1 = time.perf_counter()
                cam.ops.combine_send(comm, out, wi)
                n = int(int(wi[0]) == 1)
            if n:
                last = time.perf_counter()
                busy += last - s
                gmm += g1 - g0
                launches += _launches() - l0  # idle iterations launch W1/W2 too (no-ops): not counted
                iters += 1
                items_served += n
        wall = last - t0  # to the end of the last iteration that served work (idle polls after it excluded)
        return dict(wall=wall, busy=busy / wall, gmm_fraction=gmm / wall, iterations=iters, items=items_served,
                    launches=launches)

    def waiter():
        for _ in range(t.A):
            if not finished.acquire(timeout=900):
                return
        all_done.set()

    def main(r):
        try:
            with cam.Comm(t, r, group=group, dtype=torch.bfloat16, idle_poll_s=0.02) as comm:
                results[r] = attention(comm) if r < t.A else ffn(comm)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors[r] = e
            start.abort()
            all_done.set()

    threads = [threading.Thread(target=main, args=(r,), daemon=True) for r in range(t.world_size)]
    threads.append(threading.Thread(target=waiter, daemon=True))
    for th in threads:
        th.start()
    for th in threads:
        th.join(900)
    if errors:
        raise RuntimeError(f"rank {min(errors)} failed: {errors[min(errors)]!r}") from errors[min(errors)]
    if any(th.is_alive() for th in threads):
        raise RuntimeError("a rank was still running after 900 s")
    f = results[t.A]
    f["launches_per_token"] = f["launches"] / tokens
    f["items_per_iteration"] = f["items"] / max(f["iterations"], 1)
    return f, [results[a] for a in range(t.A)], tokens


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--replicas", type=int, default=6)
    p.add_argument("--rounds", type=int, default=4, help="rounds (layers) per replica")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json")
    args = p.parse_args(argv)
    t = cam.Topology(D=args.replicas, P=1, F=1, E=8, K=2, H=256, Bmax=64, L=2, slots=1)
    w1, w2 = _weights(t, inter=128)
    work = _workload(t, args.rounds, seed=3)
    runs = {"off": [], "on": []}
    reference = None
    for rep in range(args.repeats):
        for mode in ("off", "on"):
            f, outs, tokens = _run(t, work, w1, w2, batched=mode == "on")
            if reference is None:
                reference = outs
            for a, (got, want) in enumerate(zip(outs, reference)):
                for r, (g_, w_) in enumerate(zip(got, want)):
                    if not torch.equal(g_, w_):
                        raise RuntimeError(f"{mode} run {rep}: rank {a} round {r} differs from the first run")
            runs[mode].append(f)
            print(f"{mode:>3} run {rep}: {f['launches_per_token']:.4f} GMM launches/token, "
                  f"{f['items_per_iteration']:.2f} items/iteration, busy {100 * f['busy']:.0f}% "
                  f"(in W1+W2 {100 * f['gmm_fraction']:.0f}%), "
                  f"makespan {f['wall']:.2f} s", flush=True)
    med = {m: {k: statistics.median(r[k] for r in runs[m]) for k in runs[m][0]} for m in runs}
    summary = dict(
        topology=dict(D=t.D, P=t.P, F=t.F, E=t.E, K=t.K, H=t.H, Bmax=t.Bmax, L=t.L, recv_rows=t.recv_rows),
        tokens=tokens, row_budget=t.D * t.recv_rows, runs=runs, median=med,
        on_over_off=dict(launches_per_token=med["on"]["launches_per_token"] / med["off"]["launches_per_token"],
                         busy=med["on"]["busy"] / med["off"]["busy"],
                         gmm_fraction=med["on"]["gmm_fraction"] / med["off"]["gmm_fraction"],
                         makespan=med["on"]["wall"] / med["off"]["wall"]))
    r = summary["on_over_off"]
    print(f"on / off (medians of {args.repeats} alternated runs): GMM launches per token {r['launches_per_token']:.2f}x, "
          f"busy fraction {r['busy']:.2f}x, W1+W2 fraction {r['gmm_fraction']:.2f}x, makespan {r['makespan']:.2f}x")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
