"""The routed data plane end to end on the twin, threads as ranks: dispatch_send -> dispatch_recv -> (expert) ->
combine_send -> combine_recv against the independent golden (cam.reference.dispatch_combine), plus progress,
slots, fairness and capture-safety of the FFN side."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cam
from _window_layout import WindowLayout
from _dataplane_harness import (
    attention_body,
    ffn_server,
    make_rounds,
    raise_first,
    run_ranks,
    run_round_trip,
)
from _topology import topology_with

pytestmark = pytest.mark.timeout(120)


topo = topology_with(D=1, P=1, F=1, E=4, K=2, H=64, Bmax=8, L=3, slots=2)


ROUND_TRIP_CASES = [
    # (topology kwargs, tokens per Attention rank per round)
    (dict(), [[5, 8]]),
    (dict(D=2, P=2, F=2, E=8, K=3, H=96, Bmax=6), [[6, 0], [3, 6], [0, 1], [6, 6]]),
    (dict(D=3, P=1, F=3, E=9, K=2, H=40, Bmax=5, quantized=False), [[5, 2], [0, 5], [1, 0]]),
    (dict(D=4, P=1, F=4, E=8, K=4, H=33, Bmax=4, slots=1), [[4], [0], [2], [4]]),
    (dict(D=1, P=2, F=4, E=4, K=1, H=128, Bmax=3, quantized=False), [[3, 3], [1, 0]]),
    (dict(D=2, P=1, F=2, E=2, K=2, H=4100, Bmax=3), [[3], [2]]),  # H > one 4096-column pass: chunked quant
]

# Enough tokens and rows that every op runs on several blocks where tiling gives a block per 16 rows: the Ascend
# descriptions. The twin's own description also asks for 4 MiB per block (a block is a thread on the host CPUs,
# PlatformInfo::minBlockBytes), so these payloads run as one block there; MULTI_BLOCK_PLATFORMS runs them on both.
MULTI_BLOCK_CASES = [
    (dict(D=2, P=1, F=2, E=8, K=4, H=72, Bmax=70), [[70, 33], [17, 64]]),
    (dict(D=1, P=2, F=3, E=6, K=3, H=48, Bmax=40, quantized=False, capacity=150), [[40, 9], [35, 40]]),
]
MULTI_BLOCK_PLATFORMS = ["twin", "ascend910b4"]


@contextlib.contextmanager
def twin_platform(name):
    before = cam._C.platform()["name"]
    cam._C.set_twin_platform(name)
    try:
        yield
    finally:
        cam._C.set_twin_platform(before)


@pytest.mark.parametrize("kw, bs", ROUND_TRIP_CASES, ids=lambda v: str(v) if isinstance(v, dict) else None)
def test_round_trip_matches_golden(kw, bs):
    t = topo(**kw)
    run_round_trip(t, make_rounds(t, bs, seed=len(bs)))


@pytest.mark.parametrize("platform", MULTI_BLOCK_PLATFORMS)
@pytest.mark.parametrize("kw, bs", MULTI_BLOCK_CASES, ids=lambda v: str(v) if isinstance(v, dict) else None)
def test_round_trip_multi_block(kw, bs, platform):
    t = topo(**kw)
    with twin_platform(platform):
        run_round_trip(t, make_rounds(t, bs, seed=len(bs)))


def test_round_trip_payload_above_the_twin_block_floor():
    """On the twin's own description a payload above its 4 MiB floor per block is split: dispatch_send reads
    272 x 8192 bf16 (4.25 MiB, two blocks), combine_recv reduces twice that (three blocks)."""
    t = topo(D=1, P=1, F=2, E=4, K=2, H=8192, Bmax=272)
    with twin_platform("twin"):
        run_round_trip(t, make_rounds(t, [[272, 100]], seed=5))


# dispatch_send builds a round's tables (counts per expert, slots per token and FFN rank, index entries) in UB when
# they fit beside its working set, else in the workspace. 4096 tokens x K = 4 do not fit 184 KiB of UB: 128 KiB of
# index entries, 16 KiB of slots and a working set of ~57 KiB. (Tens of thousands of experts take the same path,
# but every op then walks E scalar words and such a round takes minutes on the twin.) Every other round-trip test
# has small tables, so both paths meet the same golden; on ascend910b4 the other blocks read the slots from the
# workspace too.
@pytest.mark.parametrize("platform", ["twin", "ascend910b4"])
def test_round_trip_tables_beyond_ub(platform):
    t = topo(D=1, P=1, F=1, E=4, K=4, H=16, Bmax=4096)
    with twin_platform(platform):
        run_round_trip(t, make_rounds(t, [[4096]], seed=11), timeout=240)


@pytest.mark.parametrize("quantized", [True, False])
def test_round_trip_fp16(quantized):
    t = topo(D=2, P=1, F=2, E=4, quantized=quantized)
    run_round_trip(t, make_rounds(t, [[8, 3], [2, 8]], dtype=torch.float16), dtype=torch.float16)


@pytest.mark.parametrize("quantized", [True, False])
def test_duplicates_all_to_one_expert_and_empty_slots(quantized):
    t = topo(D=2, P=2, F=2, E=8, K=4, Bmax=6, quantized=quantized)
    patterns = [
        lambda b: torch.full((b, 4), 5),                               # every slot of every token on expert 5
        lambda b: torch.tensor([[3, 3, -1, 3]] * b),                   # duplicates and an empty slot
        lambda b: torch.full((b, 4), -1),                              # nothing routed at all
        lambda b: torch.tensor([[0, 7, 7, 0]] * b),                    # duplicates across both FFN ranks
    ]
    rounds = make_rounds(t, [[6, 6]] * 4, ids_fn=lambda a, r, b: patterns[(a + r) % 4](b))
    run_round_trip(t, rounds)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    D=st.integers(1, 4), P=st.integers(1, 2), F=st.integers(1, 4), R=st.integers(1, 3), K=st.integers(1, 3),
    H=st.sampled_from([1, 31, 64, 200]), Bmax=st.integers(1, 5), quantized=st.booleans(), seed=st.integers(0, 99),
    data=st.data(),
)
def test_round_trip_hypothesis(D, P, F, R, K, H, Bmax, quantized, seed, data):
    E = R * F
    K = min(K, E)
    t = cam.Topology(D=D, P=P, F=F, E=E, K=K, H=H, Bmax=Bmax, L=2, slots=2, quantized=quantized)
    bs = [[data.draw(st.sampled_from([0, Bmax, data.draw(st.integers(0, Bmax))]))] for _ in range(t.A)]
    run_round_trip(t, make_rounds(t, bs, seed=seed))


def test_two_slots_in_flight_and_uneven_progress():
    """Each Attention rank keeps two rounds dispatched ahead of its combines; replicas run different layer
    sequences and different numbers of tokens, so at any moment they sit at different layers, and the FFN ranks
    consume them in whatever order they become ready."""
    t = topo(D=3, P=2, F=2, E=6, K=2, Bmax=5, L=4, slots=2)
    layers = [[0, 1, 2, 3], [0, 1, 2, 3], [3, 2, 1, 0], [3, 2, 1, 0], [1, 3, 0, 2], [1, 3, 0, 2]]
    counts = [[5, 1, 4, 0], [2, 5, 5, 3], [0, 0, 5, 5], [5, 5, 0, 1], [3, 3, 3, 3], [1, 2, 3, 4]]
    rounds = make_rounds(t, counts, layers=layers, seed=7)
    results = run_round_trip(t, rounds, in_flight=2)
    orders = [[(s.replica, s.seq) for s in results[t.A + f].served] for f in range(t.F)]
    for order in orders:  # rounds of one replica are consumed in seq order
        for d in range(t.D):
            seqs = [q for r, q in order if r == d]
            assert seqs == sorted(seqs) == list(range(1, 5))


def test_slots_one_forces_lockstep():
    t = topo(D=1, P=1, F=2, E=4, slots=1)
    rounds = make_rounds(t, [[3, 4, 5]], seed=3)
    run_round_trip(t, rounds, in_flight=1)


def test_slot_reuse_waits_for_own_combine_and_is_bounded():
    """With slots=2 a third dispatch_send reuses slot 0, so it must wait until round 0 was combine-received. On one
    rank's stream that combine_recv can only come later, so the wait expires (bounded) naming this rank's own
    combine_recv; nothing of round 3 reaches the FFN rank."""
    t = topo(D=1, P=1, F=1, slots=2)
    rounds = make_rounds(t, [[4, 4, 4]], seed=1)

    def attn(comm):
        for r in range(2):
            cam.ops.dispatch_send(comm, rounds[0][r].x, rounds[0][r].ids, rounds[0][r].layer)
        t0 = time.monotonic()
        with pytest.raises(cam.CommTimeoutError) as info:
            cam.ops.dispatch_send(comm, rounds[0][2].x, rounds[0][2].ids, rounds[0][2].layer)
        return str(info.value), time.monotonic() - t0

    results, errors = run_ranks(t, {0: attn}, timeout=60, timeout_s=0.4)
    raise_first(errors)
    msg, waited = results[0]
    assert "dispatch_send on rank 0" in msg and "combine_recv of round seq 1 has not run" in msg, msg
    assert 0.3 < waited < 20


def _ffn_state(comm, t):
    t = WindowLayout(t)
    w = comm.window.view(torch.int64)
    rr, served = int(w[t.ffn_state_off // 8]), int(w[t.ffn_state_off // 8 + 1])
    done = w[t.ffn_done_seq_off // 8: t.ffn_done_seq_off // 8 + t.D].tolist()
    combined = w[t.ffn_combined_seq_off // 8: t.ffn_combined_seq_off // 8 + t.D].tolist()
    return rr, served, done, combined


def test_fairness_round_robin_bound_under_flooding():
    """Replicas 0 and 1 keep rounds ready at all times (slots=4, all dispatched up front); replica 2 publishes one
    round, once before the FFN starts and once while the FFN is busy with the flood. Each time, replica 2 is
    served within D selections of becoming ready, and the selection order is round robin over the ready ones."""
    t = topo(D=3, P=1, F=1, E=2, K=1, H=32, Bmax=2, L=2, slots=4)
    flood = make_rounds(t, [[2] * 4, [2] * 4, [1, 1]], seed=11)
    published = threading.Event()
    late_go = threading.Event()
    late_published = threading.Event()
    trace = []

    def flooder(a):
        def body(comm):
            for rd in flood[a]:
                cam.ops.dispatch_send(comm, rd.x, rd.ids, rd.layer)
            return [cam.ops.combine_recv(comm, rd.ids, rd.w) for rd in flood[a]]
        return body

    def late(comm):
        rd = flood[2]
        cam.ops.dispatch_send(comm, rd[0].x, rd[0].ids, rd[0].layer)
        published.set()
        outs = [cam.ops.combine_recv(comm, rd[0].ids, rd[0].w)]
        late_go.wait(30)
        cam.ops.dispatch_send(comm, rd[1].x, rd[1].ids, rd[1].layer)
        late_published.set()
        outs.append(cam.ops.combine_recv(comm, rd[1].ids, rd[1].w))
        return outs

    def on_item(comm, log):
        trace.append(log.served[-1].replica)
        if len(trace) == 4:  # replica 2 becomes ready again while 0 and 1 still have rounds queued
            late_go.set()
            assert late_published.wait(30)

    def ffn(comm):
        assert published.wait(30)
        time.sleep(0.2)  # let the flooders publish everything
        return ffn_server(t, 10, on_item=on_item)(comm)

    results, errors = run_ranks(t, {0: flooder(0), 1: flooder(1), 2: late, 3: ffn}, timeout=90)
    raise_first(errors)
    assert trace[:3] == [0, 1, 2], trace  # first D selections: every ready replica once
    first_after = trace[4:].index(2)  # selections that began after replica 2 was ready again
    assert first_after < t.D, trace
    assert sorted(trace) == [0] * 4 + [1] * 4 + [2] * 2


def test_idle_ffn_far_longer_than_timeout_stays_healthy():
    """Nothing is dispatched for several timeouts: dispatch_recv keeps returning empty work items (static shapes,
    layer 0, zero counts), combine_send passes them through, and the next round is served normally."""
    t = topo(D=1, P=1, F=2, E=4)
    rounds = make_rounds(t, [[6]], seed=2)
    empties = []
    plane_ids = []

    def attn(comm):
        time.sleep(1.6)  # > 3x the timeout below
        return attention_body(rounds[0])(comm)

    def ffn(comm):
        log = None
        plane_ids.append(comm.plane_id)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            ex, sc, cnt, wi = cam.ops.dispatch_recv(comm)
            assert ex.shape == (t.recv_rows, t.H) and cnt.shape == (t.R,) and wi.shape == (t.work_item_words,)
            if cam.WorkItem(wi).kind == 0:
                empties.append((wi[:8].tolist(), cnt.tolist()))
                cam.ops.combine_send(comm, torch.zeros((t.recv_rows, t.H), dtype=torch.bfloat16), wi)
        log = ffn_server(t, 1)(comm)
        return log

    results, errors = run_ranks(t, {0: attn, 1: ffn, 2: ffn}, timeout=60, timeout_s=0.5, idle_poll_s=0.05)
    raise_first(errors)
    assert len(empties) >= 4 and len(set(plane_ids)) == 1 and plane_ids[0] != 0
    for words, counts in empties:
        assert words[0] == 0 and words[1] == -1 and words[2] == 0 and words[3] == 0 and words[5] == 0
        assert words[7] == plane_ids[0] and counts == [0] * t.R
    from _dataplane_harness import check_against_golden

    check_against_golden(t, rounds, results)


def test_capture_safe_ffn_loop_replays_identical_calls():
    """The FFN step is one fixed call sequence with identical host arguments (no per-round value crosses from the
    host); rounds of several replicas at several layers still come out in order with the right layer, and the
    per-round state in the window (done_seq, combined_seq, fairness pointer, served) advances on the device."""
    t = topo(D=2, P=1, F=1, E=4, L=4, slots=2)
    rounds = make_rounds(t, [[3, 2, 1], [1, 2, 3]], layers=[[2, 0, 3], [1, 3, 0]], seed=5)
    states = []

    def step_record(comm, log):
        states.append(_ffn_state(comm, t))

    bodies = {a: attention_body(rounds[a], in_flight=2) for a in range(t.A)}
    bodies[t.A] = ffn_server(t, 6, on_item=step_record)
    results, errors = run_ranks(t, bodies, timeout=60)
    raise_first(errors)
    from _dataplane_harness import check_against_golden

    check_against_golden(t, rounds, results)
    served = [s for s in results[t.A].served]
    assert [s.layer for s in served if s.replica == 0] == [2, 0, 3]
    assert [s.layer for s in served if s.replica == 1] == [1, 3, 0]
    assert [st_[1] for st_ in states] == [1, 2, 3, 4, 5, 6]  # served counter, advanced by dispatch_recv
    rr, served_n, done, combined = _ffn_state_final = states[-1]
    assert done == [3, 3] and served_n == 6


def test_torch_compile_keeps_side_effecting_ops():
    """Under torch.compile the data-plane ops trace through their fake impls and are neither dropped nor
    reordered (combine_send's result is unused: only its mutation of the window keeps it)."""
    t = topo(D=1, P=1, F=1)
    rounds = make_rounds(t, [[4, 4]], seed=9)

    def ffn_step(token, comm_id, fn_scale: float):
        ex = torch.empty((t.recv_rows, t.H), dtype=torch.int8)
        sc = torch.empty((t.recv_rows,), dtype=torch.float32)
        cnt = torch.empty((t.R,), dtype=torch.int64)
        wi = torch.empty((t.work_item_words,), dtype=torch.int64)
        torch.ops.cam.dispatch_recv(token, ex, sc, cnt, wi, comm_id)
        out = torch.zeros((t.recv_rows, t.H), dtype=torch.bfloat16)
        n = t.recv_rows
        out[:n] = (ex.to(torch.float32) * sc[:, None] * fn_scale).to(torch.bfloat16)
        torch.ops.cam.combine_send(token, out, wi, comm_id)
        return wi

    compiled = torch.compile(ffn_step, backend="aot_eager", fullgraph=True)

    def ffn(comm):
        kinds = []
        while sum(kinds) < 2:
            wi = compiled(comm.token, comm.id, 1.0)
            kinds.append(cam.WorkItem(wi).kind)
        return kinds

    def attn(comm):
        return attention_body(rounds[0])(comm)

    results, errors = run_ranks(t, {0: attn, 1: ffn}, timeout=120)
    raise_first(errors)
    assert len(results[0]) == 2  # both combine_recv returned: combine_send really ran inside the compiled graph


def test_round_trip_on_the_ascend_platform_description():
    """The same kernels with the A3 platform description (48 vector cores): tiling hands out dozens of blocks,
    more blocks than FFN ranks or tokens per block, and the result is unchanged."""
    with twin_platform("ascend910_93"):
        t = topo(D=1, P=1, F=2, E=4, K=2, H=32, Bmax=400)
        run_round_trip(t, make_rounds(t, [[400, 37]], seed=13))
