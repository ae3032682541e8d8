"""Soak: many routed rounds of random shape (B = 0 included) through one plane, threads as ranks; reports rounds,
RSS, threads and open fds at the start (after a warm-up) and at the end. Memory must stay flat: every op allocates
its outputs and workspace per call, and nothing may accumulate. Every `--check-every`-th round of each
Attention rank is compared with the independent golden round trip, so the soak also watches correctness.

    python benchmarks/soak.py --rounds 10000 --json benchmarks/results/soak.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid

import torch

import cam
from cam.reference.dispatch_combine import round_trip_plane
from cam.reference.dynamic_quant import dynamic_quant

TOPOLOGY = dict(D=2, P=1, F=2, E=8, K=2, H=64, Bmax=8, L=3, slots=2)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def sample() -> dict:
    return {"rss_bytes": rss_bytes(), "threads": threading.active_count(), "fds": open_fds(), "t": time.monotonic()}


def expert(t, f, ex, sc, cnt, n):
    e = torch.repeat_interleave(torch.arange(t.R), cnt) + f * t.R
    v = ex[:n].to(torch.float32)
    if t.quantized:
        v = v * sc[:n, None]
    return (v * (e.to(torch.float32) + 1)[:, None]).to(torch.bfloat16)


def golden(t, x, ids, w, a):
    """Golden output of Attention rank a alone: the other ranks' rounds do not change it."""
    def fn(e, rows, scales):
        v = rows.to(torch.float32)
        if scales is not None:
            v = v * scales[:, None]
        return (v * (e.to(torch.float32) + 1)[:, None]).to(torch.bfloat16)

    zero = (torch.zeros((0, t.H), dtype=torch.bfloat16), torch.zeros((0, t.K), dtype=torch.int32),
            torch.zeros((0, t.K)))
    inputs = [zero] * t.A
    inputs[a] = (x, ids, w)
    return round_trip_plane(t, inputs, fn, quant_fn=dynamic_quant, global_ids=True)["out"][a]


def run(rounds: int, warmup: int, check_every: int, seed: int) -> dict:
    t = cam.Topology(**TOPOLOGY)
    group = f"soak-{uuid.uuid4().hex[:8]}"
    total = warmup + rounds
    marks, errors, mismatches = {}, [], []
    start_gate = threading.Barrier(t.world_size + 1, timeout=120)
    warm_gate = threading.Barrier(t.A + 1, timeout=600)
    # every rank, still holding its Comm, waits here after its last round so the end sample sees the same
    # threads as the start sample; the timeout is the soak's own bound
    end_gate = threading.Barrier(t.world_size + 1, timeout=24 * 3600)
    release = threading.Event()

    def attention(rank):
        g = torch.Generator().manual_seed(seed * 1000 + rank)
        with cam.Comm(t, rank, group=group, timeout_s=120) as comm:
            start_gate.wait()
            for r in range(total):
                if r == warmup:
                    warm_gate.wait()
                b = int(torch.randint(0, t.Bmax + 1, (1,), generator=g))  # B = 0 included
                x = (torch.randn((b, t.H), generator=g) * 2).to(torch.bfloat16)
                ids = torch.randint(-1, t.E, (b, t.K), generator=g, dtype=torch.int32)
                w = torch.rand((b, t.K), generator=g)
                cam.ops.dispatch_send(comm, x, ids, r % t.L)
                out = cam.ops.combine_recv(comm, ids, w)
                if check_every and r % check_every == 0 and not torch.equal(out, golden(t, x, ids, w, rank)):
                    mismatches.append((rank, r))
            end_gate.wait()
            release.wait(600)

    def ffn(rank):
        f = rank - t.A
        with cam.Comm(t, rank, group=group, timeout_s=120) as comm:
            start_gate.wait()
            served = 0
            while served < t.D * total:
                ex, sc, cnt, wi = cam.ops.dispatch_recv(comm)
                out = torch.zeros((t.recv_rows, t.H), dtype=torch.bfloat16)
                if int(wi[0]) == 1:
                    n = int(wi[5])
                    out[:n] = expert(t, f, ex, sc, cnt, n)
                    served += 1
                cam.ops.combine_send(comm, out, wi)
            end_gate.wait()
            release.wait(600)

    def guarded(fn, rank):
        try:
            fn(rank)
        except BaseException as e:  # noqa: BLE001
            errors.append((rank, repr(e)))
            for gate in (start_gate, warm_gate, end_gate):
                gate.abort()

    threads = [threading.Thread(target=guarded, args=(attention if r < t.A else ffn, r), daemon=True)
               for r in range(t.world_size)]
    for th in threads:
        th.start()
    try:
        start_gate.wait()
        warm_gate.wait()
    except threading.BrokenBarrierError:
        release.set()
        return {"errors": errors}
    marks["start"] = sample()
    try:
        end_gate.wait()
    except threading.BrokenBarrierError:
        pass
    marks["end"] = sample()
    release.set()
    for th in threads:
        th.join(600)
    elapsed = marks["end"]["t"] - marks["start"]["t"]
    return {
        "topology": TOPOLOGY, "rounds_per_attention_rank": rounds, "warmup_rounds": warmup,
        "rounds_total": rounds * t.A, "elapsed_s": elapsed, "rounds_per_s": rounds * t.A / elapsed if elapsed else 0,
        "start": {k: v for k, v in marks["start"].items() if k != "t"},
        "end": {k: v for k, v in marks["end"].items() if k != "t"},
        "rss_growth_bytes": marks["end"]["rss_bytes"] - marks["start"]["rss_bytes"],
        "checked_rounds": (total // check_every + 1) * t.A if check_every else 0,
        "mismatches": mismatches, "errors": errors,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=10_000, help="measured rounds per Attention rank")
    p.add_argument("--warmup", type=int, default=200, help="rounds before the start sample")
    p.add_argument("--check-every", type=int, default=50, help="golden check every N-th round (0: never)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.warmup < 1 or args.check_every < 0:
        p.error("--rounds and --warmup must be >= 1, --check-every >= 0")
    report = run(args.rounds, args.warmup, args.check_every, args.seed)
    if "start" not in report:
        print(f"the plane failed before the start sample: {report['errors']}", file=sys.stderr)
        return 1
    s, e = report["start"], report["end"]
    print(f"{report['rounds_total']} rounds in {report['elapsed_s']:.1f} s ({report['rounds_per_s']:.0f}/s); "
          f"RSS {s['rss_bytes'] / 2**20:.1f} -> {e['rss_bytes'] / 2**20:.1f} MiB, threads {s['threads']} -> "
          f"{e['threads']}, fds {s['fds']} -> {e['fds']}; golden mismatches {len(report['mismatches'])}, "
          f"errors {len(report['errors'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if not report["errors"] and not report["mismatches"] else 1


if __name__ == "__main__":
    sys.exit(main())
