"""How many FFN ranks share one Attention replica's ingress in the afd-a3 study's async schedule: when an FFN rank
ends a work item (its combine_send into that replica), how many FFN ranks are serving a work item of the same
replica at that instant, itself included. The device file's `combine_send` line holds for one sharing: 8 FFN ranks
into one Attention rank (`cam-bench predict`, one Attention rank), or F / 4 of them (`--attention 4`, each FFN rank
sending to a different replica at once); this says which one the simulated schedule is nearer (docs/sim.md §12).

    python benchmarks/sim/ingress_share.py --record benchmarks/sim/results/afd-a3.json

It re-runs the study's async AFD deployment at the recorded 1.0x rate with the schedule's trace on and writes the
result under the record's key `ingress_share`."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from cam.sim import CostModel, Simulation, SimTopology, SimWorkload, model_presets, serving
from cam.sim.cli import _parse


def share(record: dict, load: float = 1.0) -> dict:
    args = _parse(serving.expand_study(["--study", "afd-a3"]))
    eng = serving.engine(args.engine)
    rate = load * record["study"]["load_axis"]["rate_req_s"]
    model = model_presets()[args.model]
    topo = SimTopology(D=args.replicas, F=args.ffn, P=args.participants, slots=args.slots, ubatches=args.ubatches,
                       ubatch_split=eng.ubatch_split)
    wl = SimWorkload.generate(args.requests, args.replicas, lengths=args.lengths, mean_len=args.mean_len,
                              min_len=args.min_len, max_len=args.max_len, sigma=args.sigma, rate=rate,
                              token_budget=eng.max_num_batched_tokens, seed=args.seed, chunked=eng.chunked_prefill)
    sim = Simulation(model, topo, wl, CostModel.load(args.costs), trace=True, two_stage=eng.two_stage,
                     step_overhead_s=eng.step_overhead_s, seed=args.seed)
    sim.run()
    items = np.array([(f, d, s, e) for f, d, _, s, e, _ in sim.trace["items"]], dtype=np.float64)
    counts = []
    for d in range(topo.D):
        own = items[items[:, 1] == d]
        starts, ends = np.sort(own[:, 2]), np.sort(own[:, 3])
        t = own[:, 3] - 1e-12  # just before each item's end: items begun and not yet ended
        counts.append(np.searchsorted(starts, t, side="right") - np.searchsorted(ends, t, side="right"))
    c = np.concatenate(counts)
    return {"load": load, "rate_req_s": rate, "costs": args.costs, "work_items": int(len(c)), "ffn_ranks": topo.F,
            "mean": float(c.mean()), "median": float(np.median(c)), "p10": float(np.percentile(c, 10)),
            "p90": float(np.percentile(c, 90))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--record", required=True, help="the afd-a3 study's record (benchmarks/sim/afd_a3.py --json)")
    a = p.parse_args(argv)
    with open(a.record) as f:
        rec = json.load(f)
    out = share(rec)
    rec["ingress_share"] = out
    with open(a.record, "w") as f:
        json.dump(rec, f, indent=1)
        f.write("\n")
    print(f"FFN ranks serving the replica an item ends for ({out['work_items']} items, {out['ffn_ranks']} FFN ranks, "
          f"{out['rate_req_s']:.3g} req/s): mean {out['mean']:.2f}, median {out['median']:g}, p10 {out['p10']:g}, "
          f"p90 {out['p90']:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
