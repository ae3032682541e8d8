"""Elastic serving: how long an FFN rank's death costs a running world, and what it costs in rounds.

Setting, stated on every record: **twin, one host, tiny model**. One Attention rank and F = 3 FFN rank processes over
the shm transport (cam.connector.AsyncAFDConnector with elastic=True), E = 6 experts each replicated on two FFN ranks
(Placement.balanced(replicate=every expert)), H = 64, I = 32, K = 2, 6 tokens a round, two rounds in flight; FFN
ranks serve with cam.serve_ffn (the real dispatch_recv, W1, W2, combine_send). FFN rank 2 SIGKILLs itself after its
5th work item with rows. Per run:

- detection_s: from the kill to the first survivor's liveness watchdog naming the dead rank;
- failover_s: from the kill to the Attention rank's successor plane being formed;
- first_round_s: from the kill to the first round the Attention rank received after the failover (served without
  the dead rank): the time a round waits at most because of the death;
- rounds_reserved / rounds_lost: rounds dispatched again after the failover / rounds never received;
- exact: every round's output equal, bit for bit, to cam's ops in one process without the failure.

Rejoin (a restarted rank joining the running world) is not built, so no rejoin time is measured.

Context, not a comparison: the Mooncake team reports SGLang's Elastic EP recovering in 6.2-6.8 s (against 120-180 s
for a restart) on DeepSeek V3.2 over 4 nodes / 32 GPUs with 256 redundant experts, 1 to 16 failed ranks (LMSYS blog,
"Elastic EP in SGLang: Achieving Partial Failure Tolerance for DeepSeek MoE Deployments", 2026-03-17). Nothing in
that setting (real GPUs, a 671B model, RDMA, failure detection by timeout across nodes) is shared with this one, so
no ratio is drawn.

    python benchmarks/elastic_failover.py --runs 3 --json benchmarks/results/dead-peer-detection.json

writes its record under the key ``elastic_failover`` of that file (the rank-death record, beside
dead_peer_detection.py's), keeping the file's other keys.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

SPEC = {"E": 6, "F": 3, "L": 2, "K": 2, "H": 64, "I": 32, "B": 6, "rounds": 24}
KILL_RANK, KILL_AFTER = 2, 5
TIMEOUT_S = 60.0
SETTING = "twin, one host, tiny model"


def _world():
    import torch

    import cam
    from cam import convert
    from cam.placement import Placement

    E, F, L = SPEC["E"], SPEC["F"], SPEC["L"]
    table = Placement.balanced(E, F, L, replicate=range(E))
    topo = cam.Topology(D=1, P=1, F=F, E=E, K=SPEC["K"], H=SPEC["H"], Bmax=SPEC["B"], L=L,
                        expert_slots=table.slots_per_rank)
    g = torch.Generator().manual_seed(11)
    layers = [convert.ExpertFFN(torch.randn(E, SPEC["H"], 2 * SPEC["I"], generator=g) / SPEC["H"] ** 0.5,
                                torch.randn(E, SPEC["I"], SPEC["H"], generator=g) / SPEC["I"] ** 0.5)
              for _ in range(L)]
    return topo, table, layers


def _round(i: int):
    import torch

    g = torch.Generator().manual_seed(1000 + i)
    x = torch.randn(SPEC["B"], SPEC["H"], generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(SPEC["E"], generator=g)[:SPEC["K"]] for _ in range(SPEC["B"])]).to(torch.int32)
    return x, ids, torch.rand(SPEC["B"], SPEC["K"], generator=g), i % SPEC["L"]


def worker(args) -> None:
    import torch
    from torch.distributed import FileStore

    import cam
    from cam import convert
    from cam.connector import AFDTransferContext, AFDTransferMetadata, AsyncAFDConnector, ConnectorConfig

    topo, table, layers = _world()
    cfg = ConnectorConfig(topology=topo, timeout_s=TIMEOUT_S, idle_poll_s=0.01, group="elastic", placement=table,
                          elastic=True)
    role = "attention" if args.rank < topo.A else "ffn"
    conn = AsyncAFDConnector(args.rank, role, cfg)
    out = {"rank": args.rank}
    try:
        conn.init_afd_connector(FileStore(args.store, topo.world_size))
        if role == "attention":
            conn.wait_ffn_serving(TIMEOUT_S)
            outputs, times, sent = [], [], 0
            for i in range(2):
                x, ids, w, layer = _round(i)
                conn.send_attn_output(x, AFDTransferContext(AFDTransferMetadata(layer)), topk_ids=ids, topk_weights=w)
                sent += 1
            while len(outputs) < SPEC["rounds"]:
                outputs.append(conn.recv_ffn_output())
                times.append(time.time())
                if sent < SPEC["rounds"]:
                    x, ids, w, layer = _round(sent)
                    conn.send_attn_output(x, AFDTransferContext(AFDTransferMetadata(layer)), topk_ids=ids,
                                          topk_weights=w)
                    sent += 1
            conn.finish()
            w1, w2 = convert.layer_weights(layers)
            from cam.integrations.plane import routed_local

            out["exact"] = all(torch.equal(o, routed_local(*_round(i)[:3], w1, w2, _round(i)[3]))
                               for i, o in enumerate(outputs))
            out["times"], out["received"] = times, len(outputs)
        else:
            w1, w2 = convert.layer_weights(layers)
            served = cam.ExpertWeights(w1, w2).slots(table, args.rank - topo.A)
            count = [0]

            def on_iteration(it):
                if it.served:
                    count[0] += 1
                    if count[0] >= KILL_AFTER:
                        with open(os.path.join(args.dir, "killed_at"), "w") as f:
                            f.write(repr(time.time()))
                        os.kill(os.getpid(), signal.SIGKILL)

            cam.serve_ffn(conn, served.w1, served.w2, max_serve_s=4 * TIMEOUT_S,
                          on_iteration=on_iteration if args.rank == KILL_RANK else None)
    except Exception as e:  # noqa: BLE001 - recorded
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        out["failovers"] = [f.__dict__ for f in conn.failovers]
        conn.close()
        with open(os.path.join(args.dir, f"rank{args.rank}.json"), "w") as f:
            json.dump(out, f)


def one_run() -> dict:
    with tempfile.TemporaryDirectory(prefix="cam-elastic-") as d:
        world = 1 + SPEC["F"]
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--rank", str(r), "--dir", d,
                                   "--store", os.path.join(d, "store")]) for r in range(world)]
        try:
            for p in procs:
                p.wait(240)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(30)
        killed = float(open(os.path.join(d, "killed_at")).read())
        ranks = {r: json.load(open(os.path.join(d, f"rank{r}.json"))) for r in range(world) if r != KILL_RANK}
    errors = {r: x["error"] for r, x in ranks.items() if "error" in x}
    if errors:
        raise RuntimeError(f"a survivor failed: {errors}")
    att = ranks[0]
    (fo,) = att["failovers"]
    seen = min(f["seen_at"] for x in ranks.values() for f in x["failovers"])
    first = min(t for t in att["times"] if t >= fo["formed_at"])
    return {"detection_s": seen - killed, "failover_s": fo["formed_at"] - killed, "first_round_s": first - killed,
            "rounds_reserved": fo["redispatched"], "rounds_lost": SPEC["rounds"] - att["received"],
            "exact": att["exact"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return 0
    if args.runs < 1:
        p.error("--runs must be >= 1")
    runs = [one_run() for _ in range(args.runs)]
    med = {k: statistics.median(r[k] for r in runs) for k in ("detection_s", "failover_s", "first_round_s")}
    record = {"setting": SETTING, "spec": SPEC, "killed": {"rank": KILL_RANK, "after_work_items": KILL_AFTER},
              "liveness_poll_s": 0.25, "median": med,
              "max": {k: max(r[k] for r in runs) for k in med},
              "rounds_reserved": [r["rounds_reserved"] for r in runs], "rounds_lost": [r["rounds_lost"] for r in runs],
              "exact": all(r["exact"] for r in runs), "rejoin_s": None, "rejoin": "not built", "runs": runs,
              "context": "Mooncake/SGLang Elastic EP: 6.2-6.8 s recovery (vs 120-180 s restart), DeepSeek V3.2, "
                         "4 nodes / 32 GPUs, 256 redundant experts, 1-16 failed ranks (LMSYS blog, 2026-03-17); "
                         "another setting entirely: no ratio drawn"}
    print(f"{SETTING}: detection {med['detection_s']:.3f} s, failover {med['failover_s']:.3f} s, first round served "
          f"without the dead rank {med['first_round_s']:.3f} s after the kill (median of {len(runs)}); rounds "
          f"re-served {record['rounds_reserved']}, lost {record['rounds_lost']}, exact {record['exact']}")
    if args.json:
        existing = {}
        if os.path.exists(args.json):
            with open(args.json) as f:
                existing = json.load(f)
        existing["elastic_failover"] = record
        with open(args.json, "w") as f:
            json.dump(existing, f, indent=2)
        print(f"wrote {args.json} (key elastic_failover)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
