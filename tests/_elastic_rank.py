"""One rank of an elastic world (run by tests/test_elastic.py and benchmarks/elastic_failover.py): processes as
ranks over the shm transport, a FileStore, FFN ranks serving with the real ops through cam.serve_ffn.

Attention rank 0 sends ``--rounds`` seeded rounds, two in flight, and saves every output (or the error that ended
it) with its failover records. FFN rank ``--kill`` SIGKILLs itself once it served ``--kill-after`` work items with
rows (no cleanup: a crash). Every FFN rank saves its ServeResult or error."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch.distributed import FileStore  # noqa: E402

import cam  # noqa: E402
from cam import convert  # noqa: E402
from cam.connector import AFDTransferContext, AFDTransferMetadata, AsyncAFDConnector, ConnectorConfig  # noqa: E402
from cam.placement import Placement  # noqa: E402

TIMEOUT_S = 60.0


def world(spec: dict):
    """(topology, placement, expert layers) of an elastic test world ``spec``: E experts on F FFN ranks of one
    Attention rank, every expert replicated on two ranks (``replicated``) or held once (contiguous)."""
    E, F, L = spec["E"], spec["F"], spec["L"]
    table = Placement.balanced(E, F, L, replicate=range(E)) if spec["replicated"] else Placement.contiguous(E, F, L)
    topo = cam.Topology(D=1, P=1, F=F, E=E, K=spec["K"], H=spec["H"], Bmax=spec["B"], L=L,
                        expert_slots=table.slots_per_rank)
    g = torch.Generator().manual_seed(11)
    layers = [convert.ExpertFFN(torch.randn(E, spec["H"], 2 * spec["I"], generator=g) / spec["H"] ** 0.5,
                                torch.randn(E, spec["I"], spec["H"], generator=g) / spec["I"] ** 0.5)
              for _ in range(L)]
    return topo, table, layers


def round_inputs(spec: dict, i: int):
    """Round ``i``'s (x, topk ids, topk weights, layer), the same in every process."""
    g = torch.Generator().manual_seed(1000 + i)
    B, E, K, H = spec["B"], spec["E"], spec["K"], spec["H"]
    x = torch.randn(B, H, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(B)]).to(torch.int32)
    w = torch.rand(B, K, generator=g)
    return x, ids, w, i % spec["L"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--spec", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--group", default="elastic")
    p.add_argument("--kill", type=int, default=-1)
    p.add_argument("--kill-after", type=int, default=0)
    p.add_argument("--join", action="store_true", help="a restarted FFN rank: join the running world")
    p.add_argument("--until-joined", action="store_true", help="Attention: send rounds until a rank rejoined")
    args = p.parse_args()
    spec = json.loads(args.spec)
    topo, table, layers = world(spec)
    store = FileStore(args.store, topo.world_size)
    cfg = ConnectorConfig(topology=topo, timeout_s=TIMEOUT_S, idle_poll_s=0.01, group=args.group, placement=table,
                          elastic=True)
    role = "attention" if args.rank < topo.A else "ffn"
    out = {"rank": args.rank}
    if args.join:  # the killed rank's slots, as the last FFN rank of the world it joins
        running, held = joined_table(store, args.group, table, args.rank - topo.A)
        cfg = dataclasses.replace(cfg, placement=running.with_rank(held),
                                  topology=dataclasses.replace(topo, F=running.ffn_ranks + 1))
        conn = AsyncAFDConnector(topo.A + running.ffn_ranks, "ffn", cfg)
    else:
        conn = AsyncAFDConnector(args.rank, role, cfg)
    try:
        if args.join:
            conn.join_running(store)
            table = cfg.placement
        else:
            conn.init_afd_connector(store)
        if role == "attention":
            attention(conn, spec, out, args.until_joined)
        else:
            out.update(ffn(conn, table, layers, args))
    except Exception as e:  # noqa: BLE001 - the error is the result
        out["error"] = f"{type(e).__name__}: {e}"
        out["lost"] = getattr(e, "lost", None)
        out["lost_rounds"] = getattr(e, "rounds", None)
    finally:
        out["failovers"] = [f.__dict__ for f in conn.failovers]
        conn.close()
        torch.save(out, args.out)


def joined_table(store, group, table, index):
    """(the running world's table, the slots ``index`` held in ``table``) for a rank that joins: waits, bounded,
    until the world is a successor (its plane record published)."""
    import cam.world

    deadline = time.monotonic() + TIMEOUT_S
    while True:
        current = cam.world.current(store, group)
        key = f"{group}/{current}/plane"
        if current is not None and store.check([key]):
            plane = json.loads(store.get(key).decode())
            if plane["placement"]["ffn_ranks"] < table.ffn_ranks:
                break
        if time.monotonic() > deadline:
            raise TimeoutError("no failover to join after")
        time.sleep(0.01)
    held = [table.slot_experts(l, index) for l in range(table.layers)]
    return Placement.from_dict(plane["placement"]), held


def attention(conn, spec, out: dict, until_joined: bool = False) -> None:
    """Sends every round, two in flight; ``out`` holds the outputs received so far (and their times). With
    ``until_joined``, paced rounds go on until a rank joined, then ``spec["rounds"]`` more."""
    conn.wait_ffn_serving(TIMEOUT_S)
    out["outputs"], out["times"] = [], []
    n, sent = spec["rounds"], 0
    if until_joined:
        n = 10 ** 6

    def send(i):
        x, ids, w, layer = round_inputs(spec, i)
        conn.send_attn_output(x, AFDTransferContext(AFDTransferMetadata(layer_idx=layer)), topk_ids=ids,
                              topk_weights=w)

    for i in range(min(2, n)):
        send(i)
        sent += 1
    deadline = time.monotonic() + 3 * TIMEOUT_S
    while len(out["outputs"]) < n:
        out["outputs"].append(conn.recv_ffn_output())
        out["times"].append(time.time())
        if until_joined:
            if any(f.joined_rank is not None for f in conn.failovers) and n == 10 ** 6:
                n = len(out["outputs"]) + spec["rounds"]
            if time.monotonic() > deadline:
                raise TimeoutError("no rank joined")
            time.sleep(0.02)
        if sent < n:
            send(sent)
            sent += 1
    while len(out["outputs"]) < sent:
        out["outputs"].append(conn.recv_ffn_output())
    conn.finish()


def ffn(conn, table, layers, args) -> dict:
    w1, w2 = convert.layer_weights(layers)
    served = cam.ExpertWeights(w1, w2).slots(table, conn.rank - conn.config.topology.A)
    count = {"rows": 0}

    def on_iteration(it):
        if it.served:
            count["rows"] += 1
            if args.rank == args.kill and count["rows"] >= args.kill_after and not args.join:
                os.kill(os.getpid(), signal.SIGKILL)

    result = cam.serve_ffn(conn, served.w1, served.w2, max_serve_s=4 * TIMEOUT_S, on_iteration=on_iteration)
    return {"reason": result.reason, "iterations": result.iterations, "final_rank": conn.rank,
            "served": count["rows"]}


if __name__ == "__main__":
    main()
