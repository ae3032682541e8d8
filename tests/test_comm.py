"""cam.Comm and the failure paths of the data plane: creation checks, bounded waits naming the missing peer,
abort, refusals before anything is written (peers' windows untouched), host argument errors."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import cam
from _window_layout import IDENTITY_OFF, LAYOUT_VERSION, WindowLayout
from _dataplane_harness import (
    attention_body,
    check_against_golden,
    ffn_server,
    make_rounds,
    raise_first,
    run_ranks,
    unique_group,
)
from _topology import topology_with

pytestmark = pytest.mark.timeout(120)


topo = topology_with(D=1, P=1, F=1, E=4, K=2, H=64, Bmax=8, L=3, slots=2)


# ----------------------------------------------------------------------------- creation


def test_comm_window_sizes_and_identity():
    t = topo(D=2, P=1, F=2, E=4)

    def body(comm):
        w = comm.window.view(torch.int64)
        ident = w[IDENTITY_OFF // 8: IDENTITY_OFF // 8 + 5].tolist()
        return comm.window_bytes, ident, comm.status()

    results, errors = run_ranks(t, {r: body for r in range(t.world_size)}, timeout=30)
    raise_first(errors)
    for r, (nbytes, ident, status) in results.items():
        assert nbytes == t.rank_window_bytes(r)
        assert ident == [t.fingerprint, LAYOUT_VERSION, r, 1 if r < t.A else 2, nbytes]
        assert status["code"] == 0 and status["abort"] == 0


def test_topology_mismatch_across_ranks_fails_at_creation():
    group = unique_group()
    t0, t1 = topo(), topo(H=65)
    errs = {}

    def make(t, rank):
        try:
            cam.Comm(t, rank, group=group, join_timeout_s=10).close()
        except Exception as e:  # noqa: BLE001
            errs[rank] = e

    threads = [threading.Thread(target=make, args=(t0, 0)), threading.Thread(target=make, args=(t1, 1))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert set(errs) == {0, 1}
    # Topology blame: whichever joined first, every rank's error names both ranks, the field and both values.
    for e in errs.values():
        message = str(e)
        assert "different topology" in message and "rank 0" in message and "rank 1" in message, message
        assert "H=65" in message and f"H={t0.H}" in message, message


def test_join_timeout_names_missing_ranks():
    with pytest.raises(cam.InvalidArgumentError, match=r"ranks not joined: 1"):
        cam.Comm(topo(), 0, group=unique_group(), join_timeout_s=0.3)


def test_comm_argument_errors():
    t = topo()
    with pytest.raises(ValueError, match="rank"):
        cam.Comm(t, 2)
    with pytest.raises(TypeError, match="dtype"):
        cam.Comm(t, 0, dtype=torch.float32)
    with pytest.raises(ValueError, match="timeout_s"):
        cam.Comm(t, 0, timeout_s=0)
    with pytest.raises(ValueError, match="transport"):
        cam.Comm(t, 0, transport="rdma")
    with pytest.raises(ValueError, match="Store"):
        cam.Comm(t, 0, transport="shm")


def test_group_must_be_a_name():
    # Comm(group=None) was pybind's "incompatible function arguments"; now the argument is named.
    t = topo(D=1, P=1, F=1)
    for bad in (None, 7, b"cam"):
        with pytest.raises(TypeError, match="Comm: group must be a str"):
            cam.Comm(t, 0, group=bad)
    with pytest.raises(ValueError, match="Comm: group must not be empty"):
        cam.Comm(t, 0, group="")
    with pytest.raises(ValueError, match="Comm: group contains a NUL"):
        cam.Comm(t, 0, group="a\0b")
    # Below the Python checks the binding refuses it too, rather than cutting the C string at the NUL.
    with pytest.raises(cam.CamError, match="group contains a NUL"):
        cam._C.Comm.in_process("a\0b", list(t.as_c_fields()), 0, 10**9, 10**6, 1000, 27)
    # Control: a plain name makes a plane (both ranks as threads).
    sizes = {}

    def rank(r):
        with cam.Comm(t, r, group="named-plane", join_timeout_s=20) as comm:
            sizes[r] = comm.window_bytes

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(t.world_size)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert len(sizes) == t.world_size and all(v > 0 for v in sizes.values())


# ----------------------------------------------------------------------------- bounded waits


def test_missing_participant_times_out_naming_it():
    """Participant 1 of replica 0 never publishes: the FFN rank's dispatch_recv reports a timeout naming the
    replica, that participant and the layer, and the abort spreads: participant 0's combine_recv then ends with
    CommAbortedError naming the FFN rank. (Participant 0 starts waiting only after the FFN rank failed; had it
    waited from the start, its own combine timeout could win the race and name the FFN rank instead, which is
    the other legitimate report of the same fault.)"""
    t = topo(D=1, P=2, F=1)
    rounds = make_rounds(t, [[4], [4]], layers=[[2], [2]])
    ffn_failed = threading.Event()

    def p0(comm):
        cam.ops.dispatch_send(comm, rounds[0][0].x, rounds[0][0].ids, 2)
        assert ffn_failed.wait(30)
        t0 = time.monotonic()
        with pytest.raises(cam.CommAbortedError) as info:
            cam.ops.combine_recv(comm, rounds[0][0].ids, rounds[0][0].w)
        return str(info.value), time.monotonic() - t0

    def p1(comm):
        assert ffn_failed.wait(30)  # alive, but never dispatches

    def ffn(comm):
        t0 = time.monotonic()
        try:
            with pytest.raises(cam.CommTimeoutError) as info:
                while True:
                    cam.ops.dispatch_recv(comm)
            return str(info.value), time.monotonic() - t0
        finally:
            ffn_failed.set()

    results, errors = run_ranks(t, {0: p0, 1: p1, 2: ffn}, timeout=60, timeout_s=0.5, idle_poll_s=0.05)
    raise_first(errors)
    msg, waited = results[2]
    assert "dispatch_recv on rank 2" in msg and "replica 0" in msg and "participant rank 1" in msg, msg
    assert "layer 2" in msg, msg
    assert waited < 15
    msg0, waited0 = results[0]
    assert "combine_recv on rank 0" in msg0 and "aborted by rank 2" in msg0 and waited0 < 5, msg0


def test_missing_ffn_rank_times_out_in_combine_recv():
    t = topo(D=1, P=1, F=2, E=4)
    rounds = make_rounds(t, [[5]])
    gate = threading.Event()

    def attn(comm):
        try:
            cam.ops.dispatch_send(comm, rounds[0][0].x, rounds[0][0].ids, 0)
            with pytest.raises(cam.CommTimeoutError) as info:
                cam.ops.combine_recv(comm, rounds[0][0].ids, rounds[0][0].w)
            return str(info.value)
        finally:
            gate.set()

    def ffn_ok(comm):
        return ffn_server(t, 1)(comm)

    def ffn_dead(comm):
        gate.wait(30)  # mapped its window, never serves

    results, errors = run_ranks(t, {0: attn, 1: ffn_ok, 2: ffn_dead}, timeout=60, timeout_s=0.5)
    raise_first(errors)
    assert "combine_recv on rank 0" in results[0] and "FFN rank 2" in results[0], results[0]


def test_abort_releases_every_waiter_and_later_ops_refuse():
    """Ranks wait in three different places (combine_recv on the device, idle dispatch_recv loops); one abort from
    another thread ends all of them with CommAbortedError, the comms refuse further ops, and a fresh plane on the
    same group name works (no stale state)."""
    t = topo(D=1, P=1, F=2, E=4)
    rounds = make_rounds(t, [[5]])
    comms = {}
    ready = threading.Barrier(t.world_size + 1, timeout=30)

    def attn(comm):
        comms[0] = comm
        cam.ops.dispatch_send(comm, rounds[0][0].x, rounds[0][0].ids, 0)
        ready.wait()
        t0 = time.monotonic()
        with pytest.raises(cam.CommAbortedError, match="aborted by rank 1"):
            cam.ops.combine_recv(comm, rounds[0][0].ids, rounds[0][0].w)
        waited = time.monotonic() - t0
        with pytest.raises(cam.CommAbortedError):
            cam.ops.dispatch_send(comm, rounds[0][0].x, rounds[0][0].ids, 0)
        return waited

    def ffn(comm):
        comms[comm.rank] = comm
        ready.wait()
        t0 = time.monotonic()
        with pytest.raises(cam.CommAbortedError):
            while True:  # takes the round but never combines it, then idles
                cam.ops.dispatch_recv(comm)
        waited = time.monotonic() - t0
        with pytest.raises(cam.CommAbortedError):
            cam.ops.dispatch_recv(comm)
        return waited

    def controller():
        ready.wait()
        time.sleep(0.5)
        comms[1].abort()

    th = threading.Thread(target=controller, daemon=True)
    th.start()
    # timeout far longer than the test: only the abort can end these waits
    results, errors = run_ranks(t, {0: attn, 1: ffn, 2: ffn}, timeout=60, timeout_s=300, idle_poll_s=0.05,
                                group="abort-plane")
    th.join(10)
    raise_first(errors)
    assert all(w < 20 for w in results.values()), results

    fresh = make_rounds(t, [[3]], seed=4)
    bodies = {0: attention_body(fresh[0]), 1: ffn_server(t, 1), 2: ffn_server(t, 1)}
    results, errors = run_ranks(t, bodies, timeout=60, group="abort-plane")
    raise_first(errors)
    check_against_golden(t, fresh, results)


# ----------------------------------------------------------------------------- refusals before writes


def _snapshot(comms, ranks):
    return {r: comms[r].window.clone() for r in ranks}


@pytest.mark.parametrize(
    "case",
    ["id_too_large", "id_below_minus_one", "window_tokens"],
)
def test_device_refusal_writes_nothing_and_comm_stays_usable(case):
    # capacity=1 as well: more rows than capacity is never refused (chunked), only the window bound is
    t = topo(D=1, P=1, F=2, E=4, K=2, window_tokens=2, capacity=1 if case == "window_tokens" else None)
    good = make_rounds(t, [[2]], seed=6, ids_fn=lambda a, r, b: torch.tensor([[0, 3], [1, -1]]))
    x = good[0][0].x
    bad_ids = {
        "id_too_large": torch.tensor([[0, 4], [1, 2]], dtype=torch.int32),
        "id_below_minus_one": torch.tensor([[0, -2], [1, 2]], dtype=torch.int32),
        "window_tokens": torch.tensor([[0, 2], [1, 2], [0, 3]], dtype=torch.int32),  # 3 tokens for each FFN rank
    }[case]
    if case == "window_tokens":
        x = torch.ones((3, t.H), dtype=torch.bfloat16)
    comms = {}
    ffn_ready = threading.Barrier(t.world_size, timeout=30)
    attn_done = threading.Event()

    def attn(comm):
        comms[0] = comm
        ffn_ready.wait()
        before = _snapshot(comms, range(t.world_size))
        with pytest.raises(cam.DeviceArgumentError) as info:
            cam.ops.dispatch_send(comm, x, bad_ids, 1)
        after = _snapshot(comms, range(t.world_size))
        for r in range(t.world_size):
            assert torch.equal(before[r], after[r]), f"rank {r}'s window changed"
        assert comm.status()["code"] == 0  # the refusal was reported and cleared
        attn_done.set()
        outs = attention_body(good[0])(comm)  # the plane is still usable
        return str(info.value), outs

    def ffn(comm):
        comms[comm.rank] = comm
        ffn_ready.wait()
        assert attn_done.wait(30)
        return ffn_server(t, 1)(comm)

    results, errors = run_ranks(t, {0: attn, 1: ffn, 2: ffn}, timeout=60)
    raise_first(errors)
    msg, outs = results[0]
    assert "dispatch_send on rank 0" in msg
    if case == "window_tokens":
        assert "3 distinct tokens for FFN rank 1" in msg and "window_tokens = 2" in msg, msg
    else:
        assert "topk_ids" in msg, msg
    results[0] = outs
    check_against_golden(t, good, results)


def test_combine_recv_refusals():
    t = topo(D=1, P=1, F=1)
    rounds = make_rounds(t, [[3]], seed=8)

    def attn(comm):
        with pytest.raises(cam.CommProtocolError, match="no dispatch_send round is in flight"):
            cam.ops.combine_recv(comm, rounds[0][0].ids, rounds[0][0].w)
        cam.ops.dispatch_send(comm, rounds[0][0].x, rounds[0][0].ids, 0)
        with pytest.raises(cam.DeviceArgumentError, match="token count"):
            cam.ops.combine_recv(comm, rounds[0][0].ids[:2], rounds[0][0].w[:2])
        with pytest.raises(cam.DeviceArgumentError, match="topk_ids"):
            cam.ops.combine_recv(comm, torch.full_like(rounds[0][0].ids, 9), rounds[0][0].w)
        return [cam.ops.combine_recv(comm, rounds[0][0].ids, rounds[0][0].w)]

    results, errors = run_ranks(t, {0: attn, 1: ffn_server(t, 1)}, timeout=60)
    raise_first(errors)
    check_against_golden(t, rounds, results)


def test_combine_send_refuses_foreign_and_repeated_work_items():
    t = topo(D=1, P=1, F=1)
    rounds = make_rounds(t, [[3]], seed=8)

    def ffn(comm):
        out = torch.zeros((t.recv_rows, t.H), dtype=torch.bfloat16)
        with pytest.raises(cam.DeviceArgumentError, match="work_item"):
            cam.ops.combine_send(comm, out, torch.zeros(t.work_item_words, dtype=torch.int64))
        while True:
            ex, sc, cnt, wi = cam.ops.dispatch_recv(comm)
            if cam.WorkItem(wi).kind == 1:
                break
        cam.ops.combine_send(comm, out, wi)
        with pytest.raises(cam.CommProtocolError, match="already combined"):
            cam.ops.combine_send(comm, out, wi)
        return True

    results, errors = run_ranks(t, {0: attention_body(rounds[0]), 1: ffn}, timeout=60)
    raise_first(errors)


# ----------------------------------------------------------------------------- host errors


def test_host_argument_errors_before_launch():
    t = topo(D=1, P=1, F=1)

    def attn(comm):
        x = torch.zeros((2, t.H), dtype=torch.bfloat16)
        ids = torch.zeros((2, t.K), dtype=torch.int32)
        cases = [
            (TypeError, "x must be", lambda: cam.ops.dispatch_send(comm, x.float(), ids, 0)),
            (ValueError, "H=64", lambda: cam.ops.dispatch_send(comm, x[:, :10].contiguous(), ids, 0)),
            (ValueError, "Bmax", lambda: cam.ops.dispatch_send(
                comm, torch.zeros((9, t.H), dtype=torch.bfloat16), torch.zeros((9, t.K), dtype=torch.int32), 0)),
            (TypeError, "topk_ids", lambda: cam.ops.dispatch_send(comm, x, ids.long(), 0)),
            (ValueError, "topk_ids", lambda: cam.ops.dispatch_send(comm, x, ids[:1], 0)),
            (ValueError, "layer=3", lambda: cam.ops.dispatch_send(comm, x, ids, 3)),
            (TypeError, "layer", lambda: cam.ops.dispatch_send(comm, x, ids, 1.0)),
            (ValueError, "contiguous", lambda: cam.ops.dispatch_send(
                comm, torch.zeros((t.H, 2), dtype=torch.bfloat16).t(), ids, 0)),
            (TypeError, "topk_weights", lambda: cam.ops.combine_recv(comm, ids, torch.zeros((2, t.K)).double())),
            (ValueError, "FFN ranks", lambda: cam.ops.dispatch_recv(comm)),
        ]
        for exc, pattern, fn in cases:
            with pytest.raises(exc, match=pattern):
                fn()
        return comm.status()

    results, errors = run_ranks(t, {0: attn}, timeout=60)
    raise_first(errors)
    assert results[0]["code"] == 0 and results[0]["abort"] == 0


def test_closed_comm_refuses():
    t = topo()
    holder = {}

    def attn(comm):
        holder["c"] = comm

    results, errors = run_ranks(t, {0: attn}, timeout=30)
    raise_first(errors)
    with pytest.raises(ValueError, match="closed"):
        cam.ops.dispatch_send(holder["c"], torch.zeros((1, t.H), dtype=torch.bfloat16),
                              torch.zeros((1, t.K), dtype=torch.int32), 0)


def test_replica_above_capacity_is_chunked_not_refused():
    """Each participant fits the capacity, their sum does not. This used to be a fatal capacity error at
    dispatch_recv; now the round is served as chunks (docs/protocol.md §8) and the outputs match the golden."""
    t = topo(D=1, P=2, F=1, E=4, K=2, Bmax=4, capacity=5)
    ids = lambda a, r, b: torch.tensor([[0, 1], [2, 3]])  # noqa: E731 - 4 rows each, 8 > 5 in total
    rounds = make_rounds(t, [[2], [2]], ids_fn=ids)
    bodies = {a: attention_body(rounds[a]) for a in range(t.A)}
    bodies[t.A] = ffn_server(t, 1)
    results, errors = run_ranks(t, bodies, timeout=60)
    raise_first(errors)
    check_against_golden(t, rounds, results)
    assert [s.rows.shape[0] for s in results[t.A].served] == [4, 4]  # experts {0, 1} then {2, 3}


def test_signal_ahead_of_its_round_is_a_protocol_error():
    """A ready signal beyond the round the FFN rank expects can only come from a broken peer or stale memory:
    reported as CommProtocolError naming the rank, and the plane aborts."""
    t = topo(D=1, P=1, F=1)

    def ffn(comm):
        w = comm.window.view(torch.int64)
        w[WindowLayout(t).ffn_ready_signal_off(0, 0) // 8] = 3  # round seq 1 expected in slot 0
        with pytest.raises(cam.CommProtocolError, match="ahead") as info:
            cam.ops.dispatch_recv(comm)
        with pytest.raises(cam.CommAbortedError):
            cam.ops.dispatch_recv(comm)
        return str(info.value)

    results, errors = run_ranks(t, {1: ffn}, timeout=60)
    raise_first(errors)
    assert "peer rank 0" in results[1], results[1]


def test_dead_participant_named_by_its_replica_mate_while_the_ffn_is_busy():
    """Replica 0's participant 1 never publishes while replica 1 keeps the FFN rank busy, so no dispatch_recv
    sits on the partial replica long enough to time out. Participant 0's combine_recv (shorter timeout) names the
    dead participant rather than the FFN rank it was waiting on, and the abort ends everyone else."""
    t = topo(D=2, P=2, F=1, E=4, slots=2, L=2)
    rounds = make_rounds(t, [[3] * 8] * 4, seed=12)

    def p0(comm):
        cam.ops.dispatch_send(comm, rounds[0][0].x, rounds[0][0].ids, 0)
        with pytest.raises(cam.CommTimeoutError) as info:
            cam.ops.combine_recv(comm, rounds[0][0].ids, rounds[0][0].w)
        return str(info.value)

    def dead(comm):
        time.sleep(0.1)  # mapped, never publishes; the abort below ends the plane

    def busy(comm):
        a = comm.rank
        with pytest.raises(cam.CommAbortedError):
            for rd in rounds[a]:  # keeps the FFN rank serving replica 1 until the abort
                cam.ops.dispatch_send(comm, rd.x, rd.ids, rd.layer)
                cam.ops.combine_recv(comm, rd.ids, rd.w)
            while True:
                time.sleep(0.05)
                cam.ops.dispatch_send(comm, rounds[a][0].x, rounds[a][0].ids, 0)
                cam.ops.combine_recv(comm, rounds[a][0].ids, rounds[a][0].w)

    def ffn(comm):
        with pytest.raises(cam.CommAbortedError):
            ffn_server(t, 10_000, deadline_s=60)(comm)

    rank_kw = {0: dict(timeout_s=0.6)}
    results, errors = run_ranks(t, {0: p0, 1: dead, 2: busy, 3: busy, 4: ffn}, timeout=60, timeout_s=30,
                                rank_kw=rank_kw)
    raise_first(errors)
    assert "combine_recv on rank 0" in results[0] and "participant rank 1" in results[0], results[0]
