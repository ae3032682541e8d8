"""A rebalance (Comm.set_placement, docs/protocol.md §15) moves everything an FFN rank computes with, and is one
agreement across the plane.

The FFN ranks here compute with the real W1/W2 ops (gmm_swiglu_quant_multi_layer, gmm_multi_layer) over
cam.FfnWeights, and every Attention output is compared bit for bit with cam.reference's round trip under the table
its round was routed by: rounds before, held back during, and after a rebalance, with DP replicas, replicated
experts and E % F != 0. Then the agreement: a refusal on one rank (a round in flight) refuses the attempt on every
rank, the retry succeeds on every rank (in-process and shm), and a rank that never joins makes every rank time out
on the old table."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import cam
from cam import _C, _runtime
from cam.placement import Placement, PlacementError
from _dataplane_harness import (FfnLog, attention_body, check_real_rounds, expert_set, make_rounds, raise_first,
                                real_ffn_server, real_ffn_step, run_ranks, unique_group)

pytestmark = pytest.mark.timeout(300)

# E = 5 experts on F = 2 FFN ranks of 4 slots: no contiguous placement; experts 0 and 3 (then 1 and 4) replicated
TOPO = dict(D=2, P=1, F=2, E=5, K=2, H=32, Bmax=5, L=2, expert_slots=4)
P_TABLE = Placement.balanced(5, 2, layers=2, replicate=[0, 3], slots_per_rank=4)
Q_TABLE = Placement(5, 2, 4, [[[(1, 3)], [(0, 0), (1, 1)], [(1, 0)], [(0, 3)], [(0, 1), (1, 2)]],
                              [[(0, 2), (1, 0)], [(1, 3)], [(0, 1)], [(1, 1), (0, 3)], [(0, 0)]]])


def test_the_tables_move_experts_between_ranks():
    """The golden below only proves something if q puts other experts in the slots than p."""
    for layer in range(2):
        for f in range(2):
            assert P_TABLE.slot_experts(layer, f) != Q_TABLE.slot_experts(layer, f)


def test_rounds_before_and_after_a_rebalance_are_the_real_ffn_of_their_own_table():
    """Two rounds per replica under p, a rebalance on every rank, two under q: every Attention output is the
    golden W1 -> SwiGLU -> W2 of its own table's experts (so W1 AND W2 moved, with their scales), the slot tensors
    kept their addresses, and every slot tensor equals what ExpertWeights.slots(q) gives."""
    topo = cam.Topology(**TOPO)
    ws = expert_set(topo, seed=3)
    rounds = make_rounds(topo, [[5, 4, 5, 3]] * topo.A, seed=4)
    first = {}

    def attention(a):
        def body(comm):
            outs = attention_body(rounds[a][:2])(comm)
            first[a] = comm.set_placement(Q_TABLE)
            return outs + attention_body(rounds[a][2:])(comm)
        return body

    def ffn(f):
        def body(comm):
            experts = ws.experts()
            served = experts.slots(P_TABLE, f)
            ptrs = [t.data_ptr() for t in served.tensors()]
            log = real_ffn_server(topo.D * 2, served)(comm)
            assert comm.set_placement(Q_TABLE, served, experts=experts) == 0
            assert [t.data_ptr() for t in served.tensors()] == ptrs, "a slot tensor moved"
            want = experts.slots(Q_TABLE, f)
            assert all(torch.equal(x, y) for x, y in zip(served.tensors(), want.tensors()))
            return real_ffn_server(topo.D * 2, served, log=log)(comm)
        return body

    bodies = {a: attention(a) for a in range(topo.A)}
    bodies.update({topo.A + f: ffn(f) for f in range(topo.F)})
    results, errors = run_ranks(topo, bodies, timeout=240, placement=P_TABLE)
    raise_first(errors)
    assert first == {a: 3 for a in range(topo.A)}
    check_real_rounds(topo, rounds, results, ws, [P_TABLE, P_TABLE, Q_TABLE, Q_TABLE])


def test_a_round_is_held_back_while_w2_is_still_being_copied(monkeypatch):
    """FFN rank 0 is paused after it copied W1's new slots and before W2's: its weights epoch is -1, and a round
    the Attention rank already dispatched under q is held back by a dispatch_recv on another stream (partly moved
    weights are never served); once W2 is copied the real chain serves it, bit-exact against q's golden."""
    topo = cam.Topology(D=1, P=1, F=2, E=5, K=2, H=32, Bmax=4, L=2, expert_slots=4)
    ws = expert_set(topo, seed=5)
    rounds = make_rounds(topo, [[4, 4]], seed=6)
    paused, release, dispatched = threading.Event(), threading.Event(), threading.Event()
    slow = topo.A
    copy_set = cam.Comm._copy_weight_set

    def paused_copy(self, name, dst, src):
        copy_set(self, name, dst, src)
        if self.rank == slow and name == "w1":
            paused.set()
            assert release.wait(60)

    monkeypatch.setattr(cam.Comm, "_copy_weight_set", paused_copy)

    def attention(comm):
        outs = attention_body(rounds[0][:1])(comm)
        comm.set_placement(Q_TABLE)
        r = rounds[0][1]
        cam.ops.dispatch_send(comm, r.x, r.ids, r.layer)
        dispatched.set()
        return outs + [cam.ops.combine_recv(comm, r.ids, r.w)]

    def ffn(comm):
        experts = ws.experts()
        served = experts.slots(P_TABLE, comm.rank - topo.A)
        log = real_ffn_server(1, served)(comm)
        if comm.rank != slow:
            comm.set_placement(Q_TABLE, served, experts=experts)
            return real_ffn_server(1, served, log=log)(comm)
        errs = []
        th = threading.Thread(target=lambda: _catch(errs, comm.set_placement, Q_TABLE, served, experts=experts),
                              daemon=True)
        th.start()
        try:
            assert paused.wait(60) and dispatched.wait(60)
            assert comm._c.weights_epoch() == -1
            # The rebalance holds this Comm's stream; a loop on another stream (a replay there) is what could take
            # the round now, so dispatch_recv runs on one: it is held back on the device, not served.
            other = _C.Stream()
            try:
                got = [torch.zeros(s, dtype=d) for d, s in ((torch.int8, (topo.recv_rows, topo.H)),
                                                            (torch.float32, (topo.recv_rows,)),
                                                            (torch.int64, (topo.R,)),
                                                            (torch.int64, (topo.work_item_words,)))]
                for _ in range(3):
                    _runtime.run(_C.dispatch_recv, comm._c, *got, stream=other, tensor=got[0])
                    assert int(got[3][0]) != 1, "a round was taken with W1 moved and W2 not"
            finally:
                other.close()
        finally:
            release.set()
            th.join(60)
        assert not th.is_alive() and not errs, errs
        assert comm._c.weights_epoch() == 1
        return real_ffn_server(1, served, log=log)(comm)

    results, errors = run_ranks(topo, {0: attention, topo.A: ffn, topo.A + 1: ffn}, timeout=240, placement=P_TABLE)
    raise_first(errors)
    check_real_rounds(topo, rounds, results, ws, [P_TABLE, Q_TABLE])


def _catch(errs, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except BaseException as e:  # noqa: BLE001 - reported by the test
        errs.append(e)


# ----------------------------------------------------------------------------- the signature

def test_set_placement_refuses_anything_but_both_weight_sets():
    """A single LayerWeights, the old (layer_weights, weights, scales) tuple, or the two objects swapped: refused
    naming the argument, on the rank that passed it, and every other rank learns of the refusal."""
    topo = cam.Topology(D=1, P=1, F=1, E=2, K=2, H=32, Bmax=4, L=1)
    p = Placement.contiguous(2, 1, 1)
    q = Placement(2, 1, 2, [[[(0, 1)], [(0, 0)]]])
    ws = expert_set(topo, seed=7)
    tried = []

    def ffn(comm):
        experts = ws.experts()
        served = experts.slots(p, 0)
        before = [t.clone() for t in served.tensors()]
        bad = [((served.w1,), {}, "weights must be the cam.FfnWeights"),
               (((served.w1, ws.w1, ws.s1),), {}, "weights must be the cam.FfnWeights"),
               ((served,), {"experts": experts.w1}, "experts must be the cam.ExpertWeights"),
               ((experts,), {"experts": served}, "weights must be the cam.FfnWeights")]
        for args, kw, msg in bad:
            with pytest.raises(TypeError, match=msg):
                comm.set_placement(q, *args, **kw)
            tried.append(msg)
        assert all(torch.equal(x, y) for x, y in zip(served.tensors(), before))
        comm.set_placement(q, served, experts=experts)
        return comm.placement_epoch

    def attention(comm):
        for _ in range(4):
            with pytest.raises(PlacementError, match=r"rank 1 refused: TypeError: Comm.set_placement: (weights|"
                                                     r"experts) must be"):
                comm.set_placement(q)
        comm.set_placement(q)
        return comm.placement_epoch

    results, errors = run_ranks(topo, {0: attention, 1: ffn}, timeout=60, placement=p)
    raise_first(errors)
    assert results == {0: 1, 1: 1} and len(tried) == 4


def test_ffn_and_expert_weights_check_that_w1_and_w2_chain():
    g = torch.Generator().manual_seed(1)
    w1 = cam.LayerWeights.random(3, 2, 32, 32, g)
    w2 = cam.LayerWeights.random(3, 2, 16, 32, g)
    assert cam.FfnWeights(w1, w2).num_experts == 3
    with pytest.raises(ValueError, match="w2 has K = 8"):
        cam.FfnWeights(w1, cam.LayerWeights.random(3, 2, 8, 32, g))
    with pytest.raises(ValueError, match="w1 has 2 layers, w2 1"):
        cam.ExpertWeights(w1, cam.LayerWeights.random(3, 1, 16, 32, g))
    with pytest.raises(ValueError, match="w1 has 3 experts per layer, w2 2"):
        cam.FfnWeights(w1, cam.LayerWeights.random(2, 2, 16, 32, g))
    with pytest.raises(ValueError, match="w1 has K = 32 .* w2 N = 64"):
        cam.FfnWeights(w1, cam.LayerWeights.random(3, 2, 16, 64, g))
    with pytest.raises(ValueError, match="same cam.LayerWeights"):
        cam.FfnWeights(w1, w1)
    with pytest.raises(TypeError, match="w2 must be a cam.LayerWeights"):
        cam.FfnWeights(w1, None)
    for bad in (-1.0, float("nan"), True, "7"):
        with pytest.raises(ValueError, match="swiglu_limit"):
            cam.FfnWeights(w1, w2, swiglu_limit=bad)


def test_a_rebalance_keeps_the_swiglu_limit_and_refuses_one_that_differs():
    """swiglu_limit is part of what an FFN rank computes with: served and source must agree, or the rebalance is
    refused naming it; with a limit that clips, the rounds after the rebalance are still the golden's."""
    topo = cam.Topology(D=1, P=1, F=2, E=5, K=2, H=32, Bmax=4, L=2, expert_slots=4)
    ws = expert_set(topo, seed=8, swiglu_limit=0.05)
    rounds = make_rounds(topo, [[4, 4]], seed=9)

    def attention(comm):
        outs = attention_body(rounds[0][:1])(comm)
        with pytest.raises(PlacementError, match="swiglu_limit"):
            comm.set_placement(Q_TABLE)
        comm.set_placement(Q_TABLE)
        return outs + attention_body(rounds[0][1:])(comm)

    def ffn(comm):
        experts = ws.experts()
        served = experts.slots(P_TABLE, comm.rank - topo.A)
        log = real_ffn_server(1, served)(comm)
        other = cam.ExpertWeights(experts.w1, experts.w2, swiglu_limit=None)
        if comm.rank == topo.A:
            with pytest.raises(ValueError, match="swiglu_limit 0.05, experts None"):
                comm.set_placement(Q_TABLE, served, experts=other)
        else:
            with pytest.raises(PlacementError, match="swiglu_limit"):
                comm.set_placement(Q_TABLE, served, experts=experts)
        comm.set_placement(Q_TABLE, served, experts=experts)
        return real_ffn_server(1, served, log=log)(comm)

    results, errors = run_ranks(topo, {0: attention, topo.A: ffn, topo.A + 1: ffn}, timeout=240, placement=P_TABLE)
    raise_first(errors)
    check_real_rounds(topo, rounds, results, ws, [P_TABLE, Q_TABLE])


# ----------------------------------------------------------------------------- the agreement

SMALL = dict(D=1, P=1, F=1, E=2, K=2, H=32, Bmax=4, L=1)
SWAPPED = Placement(2, 1, 2, [[[(0, 1)], [(0, 0)]]])  # the contiguous table's two experts in each other's slot


def _refuse_then_retry(rank: int, comm: cam.Comm, seed: int):
    """The issue's sequence, one body per rank: every rank calls set_placement while the Attention rank has a round
    in flight (the FFN rank served it already), then, once the round is combined, every rank calls it again.
    Returns (the errors of the first call, the epoch after the retry, the Attention rank's outputs as int16
    lists, the table digest)."""
    topo = comm.topology
    ws = expert_set(topo, seed=seed)
    rounds = make_rounds(topo, [[4, 3]], seed=seed + 1)
    errs = []
    if rank < topo.A:
        r = rounds[0][0]
        cam.ops.dispatch_send(comm, r.x, r.ids, r.layer)
        try:
            comm.set_placement(SWAPPED)
        except PlacementError as e:
            errs.append(str(e))
        outs = [cam.ops.combine_recv(comm, r.ids, r.w)]
        assert comm.placement_epoch == 0 and comm.placement is None
        assert comm.set_placement(SWAPPED) == 2
        outs += attention_body(rounds[0][1:])(comm)
        return errs, comm.placement_epoch, [o.view(torch.int16).tolist() for o in outs], comm.placement.digest()
    experts = ws.experts()
    served = experts.slots(Placement.contiguous(2, 1, 1), 0)
    log = real_ffn_server(1, served)(comm)
    try:
        comm.set_placement(SWAPPED, served, experts=experts)
    except PlacementError as e:
        errs.append(str(e))
    assert comm.placement_epoch == 0 and comm._c.weights_epoch() == 0
    comm.set_placement(SWAPPED, served, experts=experts)
    real_ffn_server(1, served, log=log)(comm)
    return errs, comm.placement_epoch, None, comm.placement.digest()


def _check_refuse_then_retry(got: dict, seed: int) -> None:
    topo = cam.Topology(**SMALL)
    for rank in range(topo.world_size):
        errs, epoch, _, digest = got[rank]
        assert len(errs) == 1 and "rank 0 refused: a rebalance racing a round" in errs[0], (rank, errs)
        assert "nothing was changed on any rank" in errs[0]
        assert epoch == 1 and digest == SWAPPED.digest(), (rank, epoch)
    ws = expert_set(topo, seed=seed)
    rounds = make_rounds(topo, [[4, 3]], seed=seed + 1)
    outs = {0: [torch.tensor(o, dtype=torch.int16).view(torch.bfloat16) for o in got[0][2]]}
    check_real_rounds(topo, rounds, outs, ws, [Placement.contiguous(2, 1, 1), SWAPPED])


def test_a_refused_rebalance_is_refused_on_every_rank_and_the_retry_succeeds_on_every_rank():
    """One replica, one FFN rank, two experts, threads as ranks: the Attention rank's refusal (a round in flight)
    reaches the FFN rank too, both stay on the old table, and the retry moves both (then a round under the new
    table is the real FFN's golden)."""
    topo = cam.Topology(**SMALL)
    results, errors = run_ranks(topo, {r: (lambda comm, r=r: _refuse_then_retry(r, comm, 11)) for r in range(2)},
                                timeout=120)
    raise_first(errors)
    _check_refuse_then_retry(results, 11)


def _shm_refuse_then_retry_rank(rank, store_path, group, out):
    from torch.distributed import FileStore

    topo = cam.Topology(**SMALL)
    try:
        with cam.Comm(topo, rank, transport="shm", store=FileStore(store_path, topo.world_size), group=group,
                      timeout_s=60) as comm:
            out.put((rank, _refuse_then_retry(rank, comm, 13)))
    except BaseException as e:  # noqa: BLE001 - reported by the test
        out.put((rank, e))


@pytest.mark.slow  # two spawned processes import torch and cam
def test_a_refused_rebalance_over_shm_processes_is_refused_on_every_rank_and_the_retry_succeeds(tmp_path):
    """The same sequence with processes as ranks (the agreement through the Store)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    group = unique_group("shm-refuse")
    procs = [ctx.Process(target=_shm_refuse_then_retry_rank, args=(r, str(tmp_path / "store"), group, out),
                         daemon=True) for r in range(2)]
    for pr in procs:
        pr.start()
    try:
        got = dict(out.get(timeout=180) for _ in procs)
    finally:
        for pr in procs:
            pr.join(60)
            if pr.is_alive():
                pr.kill()
    raise_first({r: v for r, v in got.items() if isinstance(v, BaseException)})
    _check_refuse_then_retry(got, 13)


def test_a_rank_that_does_not_join_makes_every_rank_time_out_on_the_old_table_and_the_retry_succeeds():
    """The Attention rank calls set_placement, the FFN rank does not within join_timeout_s: the attempt times out
    on the Attention rank naming the FFN rank; the FFN rank's first call is that attempt and learns it timed out
    (nothing moved on either); the next call on both commits."""
    topo = cam.Topology(**SMALL)
    ws = expert_set(topo, seed=17)
    first_done = threading.Event()

    def attention(comm):
        with pytest.raises(TimeoutError, match=r"rank\(s\) 1 never called set_placement"):
            comm.set_placement(SWAPPED)
        first_done.set()
        assert comm.placement is None and comm.placement_epoch == 0
        assert comm.set_placement(SWAPPED) == 1
        return comm.placement_epoch

    def ffn(comm):
        experts = ws.experts()
        served = experts.slots(Placement.contiguous(2, 1, 1), 0)
        before = [t.clone() for t in served.tensors()]
        assert first_done.wait(60)
        with pytest.raises(TimeoutError, match=r"rebalance 1\.0 was refused: rank\(s\) 1 never called"):
            comm.set_placement(SWAPPED, served, experts=experts)
        assert all(torch.equal(x, y) for x, y in zip(served.tensors(), before))
        assert comm._c.weights_epoch() == 0 and comm.rebalance_id == "1.1"
        comm.set_placement(SWAPPED, served, experts=experts)
        assert all(torch.equal(x, y) for x, y in zip(served.tensors(), experts.slots(SWAPPED, 0).tensors()))
        return comm.placement_epoch

    results, errors = run_ranks(topo, {0: attention, 1: ffn}, timeout=120, join_timeout_s=5.0)
    raise_first(errors)
    assert results == {0: 1, 1: 1}


def test_tables_that_differ_refuse_the_attempt_on_every_rank_and_the_retry_with_one_table_succeeds():
    topo = cam.Topology(**SMALL)
    ws = expert_set(topo, seed=19)

    def body(comm):
        kw = {}
        if comm.rank >= topo.A:
            experts = ws.experts()
            kw = {"weights": experts.slots(Placement.contiguous(2, 1, 1), 0), "experts": experts}
        first = SWAPPED if comm.rank == 0 else Placement.contiguous(2, 1, 1)
        with pytest.raises(PlacementError, match=r"tables differ across ranks: rank\(s\) 1"):
            comm.set_placement(first, **kw)
        assert comm.placement_epoch == 0
        comm.set_placement(SWAPPED, **kw)
        return comm.placement_epoch

    results, errors = run_ranks(topo, {0: body, 1: body}, timeout=60)
    raise_first(errors)
    assert results == {0: 1, 1: 1}


def test_served_slots_that_share_memory_with_the_experts_are_refused():
    """A served slot tensor that is a view of the experts' (LayerWeights keeps a contiguous scales tensor as it is,
    so slicing the full scales gives one) would have each rebalance overwrite the source of the next: refused
    naming the tensor, on the rank that passed it; every rank learns of it."""
    topo = cam.Topology(**SMALL)
    ws = expert_set(topo, seed=23)

    def ffn(comm):
        experts = ws.experts()
        aliased = cam.FfnWeights(cam.LayerWeights(ws.w1, [s[:2] for s in experts.w1.scales]),
                                 cam.LayerWeights(ws.w2, [s.clone() for s in ws.s2]))
        with pytest.raises(ValueError, match=r"weights.w1.scales\[0\] shares memory with experts"):
            comm.set_placement(SWAPPED, aliased, experts=experts)
        return comm.placement_epoch

    def attention(comm):
        with pytest.raises(PlacementError, match="rank 1 refused: ValueError"):
            comm.set_placement(SWAPPED)
        return comm.placement_epoch

    results, errors = run_ranks(topo, {0: attention, 1: ffn}, timeout=60)
    raise_first(errors)
    assert results == {0: 0, 1: 0}


@pytest.mark.slow
@pytest.mark.e2e
def test_cam_run_rebalance_every_passes_check(tmp_path):
    """cam-run --rebalance-every 1: every rank adopts a rebalance after each step (every expert moves to another FFN
    rank), the outputs still equal the single-process reference, and the report says every rank ended at the same
    epoch; eager, and captured + batched with a replicated table on F = 3."""
    import json
    import os
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from test_run import cam_run

    for name, extra in (("eager", ()), ("graph", ("--graph", "--batch-items", "--ffn", "3", "--placement", "hot:2"))):
        out = tmp_path / f"{name}.json"
        result = cam_run("--rebalance-every", "1", *extra, "--check", "--quiet", "--json", str(out), cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(out.read_text())
        assert report["check"]["ok"], report["check"]
        assert report["rebalances"] == [3] and report["check"]["rebalances"] == {"want": 3, "got": [3]}


def test_cam_run_refuses_rebalance_every_where_it_is_not_driven(capsys):
    from cam.run import cli

    for extra in ((), ("--assign", "fewest-tokens"), ("--keep-going",), ("--mode", "colocated")):
        n = "-1" if not extra else "2"
        assert cli.main(["--rebalance-every", n, *extra, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert ("must be >= 0" if not extra else f"is not driven with {' '.join(extra)}") in err, err


def test_a_captured_batched_ffn_loop_serves_the_new_experts_after_a_rebalance_without_recapture():
    """The FFN ranks' iteration (a batched dispatch_recv over every replica's rows -> W1 and W2 over the group table
    -> batched combine_send) is captured once and replayed; a rebalance between replays rewrites the slot tensors
    the graph holds, and the replays after it compute with the new experts: every round before and after is the
    real FFN's golden under its own table."""
    import importlib

    from cam.graph import Graph
    from cam.ops.gmm import GROUP_TABLE
    from _window_layout import WindowLayout

    topo = cam.Topology(**TOPO)
    ws = expert_set(topo, seed=29)
    rounds = make_rounds(topo, [[5, 4, 5, 3]] * topo.A, seed=30)
    chunk = WindowLayout(topo).work_item_chunk_off

    def attention(a):
        def body(comm):
            outs = attention_body(rounds[a][:2])(comm)
            comm.set_placement(Q_TABLE)
            return outs + attention_body(rounds[a][2:])(comm)
        return body

    def ffn(f):
        def body(comm):
            experts = ws.experts()
            served = experts.slots(P_TABLE, f)
            budget = topo.D * topo.recv_rows
            specs = importlib.import_module("cam.ops.dispatch_recv").batch_output_specs(comm, budget)
            recv = tuple(torch.zeros(s, dtype=d) for d, s in specs)
            y = torch.zeros(budget, served.w1.n // 2, dtype=torch.int8)
            ys = torch.zeros(budget, dtype=torch.float32)
            out = torch.zeros(budget, topo.H, dtype=torch.bfloat16)
            graph = Graph()
            # Ranks here are threads of one process: under GLOBAL another rank's synchronize would break this capture.
            with graph.capture(stream=comm.stream, mode="thread_local"):
                cam.ops.dispatch_recv(comm, row_budget=budget, out=recv)
                cam.ops.gmm_swiglu_quant_multi_layer(recv[0], recv[1], served.w1, recv[2], None, GROUP_TABLE,
                                                     out=(y, ys), swiglu_limit=served.swiglu_limit)
                cam.ops.gmm_multi_layer(y, ys, served.w2, recv[2], None, GROUP_TABLE, out=out)
                cam.ops.combine_send(comm, out, recv[4])

            def serve(n_rounds):
                done, end = 0, time.monotonic() + 90
                while done < n_rounds:
                    assert time.monotonic() < end, f"FFN rank {comm.rank} completed {done} of {n_rounds} rounds"
                    graph.replay()
                    items = recv[4]
                    done += sum(int(items[i, 5]) + int(items[i, chunk]) == int(items[i, chunk + 1])
                                for i in range(items.shape[0]) if int(items[i, 0]) == 1)

            try:
                serve(topo.D * 2)
                comm.set_placement(Q_TABLE, served, experts=experts)
                serve(topo.D * 2)
            finally:
                graph.synchronize()
                graph.reset()
            return comm.placement_epoch
        return body

    bodies = {a: attention(a) for a in range(topo.A)}
    bodies.update({topo.A + f: ffn(f) for f in range(topo.F)})
    results, errors = run_ranks(topo, bodies, timeout=240, placement=P_TABLE)
    raise_first(errors)
    assert all(results[topo.A + f] == 1 for f in range(topo.F))
    check_real_rounds(topo, rounds, results, ws, [P_TABLE, P_TABLE, Q_TABLE, Q_TABLE])


def test_a_rebalance_moves_packed_int4_weights_and_their_column_sums():
    """W4A8 slots (LayerWeights format "int4": packed weights and the column sums the int4 kernels' recombination
    adds) move whole: after a rebalance that swaps the two experts' slots, the served tensors kept their addresses
    and the real W1/W2 ops on them equal cam.reference's W4A8 goldens of the experts now in each slot (W2 bit for
    bit, W1 within docs/gmm.md §6's tolerance). Stale column sums would leave each slot recombining with the other
    expert's sums."""
    from cam.reference import w4a8 as ref4

    topo = cam.Topology(**SMALL)
    g = torch.Generator().manual_seed(29)
    inter, m = 16, 12
    w1 = [torch.randint(-8, 8, (topo.E, topo.H, 2 * inter), generator=g, dtype=torch.int8)]
    w2 = [torch.randint(-8, 8, (topo.E, inter, topo.H), generator=g, dtype=torch.int8)]
    s1 = [(torch.rand(topo.E, 2 * inter, generator=g) * 2e-2 + 2e-3).float()]
    s2 = [(torch.rand(topo.E, topo.H, generator=g) * 5e-2 + 5e-3).float()]
    x = torch.randint(-128, 128, (m, topo.H), generator=g, dtype=torch.int8)
    xs = (torch.rand(m, generator=g) * 1e-2 + 1e-3).float()
    counts = torch.tensor([5, 7], dtype=torch.int64)

    def ffn(comm):
        experts = cam.ExpertWeights(cam.LayerWeights(w1, s1, format="int4"), cam.LayerWeights(w2, s2, format="int4"))
        served = experts.slots(Placement.contiguous(topo.E, topo.F, topo.L), 0)
        assert served.w1.format == served.w2.format == "int4" and served.w1.colsums is not None
        ptrs = [t.data_ptr() for t in served.tensors()]
        before = [t.clone() for t in served.tensors()]
        comm.set_placement(SWAPPED, served, experts=experts)
        assert [t.data_ptr() for t in served.tensors()] == ptrs, "a slot tensor moved"
        assert not any(torch.equal(a, b) for a, b in zip(before, served.tensors())), "a slot tensor was not rewritten"
        held = SWAPPED.slot_experts(0, 0)
        sw1, sw2 = [w1[0][held]], [w2[0][held]]
        y, ys = cam.ops.gmm_swiglu_quant_multi_layer(x, xs, served.w1, counts, torch.tensor([0]))
        want_y, want_ys, rows = ref4.gmm_swiglu_quant_multi_layer_w4a8(x, xs, sw1, [s1[0][held]], counts, 0)
        assert rows == m
        assert int((y.to(torch.int16) - want_y.to(torch.int16)).abs().max()) <= 1
        assert torch.allclose(ys, want_ys, rtol=1e-6, atol=0)
        out = cam.ops.gmm_multi_layer(want_y, want_ys, served.w2, counts, torch.tensor([0]))
        want = ref4.gmm_multi_layer_w4a8(want_y, want_ys, sw2, [s2[0][held]], counts, 0)
        assert torch.equal(out.view(torch.int16), want.view(torch.int16))
        return comm.placement_epoch

    results, errors = run_ranks(topo, {0: lambda comm: (comm.set_placement(SWAPPED), comm.placement_epoch)[1],
                                       1: ffn}, timeout=60)
    raise_first(errors)
    assert results == {0: 1, 1: 1}


def test_a_rebalance_refuses_experts_of_another_format():
    """Served int4 slots and int8 experts (or the reverse) would copy bytes of one layout into the other: refused
    naming both formats."""
    topo = cam.Topology(**SMALL)
    ws = expert_set(topo, seed=31)
    q1 = [w.clamp(-8, 7) for w in ws.w1]
    q2 = [w.clamp(-8, 7) for w in ws.w2]

    def ffn(comm):
        experts = ws.experts()
        served = cam.FfnWeights(cam.LayerWeights(q1, [s.clone() for s in ws.s1], format="int4"),
                                cam.LayerWeights(q2, [s.clone() for s in ws.s2], format="int4"))
        with pytest.raises(ValueError, match=r"weights.w1 is format 'int4', experts.w1 'int8'"):
            comm.set_placement(SWAPPED, served, experts=experts)
        return comm.placement_epoch

    def attention(comm):
        with pytest.raises(PlacementError, match="rank 1 refused: ValueError"):
            comm.set_placement(SWAPPED)
        return comm.placement_epoch

    results, errors = run_ranks(topo, {0: attention, 1: ffn}, timeout=60)
    raise_first(errors)
    assert results == {0: 0, 1: 0}
