"""One rank of an elastic world (run by tests/test_elastic.py and benchmarks/elastic_failover.py): processes as
ranks over the shm transport, a FileStore, FFN ranks serving with the real ops through cam.serve_ffn.

Attention rank 0 sends ``--rounds`` seeded rounds (``rounds_of`` in the spec: another count for some rank), two in flight, and saves every output (or the error that ended
it) with its failover records. Each rank of ``--kill`` SIGKILLs itself once it served (FFN) or received (Attention)
the matching count of ``--kill-after`` work items with rows or rounds (no cleanup: a crash); with ``--kill-with``,
first that rank too (the same boundary). Every FFN rank saves its ServeResult or error."""

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
# The checkpoint identity every rank of the world gives (cam.checkpoint_identity.published's fields), and another.
CHECKPOINT = {"model_type": "tiny-moe", "shape": {}, "layers": {"1": "e1"}, "digest": "tiny-moe-1"}
OTHER_CHECKPOINT = {"model_type": "tiny-moe", "shape": {}, "layers": {"1": "e2"}, "digest": "tiny-moe-2"}


def world(spec: dict):
    """(topology, placement, expert layers) of an elastic test world ``spec``: E experts on F FFN ranks of one
    Attention rank, every expert replicated on two ranks (``replicated``) or held once (contiguous)."""
    E, F, L = spec["E"], spec["F"], spec["L"]
    if spec["replicated"] == "all":  # every expert on every FFN rank, in slot e
        table = Placement(E, F, E, [[[(f, e) for f in range(F)] for e in range(E)] for _ in range(L)])
    elif spec["replicated"]:
        table = Placement.balanced(E, F, L, replicate=range(E))
    else:
        table = Placement.contiguous(E, F, L)
    topo = cam.Topology(D=spec.get("D", 1), P=1, F=F, E=E, K=spec["K"], H=spec["H"], Bmax=spec["B"], L=L,
                        expert_slots=table.slots_per_rank)
    g = torch.Generator().manual_seed(11)
    layers = [convert.ExpertFFN(torch.randn(E, spec["H"], 2 * spec["I"], generator=g) / spec["H"] ** 0.5,
                                torch.randn(E, spec["I"], spec["H"], generator=g) / spec["I"] ** 0.5)
              for _ in range(L)]
    return topo, table, layers


def round_inputs(spec: dict, i: int, rank: int = 0):
    """Attention rank ``rank``'s round ``i``: (x, topk ids, topk weights, layer), the same in every process."""
    g = torch.Generator().manual_seed(1000 + i + 7919 * rank)
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
    p.add_argument("--kill", default="-1", help="rank(s), comma separated")
    p.add_argument("--kill-after", default="0", help="for each rank of --kill, comma separated")
    p.add_argument("--kill-with", type=int, default=-1, help="a rank the (first) killed rank kills with itself")
    p.add_argument("--stop-with", type=int, default=-1,
                   help="a rank the (first) killed rank SIGSTOPs before it dies (the test kills it later)")
    p.add_argument("--kill-once-finished", type=int, default=-1,
                   help="the killed FFN rank dies only once this Attention rank finished (its rounds all received)")
    p.add_argument("--join", action="store_true", help="a restarted FFN rank: join the running world")
    p.add_argument("--until-joined", action="store_true", help="Attention: send rounds until a rank rejoined")
    p.add_argument("--rebalance-at", type=int, default=0,
                   help="every rank rebalances (each replica to the next FFN index) after this many rounds, and a "
                        "joiner (--join) asks inside that rebalance first, then once it is over")
    args = p.parse_args()
    args.kills = {int(r): int(n) for r, n in zip(args.kill.split(","), args.kill_after.split(","))}
    spec = json.loads(args.spec)
    topo, table, layers = world(spec)
    store = FileStore(args.store, topo.world_size)
    cfg = ConnectorConfig(topology=topo, timeout_s=TIMEOUT_S, idle_poll_s=0.01, group=args.group, placement=table,
                          elastic=True, checkpoint=CHECKPOINT)
    role = "attention" if args.rank < topo.A else "ffn"
    out = {"rank": args.rank}
    conn = None
    try:
        if args.join and role == "attention":
            conn = rejoin_replica(store, cfg, args.rank, out)
        elif args.join and args.rebalance_at:
            conn = join_across_rebalance(store, cfg, out)
            table = conn.config.placement
        elif args.join:  # the killed rank's slots, as the last FFN rank of the world it joins
            running, held = joined_table(store, args.group, table, args.rank - topo.A)
            cfg = dataclasses.replace(cfg, placement=running.with_rank(held),
                                      topology=dataclasses.replace(topo, F=running.ffn_ranks + 1))
            conn = AsyncAFDConnector(topo.A + running.ffn_ranks, "ffn", cfg)
            conn.join_running(store)
            table = cfg.placement
        else:
            conn = AsyncAFDConnector(args.rank, role, cfg)
            conn.init_afd_connector(store)
        if role == "attention":
            rebalance = None
            if args.rebalance_at:
                def rebalance():
                    # Names the key of this rank's vote in the rebalance, which the others wait for.
                    comm = conn.comm
                    store.set("test/rebalance", f"{args.group}/{conn.world_id}/rebalance/{comm.plane_id}/"
                                                f"{comm.rebalance_id}/vote/{conn.rank}")
                    conn.set_placement(rotated(table))
                    out["epoch"] = conn.comm.placement_epoch
            attention(conn, spec, out, args.until_joined, (args.rebalance_at, rebalance) if rebalance else None,
                      kill_after=args.kills.get(args.rank) if not args.join else None)
        else:
            out.update(ffn(conn, table, layers, args, store))
    except Exception as e:  # noqa: BLE001 - the error is the result
        out["error"] = f"{type(e).__name__}: {e}"
        out["lost"] = getattr(e, "lost", None)
        out["lost_rounds"] = getattr(e, "rounds", None)
    finally:
        if conn is not None:
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


def rotated(table: Placement, k: int = 1) -> Placement:
    """``table`` with every replica moved from FFN index f to (f + k) % F: a rebalance that moves every expert."""
    F = table.ffn_ranks
    return Placement(table.experts, F, table.slots_per_rank,
                     [[[((f + k) % F, j) for f, j in table.replicas(l, e)] for e in range(table.experts)]
                      for l in range(table.layers)])


def wait_for(what: str, ready, timeout_s: float = TIMEOUT_S):
    """Polls ``ready()`` until it returns something true (returned), for at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = ready()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s:g} s for {what}")
        time.sleep(0.01)


def plane(store, group):
    """The running world's published plane record, or None."""
    import cam.world

    current = cam.world.current(store, group)
    key = f"{group}/{current}/plane"
    return json.loads(store.get(key).decode()) if current is not None and store.check([key]) else None


def join_across_rebalance(store, cfg, out: dict):
    """A new FFN rank (a third replica of FFN index 0's slots) asks to join once the world began its rebalance: it
    is refused naming it; it asks again on the table the world publishes after it, until admitted (bounded)."""
    from cam.connector import JoinRefusedError

    wait_for("the rebalance to begin", lambda: store.check(["test/rebalance"]))
    vote = store.get("test/rebalance").decode()
    wait_for("Attention rank 0's vote in it", lambda: store.check([vote]))
    out["refusals"] = []
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        record = wait_for("a plane record", lambda: plane(store, cfg.group))
        running = Placement.from_dict(record["placement"])
        held = [running.slot_experts(l, 0) for l in range(running.layers)]
        joined = dataclasses.replace(cfg, placement=running.with_rank(held), topology=dataclasses.replace(
            cfg.topology, F=running.ffn_ranks + 1))
        conn = AsyncAFDConnector(joined.topology.world_size - 1, "ffn", joined)
        try:
            conn.join_running(store)
            return conn
        except JoinRefusedError as e:
            if not e.rebalance or time.monotonic() > deadline:
                raise
            out["refusals"].append(e.reason)
        # Ask again once the world's table moved on (the rebalance adopted), or, if it did already, shortly.
        epoch = record.get("epoch", 0)
        wait_for("the rebalance to end", lambda: (plane(store, cfg.group) or {}).get("epoch", 0) > epoch
                 or len(out["refusals"]) > 1)
        time.sleep(0.05 if len(out["refusals"]) > 1 else 0)


def rejoin_replica(store, cfg, rank: int, out: dict):
    """A restarted Attention rank (its replica fenced when it died) rejoins the running world in its slot. Asked
    first with another topology (H doubled), another checkpoint identity, and for a live rank's slot (rank 0): each
    refused by name (``out["refused"]``)."""
    from cam.connector import JoinRefusedError

    record = wait_for("a plane record", lambda: plane(store, cfg.group))
    running = Placement.from_dict(record["placement"])
    cfg = dataclasses.replace(cfg, placement=running, topology=dataclasses.replace(
        cfg.topology, F=running.ffn_ranks, expert_slots=running.slots_per_rank))
    out["refused"] = []
    for bad_rank, bad in ((rank, dataclasses.replace(cfg, topology=dataclasses.replace(cfg.topology,
                                                                                      H=2 * cfg.topology.H))),
                          (rank, dataclasses.replace(cfg, checkpoint=OTHER_CHECKPOINT)), (0, cfg)):
        try:
            AsyncAFDConnector(bad_rank, "attention", bad).join_running(store)
            out["refused"].append("admitted")
        except JoinRefusedError as e:
            out["refused"].append(str(e))
    conn = AsyncAFDConnector(rank, "attention", cfg)
    conn.join_running(store)
    return conn


def attention(conn, spec, out: dict, until_joined: bool = False, rebalance=None, kill_after=None) -> None:
    """Sends every round, two in flight; ``out`` holds the outputs received so far (and their times). With
    ``until_joined``, paced rounds go on until a rank joined, then ``spec["rounds"]`` more. ``rebalance``:
    ``(n, call)``: once the first ``n`` rounds are received and none is in flight, ``call()`` (every rank
    rebalances between rounds n - 1 and n)."""
    conn.wait_ffn_serving(TIMEOUT_S)
    out["outputs"], out["times"] = [], []
    n, sent = spec.get("rounds_of", {}).get(str(conn.rank), spec["rounds"]), 0
    if until_joined:
        n = 10 ** 6

    def send(i):
        x, ids, w, layer = round_inputs(spec, i, conn.rank)
        conn.send_attn_output(x, AFDTransferContext(AFDTransferMetadata(layer_idx=layer)), topk_ids=ids,
                              topk_weights=w)

    def may_send():
        return sent < n and sent - len(out["outputs"]) < 2 and (rebalance is None or sent != rebalance[0])

    while may_send():
        send(sent)
        sent += 1
    deadline = time.monotonic() + 3 * TIMEOUT_S
    while len(out["outputs"]) < n:
        if rebalance is not None and sent == len(out["outputs"]) == rebalance[0]:
            rebalance[1]()
            rebalance = None
            while may_send():
                send(sent)
                sent += 1
        out["outputs"].append(conn.recv_ffn_output())
        out["times"].append(time.time())
        if kill_after is not None and len(out["outputs"]) >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash, with rounds in flight
        if until_joined:
            if any(f.joined_rank is not None for f in conn.failovers) and n == 10 ** 6:
                n = len(out["outputs"]) + spec["rounds"]
            if time.monotonic() > deadline:
                raise TimeoutError("no rank joined")
            time.sleep(0.02)
        while may_send():
            send(sent)
            sent += 1
    while len(out["outputs"]) < sent:
        out["outputs"].append(conn.recv_ffn_output())
    conn.finish()


def kill_with(conn, store, rank: int) -> None:
    """Two deaths at one boundary, whatever the order the watchdogs look in: SIGSTOPs every other rank of the world
    (the test SIGCONTs them once this process is dead), SIGKILLs rank ``rank`` and waits, bounded, until it is dead;
    the caller then kills itself."""
    from cam._proc import start_ticks

    def pid(r):
        return int(store.get(f"{conn.config.group}/{conn.world_id}/proc/{r}").decode().split(":")[0])

    for r in range(conn.config.topology.world_size):
        if r not in (rank, conn.rank):
            os.kill(pid(r), signal.SIGSTOP)
    victim = pid(rank)
    os.kill(victim, signal.SIGKILL)
    wait_for(f"rank {rank} (process {victim}) to die", lambda: start_ticks(victim) is None)


def ffn(conn, table, layers, args, store) -> dict:
    w1, w2 = convert.layer_weights(layers)
    experts = cam.ExpertWeights(w1, w2)
    served = experts.slots(table, conn.rank - conn.config.topology.A)
    count = {"rows": 0}
    state = {"rebalanced": not args.rebalance_at or args.join}

    def between():
        # The rebalance Attention rank 0 began: once its vote and the joiner's request are in the store, this rank
        # decides the join (inside the rebalance: refused), then votes and adopts the rotated table.
        if state["rebalanced"] or not store.check(["test/rebalance"]):
            return
        group = conn.config.group
        vote = store.get("test/rebalance").decode()
        wait_for("Attention rank 0's vote and the join request",
                 lambda: store.check([vote]) and store.check([f"{group}/{conn.world_id}/join/0"]))
        state["decided_in_rebalance"] = conn.poll_join()
        conn.set_placement(rotated(table), served, experts=experts)
        state["rebalanced"] = True

    def finished(rank):
        # --kill-once-finished: not before Attention rank `rank` finished (cam.serve.store.DONE_KEY in this world)
        return rank < 0 or store.check([f"{conn.config.group}/{conn.world_id}/serve/done/{rank}"])

    def on_iteration(it):
        if it.served:
            count["rows"] += 1
            # A later rank of --kill dies only once it failed over (after the deaths before it, never with them).
            later = args.rank != next(iter(args.kills)) and not conn.failovers
            if args.rank in args.kills and count["rows"] >= args.kills[args.rank] and not args.join and not later \
                    and finished(args.kill_once_finished):
                if args.kill_with >= 0:
                    kill_with(conn, store, args.kill_with)
                if args.stop_with >= 0:  # alive to every watchdog, but it will not join the successor
                    os.kill(int(store.get(f"{conn.config.group}/{conn.world_id}/proc/{args.stop_with}").decode()
                                .split(":")[0]), signal.SIGSTOP)
                os.kill(os.getpid(), signal.SIGKILL)

    result = cam.serve_ffn(conn, served.w1, served.w2, max_serve_s=4 * TIMEOUT_S, on_iteration=on_iteration,
                           between=between)
    return {"reason": result.reason, "iterations": result.iterations, "final_rank": conn.rank,
            "served": count["rows"], "decided_in_rebalance": state.get("decided_in_rebalance"),
            "epoch": conn.comm.placement_epoch if conn.comm is not None else None}


if __name__ == "__main__":
    main()
