"""cam.placement (docs/protocol.md §15): the table's checks, the replica rule bit for bit as documented, the
contiguous default, any E and F with replicated experts, and LayerWeights laid out per FFN rank from a table."""

from __future__ import annotations

import pytest
import torch

import cam
from cam.placement import Placement, PlacementError


def test_contiguous_is_todays_arithmetic():
    p = Placement.contiguous(8, 2, layers=2)
    for e in range(8):
        assert p.replicas(1, e) == ((e // 4, e % 4),)
        assert p.replica(0, [7, e, e], token=5, k=2) == (e // 4, e % 4)
    assert p.slot_experts(0, 1) == [4, 5, 6, 7]


def _contiguous_by_counts(E, F):
    """The documented contiguous layout written from its per-rank counts, not from ``e * F // E``: FFN index f
    holds the next ceil((f + 1) E / F) - ceil(f E / F) experts in order, in slots 0, 1, ..."""
    reps, e = [], 0
    for f in range(F):
        n = -(-(f + 1) * E // F) - -(-f * E // F)
        reps += [(f, j) for j in range(n)]
        e += n
    assert e == E
    return reps


def test_contiguous_takes_any_e_and_f_floor_or_ceil_per_rank():
    # Hand-written counts per FFN index: the ceil ranks spread evenly from index 0.
    for (E, F), counts in {(8, 3): [3, 3, 2], (10, 4): [3, 2, 3, 2], (7, 2): [4, 3], (5, 5): [1] * 5,
                           (9, 6): [2, 1, 2, 1, 2, 1], (256, 3): [86, 85, 85]}.items():
        p = Placement.contiguous(E, F, layers=1)
        got = [sum(1 for e in p.slot_experts(0, f) if e >= 0) for f in range(F)]
        assert got == counts, (E, F)
    for E in range(1, 41):
        for F in range(1, E + 1):
            p = Placement.contiguous(E, F, layers=2)
            want = _contiguous_by_counts(E, F)
            assert [p.replicas(1, e) for e in range(E)] == [(r,) for r in want], (E, F)
            assert p.slots_per_rank == -(-E // F)
            counts = [sum(1 for e in p.slot_experts(0, f) if e >= 0) for f in range(F)]
            assert set(counts) <= {E // F, -(-E // F)} and counts.count(-(-E // F)) == (E % F or F), (E, F)
            if E % F == 0:  # today's layout, the one a Comm without a table routes by
                assert want == [(e // (E // F), e % (E // F)) for e in range(E)]


def test_contiguous_refuses_fewer_experts_than_ffn_ranks_by_name():
    with pytest.raises(PlacementError, match=r"Placement.contiguous: E = 2 experts cannot fill F = 3 FFN ranks"):
        Placement.contiguous(2, 3, layers=1)


def test_the_replica_rule_without_duplicates_is_t_plus_k_mod_replicas():
    # 60 experts on 8 FFN ranks (E % F != 0), the 4 hottest replicated once more
    p = Placement.balanced(60, 8, layers=1, replicate=[3, 17, 17, 42, 59])
    assert p.slots_per_rank == 8  # ceil((60 + 4) / 8)
    for e in (3, 17, 42, 59):
        reps = p.replicas(0, e)
        assert len(reps) == 2 and reps[0][0] != reps[1][0], "a replica on another rank"
        for t in range(5):
            for k in range(4):
                row = [e if i == k else 10 + i for i in range(4)]  # e once, at index k
                assert p.replica(0, row, t, k) == reps[(t + k) % 2]
    assert all(len(p.replicas(0, e)) == 1 for e in range(60) if e not in (3, 17, 42, 59))
    ids = torch.tensor([[3, 17, -1], [3, 3, 59]])
    r = p.route(0, ids)
    assert r[0, 2].tolist() == [-1, -1]
    assert r[0, 1].tolist() == list(p.replicas(0, 17)[(0 + 1) % 2])
    assert r[1, 0].tolist() == r[1, 1].tolist() == list(p.replicas(0, 3)[(1 + 0) % 2]), "token 1's rows of 3 split"
    counts = [sum(1 for j in p.slot_experts(0, f) if j >= 0) for f in range(8)]
    assert sum(counts) == 64 and max(counts) - min(counts) <= 1
    with pytest.raises(ValueError, match="top-k index 2 of the row"):
        p.replica(0, [3, 17, -1], 0, 2)


# A hand-made case for the duplicate-id rule (docs/protocol.md §15): expert 0 on two replicas, expert 1 on one,
# expert 2 on three, expert 3 (never named) on one; tokens naming 0 or 2 twice (or three times). DUP_ROUTE is written
# by hand from replica(t, k) = replicas(e)[(t + k0) % n], k0 the token's first index naming e, one line per token:
#   t=0 [0, 0, 2, 2]: e0 k0=0 -> 0 % 2 = 0 (0, 0);  e2 k0=2 -> 2 % 3 = 2 (2, 1)
#   t=1 [2, 0, 2, 0]: e2 k0=0 -> 1 % 3 = 1 (1, 1);  e0 k0=1 -> 2 % 2 = 0 (0, 0)
#   t=2 [1, 0, -1, 0]: e1 -> (2, 0);  e0 k0=1 -> 3 % 2 = 1 (1, 0);  -1 nowhere
#   t=3 [0, 2, 0, 0]: e0 k0=0 -> 3 % 2 = 1 (1, 0);  e2 k0=1 -> 4 % 3 = 1 (1, 1)
# The rule (t + k) % n splits token 0's, 1's and 3's rows of one expert over two replicas.
DUP_TABLE = [[(0, 0), (1, 0)], [(2, 0)], [(0, 1), (1, 1), (2, 1)], [(0, 2)]]
DUP_IDS = [[0, 0, 2, 2], [2, 0, 2, 0], [1, 0, -1, 0], [0, 2, 0, 0]]
DUP_ROUTE = [[(0, 0), (0, 0), (2, 1), (2, 1)],
             [(1, 1), (0, 0), (1, 1), (0, 0)],
             [(2, 0), (1, 0), (-1, -1), (1, 0)],
             [(1, 0), (1, 1), (1, 0), (1, 0)]]


def test_a_tokens_rows_for_one_expert_share_one_replica():
    """Duplicate ids in a token's row (legal, one row per slot) of a replicated expert: Placement.route and
    cam.reference.dispatch both send all of the token's rows for that expert to one replica, as written by hand."""
    from cam.reference import dispatch

    p = Placement(4, 3, 3, [DUP_TABLE])
    ids = torch.tensor(DUP_IDS, dtype=torch.int32)
    assert [[tuple(x) for x in row] for row in p.route(0, ids).tolist()] == DUP_ROUTE
    for t, row in enumerate(DUP_IDS):
        for k, e in enumerate(row):
            if e >= 0:
                assert p.replica(0, row, t, k) == DUP_ROUTE[t][k], (t, k)
    topo = cam.Topology(D=1, P=1, F=3, E=4, K=4, H=8, Bmax=4, L=1, quantized=False, expert_slots=3)
    x = torch.arange(4 * 8, dtype=torch.float32).reshape(4, 8).to(torch.bfloat16)
    for f in range(3):
        d = dispatch(topo, [(x, ids)], topo.A + f, placement=p, layer=0)
        want = sorted((j, 0, t, k) for t in range(4) for k in range(4) if DUP_ROUTE[t][k][0] == f
                      for j in [DUP_ROUTE[t][k][1]])
        assert [(int(j), p_, t, k) for j, (p_, t, k) in zip(d["local_expert"], d["row_source"])] == want, f


@pytest.mark.parametrize("layers, match", [
    ([[[(2, 0)], [(0, 0)]]], r"FFN index 2, outside the FFN set \[0, 2\)"),
    ([[[(0, 0)], []]], "expert 1 has zero replicas"),
    ([[[(0, 0)], [(0, 0)]]], "slot 0 of FFN index 0 holds expert 0 and expert 1"),
    ([[[(0, 3)], [(1, 0)]]], r"slot 3 of FFN index 0, outside \[0, 2\)"),
    ([[[(0, 0)]]], "places 1 experts, expected E = 2"),
])
def test_bad_tables_are_refused_naming_the_entry(layers, match):
    with pytest.raises(PlacementError, match=match):
        Placement(2, 2, 2, layers)


def test_tables_that_differ_across_ranks_are_refused():
    a = Placement.balanced(6, 2, layers=2, replicate=[1])
    b = Placement.balanced(6, 2, layers=2, replicate=[2])
    a.require_same(Placement.balanced(6, 2, layers=2, replicate=[1]))
    assert a.digest() != b.digest()
    with pytest.raises(PlacementError, match="tables differ at layer 0 expert 1"):
        a.require_same(b, "rank 3")


def test_device_table_words():
    p = Placement(3, 2, 2, [[[(0, 0), (1, 1)], [(1, 0)], [(0, 1)]]])
    assert p.device_table(0).tolist() == [[2, 0, 0, 1, 1], [1, 1, 0, -1, -1], [1, 0, 1, -1, -1]]


def test_layer_weights_from_a_placement_hold_each_slots_expert():
    g = torch.Generator().manual_seed(2)
    E, K, N, L = 5, 40, 64, 2
    w = [torch.randint(-128, 128, (E, K, N), generator=g, dtype=torch.int8) for _ in range(L)]
    s = [torch.rand(E, N, generator=g) for _ in range(L)]
    p = Placement.balanced(E, 2, layers=L, replicate=[4])
    for f in range(2):
        lw = cam.LayerWeights.from_placement(p, f, w, s)
        assert lw.num_experts == p.slots_per_rank == 3 and lw.num_layers == L
        for l in range(L):
            for j, e in enumerate(p.slot_experts(l, f)):
                want_w = w[l][e] if e >= 0 else torch.zeros(K, N, dtype=torch.int8)
                want_s = s[l][e] if e >= 0 else torch.zeros(N)
                assert torch.equal(lw.weights[l][j], cam.ops.prepack_weights(want_w)), (f, l, j)
                assert torch.equal(lw.scales[l][j], want_s)
    with pytest.raises(ValueError, match="ffn_index 2 outside"):
        cam.LayerWeights.from_placement(p, 2, w, s)


def test_device_tables_are_every_layer_at_the_plane_width():
    p = Placement(3, 2, 2, [[[(0, 0), (1, 1)], [(1, 0)], [(0, 1)]], [[(1, 1)], [(0, 0)], [(0, 1), (1, 0)]]])
    t = p.device_tables()
    assert t.shape == (2, 3, 5) and t.dtype == torch.int64
    assert torch.equal(t[0], p.device_table(0)) and t[1].tolist() == [[1, 1, 1, -1, -1], [1, 0, 0, -1, -1],
                                                                      [2, 0, 1, 1, 0]]
    with pytest.raises(PlacementError, match="2 replicas, more than a width of 3 words holds"):
        p.device_tables(3)


def test_the_reference_dispatch_routes_as_placement_route():
    # cam.reference applies the rule itself; Placement.route is the other statement of it
    from cam.reference import dispatch
    p = Placement.balanced(7, 3, layers=2, replicate=[1, 4, 5])
    topo = cam.Topology(D=1, P=1, F=3, E=7, K=3, H=8, Bmax=6, L=2, quantized=False, expert_slots=p.slots_per_rank)
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(-1, 7, (6, 3), generator=g, dtype=torch.int32)
    ids[::2, 1] = ids[::2, 0]  # duplicates in half the tokens (legal: one row per slot)
    x = torch.randn(6, 8, generator=g).to(torch.bfloat16)
    route = p.route(1, ids)
    dup = [t for t in range(0, 6, 2) if int(ids[t, 0]) >= 0 and len(p.replicas(1, int(ids[t, 0]))) > 1]
    assert dup, "no duplicate of a replicated expert (where (t + k) % n would split the token's rows)"
    assert all(route[t, 0].tolist() == route[t, 1].tolist() for t in dup)
    for f in range(3):
        d = dispatch(topo, [(x, ids)], topo.A + f, placement=p, layer=1)
        want = sorted((int(route[t, k, 1]), 0, t, k) for t in range(6) for k in range(3)
                      if int(ids[t, k]) >= 0 and int(route[t, k, 0]) == f)
        assert [(int(j), 0, t, k) for j, (_, t, k) in zip(d["local_expert"], d["row_source"])] == want
        assert all(p.slot_experts(1, f)[int(j)] == int(e) for j, e in zip(d["local_expert"], d["expert"]))


def test_balanced_takes_one_more_slot_when_the_last_free_one_is_on_the_replicated_experts_rank():
    """8 experts + 1 replica on 3 ranks fit 9 slots by count, but after dealing e -> e % 3 the only free slot is on
    rank 2, which holds expert 5 already: the default slot count is then 4, and an explicit 3 is refused by name."""
    p = Placement.balanced(8, 3, layers=1, replicate=[5])
    assert p.slots_per_rank == 4 and p.replicas(0, 5) == ((2, 1), (0, 3))
    with pytest.raises(PlacementError, match="no free slot for expert 5 on a rank without it"):
        Placement.balanced(8, 3, layers=1, replicate=[5], slots_per_rank=3)


def test_epoch_verdict_is_the_documented_rule():
    """cam.reference's epoch rule (docs/protocol.md §15) on hand-written cases: -1 holds everything back, a newer
    epoch on any participant holds back, all equal serves, anything else fails naming the first participant
    whose epoch is not the weights'."""
    from cam.reference.dispatch_combine import epoch_verdict

    cases = [
        (([0, 0], 0), ("serve", None)),
        (([3], 3), ("serve", None)),
        (([0, 0], -1), ("hold", None)),
        (([5, 2], -1), ("hold", None)),
        (([1, 1], 0), ("hold", None)),
        (([0, 1], 0), ("hold", None)),
        (([0, 0], 1), ("fail", 0)),
        (([1, 0], 1), ("fail", 1)),
        (([2, 0], 1), ("hold", None)),
        (([-1, 0], 0), ("fail", 0)),
        (([0, 0], -4), ("fail", 0)),
    ]
    for (epochs, w), want in cases:
        assert epoch_verdict(epochs, w) == want, (epochs, w)


def test_placement_buffer_golden_is_the_epoch_line_then_the_padded_rows():
    from cam.reference.dispatch_combine import placement_buffer

    p = Placement(3, 2, 2, [[[(0, 0), (1, 1)], [(1, 0)], [(0, 1)]]])
    buf = placement_buffer(p, epoch=4)
    assert buf.tolist() == [4, 0, 0, 0, 0, 0, 0, 0,
                            2, 0, 0, 1, 1,
                            1, 1, 0, -1, -1,
                            1, 0, 1, -1, -1]
    assert torch.equal(buf[8:].view(1, 3, 5), p.device_tables())
