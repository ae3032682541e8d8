"""Batched dispatch_recv and combine_send (docs/protocol.md §6.2, §6.3, §7): a snapshot takes every ready replica's
next chunk within a row budget, one group table spans the items' layers, and combine_send serves the batch as if
each item had been served alone. The selections are the golden's (cam.reference.dispatch_combine.batch_select)."""

from __future__ import annotations

import importlib
import threading

import pytest
import torch

import cam
from cam.reference.dispatch_combine import batch_select, chunk_bounds, group_table, round_trip_plane
from cam.reference.dynamic_quant import dynamic_quant
from _window_layout import WindowLayout
from _dataplane_harness import (FfnLog, check_against_golden, ffn_batch_server, make_rounds, raise_first, run_ranks,
                                run_round_trip, serve_batch)
from _topology import topology_with

pytestmark = pytest.mark.timeout(180)


topo = topology_with(D=3, P=1, F=1, E=4, K=2, H=32, Bmax=6, L=2, slots=2)


def attention_first_published(rounds, published: threading.Barrier):
    """Attention body: dispatch round 0, meet the other Attention ranks (so every replica is ready before the FFN's
    first poll), then combine it and run the rest of its rounds one at a time."""

    def body(comm):
        outs = []
        for r, rd in enumerate(rounds):
            cam.ops.dispatch_send(comm, rd.x, rd.ids, rd.layer)
            if r == 0:
                published.wait(60)
            outs.append(cam.ops.combine_recv(comm, rd.ids, rd.w))
        return outs

    return body


def run_batched(t, rounds, row_budget, *, all_ready_first=True, timeout=90.0):
    published = threading.Barrier(t.A + 1) if all_ready_first else None
    start = threading.Event()
    bodies = {}
    for a in range(t.A):
        bodies[a] = attention_first_published(rounds[a], published) if all_ready_first else _plain(rounds[a])
    for f in range(t.F):
        bodies[t.A + f] = ffn_batch_server(t, t.D * len(rounds[0]), row_budget, start=start if all_ready_first else None)
    if all_ready_first:
        threading.Thread(target=lambda: (published.wait(60), start.set()), daemon=True).start()
    results, errors = run_ranks(t, bodies, timeout=timeout, idle_poll_s=0.02)
    raise_first(errors)
    return results


def _plain(rounds):
    def body(comm):
        outs = []
        for rd in rounds:
            cam.ops.dispatch_send(comm, rd.x, rd.ids, rd.layer)
            outs.append(cam.ops.combine_recv(comm, rd.ids, rd.w))
        return outs
    return body


def test_one_snapshot_takes_every_ready_item_of_two_layers_bit_identical_to_one_by_one():
    """Three replicas on two layers, all published before the FFN's first poll: one batched dispatch_recv takes all
    three (one group table over both layers), one combine_send returns them, and every rank's output is
    bit-identical to the one-item mode's run."""
    t = topo()
    layers = [[0, 1], [1, 0], [0, 0]]
    rounds = make_rounds(t, [[5, 4], [6, 2], [3, 6]], seed=3, layers=layers)
    one_by_one = run_round_trip(t, rounds)
    res = run_batched(t, rounds, row_budget=t.D * t.recv_rows)
    check_against_golden(t, rounds, res)
    log: FfnLog = res[t.A]
    assert sorted(log.batches[0]) == [0, 1, 2], log.batches
    assert {s.layer for s in log.served[:3]} == {0, 1}
    for a in range(t.A):
        for r in range(2):
            assert torch.equal(res[a][r], one_by_one[a][r]), (a, r)


def test_group_table_origin_and_empty_slots_match_the_golden():
    """The group table is the golden's (item i's groups at i*R..), unused item slots are empty items with
    {0, j, 0} groups, and each row's origin is the (replica, participant, t*K + k) it came from."""
    t = topo(P=2, D=2, F=2, E=4)
    rounds = make_rounds(t, [[4], [5], [3], [6]], seed=5, layers=[[1], [1], [0], [0]])
    seen = {}

    def inspect(comm, ex, sc, groups, origin, items, out):
        f = comm.rank - t.A
        work = [i for i in range(items.shape[0]) if int(items[i, 0]) == 1]
        want = group_table([(int(items[i, 2]), items[i, 8:8 + t.R].tolist()) for i in work], items.shape[0], t.R)
        assert torch.equal(groups, want)
        for i in range(items.shape[0]):
            if i not in work:
                assert int(items[i, 1]) == -1 and int(items[i, 5]) == 0
        golden = round_trip_plane(t, [(rounds[a][0].x, rounds[a][0].ids, rounds[a][0].w) for a in range(t.A)],
                                  lambda e, rows, s: rows.to(torch.bfloat16), quant_fn=dynamic_quant, global_ids=True)
        base, chunk = 0, int(WindowLayout(t).work_item_chunk_off)
        for i in work:
            d, n, lo = int(items[i, 1]), int(items[i, 5]), int(items[i, chunk])
            src = golden["dispatch"][(d, comm.rank)]["row_source"][lo:lo + n]
            want_origin = torch.tensor([(d, p, tk * t.K + k) for p, tk, k in src], dtype=torch.int64).reshape(n, 3)
            assert torch.equal(origin[base:base + n], want_origin), (comm.rank, i)
            base += n
        seen[f] = len(work)

    published = threading.Barrier(t.A + 1)
    start = threading.Event()
    bodies = {a: attention_first_published(rounds[a], published) for a in range(t.A)}
    for f in range(t.F):
        bodies[t.A + f] = ffn_batch_server(t, t.D, 4 * t.recv_rows, start=start, before_combine=inspect)
    threading.Thread(target=lambda: (published.wait(60), start.set()), daemon=True).start()
    results, errors = run_ranks(t, bodies, timeout=90, idle_poll_s=0.02)
    raise_first(errors)
    check_against_golden(t, rounds, results)
    assert seen == {0: 2, 1: 2}


def test_selection_is_the_golden_round_robin_and_keeps_the_fairness_bound():
    """Four replicas all ready, a budget that holds about two chunks: every batch is batch_select's, a replica that
    is ready is served within D batches, and the pointer moves past the last one taken."""
    t = topo(D=4, E=4, capacity=6)
    rounds = make_rounds(t, [[6], [2], [5], [4]], seed=9, layers=[[0], [1], [0], [1]])
    budget = 2 * t.recv_rows
    res = run_batched(t, rounds, row_budget=budget)
    check_against_golden(t, rounds, res)
    log: FfnLog = res[t.A]
    # Replay the golden: each replica's chunks of its one round, in order; a replica is ready until its last chunk.
    golden = round_trip_plane(t, [(rounds[a][0].x, rounds[a][0].ids, rounds[a][0].w) for a in range(t.A)],
                              lambda e, rows, s: rows.to(torch.bfloat16), quant_fn=dynamic_quant, global_ids=True)
    pending = {d: chunk_bounds(golden["dispatch"][(d, t.A)]["counts"].tolist(), t.recv_rows) for d in range(t.D)}
    rr, first_ready = 0, {d: 0 for d in range(t.D)}
    for b, got in enumerate(log.batches):
        ready = [pending[d][0][1] - pending[d][0][0] if pending[d] else None for d in range(t.D)]
        want, rr = batch_select(ready, rr, budget, min(t.D, 64))
        assert got == want, (b, got, want)
        for d in got:
            pending[d].pop(0)
        for d in range(t.D):
            if pending[d] and d not in got:
                assert b - first_ready[d] < t.D, f"replica {d} waited more than D batches"
            elif d in got:
                first_ready[d] = b + 1
    assert not any(pending.values())


def test_random_rounds_mixed_layers_and_chunks():
    """Random rounds, layers and chunking (capacity below the worst case), replicas not synchronized: batched
    serving matches the golden exactly, every item once, in each replica's chunk order."""
    g = torch.Generator().manual_seed(17)
    for trial in range(2):
        t = topo(D=3, P=2, F=2, E=8, K=3, capacity=int(torch.randint(3, 12, (1,), generator=g)))
        counts = [[int(torch.randint(0, t.Bmax + 1, (1,), generator=g)) for _ in range(3)] for _ in range(t.A)]
        layers = [[int(torch.randint(0, t.L, (1,), generator=g)) for _ in range(3)] for _ in range(t.D)]
        layers = [layers[a // t.P] for a in range(t.A)]
        rounds = make_rounds(t, counts, seed=trial, layers=layers)
        budget = t.recv_rows * int(torch.randint(1, 4, (1,), generator=g))
        res = run_batched(t, rounds, row_budget=budget, all_ready_first=False)
        check_against_golden(t, rounds, res)


def test_a_row_budget_below_one_work_item_is_refused_before_anything_runs():
    """A budget below one work item's rows (recv_rows), below one token's rows (K) among them, is refused naming
    row_budget, before anything is allocated or launched; so are a non-int and a non-positive one."""
    t = topo()

    def ffn(comm):
        for budget in (t.recv_rows - 1, t.K - 1):
            with pytest.raises(cam.InvalidArgumentError,
                               match=f"dispatch_recv: row_budget {budget} is smaller than one work item's rows"):
                cam.ops.dispatch_recv(comm, row_budget=budget)
        with pytest.raises(cam.InvalidArgumentError, match="row_budget must be positive, got 0"):
            cam.ops.dispatch_recv(comm, row_budget=0)
        with pytest.raises(TypeError, match="row_budget must be an int"):
            cam.ops.dispatch_recv(comm, row_budget=2.0)
        specs = importlib.import_module("cam.ops.dispatch_recv").batch_output_specs(comm, t.recv_rows)
        out = tuple(torch.empty(s, dtype=d) for d, s in specs)
        bad = (out[0], out[1], out[2][:-1], out[3], out[4])
        with pytest.raises(cam.InvalidArgumentError, match="group_table"):
            cam.ops.dispatch_recv(comm, row_budget=t.recv_rows, out=bad)
        return True

    results, errors = run_ranks(t, {t.A: ffn}, timeout=30, idle_poll_s=0.02)
    raise_first(errors)


def test_idle_batch_is_all_empty_and_combines_as_a_no_op():
    t = topo()

    def ffn(comm):
        log = FfnLog()
        for _ in range(2):
            assert serve_batch(t, comm, 2 * t.recv_rows, log) == 0
        return log.empties

    results, errors = run_ranks(t, {t.A: ffn}, timeout=30, idle_poll_s=0.02)
    raise_first(errors)
    assert results[t.A] == 2


# ----------------------------------------------------------------------------- the FFN chain over a batch

def _weights(t, inter=16, seed=21):
    g = torch.Generator().manual_seed(seed)
    return (cam.LayerWeights.random(t.R, t.L, t.H, 2 * inter, g), cam.LayerWeights.random(t.R, t.L, inter, t.H, g))


def _launches():
    return (cam._C.launch_count("gmm_swiglu_quant_multi_layer"), cam._C.launch_count("gmm_multi_layer"))


def _ffn_one_by_one(t, w1, w2, n_rounds):
    def body(comm):
        done = 0
        while done < n_rounds:
            ex, sc, cnt, wi = cam.ops.dispatch_recv(comm)
            y, ys = cam.ops.gmm_swiglu_quant_multi_layer(ex, sc, w1, cnt, cam.WorkItem(wi).layer_index)
            out = cam.ops.gmm_multi_layer(y, ys, w2, cnt, cam.WorkItem(wi).layer_index)
            cam.ops.combine_send(comm, out, wi)
            view = cam.WorkItem(wi)
            done += view.kind == 1 and view.rows + int(wi[WindowLayout(t).work_item_chunk_off]) == \
                int(wi[WindowLayout(t).work_item_chunk_off + 1])
        return done
    return body


def _ffn_batched(t, w1, w2, n_rounds, budget, start):
    chunk = WindowLayout(t).work_item_chunk_off

    def body(comm):
        assert start.wait(60), "the Attention ranks never published"
        done, batches = 0, []
        while done < n_rounds:
            before = _launches()
            ex, sc, groups, origin, items = cam.ops.dispatch_recv(comm, row_budget=budget)
            y, ys = cam.ops.gmm_swiglu_quant_multi_layer(ex, sc, w1, groups, None, cam.ops.gmm.GROUP_TABLE)
            out = cam.ops.gmm_multi_layer(y, ys, w2, groups, None, cam.ops.gmm.GROUP_TABLE)
            cam.ops.combine_send(comm, out, items)
            after = _launches()
            work = [i for i in range(items.shape[0]) if int(items[i, 0]) == 1]
            if work:
                batches.append(([int(items[i, 2]) for i in work], after[0] - before[0], after[1] - before[1]))
            done += sum(int(items[i, 5]) + int(items[i, chunk]) == int(items[i, chunk + 1]) for i in work)
        return batches
    return body


def test_one_w1_and_one_w2_launch_serve_three_items_of_two_layers_bit_identical_to_one_by_one():
    t = topo()
    w1, w2 = _weights(t)
    layers = [[0, 1], [1, 1], [0, 0]]
    rounds = make_rounds(t, [[5, 4], [6, 2], [3, 6]], seed=13, layers=layers)
    n = t.D * 2

    bodies = {a: _plain(rounds[a]) for a in range(t.A)}
    bodies[t.A] = _ffn_one_by_one(t, w1, w2, n)
    ref_res, errors = run_ranks(t, bodies, timeout=90, idle_poll_s=0.02)
    raise_first(errors)

    published = threading.Barrier(t.A + 1)
    start = threading.Event()
    bodies = {a: attention_first_published(rounds[a], published) for a in range(t.A)}
    bodies[t.A] = _ffn_batched(t, w1, w2, n, t.D * t.recv_rows, start)
    threading.Thread(target=lambda: (published.wait(60), start.set()), daemon=True).start()
    res, errors = run_ranks(t, bodies, timeout=90, idle_poll_s=0.02)
    raise_first(errors)

    first_layers, w1_launches, w2_launches = res[t.A][0]
    assert len(first_layers) == 3 and set(first_layers) == {0, 1}, res[t.A]
    assert (w1_launches, w2_launches) == (1, 1), "one W1 and one W2 launch serve the whole batch"
    for a in range(t.A):
        for r in range(2):
            assert torch.equal(res[a][r], ref_res[a][r]), (a, r)


def test_the_batched_ffn_loop_is_captured_once_and_replayed():
    """Static shapes, no host read: the batched loop (dispatch_recv batch -> W1 -> W2 -> combine_send batch) is
    captured once and replayed until every round is in; the Attention outputs are bit-identical to the eager
    one-by-one run."""
    from cam.graph import Graph

    t = topo()
    w1, w2 = _weights(t)
    rounds = make_rounds(t, [[5, 4], [6, 2], [3, 6]], seed=29, layers=[[0, 1], [1, 0], [1, 1]])
    bodies = {a: _plain(rounds[a]) for a in range(t.A)}
    bodies[t.A] = _ffn_one_by_one(t, w1, w2, t.D * 2)
    ref_res, errors = run_ranks(t, bodies, timeout=90, idle_poll_s=0.02)
    raise_first(errors)

    budget = 2 * t.recv_rows
    chunk = WindowLayout(t).work_item_chunk_off

    def ffn(comm):
        specs = importlib.import_module("cam.ops.dispatch_recv").batch_output_specs(comm, budget)
        recv = tuple(torch.zeros(s, dtype=d) for d, s in specs)
        ex, sc, groups, origin, items = recv
        items[:, 0] = 0  # kind empty: the warm-up below is a no-op
        y, ys = cam.ops.gmm_swiglu_quant_multi_layer(ex, sc, w1, groups, None, cam.ops.gmm.GROUP_TABLE)
        out = cam.ops.gmm_multi_layer(y, ys, w2, groups, None, cam.ops.gmm.GROUP_TABLE)
        g = Graph()
        # Ranks here are threads of one process: under GLOBAL another rank's synchronize would break this capture.
        with g.capture(stream=comm.stream, mode="thread_local"):
            cam.ops.dispatch_recv(comm, row_budget=budget, out=recv)
            cam.ops.gmm_swiglu_quant_multi_layer(ex, sc, w1, groups, None, cam.ops.gmm.GROUP_TABLE, out=(y, ys))
            cam.ops.gmm_multi_layer(y, ys, w2, groups, None, cam.ops.gmm.GROUP_TABLE, out=out)
            cam.ops.combine_send(comm, out, items)
        done, replays = 0, 0
        while done < t.D * 2:
            assert replays < 200, "the replays never served every round"
            g.replay()
            replays += 1
            done += sum(int(items[i, 0]) == 1 and int(items[i, 5]) + int(items[i, chunk]) == int(items[i, chunk + 1])
                        for i in range(items.shape[0]))
        g.reset()
        return replays

    bodies = {a: _plain(rounds[a]) for a in range(t.A)}
    bodies[t.A] = ffn
    res, errors = run_ranks(t, bodies, timeout=90, idle_poll_s=0.02)
    raise_first(errors)
    for a in range(t.A):
        for r in range(2):
            assert torch.equal(res[a][r], ref_res[a][r]), (a, r)


def test_a_batch_with_one_tampered_word_is_refused_whole_before_anything_is_written():
    """combine_send of a batch checks every item before it writes: any word of either item tampered (or the same
    replica's item twice) refuses the whole call with no window changed on any rank, and the genuine batch then
    completes both rounds exactly."""
    from test_safety import golden_out, make_round, plane, refused_unchanged, tamper_values

    t = cam.Topology(D=2, P=1, F=1, E=4, K=2, H=32, Bmax=4, L=2, slots=1)
    with plane(t, timeout_s=120) as comms:
        rounds = [make_round(t, a, 5) for a in range(t.A)]
        for a in range(t.A):
            cam.ops.dispatch_send(comms[a], rounds[a][0], rounds[a][1], a % t.L)
        ffn, budget = t.A, 2 * t.recv_rows
        ex, sc, groups, origin, items = cam.ops.dispatch_recv(comms[ffn], row_budget=budget)
        assert [int(items[i, 0]) for i in range(items.shape[0])] == [1, 1], "both replicas were ready"
        n = int(groups[:, 2].sum())
        out = torch.zeros((budget, t.H), dtype=torch.bfloat16)
        e = torch.repeat_interleave(groups[:, 1], groups[:, 2])
        out[:n] = (ex[:n].float() * sc[:n, None] * (e.float() + 1)[:, None]).to(torch.bfloat16)
        trials = 0
        for i in range(items.shape[0]):
            for w in range(t.work_item_words):
                values = tamper_values(int(items[i, w]))
                for v in (values if i == 1 else values[:1]):
                    forged = items.clone()
                    forged[i, w] = v
                    refused_unchanged(comms, ffn, out, forged, f"item {i} word {w} = {v}")
                    trials += 1
        twice = items.clone()
        twice[1] = items[0]
        refused_unchanged(comms, ffn, out, twice, "one replica's item twice")
        assert trials >= 6 * t.work_item_words
        cam.ops.combine_send(comms[ffn], out, items)
        gold = golden_out(t, rounds)
        for a in range(t.A):
            assert torch.equal(cam.ops.combine_recv(comms[a], rounds[a][1], rounds[a][2]), gold[a]), a
