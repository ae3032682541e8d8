"""The FFN side in cam-sim: snapshot batching on vs off at a fixed offered load, and expert placement with vs without
replicas of the hottest experts under Zipf-skewed routing (docs/sim.md, "Placement", "Snapshot batching").

    python benchmarks/sim/ffn_side.py --json benchmarks/sim/results/ffn-side.json

Every figure follows from the costs of ``cam/sim/devices/ascend-a3-like.json`` (cam's ops modelled, the rest
assumed); each comparison is two simulations of the same workload and seed, differing only in the policy. Work items
are capped at ``--capacity`` rows, as the serving path's rule requires of the row budget (docs/sim.md §1, §7)."""

from __future__ import annotations

import argparse
import sys
import time

from _record import write_json  # benchmarks/sim/_record.py: the script's folder is on sys.path

from cam.serve.policy import add_row_budget_flag
from cam.sim import CostModel, SimTopology, SimWorkload, model_presets, simulate


def _row(r: dict) -> dict:
    out = {"makespan_s": r["makespan_s"], "ttft_p50_s": r["ttft_s"]["p50"], "ttft_p99_s": r["ttft_s"]["p99"],
           "ffn_utilisation": r["ffn_utilisation"], "work_items": r["work_items"], "launches": r["launches"]}
    if "slo" in r:
        out["slo_attainment"] = r["slo"]["compliant_fraction"]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=600)
    p.add_argument("--replicas", type=int, default=32)
    p.add_argument("--ffn", type=int, default=16)
    p.add_argument("--rate", type=float, default=60.0, help="offered load of the batching comparison (req/s)")
    p.add_argument("--mean-len", type=float, default=256.0, help="lognormal mean prompt length (short prompts)")
    p.add_argument("--slo", type=float, default=2.0)
    # The serving path's flag (cam-ffn, cam-run, cam-sim), and its rule: the budget holds one work item, so the
    # work item is capped at --capacity rows (without one it is the worst case P*Bmax*K = 131072 rows here).
    add_row_budget_flag(p, default=8192, deprecated=("--batch-rows",),
                        help="row budget of one batched launch (default 8192)")
    p.add_argument("--capacity", type=int, default=8192,
                   help="rows one work item brings to one FFN rank (default 8192: the row budget's)")
    p.add_argument("--skew", type=float, default=1.2, help="Zipf exponent of expert popularity")
    p.add_argument("--hot", type=int, default=16, help="experts per layer given a second replica")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    model = model_presets()["deepseek-v3"]
    costs = CostModel.load("ascend-a3-like")
    topo = SimTopology(D=args.replicas, F=args.ffn, capacity=args.capacity)
    common = dict(seed=args.seed, slo_s=args.slo)
    t0 = time.perf_counter()
    wl = SimWorkload.generate(args.requests, args.replicas, lengths="lognormal", mean_len=args.mean_len, sigma=0.8,
                              min_len=4, max_len=4096, rate=args.rate, token_budget=16384, seed=args.seed)
    batching = {name: _row(simulate(model, topo, wl, costs, batch_rows=rows, **common))
                for name, rows in (("off", None), ("on", args.row_budget))}
    closed = SimWorkload.generate(args.requests, args.replicas, lengths="lognormal", mean_len=2048, sigma=0.8,
                                  min_len=16, max_len=32768, rate=0.0, token_budget=16384, seed=args.seed)
    placement = {name: _row(simulate(model, topo, closed, costs, expert_skew=args.skew, placement=spec, **common))
                 for name, spec in (("contiguous", "contiguous"), (f"hot:{args.hot}", f"hot:{args.hot}"))}
    placement["uniform routing, contiguous"] = _row(simulate(model, topo, closed, costs, **common))
    out = {"model": "deepseek-v3", "costs": costs.name, "cost_status": costs.meta.get("status"),
           "topology": topo.to_dict(),
           "args": {k: v for k, v in vars(args).items() if k not in ("json", "row_budget_flag")},  # the output path is the machine's, not the run's
           "batching": {"workload": wl.description, "rate_req_s": args.rate, "slo_s": args.slo, "runs": batching},
           "placement": {"workload": closed.description, "expert_skew": args.skew, "runs": placement},
           "wall_s": time.perf_counter() - t0}
    for label, block in (("batching", batching), ("placement", placement)):
        for name, r in block.items():
            print(f"{label:9s} {name:28s} makespan {r['makespan_s']:8.3f} s  TTFT p50 {r['ttft_p50_s']:7.3f} "
                  f"p99 {r['ttft_p99_s']:7.3f} s  SLO {r.get('slo_attainment', float('nan')):.0%}  "
                  f"FFN util {r['ffn_utilisation']:.0%}  items {r['work_items']} launches {r['launches']}")
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
