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
- exact: every round's output equal, bit for bit, to cam's ops in one process without the failure;
- rejoin_s: the killed rank restarted (a new process, started once the kill is seen; its interpreter start and
  imports are not counted) joins the running world (AsyncAFDConnector.join_running, with its old slots): from its
  join request to its successor plane formed; rejoin_first_item_s to the first work item it served. The Attention
  rank sends paced rounds (every 20 ms) until the join, then 24 more.

``--attention``: an Attention replica's rejoin, same setting with two replicas (D = 2, one rank each): Attention rank
1 SIGKILLs itself after receiving its 5th round (its replica fenced, replica 0 goes on), is restarted as a new
process once it is dead, and rejoins in its slot (join_running as rank 1, the running table). Per run: rejoin_s,
from its join request to its successor plane formed; rejoin_first_round_s, to the first of its own rounds received;
the rounds replica 0 dispatched again at the rejoin; exact, every round of both replicas equal to the failure-free
result. Recorded under the key ``attention_rejoin`` of the same file.

Context, not a comparison: the Mooncake team reports SGLang's Elastic EP recovering in 6.2-6.8 s (against 120-180 s
for a restart) on DeepSeek V3.2 over 4 nodes / 32 GPUs with 256 redundant experts, 1 to 16 failed ranks (LMSYS blog,
"Elastic EP in SGLang: Achieving Partial Failure Tolerance for DeepSeek MoE Deployments", 2026-03-17). Nothing in
that setting (real GPUs, a 671B model, RDMA, failure detection by timeout across nodes) is shared with this one, so
no ratio is drawn.

    python benchmarks/elastic_failover.py --runs 3 --json benchmarks/results/dead-peer-detection.json

writes its record under the key ``elastic_failover`` of that file (the rank-death record, beside
dead_peer_detection.py's), keeping the file's other keys; with ``--attention``, under ``attention_rejoin``.
"""

from __future__ import annotations

import argparse
import dataclasses
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
ATTENTION_KILL_RANK = 1  # --attention: replica 1's rank
TIMEOUT_S = 60.0
SETTING = "twin, one host, tiny model"


def _world(D: int = 1):
    import torch

    import cam
    from cam import convert
    from cam.placement import Placement

    E, F, L = SPEC["E"], SPEC["F"], SPEC["L"]
    table = Placement.balanced(E, F, L, replicate=range(E))
    topo = cam.Topology(D=D, P=1, F=F, E=E, K=SPEC["K"], H=SPEC["H"], Bmax=SPEC["B"], L=L,
                        expert_slots=table.slots_per_rank)
    g = torch.Generator().manual_seed(11)
    layers = [convert.ExpertFFN(torch.randn(E, SPEC["H"], 2 * SPEC["I"], generator=g) / SPEC["H"] ** 0.5,
                                torch.randn(E, SPEC["I"], SPEC["H"], generator=g) / SPEC["I"] ** 0.5)
              for _ in range(L)]
    return topo, table, layers


def _round(i: int, rank: int = 0):
    import torch

    g = torch.Generator().manual_seed(1000 + i + 7919 * rank)
    x = torch.randn(SPEC["B"], SPEC["H"], generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(SPEC["E"], generator=g)[:SPEC["K"]] for _ in range(SPEC["B"])]).to(torch.int32)
    return x, ids, torch.rand(SPEC["B"], SPEC["K"], generator=g), i % SPEC["L"]


def worker(args) -> None:
    import torch
    from torch.distributed import FileStore

    import cam
    from cam import convert
    from cam.connector import AFDTransferContext, AFDTransferMetadata, AsyncAFDConnector, ConnectorConfig

    topo, table, layers = _world(2 if args.attention else 1)
    cfg = ConnectorConfig(topology=topo, timeout_s=TIMEOUT_S, idle_poll_s=0.01, group="elastic", placement=table,
                          elastic=True)
    role = "attention" if args.rank < topo.A else "ffn"
    store = FileStore(args.store, topo.world_size)
    out = {"rank": args.rank}
    if args.join and role == "attention":  # a restarted Attention rank: its slot, the running table
        running = _running_table(store, table, below=None)
        cfg = dataclasses.replace(cfg, placement=running)
        conn = AsyncAFDConnector(args.rank, role, cfg)
    elif args.join:  # the killed rank restarted: the running table with its old slots, as the last FFN rank
        running = _running_table(store, table)
        held = [table.slot_experts(layer, KILL_RANK - topo.A) for layer in range(table.layers)]
        cfg = dataclasses.replace(cfg, topology=dataclasses.replace(topo, F=running.ffn_ranks + 1),
                                  placement=running.with_rank(held))
        table = cfg.placement
        conn = AsyncAFDConnector(cfg.topology.world_size - 1, "ffn", cfg)
    else:
        conn = AsyncAFDConnector(args.rank, role, cfg)
    try:
        if args.join:
            out["asked_at"] = time.time()
            conn.join_running(store)
        else:
            conn.init_afd_connector(store)
        if role == "attention":
            conn.wait_ffn_serving(TIMEOUT_S)
            killer = args.attention and args.rank == ATTENTION_KILL_RANK and not args.join
            outputs, times, sent, n = [], [], 0, SPEC["rounds"] if args.join else 10 ** 6
            deadline = time.monotonic() + 3 * TIMEOUT_S
            for i in range(2):
                x, ids, w, layer = _round(i, args.rank)
                conn.send_attn_output(x, AFDTransferContext(AFDTransferMetadata(layer)), topk_ids=ids, topk_weights=w)
                sent += 1
            while len(outputs) < min(n, sent):
                outputs.append(conn.recv_ffn_output())
                times.append(time.time())
                if killer and len(outputs) >= KILL_AFTER:
                    with open(os.path.join(args.dir, "killed_at"), "w") as f:
                        f.write(repr(time.time()))
                    os.kill(os.getpid(), signal.SIGKILL)
                # Paced until the restarted rank joined, then SPEC["rounds"] more (served with it).
                if n == 10 ** 6 and any(f.joined_rank is not None for f in conn.failovers):
                    n = len(outputs) + SPEC["rounds"]
                if time.monotonic() > deadline:
                    raise TimeoutError("the killed rank never rejoined")
                time.sleep(0.02)
                if sent < n:
                    x, ids, w, layer = _round(sent, args.rank)
                    conn.send_attn_output(x, AFDTransferContext(AFDTransferMetadata(layer)), topk_ids=ids,
                                          topk_weights=w)
                    sent += 1
            conn.finish()
            w1, w2 = convert.layer_weights(layers)
            from cam.integrations.plane import routed_local

            out["exact"] = all(torch.equal(o, routed_local(*_round(i, args.rank)[:3], w1, w2,
                                                           _round(i, args.rank)[3])) for i, o in enumerate(outputs))
            out["times"], out["received"], out["sent"] = times, len(outputs), sent
        else:
            w1, w2 = convert.layer_weights(layers)
            served = cam.ExpertWeights(w1, w2).slots(table, conn.rank - conn.config.topology.A)
            count = [0]

            def on_iteration(it):
                if it.served:
                    count[0] += 1
                    if args.join and count[0] == 1:
                        out["first_served_at"] = time.time()
                    if args.rank == KILL_RANK and not args.join and not args.attention and count[0] >= KILL_AFTER:
                        with open(os.path.join(args.dir, "killed_at"), "w") as f:
                            f.write(repr(time.time()))
                        os.kill(os.getpid(), signal.SIGKILL)

            cam.serve_ffn(conn, served.w1, served.w2, max_serve_s=4 * TIMEOUT_S, on_iteration=on_iteration)
            out["served"] = count[0]
    except Exception as e:  # noqa: BLE001 - recorded
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        out["failovers"] = [f.__dict__ for f in conn.failovers]
        conn.close()
        with open(os.path.join(args.dir, f"rank{args.rank}{'-joined' if args.join else ''}.json"), "w") as f:
            json.dump(out, f)


def _running_table(store, table, below: bool = True):
    """The table of the world the restarted rank joins: the survivors' (published once they failed over); with
    ``below=None``, the running world's as it is."""
    import cam.world
    from cam.placement import Placement

    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        current = cam.world.current(store, "elastic")
        key = f"elastic/{current}/plane"
        if current is not None and store.check([key]):
            plane = json.loads(store.get(key).decode())
            if below is None or plane["placement"]["ffn_ranks"] < table.ffn_ranks:
                return Placement.from_dict(plane["placement"])
        time.sleep(0.01)
    raise TimeoutError("the survivors never published their plane")


def attention_run() -> dict:
    """One run of the Attention replica's rejoin (--attention)."""
    with tempfile.TemporaryDirectory(prefix="cam-elastic-") as d:
        world = 2 + SPEC["F"]

        def start(r, *extra):
            return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--attention", "--rank",
                                     str(r), "--dir", d, "--store", os.path.join(d, "store"), *extra])

        procs = [start(r) for r in range(world)]
        try:
            procs[ATTENTION_KILL_RANK].wait(240)
            procs.append(start(ATTENTION_KILL_RANK, "--join"))
            for p in procs:
                p.wait(240)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(30)
        ranks = {r: json.load(open(os.path.join(d, f"rank{r}.json"))) for r in range(world)
                 if r != ATTENTION_KILL_RANK}
        ranks["joined"] = json.load(open(os.path.join(d, f"rank{ATTENTION_KILL_RANK}-joined.json")))
    errors = {r: x["error"] for r, x in ranks.items() if "error" in x}
    if errors:
        raise RuntimeError(f"a rank failed: {errors}")
    att, joined = ranks[0], ranks["joined"]
    (rejoin,) = att["failovers"]
    return {"rejoin_s": joined["failovers"][0]["formed_at"] - joined["asked_at"],
            "rejoin_first_round_s": joined["times"][0] - joined["asked_at"],
            "rounds_reserved_at_rejoin": rejoin["redispatched"], "joined_received": joined["received"],
            "exact": att["exact"] and joined["exact"]}


def attention_main(args) -> int:
    runs = [attention_run() for _ in range(args.runs)]
    record = {"setting": SETTING, "spec": {**SPEC, "D": 2}, "killed": {"rank": ATTENTION_KILL_RANK,
                                                                        "after_rounds": KILL_AFTER},
              "rejoin_median_s": statistics.median(r["rejoin_s"] for r in runs),
              "rejoin_first_round_median_s": statistics.median(r["rejoin_first_round_s"] for r in runs),
              "rounds_reserved_at_rejoin": [r["rounds_reserved_at_rejoin"] for r in runs],
              "exact": all(r["exact"] for r in runs), "runs": runs}
    print(f"{SETTING}: a restarted Attention rank (replica 1 of 2) rejoined {record['rejoin_median_s']:.3f} s after "
          f"asking and received its first round {record['rejoin_first_round_median_s']:.3f} s after asking (median "
          f"of {len(runs)}); replica 0 dispatched again {record['rounds_reserved_at_rejoin']}; exact "
          f"{record['exact']}")
    if args.json:
        existing = {}
        if os.path.exists(args.json):
            with open(args.json) as f:
                existing = json.load(f)
        existing["attention_rejoin"] = record
        with open(args.json, "w") as f:
            json.dump(existing, f, indent=2)
        print(f"wrote {args.json} (key attention_rejoin)")
    return 0


def one_run() -> dict:
    with tempfile.TemporaryDirectory(prefix="cam-elastic-") as d:
        world = 1 + SPEC["F"]
        def start(r, *extra):
            return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--rank", str(r), "--dir",
                                     d, "--store", os.path.join(d, "store"), *extra])

        procs = [start(r) for r in range(world)]
        try:
            procs[KILL_RANK].wait(240)
            procs.append(start(KILL_RANK, "--join"))  # the killed rank, restarted
            for p in procs:
                p.wait(240)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(30)
        killed = float(open(os.path.join(d, "killed_at")).read())
        ranks = {r: json.load(open(os.path.join(d, f"rank{r}.json"))) for r in range(world) if r != KILL_RANK}
        ranks["joined"] = json.load(open(os.path.join(d, f"rank{KILL_RANK}-joined.json")))
    errors = {r: x["error"] for r, x in ranks.items() if "error" in x}
    if errors:
        raise RuntimeError(f"a rank failed: {errors}")
    att, joined = ranks[0], ranks["joined"]
    fo, rejoin = att["failovers"]
    seen = min(x["failovers"][0]["seen_at"] for r, x in ranks.items() if r != "joined")
    first = min(t for t in att["times"] if t >= fo["formed_at"])
    return {"detection_s": seen - killed, "failover_s": fo["formed_at"] - killed, "first_round_s": first - killed,
            "rounds_reserved": fo["redispatched"], "rounds_lost": att["sent"] - att["received"],
            "received": att["received"], "exact": att["exact"],
            "rejoin_s": joined["failovers"][0]["formed_at"] - joined["asked_at"],
            "rejoin_first_item_s": joined["first_served_at"] - joined["asked_at"],
            "rounds_reserved_at_rejoin": rejoin["redispatched"], "joined_served": joined["served"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--join", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--attention", action="store_true",
                   help="measure an Attention replica's rejoin instead (recorded under attention_rejoin)")
    args = p.parse_args()
    if args.worker:
        worker(args)
        return 0
    if args.runs < 1:
        p.error("--runs must be >= 1")
    if args.attention:
        return attention_main(args)
    runs = [one_run() for _ in range(args.runs)]
    med = {k: statistics.median(r[k] for r in runs) for k in ("detection_s", "failover_s", "first_round_s")}
    record = {"setting": SETTING, "spec": SPEC, "killed": {"rank": KILL_RANK, "after_work_items": KILL_AFTER},
              "liveness_poll_s": 0.25, "median": med,
              "max": {k: max(r[k] for r in runs) for k in med},
              "rounds_reserved": [r["rounds_reserved"] for r in runs], "rounds_lost": [r["rounds_lost"] for r in runs],
              "exact": all(r["exact"] for r in runs),
              "rejoin_median_s": statistics.median(r["rejoin_s"] for r in runs),
              "rejoin_first_item_median_s": statistics.median(r["rejoin_first_item_s"] for r in runs),
              "joined_served": [r["joined_served"] for r in runs], "runs": runs,
              "context": "Mooncake/SGLang Elastic EP: 6.2-6.8 s recovery (vs 120-180 s restart), DeepSeek V3.2, "
                         "4 nodes / 32 GPUs, 256 redundant experts, 1-16 failed ranks (LMSYS blog, 2026-03-17); "
                         "another setting entirely: no ratio drawn"}
    print(f"{SETTING}: detection {med['detection_s']:.3f} s, failover {med['failover_s']:.3f} s, first round served "
          f"without the dead rank {med['first_round_s']:.3f} s after the kill (median of {len(runs)}); rounds "
          f"re-served {record['rounds_reserved']}, lost {record['rounds_lost']}, exact {record['exact']}; the "
          f"restarted rank joined {record['rejoin_median_s']:.3f} s after asking and served its first work item "
          f"{record['rejoin_first_item_median_s']:.3f} s after asking (work items {record['joined_served']})")
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
