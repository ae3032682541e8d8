"""Each data-plane op timed alone: one thread drives every rank of an in-process plane (2x1+2 E=16 K=4 H=2048
Bmax=128, int8 wire by default; `--attention D` for D Attention ranks instead of 2), so an op has completed when it
returns and no other rank runs meanwhile. Prints the wall and process-CPU seconds of each op (median after 4 warm-up
calls, and min) and the serial sums of a round's dispatch (D dispatch_send + 2 D dispatch_recv) and combine (2 D
combine_send + D combine_recv) against a cold memcpy of their effective bytes (benchmarks/README.md, "data-plane ops
alone"); wall above CPU means the op waited (for a CPU on a loaded machine, or for a block). Public cam API only.

    python benchmarks/plane_ops.py [rounds] [H] [--attention D] [--json PATH]
"""

import argparse
import collections
import json
import os
import statistics
import sys
import threading
import time
import uuid

import torch

import cam

from cam.bench import common as C


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("rounds", type=int, nargs="?", default=40)
    p.add_argument("H", type=int, nargs="?", default=2048)
    p.add_argument("--attention", type=int, default=2, help="Attention ranks (D), each sending to both FFN ranks")
    p.add_argument("--json")
    args = p.parse_args(argv)
    if args.attention < 1:
        p.error(f"--attention must be at least 1, got {args.attention}")
    topo = cam.Topology(D=args.attention, P=1, F=2, E=16, K=4, H=args.H, Bmax=128, L=1, slots=2, quantized=True)
    wall, cpu = collections.defaultdict(list), collections.defaultdict(list)

    def timed(name, fn, *a):
        c0, t0 = time.process_time(), time.perf_counter()
        r = fn(*a)
        wall[name].append(time.perf_counter() - t0)
        cpu[name].append(time.process_time() - c0)
        return r

    ids = C.plane_ids(topo)
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn((topo.Bmax, topo.H), generator=g).to(torch.bfloat16) for _ in range(topo.A)]
    ws = [torch.rand((topo.Bmax, topo.K), generator=g) for _ in range(topo.A)]
    group = f"plane-ops-{uuid.uuid4().hex[:8]}"
    comms = [None] * topo.world_size

    def make(r):  # a Comm's creation waits for its peers: one thread each
        comms[r] = cam.Comm(topo, r, group=group, dtype=torch.bfloat16, idle_poll_s=0.5)

    threads = [threading.Thread(target=make, args=(r,)) for r in range(topo.world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if any(c is None for c in comms):
        raise RuntimeError("a Comm was not created within 120 s")
    out = torch.zeros((topo.recv_rows, topo.H), dtype=torch.bfloat16)
    try:
        for _ in range(args.rounds):
            for a in range(topo.A):
                timed("dispatch_send", cam.ops.dispatch_send, comms[a], xs[a], ids[a], 0)
            items = []
            for f in range(topo.A, topo.world_size):
                for _ in range(topo.D):
                    items.append((f, timed("dispatch_recv", cam.ops.dispatch_recv, comms[f])[3]))
            for f, wi in items:
                timed("combine_send", cam.ops.combine_send, comms[f], out, wi)
            for a in range(topo.A):
                timed("combine_recv", cam.ops.combine_recv, comms[a], ids[a], ws[a])
    finally:
        for c in comms:
            c.close()
    res = {}
    for k in wall:
        res[k] = {"wall_median_s": statistics.median(wall[k][4:]), "wall_min_s": min(wall[k]),
                  "cpu_median_s": statistics.median(cpu[k][4:]), "cpu_min_s": min(cpu[k])}
        print(f"{k:14s} wall median {res[k]['wall_median_s']*1e3:.3f} ms min {res[k]['wall_min_s']*1e3:.3f} | "
              f"cpu median {res[k]['cpu_median_s']*1e3:.3f} ms min {res[k]['cpu_min_s']*1e3:.3f}")
    rows = sum(int((i != -1).sum()) for i in ids)
    cold = C.ColdMemcpy(C.llc_bytes())
    md, mc = cold.seconds(rows * (topo.H + 4), 15), cold.seconds(rows * topo.H * 2, 15)
    n_recv = topo.D * (topo.world_size - topo.A)  # each FFN rank receives once per Attention rank's round
    d = topo.A * res["dispatch_send"]["wall_median_s"] + n_recv * res["dispatch_recv"]["wall_median_s"]
    c = n_recv * res["combine_send"]["wall_median_s"] + topo.A * res["combine_recv"]["wall_median_s"]
    print(f"serial sums: dispatch {d*1e3:.3f} ms (cold memcpy {md*1e3:.3f} ms, ratio {md/d:.3f}); "
          f"combine {c*1e3:.3f} ms (cold memcpy {mc*1e3:.3f} ms, ratio {mc/c:.3f})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"ops": res, "dispatch_serial_s": d, "combine_serial_s": c, "dispatch_memcpy_s": md,
                       "combine_memcpy_s": mc, "load1": os.getloadavg()[0]}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
