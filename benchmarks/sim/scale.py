"""cam-sim at scale: wall time of 64 replicas x 32 FFN ranks x 61 layers x 10k requests (DeepSeek-V3 shape, A3-like
example costs), async and sync, against a same-run baseline: pushing and popping the same number of events through
``heapq`` with no work at all (the floor of any event-driven simulator in Python).

    python benchmarks/sim/scale.py --json benchmarks/sim/results/scale.json
"""

from __future__ import annotations

import argparse
import heapq
import platform
import time

from _record import write_json  # benchmarks/sim/_record.py: the script's folder is on sys.path

from cam.sim import CostModel, SimTopology, SimWorkload, model_presets, simulate


def heap_baseline(events: int) -> float:
    t0 = time.perf_counter()
    heap = []
    for i in range(events):
        heapq.heappush(heap, (float(i % 1000), i, 1, i, i))
        if len(heap) > 64:
            heapq.heappop(heap)
    while heap:
        heapq.heappop(heap)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--replicas", type=int, default=64)
    p.add_argument("--ffn", type=int, default=32)
    p.add_argument("--requests", type=int, default=10000)
    p.add_argument("--rates", type=float, nargs="+", default=[0.0, 150.0],
                   help="0 = closed batch; 150 req/s keeps the 64 replicas loaded (docs/sim.md)")
    p.add_argument("--json")
    args = p.parse_args(argv)
    model = model_presets()["deepseek-v3"]
    costs = CostModel.load("ascend-a3-like")
    topo = SimTopology(D=args.replicas, F=args.ffn)
    rows = []
    for rate in args.rates:
        wl = SimWorkload.generate(args.requests, args.replicas, rate=rate, seed=0)
        for mode in ("async", "sync"):
            t0 = time.perf_counter()
            r = simulate(model, topo, wl, costs, mode=mode, seed=0, slo_s=10.0)
            wall = time.perf_counter() - t0
            events = r["work_items"] + r["rounds"]
            base = heap_baseline(events)
            rows.append({"rate": rate, "mode": mode, "wall_s": wall, "work_items": r["work_items"],
                         "rounds": r["rounds"], "batches": r["batches"], "heap_baseline_s": base,
                         "wall_over_baseline": wall / base, "simulated_makespan_s": r["makespan_s"],
                         "ttft_mean_s": r["ttft_s"]["mean"]})
            print(f"rate {rate:g} {mode:5s}: {wall:6.1f} s wall for {r['work_items']} work items, {r['rounds']} rounds "
                  f"({wall / base:.1f}x the bare heap baseline {base:.1f} s); simulated makespan "
                  f"{r['makespan_s']:.1f} s", flush=True)
    out = {"config": {"model": "deepseek-v3", "D": args.replicas, "F": args.ffn, "layers": model.layers,
                      "requests": args.requests, "costs": costs.name},
           "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
           "runs": rows}
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
