"""Expert placement in the data-plane kernels (docs/protocol.md §15): dispatch_send routes each (token, k) row by the
Comm's device placement table, the FFN side groups by local slot, combine_recv gets every row back from the rank it
went to. Bit-exact against cam.reference, which applies the documented rule (t + k0) % replicas(e) on its own (k0 the
token's first top-k index naming the expert): replicated experts, duplicate ids in a token's row, E % F != 0, layers
with different tables, chunked items, batched receive, many random rounds; a token's rows for one expert reach one
replica (a hand-written case); and a plane whose table is the contiguous one is bit-identical to a plane with no
table."""

from __future__ import annotations

import random
import threading

import pytest
import torch

import cam
from cam.placement import Placement
from _window_layout import WindowLayout
from _dataplane_harness import (Round, attention_body, check_against_golden, expert_set, ffn_batch_server,
                                ffn_server, make_rounds, raise_first, run_ranks, run_round_trip)

pytestmark = pytest.mark.timeout(240)


def random_placement(E: int, F: int, slots: int, L: int, seed: int) -> Placement:
    """Per layer its own table: every expert in one random slot, then the free slots dealt to random experts as
    extra replicas (at most F per expert; some slots stay empty)."""
    rng = random.Random(seed)
    layers = []
    for _ in range(L):
        free = [(f, j) for f in range(F) for j in range(slots)]
        rng.shuffle(free)
        reps = [[free.pop()] for _ in range(E)]
        for slot in free[: len(free) * 2 // 3]:
            e = rng.randrange(E)
            if len(reps[e]) < F:
                reps[e].append(slot)
        layers.append(reps)
    return Placement(E, F, slots, layers)


def ids_with_duplicates(topo: cam.Topology, seed: int):
    """make_rounds' ids_fn: random ids in [-1, E) where about a third of the top-k slots repeat an id an earlier
    slot of the same token already names (duplicates are legal: one row per slot)."""
    g = torch.Generator().manual_seed(seed)

    def fn(a: int, r: int, b: int) -> torch.Tensor:
        ids = torch.randint(-1, topo.E, (b, topo.K), generator=g, dtype=torch.int64)
        for t in range(b):
            for k in range(1, topo.K):
                if int(torch.randint(0, 3, (1,), generator=g)) == 0:
                    ids[t, k] = ids[t, int(torch.randint(0, k, (1,), generator=g))]
        return ids

    return fn


def splits_under_t_plus_k(p: Placement, rounds) -> int:
    """Rows whose replica under (t + k) % n differs from the documented rule's, (t + k0) % n: the rows a test must
    have for the duplicate rule to be exercised at all."""
    n = 0
    for per_rank in rounds:
        for rd in per_rank:
            for t, row in enumerate(rd.ids.tolist()):
                for k, e in enumerate(row):
                    if e >= 0:
                        reps = p.replicas(rd.layer, e)
                        n += reps[(t + k) % len(reps)] != reps[(t + row.index(e)) % len(reps)]
    return n


def test_replicated_experts_in_layers_with_their_own_tables():
    # 4 experts in 2 x 3 slots: replicas, empty slots, and a different table per layer (mixed layers per round)
    topo = cam.Topology(D=2, P=2, F=2, E=4, K=3, H=32, Bmax=6, L=3, expert_slots=3)
    p = random_placement(4, 2, 3, 3, seed=1)
    assert any(len(p.replicas(l, e)) > 1 for l in range(3) for e in range(4)), "the table must replicate"
    layers = [[(a // topo.P + r) % 3 for r in range(3)] for a in range(topo.A)]  # the participants of a replica agree
    rounds = make_rounds(topo, [[5, 6, 3]] * topo.A, seed=3, layers=layers, ids_fn=ids_with_duplicates(topo, 3))
    assert splits_under_t_plus_k(p, rounds) > 0, "no duplicate id of a replicated expert where the rules differ"
    run_round_trip(topo, rounds, placement=p, in_flight=2)


# The hand-made duplicate case of tests/test_placement.py: expert 0 on two replicas, 1 on one, 2 on three, 3 (never
# named) on one. Where each (t, k) row goes, by hand from (t + k0) % n (derivation there):
DUP_TABLE = [[(0, 0), (1, 0)], [(2, 0)], [(0, 1), (1, 1), (2, 1)], [(0, 2)]]
DUP_IDS = [[0, 0, 2, 2], [2, 0, 2, 0], [1, 0, -1, 0], [0, 2, 0, 0]]
# FFN index -> local slot -> the tokens of its rows, in the FFN rank's row order (slot, token, k):
DUP_RECEIVED = {0: {0: [0, 0, 1, 1], 1: [], 2: []},
                1: {0: [2, 2, 3, 3, 3], 1: [1, 1, 3], 2: []},
                2: {0: [2], 1: [0, 0], 2: []}}


def test_a_tokens_rows_for_one_expert_reach_one_replica():
    """dispatch_send on the hand-made case: each FFN rank receives exactly the rows written by hand (token t's row is
    the constant t + 1, unquantized, so a row names its token), so a token naming a replicated expert twice has both
    rows on one FFN rank in one slot; the round trip is bit-exact against cam.reference. With the rule (t + k) % n
    in the kernel, token 0's second row of expert 0 lands on FFN rank 1 and this fails."""
    topo = cam.Topology(D=1, P=1, F=3, E=4, K=4, H=32, Bmax=4, L=1, slots=1, quantized=False, expert_slots=3)
    p = Placement(4, 3, 3, [DUP_TABLE])
    x = (torch.arange(1, 5, dtype=torch.float32)[:, None] * torch.ones(1, topo.H)).to(torch.bfloat16)
    w = torch.rand((4, topo.K), generator=torch.Generator().manual_seed(1))
    rounds = [[Round(0, x, torch.tensor(DUP_IDS, dtype=torch.int32), w)]]
    bodies = {0: attention_body(rounds[0])}
    bodies.update({topo.A + f: ffn_server(topo, 1) for f in range(topo.F)})
    results, errors = run_ranks(topo, bodies, timeout=60, placement=p)
    raise_first(errors)
    for f in range(topo.F):  # the hand-written golden first, then the reference
        (item,) = results[topo.A + f].served
        want = DUP_RECEIVED[f]
        assert item.counts.tolist() == [len(want[j]) for j in range(topo.R)], (f, item.counts)
        tokens = [t for j in range(topo.R) for t in want[j]]
        assert torch.equal(item.rows, x[tokens]), (f, item.rows[:, 0])
    check_against_golden(topo, rounds, results, placement=p)


def test_60_experts_on_8_ffn_ranks():
    # E % F != 0, the hottest experts replicated: Placement.balanced gives 8 slots per rank
    p = Placement.balanced(60, 8, layers=2, replicate=[0, 7, 33, 59])
    topo = cam.Topology(D=1, P=1, F=8, E=60, K=4, H=32, Bmax=8, L=2, slots=1, expert_slots=p.slots_per_rank)
    assert topo.E % topo.F != 0
    rounds = make_rounds(topo, [[8, 5]], seed=5)
    run_round_trip(topo, rounds, placement=p)


def test_chunked_items_under_a_placement():
    # capacity 4 cuts each round into several work items per FFN rank
    topo = cam.Topology(D=2, P=1, F=2, E=3, K=2, H=32, Bmax=6, L=2, capacity=4, expert_slots=3)
    p = random_placement(3, 2, 3, 2, seed=7)
    rounds = make_rounds(topo, [[6, 4, 6]] * topo.A, seed=9, ids_fn=ids_with_duplicates(topo, 9))
    assert splits_under_t_plus_k(p, rounds) > 0
    run_round_trip(topo, rounds, placement=p)


def test_batched_receive_under_a_placement():
    topo = cam.Topology(D=3, P=1, F=2, E=5, K=2, H=32, Bmax=4, L=2, slots=1, expert_slots=4)
    p = random_placement(5, 2, 4, 2, seed=11)
    rounds = make_rounds(topo, [[4, 3]] * topo.A, seed=13, layers=[[0, 1], [1, 0], [1, 1]],
                         ids_fn=ids_with_duplicates(topo, 13))
    assert splits_under_t_plus_k(p, rounds) > 0
    bodies = {a: attention_body(rounds[a]) for a in range(topo.A)}
    for f in range(topo.F):
        bodies[topo.A + f] = ffn_batch_server(topo, topo.D * 2, row_budget=2 * topo.recv_rows)
    results, errors = run_ranks(topo, bodies, timeout=120, placement=p)
    raise_first(errors)
    check_against_golden(topo, rounds, results, placement=p)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_many_random_rounds_with_duplicates_and_replicas(seed):
    """Property: random tables per layer (replicas, empty slots), random rounds of random sizes and layers whose ids
    repeat within a token about a third of the time, two rounds in flight, capacity small enough to chunk: every
    round bit-exact against cam.reference (FFN payloads, counts, chunks and Attention outputs)."""
    rng = random.Random(seed)
    F, E, R = 3, 5, 3
    topo = cam.Topology(D=2, P=2, F=F, E=E, K=4, H=32, Bmax=6, L=3, capacity=10, expert_slots=R)
    p = random_placement(E, F, R, 3, seed=100 + seed)
    n_rounds = 24
    counts = [[rng.randint(0, topo.Bmax) for _ in range(n_rounds)] for _ in range(topo.D)]
    layers = [[rng.randrange(topo.L) for _ in range(n_rounds)] for _ in range(topo.D)]
    per_rank = [a // topo.P for a in range(topo.A)]  # the participants of a replica agree on B and the layer
    rounds = make_rounds(topo, [counts[d] for d in per_rank], seed=200 + seed, layers=[layers[d] for d in per_rank],
                         ids_fn=ids_with_duplicates(topo, 300 + seed))
    assert splits_under_t_plus_k(p, rounds) > 0
    run_round_trip(topo, rounds, placement=p, in_flight=2)


def test_duplicates_in_a_token_whose_ids_straddle_the_kernels_ids_window():
    """dispatch_send reads topk_ids through a UB window of 2048 ids (kTableWindowElems); with K = 3, token 682's ids
    are ids 2046..2048, so its k0 scan reads back across a refill. Every token names a replicated expert twice, the
    first time at a random index: bit-exact against cam.reference."""
    topo = cam.Topology(D=1, P=1, F=2, E=3, K=3, H=32, Bmax=800, L=1, slots=1, expert_slots=2)
    p = Placement(3, 2, 2, [[[(0, 0), (1, 0)], [(0, 1)], [(1, 1)]]])
    g = torch.Generator().manual_seed(27)

    def ids_fn(a, r, b):
        ids = torch.randint(1, 3, (b, 3), generator=g)
        first = torch.randint(0, 2, (b,), generator=g)
        ids[torch.arange(b), first] = 0
        ids[:, 2] = 0  # expert 0 at index first and at 2: (t + first) % 2 and (t + 2) % 2 differ when first = 1
        return ids

    rounds = make_rounds(topo, [[800]], seed=29, ids_fn=ids_fn)
    assert rounds[0][0].ids[682].tolist().count(0) >= 2
    assert splits_under_t_plus_k(p, rounds) > 0
    run_round_trip(topo, rounds, placement=p)


def test_every_block_routes_its_own_tokens_under_a_placement():
    """On the A3 description dispatch_send runs on many blocks, each routing its own tokens (destinations through
    the layer's table kept in UB, counts, token slots) and placing them after the blocks before it by a sum of the
    blocks' summaries (docs/protocol.md §6.1). Rounds of 0 to 300 tokens (up to 19 blocks) with replicated
    experts, duplicate ids and empty slots, two rounds in flight, chunked: bit-exact against cam.reference, whose
    index tables, token slots and counts know nothing of blocks."""
    F, E, R = 3, 7, 3
    topo = cam.Topology(D=2, P=1, F=F, E=E, K=4, H=32, Bmax=300, L=2, capacity=500, expert_slots=R)
    p = random_placement(E, F, R, 2, seed=41)
    rounds = make_rounds(topo, [[300, 0, 173, 299], [1, 300, 58, 300]], seed=43, layers=[[0, 1, 1, 0], [1, 0, 0, 1]],
                         ids_fn=ids_with_duplicates(topo, 47))
    assert splits_under_t_plus_k(p, rounds) > 0
    before = cam._C.platform()["name"]
    cam._C.set_twin_platform("ascend910_93")
    try:
        run_round_trip(topo, rounds, placement=p, in_flight=2, timeout=200)
    finally:
        cam._C.set_twin_platform(before)


def test_the_contiguous_table_is_bit_identical_to_no_table():
    topo = cam.Topology(D=1, P=2, F=2, E=4, K=2, H=32, Bmax=5, L=2, slots=1)
    rounds = make_rounds(topo, [[5, 4]] * topo.A, seed=17)
    plain = run_round_trip(topo, rounds)
    tabled = run_round_trip(topo, rounds, placement=Placement.contiguous(4, 2, layers=2))
    for a in range(topo.A):
        assert all(torch.equal(x, y) for x, y in zip(plain[a], tabled[a]))
    for f in range(topo.F):
        got, want = tabled[topo.A + f].served, plain[topo.A + f].served
        assert [(s.replica, s.seq, s.layer) for s in got] == [(s.replica, s.seq, s.layer) for s in want]
        assert all(torch.equal(x.rows, y.rows) and torch.equal(x.counts, y.counts) for x, y in zip(got, want))


def test_a_plane_is_refused_a_table_it_cannot_serve():
    needs = cam.Topology(D=1, P=1, F=2, E=3, K=2, H=32, Bmax=4, L=1, expert_slots=2)
    with pytest.raises(ValueError, match="placement is required"):
        cam.Comm(needs, 0, group="placement-needed")
    with pytest.raises(ValueError, match=r"\(E, F, slots_per_rank, L\) = \(3, 2, 3, 1\)"):
        cam.Comm(needs, 0, group="placement-shape", placement=Placement.balanced(3, 2, layers=1, slots_per_rank=3))
    with pytest.raises(TypeError, match="placement must be a cam.placement.Placement"):
        cam.Comm(needs, 0, group="placement-type", placement=[[(0, 0)]])
    with pytest.raises(ValueError, match="expert_slots"):
        cam.Topology(D=1, P=1, F=2, E=5, K=2, H=32, Bmax=4, L=1, expert_slots=2)  # 4 slots for 5 experts
    with pytest.raises(ValueError, match="E = 3: must be a multiple of F"):
        cam.Topology(D=1, P=1, F=2, E=3, K=2, H=32, Bmax=4, L=1)


def test_threads_created_with_different_tables_are_refused_on_every_rank():
    """Threads as ranks join in C on the topology alone: the placement is compared right after, as the shm/npu
    handshake compares it, so a plane whose ranks hold different tables is refused on every rank (naming the rank
    that differs) before any op runs, and each rank's window is released."""
    topo = cam.Topology(D=1, P=1, F=2, E=3, K=2, H=32, Bmax=4, L=1, expert_slots=2)
    p = Placement.balanced(3, 2, layers=1, replicate=[0])
    q = Placement.balanced(3, 2, layers=1, replicate=[2])
    results, errors = run_ranks(topo, {r: (lambda comm: True) for r in range(topo.world_size)}, timeout=60,
                                placement=p, rank_kw={1: {"placement": q}})
    assert not results and sorted(errors) == [0, 1, 2], (results, errors)
    for r, e in errors.items():
        assert isinstance(e, cam.placement.PlacementError), e
        assert "rank(s) 1 were created with another placement table than rank 0" in str(e), e
    results, errors = run_ranks(topo, {r: (lambda comm: True) for r in range(topo.world_size)}, timeout=60,
                                placement=p)
    raise_first(errors)
    assert all(results.values())


def test_a_rebalance_mid_run():
    """Two rounds per replica under table p, a rebalance on every rank (Attention: the device table in place; FFN:
    slot weights copied into the buffers they already have), two rounds under q: every round bit-exact against the
    golden under its own table, and no slot buffer moved."""
    topo = cam.Topology(D=2, P=1, F=2, E=3, K=2, H=32, Bmax=5, L=2, expert_slots=3)
    p, q = random_placement(3, 2, 3, 2, seed=21), random_placement(3, 2, 3, 2, seed=22)
    assert p.digest() != q.digest()
    ws = expert_set(topo, seed=23)
    rounds = make_rounds(topo, [[5, 4, 5, 3]] * topo.A, seed=25)
    first = {}

    def attention(a):
        def body(comm):
            outs = attention_body(rounds[a][:2])(comm)
            with pytest.raises(cam.placement.PlacementError, match="racing a round"):
                cam.ops.dispatch_send(comm, rounds[a][2].x, rounds[a][2].ids, rounds[a][2].layer)
                try:
                    comm.set_placement(q)
                finally:
                    outs.append(cam.ops.combine_recv(comm, rounds[a][2].ids, rounds[a][2].w))
            first[a] = comm.set_placement(q)
            return outs + attention_body(rounds[a][3:])(comm)
        return body

    def ffn(f):
        def body(comm):
            experts = ws.experts()
            served = experts.slots(p, f)
            ptrs = [t.data_ptr() for t in served.tensors()]
            log = ffn_server(topo, topo.D * 3)(comm)
            # the Attention ranks' first call refused the attempt (a round in flight): this rank's first call is
            # that attempt, and it learns so; its second is the retry
            with pytest.raises(cam.placement.PlacementError, match="racing a round"):
                comm.set_placement(q, served, experts=experts)
            assert comm.set_placement(q, served, experts=experts) == 0
            want = experts.slots(q, f)
            assert [t.data_ptr() for t in served.tensors()] == ptrs, "a slot buffer moved"
            assert all(torch.equal(x, y) for x, y in zip(served.tensors(), want.tensors()))
            log.served += ffn_server(topo, topo.D)(comm).served
            return log
        return body

    bodies = {a: attention(a) for a in range(topo.A)}
    bodies.update({topo.A + f: ffn(f) for f in range(topo.F)})
    results, errors = run_ranks(topo, bodies, timeout=120, placement=p)
    raise_first(errors)
    assert first == {a: 4 for a in range(topo.A)}  # the 4th round of each rank is the first under q
    check_against_golden(topo, rounds, results, placement=[p, p, p, q])


def test_a_rebalance_with_tables_that_differ_across_ranks_changes_nothing():
    topo = cam.Topology(D=1, P=1, F=2, E=3, K=2, H=32, Bmax=4, L=1, expert_slots=2)
    p = Placement.balanced(3, 2, layers=1, replicate=[0])
    others = {0: Placement.balanced(3, 2, layers=1, replicate=[2])}
    experts = expert_set(topo, seed=4).experts()

    def body(comm):
        before = None if comm.placement_table is None else comm.placement_table.clone()
        kw = {}
        if comm.rank >= topo.A:
            kw = {"weights": experts.slots(p, comm.rank - topo.A), "experts": experts}
        with pytest.raises(cam.placement.PlacementError, match=r"tables differ across ranks: rank\(s\) 1, 2"):
            comm.set_placement(others.get(comm.rank, Placement(3, 2, 2, [[[(1, 1)], [(1, 0)], [(0, 0), (0, 1)]]])),
                               **kw)
        assert comm.placement is p
        if before is not None:
            assert torch.equal(comm.placement_table, before)
        with pytest.raises(cam.placement.PlacementError, match="FFN index 2, outside the FFN set"):
            Placement(3, 2, 2, [[[(2, 0)], [(0, 1)], [(1, 0)]]])
        return True

    results, errors = run_ranks(topo, {r: body for r in range(topo.world_size)}, timeout=60, placement=p)
    raise_first(errors)
    assert all(results.values())


def test_a_rebalance_under_a_queued_replay_of_a_captured_ffn_loop_is_refused():
    """A captured FFN loop is invisible to the eager op counts: set_placement on an FFN rank whose stream still has
    replays queued refuses (naming the race) and leaves every slot buffer as it was; once they ended it goes on."""
    from _dataplane_harness import capture_batched_loop

    topo = cam.Topology(D=1, P=1, F=2, E=3, K=2, H=32, Bmax=4, L=1, expert_slots=2)
    p, q = Placement.balanced(3, 2, layers=1, replicate=[0]), Placement.balanced(3, 2, layers=1, replicate=[2])
    experts = expert_set(topo, seed=6).experts()

    def ffn(comm):
        served = experts.slots(p, 0)
        before = [t.clone() for t in served.tensors()]
        graph, _, _ = capture_batched_loop(topo, comm)
        for _ in range(3):  # nothing is dispatched: each replay idles idle_poll_s, so they stay queued
            graph.replay(synchronize=False)
        try:
            with pytest.raises(cam.placement.PlacementError, match="racing a captured replay"):
                comm.set_placement(q, served, experts=experts)
        finally:
            graph.synchronize()
        assert all(torch.equal(x, y) for x, y in zip(served.tensors(), before)), "a refused rebalance wrote"
        graph.reset()
        return True

    # only FFN rank 0 calls set_placement: its own refusal decides the attempt, so it waits for no other rank
    results, errors = run_ranks(topo, {topo.A: ffn}, timeout=60, placement=p, idle_poll_s=0.5)
    raise_first(errors)
    assert results[topo.A]


def test_a_rebalance_under_a_queued_replay_of_a_captured_dispatch_send_is_refused():
    """The Attention side: a captured dispatch_send is not counted either. With one slot and no FFN rank serving,
    the second replay waits for the slot, so it is queued when set_placement runs: refused, the device table
    unchanged. The replay then times out (nothing serves it), which is its own, expected, error."""
    from cam.graph import Graph

    topo = cam.Topology(D=1, P=1, F=2, E=3, K=2, H=32, Bmax=4, L=1, slots=1, expert_slots=2)
    p, q = Placement.balanced(3, 2, layers=1, replicate=[0]), Placement.balanced(3, 2, layers=1, replicate=[2])
    x = torch.randn(4, 32).to(torch.bfloat16)
    ids = torch.tensor([[0, 1], [2, 0], [1, 2], [0, 2]], dtype=torch.int32)

    def attention(comm):
        before = comm.placement_table.clone()
        graph = Graph()
        with graph.capture(stream=comm.stream):
            cam.ops.dispatch_send(comm, x, ids, 0)
        graph.replay(synchronize=False)
        graph.replay(synchronize=False)  # waits for slot 0, which no FFN rank frees
        with pytest.raises(cam.placement.PlacementError, match="racing a captured replay"):
            comm.set_placement(q)
        assert torch.equal(comm.placement_table, before), "a refused rebalance rewrote the table"
        with pytest.raises(cam.CommTimeoutError):
            graph.synchronize()
        return True

    results, errors = run_ranks(topo, {0: attention}, timeout=60, placement=p, timeout_s=2.0)
    raise_first(errors)
    assert results[0]


def _shm_rebalance_rank(rank, store_path, group, out):
    """One process of test_a_rebalance_over_shm_processes: a round under P_SHM, set_placement(Q_SHM), a round
    under Q_SHM; puts (rank, what it saw) or (rank, the error) on ``out``."""
    from torch.distributed import FileStore

    t, p, q = _SHM_TOPO(), *_SHM_TABLES()
    rounds = make_rounds(t, [[4, 3]], seed=31)
    experts = expert_set(t, seed=32).experts()
    try:
        with cam.Comm(t, rank, transport="shm", store=FileStore(store_path, t.world_size), group=group,
                      placement=p, timeout_s=60) as comm:
            if rank < t.A:
                outs = attention_body(rounds[rank][:1])(comm)
                seq = comm.set_placement(q)
                outs += attention_body(rounds[rank][1:])(comm)
                # as plain ints: a tensor on a queue is shared through the child's fds, gone once it exits
                out.put((rank, (seq, int(comm.placement_buffer[0]), [o.view(torch.int16).tolist() for o in outs])))
            else:
                served = experts.slots(p, rank - t.A)
                first = ffn_server(t, t.D)(comm)
                comm.set_placement(q, served, experts=experts)
                w = comm._c.weights_epoch()
                second = ffn_server(t, t.D)(comm)
                epoch = WindowLayout(t).work_item_epoch
                out.put((rank, (w, [int(s.work_item[epoch]) for s in first.served + second.served])))
    except BaseException as e:  # noqa: BLE001 - reported by the test
        out.put((rank, e))


def _SHM_TOPO():
    return cam.Topology(D=1, P=1, F=2, E=3, K=2, H=32, Bmax=4, L=2, slots=1, expert_slots=2)


def _SHM_TABLES():
    return (Placement(3, 2, 2, [[[(0, 0), (1, 1)], [(1, 0)], [(0, 1)]]] * 2),
            Placement(3, 2, 2, [[[(1, 0)], [(0, 0), (1, 1)], [(0, 1)]]] * 2))


@pytest.mark.slow  # three spawned processes import torch and cam: about 10 s on two shared CPUs
def test_a_rebalance_over_shm_processes(tmp_path):
    """set_placement with processes as ranks (shm transport: the digests through the Store, the weights epoch
    through the transport's word access): the Attention rank's table moves to epoch 1, every FFN rank's weights
    epoch too, the items of the round after it carry epoch 1, and both rounds are bit-exact against the golden
    under their own tables."""
    import multiprocessing as mp

    from _dataplane_harness import unique_group

    t, (p, q) = _SHM_TOPO(), _SHM_TABLES()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    group = unique_group("shm-rebalance")
    procs = [ctx.Process(target=_shm_rebalance_rank, args=(r, str(tmp_path / "store"), group, out), daemon=True)
             for r in range(t.world_size)]
    for pr in procs:
        pr.start()
    try:
        got = dict(out.get(timeout=180) for _ in procs)
    finally:
        for pr in procs:
            pr.join(60)
            if pr.is_alive():
                pr.kill()
    errors = {r: v for r, v in got.items() if isinstance(v, BaseException)}
    raise_first(errors)
    seq, epoch, outs = got[0]
    assert (seq, epoch) == (2, 1)
    for f in range(t.F):
        assert got[t.A + f] == (1, [0, 1]), got[t.A + f]
    rounds = make_rounds(t, [[4, 3]], seed=31)
    from cam.reference.dispatch_combine import round_trip_plane
    from cam.reference.dynamic_quant import dynamic_quant
    from _dataplane_harness import expert_fn

    for r, table in enumerate((p, q)):
        rd = rounds[0][r]
        gold = round_trip_plane(t, [(rd.x, rd.ids, rd.w)], expert_fn(t.quantized, torch.bfloat16),
                                quant_fn=dynamic_quant, global_ids=True, placement=table, layer=rd.layer)["out"]
        assert outs[r] == gold[0].view(torch.int16).tolist(), r
