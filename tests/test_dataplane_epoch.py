"""The placement epochs checked on the device (docs/protocol.md §15, "Epochs checked on the device"): every record
carries the epoch of the table its round was routed by, every FFN rank's window the epoch of its slot weights, and
the kernels turn every mismatch into a hold-back or a named error, never into rows computed with another table's
experts. The verdict is checked against the golden (cam.reference.dispatch_combine.epoch_verdict) for every kind of
pair; the two races §15 names are staged step by step: an FFN rank that takes a round routed by the new table
before (or while) it copies the new experts into its slots, and a table rewritten while dispatch_send runs. Then the
batched receive and chunked rounds under an epoch change. Threads as ranks; the test drives the ops."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import cam
from cam import _C, _runtime
from cam.placement import Placement
from cam.reference.dispatch_combine import batch_select, chunk_bounds, epoch_verdict, round_trip_plane
from cam.reference.dynamic_quant import dynamic_quant
from _dataplane_harness import (FfnLog, attention_body, expert_fn, expert_set, ffn_server, make_rounds, raise_first,
                                run_ranks, serve_batch, slot_experts, check_against_golden)
from _window_layout import WindowLayout
from test_safety import plane

pytestmark = pytest.mark.timeout(240)

# E = 3 experts on F = 2 ranks of 2 slots, expert 0 replicated: a table that is not the contiguous one
P_TABLE = Placement(3, 2, 2, [[[(0, 0), (1, 1)], [(1, 0)], [(0, 1)]]] * 2)
Q_TABLE = Placement(3, 2, 2, [[[(1, 0)], [(0, 0), (1, 1)], [(0, 1)]]] * 2)


def item_epoch(t: cam.Topology, wi: torch.Tensor) -> int:
    return int(wi[WindowLayout(t).work_item_epoch])


def serve_one(comm: cam.Comm, *, expect_work: bool = True):
    """One dispatch_recv; a work item gets the harness expert (by the slot's expert of comm.placement) and goes
    through combine_send. Returns the work item (kind 0 when nothing was ready)."""
    t = comm.topology
    ex, sc, cnt, wi = cam.ops.dispatch_recv(comm)
    out = torch.zeros((t.recv_rows, t.H), dtype=comm.dtype)
    if cam.WorkItem(wi).kind == 1:
        n = cam.WorkItem(wi).rows
        e = torch.repeat_interleave(slot_experts(comm, cam.WorkItem(wi).layer), cnt)
        out[:n] = expert_fn(t.quantized, comm.dtype)(e, ex[:n], sc[:n] if t.quantized else None)
    if expect_work is not None:
        assert (cam.WorkItem(wi).kind == 1) == expect_work, wi
    cam.ops.combine_send(comm, out, wi)
    return wi


def golden(t, rounds, placement, layer):
    return round_trip_plane(t, rounds, expert_fn(t.quantized, torch.bfloat16), quant_fn=dynamic_quant,
                            global_ids=True, placement=placement, layer=layer)["out"]


def a_round(t, a, seed, b=3):
    g = torch.Generator().manual_seed(seed * 10 + a)
    x = (torch.randn((b, t.H), generator=g) * 3).to(torch.bfloat16)
    ids = torch.randint(0, t.E, (b, t.K), generator=g, dtype=torch.int32)
    return x, ids, torch.rand((b, t.K), generator=g)


def set_weights_epoch(comm: cam.Comm, w: int) -> None:
    """-1 and epochs through the C API; anything below -1 (which the API refuses) as a write into the window."""
    if w >= -1:
        comm._c.set_weights_epoch(w)
    else:
        comm.window.view(torch.int64)[WindowLayout(comm.topology).ffn_weights_epoch_off // 8] = w
    assert int(comm.window.view(torch.int64)[WindowLayout(comm.topology).ffn_weights_epoch_off // 8]) == w


# ----------------------------------------------------------------------------- the verdict, against the golden

@pytest.mark.parametrize("epochs,w", [
    ((0, 0), 0), ((2, 2), 2),            # serve
    ((1, 1), 0), ((0, 1), 0), ((1, 1), -1), ((0, 0), -1),  # hold back: newer, newer on one participant, moving
    ((0, 0), 1), ((1, 0), 1), ((0, 0), -5),  # fail: older, older on participant 1, weights epoch not an epoch
], ids=lambda v: str(v))
def test_dispatch_recv_serves_holds_or_fails_as_the_golden_verdict(epochs, w):
    """Each Attention rank of one replica routes by a table whose epoch word is epochs[p]; the FFN rank's weights
    are at epoch w. dispatch_recv does what epoch_verdict says: serves (the item carries the epoch, the round is
    bit-exact), holds back (empty items, the round untouched, served once the weights reach its epoch), or fails
    naming the participant and both epochs."""
    t = cam.Topology(D=1, P=2, F=2, E=3, K=2, H=32, Bmax=4, L=2, slots=1, expert_slots=2)
    verdict, who = epoch_verdict(epochs, w)
    with plane(t, placement=P_TABLE, timeout_s=60) as comms:
        rounds = [a_round(t, a, seed=1) for a in range(t.A)]
        for a in range(t.A):
            comms[a].placement_buffer[0] = epochs[a]
            cam.ops.dispatch_send(comms[a], rounds[a][0], rounds[a][1], 1)
        for f in range(t.F):
            set_weights_epoch(comms[t.A + f], w)
        ffn = comms[t.A]
        if verdict == "fail":
            with pytest.raises(cam.CommProtocolError) as info:
                cam.ops.dispatch_recv(ffn)
            msg = str(info.value)
            assert f"published by rank {who} was routed by placement epoch {epochs[who]}" in msg, msg
            assert f"slot weights are at epoch {w}" in msg, msg
            return
        if verdict == "hold":
            before = ffn.window.clone()
            for _ in range(2):
                assert item_epoch(t, serve_one(ffn, expect_work=False)) == 0
            assert torch.equal(ffn.window, before), "a held-back round moved the FFN state"
            if epochs[0] != epochs[1]:  # weights at the newer epoch: the older participant is the fault
                set_weights_epoch(ffn, max(epochs))
                with pytest.raises(cam.CommProtocolError, match=f"by rank {epochs.index(min(epochs))} was routed"):
                    cam.ops.dispatch_recv(ffn)
                return
            w = epochs[0]  # the weights reach the round's epoch: served as any round
            for f in range(t.F):
                set_weights_epoch(comms[t.A + f], w)
        for f in range(t.F):
            assert item_epoch(t, serve_one(comms[t.A + f])) == w
        gold = golden(t, rounds, P_TABLE, 1)
        for a in range(t.A):
            assert torch.equal(cam.ops.combine_recv(comms[a], rounds[a][1], rounds[a][2]), gold[a]), a


# ----------------------------------------------------------------------------- race 1: weights behind the table

@pytest.mark.parametrize("pause", ["before the copy", "during the copy"])
def test_a_round_routed_by_the_new_table_waits_for_the_ffn_ranks_copy(monkeypatch, pause):
    """§15's first race: every rank agreed on table q, the Attention rank adopted it and dispatched a round under
    it, while FFN rank 0 has not copied q's experts into its slots yet (paused before the copy: weights epoch still
    0; or during it: -1). Its dispatch_recv, which the host guard cannot see, holds the round back instead of
    computing it with p's experts; once the copy ends the round is served, bit-exact against q's golden. FFN rank 1
    adopts without a pause and serves the round at once."""
    t = cam.Topology(D=1, P=1, F=2, E=3, K=2, H=32, Bmax=4, L=2, slots=1, expert_slots=2)
    g = torch.Generator().manual_seed(7)
    experts = expert_set(t, seed=8).experts()
    rounds = make_rounds(t, [[4, 3]], seed=9, ids_fn=lambda a, r, b: torch.randint(0, 3, (b, 2), generator=g))
    paused, release, dispatched = threading.Event(), threading.Event(), threading.Event()
    held = []
    slow = t.A  # FFN rank 0
    adopt, set_epoch = cam.Comm._adopt_placement, cam.Comm._set_weights_epoch

    def paused_adopt(self, new, ffn_slots):
        if self.rank == slow and pause == "before the copy":
            paused.set()
            assert release.wait(60)
        return adopt(self, new, ffn_slots)

    def paused_epoch(self, epoch):
        set_epoch(self, epoch)
        if self.rank == slow and epoch == -1 and pause == "during the copy":
            paused.set()
            assert release.wait(60)

    monkeypatch.setattr(cam.Comm, "_adopt_placement", paused_adopt)
    monkeypatch.setattr(cam.Comm, "_set_weights_epoch", paused_epoch)

    def attention(comm):
        outs = attention_body(rounds[0][:1])(comm)
        assert comm.set_placement(Q_TABLE) == 2 and comm.placement_epoch == 1
        assert int(comm.placement_buffer[0]) == 1
        r = rounds[0][1]
        cam.ops.dispatch_send(comm, r.x, r.ids, r.layer)
        dispatched.set()
        return outs + [cam.ops.combine_recv(comm, r.ids, r.w)]

    def ffn(comm):
        served = experts.slots(P_TABLE, comm.rank - t.A)
        log = ffn_server(t, 1)(comm)
        if comm.rank != slow:
            comm.set_placement(Q_TABLE, served, experts=experts)
            log.served += ffn_server(t, 1)(comm).served
            return log
        errs = []

        def rebalance():
            try:
                comm.set_placement(Q_TABLE, served, experts=experts)
            except BaseException as e:  # noqa: BLE001 - reported below
                errs.append(e)

        th = threading.Thread(target=rebalance, daemon=True)
        th.start()
        try:
            assert paused.wait(60) and dispatched.wait(60)
            assert comm._c.weights_epoch() == (0 if pause == "before the copy" else -1)
            for _ in range(3):  # the round under q is published: held back, not served with p's experts
                held.append(serve_one(comm, expect_work=False))
        finally:
            release.set()
            th.join(60)
        assert not th.is_alive() and not errs, errs
        assert comm._c.weights_epoch() == 1 and comm.placement is Q_TABLE
        more = ffn_server(t, 1)(comm)
        assert [item_epoch(t, s.work_item) for s in more.served] == [1] * len(more.served)
        log.served += more.served
        return log

    results, errors = run_ranks(t, {0: attention, t.A: ffn, t.A + 1: ffn}, timeout=180, placement=P_TABLE)
    raise_first(errors)
    assert len(held) == 3
    check_against_golden(t, rounds, results, placement=[P_TABLE, Q_TABLE])


# ----------------------------------------------------------------------------- race 2: table rewritten under the op

def test_a_table_rewritten_while_dispatch_send_runs_is_refused_and_nothing_is_published():
    """§15's second race: a dispatch_send read its table (epoch 0) and then waits for its slot; meanwhile the table
    is rewritten in place the way a rebalance does it (epoch -1, q's rows, epoch 1) by a user or a captured loop the
    host guard does not see. When the slot frees, the op reads the epoch again, finds 1 and refuses naming both
    epochs: nothing was published (the FFN rank's ready signal and state stay), the Comm stays usable, and the round
    sent again under p is bit-exact. A table whose epoch word is -1 when the op starts is refused likewise."""
    t = cam.Topology(D=1, P=1, F=2, E=3, K=2, H=32, Bmax=4, L=2, slots=1, expert_slots=2)
    lay = WindowLayout(t)
    with plane(t, placement=P_TABLE, timeout_s=60) as comms:
        att = comms[0]
        r0, r1 = a_round(t, 0, seed=3), a_round(t, 0, seed=4)
        cam.ops.dispatch_send(att, r0[0], r0[1], 0)
        errs = []

        def second():
            try:
                cam.ops.dispatch_send(att, r1[0], r1[1], 1)
            except BaseException as e:  # noqa: BLE001 - checked below
                errs.append(e)

        th = threading.Thread(target=second, daemon=True)
        th.start()
        end = time.monotonic() + 30
        while not _runtime.stream_lock(att.stream).locked():  # the op runs (and waits for slot 0 to free)
            assert time.monotonic() < end and th.is_alive(), errs
            time.sleep(0.01)
        time.sleep(0.3)
        att.placement_buffer[0] = -1
        att.placement_table.copy_(Q_TABLE.device_tables(t.placement_width))
        att.placement_buffer[0] = 1
        ready = [comms[t.A + f].window.view(torch.int64)[lay.ffn_ready_signal_off(0, 0) // 8].item()
                 for f in range(t.F)]
        for f in range(t.F):  # round 0 (epoch 0) is served; its combine_recv runs on another stream
            assert item_epoch(t, serve_one(comms[t.A + f])) == 0
        out0 = torch.empty((r0[0].shape[0], t.H), dtype=torch.bfloat16)
        _runtime.run(_C.combine_recv, att._c, r0[1], r0[2], out0, stream=_C.Stream())
        th.join(60)
        assert not th.is_alive()
        assert len(errs) == 1 and isinstance(errs[0], cam.DeviceArgumentError), errs
        msg = str(errs[0])
        assert "placement table changed while dispatch_send read it (epoch 0 before its rows were read, 1 before " \
               "publishing)" in msg and "was not published" in msg, msg
        assert ready == [1, 1] and all(
            comms[t.A + f].window.view(torch.int64)[lay.ffn_ready_signal_off(0, 0) // 8].item() == 1
            for f in range(t.F)), "the refused round was published"
        assert torch.equal(out0, golden(t, [r0], P_TABLE, 0)[0])
        # the table mid-rewrite when the op starts: refused at once
        with pytest.raises(cam.DeviceArgumentError, match=r"epoch word is -1 \(a rebalance is rewriting the table\)"):
            att.placement_buffer[0] = -1
            cam.ops.dispatch_send(att, r1[0], r1[1], 1)
        att.placement_table.copy_(P_TABLE.device_tables(t.placement_width))
        att.placement_buffer[0] = 0
        cam.ops.dispatch_send(att, r1[0], r1[1], 1)
        for f in range(t.F):
            assert item_epoch(t, serve_one(comms[t.A + f])) == 0
        assert torch.equal(cam.ops.combine_recv(att, r1[1], r1[2]), golden(t, [r1], P_TABLE, 1)[0])


# ----------------------------------------------------------------------------- combine_send

@pytest.mark.parametrize("w", [1, -1])
def test_combine_send_fails_an_item_whose_weights_moved_before_writing_anything(w):
    """A work item served under weights epoch 0, whose weights then move (a rebalance on another stream: -1, or
    done: 1) before its combine_send: the item's rows are another table's experts, so combine_send fails naming
    both epochs before it writes a row or a signal (every Attention window unchanged)."""
    t = cam.Topology(D=1, P=2, F=1, E=2, K=2, H=32, Bmax=4, L=2, slots=1)
    with plane(t, timeout_s=60) as comms:
        for a in range(t.A):
            x, ids, _ = a_round(t, a, seed=5)
            cam.ops.dispatch_send(comms[a], x, ids, 0)
        ffn = comms[t.A]
        ex, sc, cnt, wi = cam.ops.dispatch_recv(ffn)
        assert cam.WorkItem(wi).kind == 1 and item_epoch(t, wi) == 0
        before = {a: comms[a].window[256:].clone() for a in range(t.A)}  # past the control area (abort word)
        set_weights_epoch(ffn, w)
        with pytest.raises(cam.CommProtocolError) as info:
            cam.ops.combine_send(ffn, torch.ones((t.recv_rows, t.H), dtype=torch.bfloat16), wi)
        msg = str(info.value)
        assert "combine_send" in msg and "routed by placement epoch 0" in msg and f"at epoch {w}" in msg, msg
        assert "the weights changed while the work item was computed" in msg, msg
        for a in range(t.A):
            assert torch.equal(comms[a].window[256:], before[a]), f"combine_send wrote into rank {a}"


# ----------------------------------------------------------------------------- batched receive, chunked rounds

def test_a_batched_receive_skips_held_back_replicas_as_the_golden_selection_does():
    """Three replicas publish; replica 1 routed by a newer table (epoch 1, same rows) than the FFN rank's weights
    (0). The snapshot takes replicas 0 and 2 and skips 1 as not ready (batch_select with replica 1 not ready), each
    item carrying epoch 0; once the weights are at epoch 1 the next batch takes replica 1 with epoch 1. Every
    output bit-exact."""
    t = cam.Topology(D=3, P=1, F=1, E=2, K=2, H=32, Bmax=4, L=2, slots=1, expert_slots=2)
    p = Placement(2, 1, 2, [[[(0, 1)], [(0, 0)]]] * 2)
    budget = 3 * t.recv_rows
    with plane(t, placement=p, timeout_s=60) as comms:
        rounds = [a_round(t, a, seed=6) for a in range(t.A)]
        comms[1].placement_buffer[0] = 1
        for a in range(t.A):
            cam.ops.dispatch_send(comms[a], rounds[a][0], rounds[a][1], a % 2)
        ffn = comms[t.A]
        log = FfnLog()
        serve_batch(t, ffn, budget, log)
        rows = {d: int(s.work_item[5]) for d, s in ((s.replica, s) for s in log.served)}
        want, rr = batch_select([rows[0], None, rows[2]], 0, budget, 64)
        assert log.batches == [want] == [[0, 2]] and rr == 0
        assert [item_epoch(t, s.work_item) for s in log.served] == [0, 0]
        set_weights_epoch(ffn, 1)
        serve_batch(t, ffn, budget, log)
        assert log.batches[1] == [1] and item_epoch(t, log.served[2].work_item) == 1
        gold = golden(t, rounds, p, [0, 1, 0])
        for a in range(t.A):
            assert torch.equal(cam.ops.combine_recv(comms[a], rounds[a][1], rounds[a][2]), gold[a]), a


def test_a_chunked_round_is_held_between_chunks_and_fails_on_weights_that_moved_on():
    """A round served in chunks (capacity 2): after its first chunk the weights are being moved (-1), so the next
    dispatch_recv holds the rest back; back at epoch 0 the remaining chunks are served and the round is bit-exact.
    A second round: its first chunk served at epoch 0, then the weights move on to epoch 1: the next chunk fails
    naming both epochs (the round's own experts are gone from the slots)."""
    t = cam.Topology(D=1, P=1, F=1, E=2, K=2, H=32, Bmax=4, L=2, slots=1, capacity=2)
    with plane(t, timeout_s=60) as comms:
        att, ffn = comms[0], comms[1]
        x, ids, w = a_round(t, 0, seed=8, b=4)
        cam.ops.dispatch_send(att, x, ids, 1)
        first = serve_one(ffn)
        n = int(first[WindowLayout(t).work_item_chunk_off + 1])
        bounds = chunk_bounds(torch.bincount(ids.flatten().long(), minlength=2).tolist(), t.recv_rows)
        assert len(bounds) >= 3 and n == 8
        set_weights_epoch(ffn, -1)
        serve_one(ffn, expect_work=False)
        set_weights_epoch(ffn, 0)
        for _ in bounds[1:]:
            assert item_epoch(t, serve_one(ffn)) == 0
        assert torch.equal(cam.ops.combine_recv(att, ids, w), golden(t, [(x, ids, w)], None, 1)[0])
        cam.ops.dispatch_send(att, x, ids, 0)
        serve_one(ffn)
        set_weights_epoch(ffn, 1)
        with pytest.raises(cam.CommProtocolError, match="routed by placement epoch 0, but this FFN rank's slot "
                                                         "weights are at epoch 1"):
            cam.ops.dispatch_recv(ffn)


def test_the_placement_buffer_is_the_epoch_line_then_the_rows_and_a_rebalance_moves_both_epochs():
    """Comm.placement_buffer word for word against the golden form (cam.reference.placement_buffer), at creation
    (epoch 0, every FFN rank's weights epoch 0) and after a rebalance (epoch 1 everywhere, q's rows); the buffer
    keeps its address (what a captured dispatch_send holds)."""
    from cam.reference.dispatch_combine import placement_buffer

    t = cam.Topology(D=1, P=1, F=2, E=3, K=2, H=32, Bmax=4, L=2, slots=1, expert_slots=2)
    experts = expert_set(t, seed=3).experts()

    def body(comm):
        assert torch.equal(comm.placement_buffer, placement_buffer(P_TABLE, 0))
        assert comm.placement_buffer.numel() == t.placement_words
        ptr = comm.placement_buffer.data_ptr()
        kw = {}
        if comm.rank >= t.A:
            assert comm._c.weights_epoch() == 0
            kw = {"weights": experts.slots(P_TABLE, comm.rank - t.A), "experts": experts}
        comm.set_placement(Q_TABLE, **kw)
        assert torch.equal(comm.placement_buffer, placement_buffer(Q_TABLE, 1)) and comm.placement_epoch == 1
        assert comm.placement_buffer.data_ptr() == ptr
        if comm.rank >= t.A:
            assert comm._c.weights_epoch() == 1
        return True

    results, errors = run_ranks(t, {r: body for r in range(t.world_size)}, timeout=60, placement=P_TABLE)
    raise_first(errors)
    assert all(results.values())


def test_a_replay_of_a_captured_ffn_loop_holds_back_while_the_weights_move():
    """The first race as §15 words it, with a replay: the FFN rank's captured batched loop (dispatch_recv ->
    combine_send, captured once) is replayed while its weights epoch is -1 (a rebalance copying its slots): the
    replay takes nothing although the round is published; replayed again once the weights are back at epoch 0 it
    takes the round, every row the golden dispatch's, the item carrying epoch 0."""
    from _dataplane_harness import capture_batched_loop
    from cam.reference.dispatch_combine import dispatch

    t = cam.Topology(D=1, P=1, F=1, E=2, K=2, H=32, Bmax=4, L=2, slots=1)
    with plane(t, timeout_s=60, idle_poll_s=0.05) as comms:
        att, ffn = comms[0], comms[1]
        graph, recv, _ = capture_batched_loop(t, ffn)
        try:
            x, ids, w = a_round(t, 0, seed=12)
            cam.ops.dispatch_send(att, x, ids, 1)
            set_weights_epoch(ffn, -1)
            graph.replay()
            assert int(recv[4][:, 0].sum()) == 0, "a replay served a round while the weights were moving"
            set_weights_epoch(ffn, 0)
            graph.replay()
            items = recv[4]
            assert int(items[0, 0]) == 1 and item_epoch(t, items[0]) == 0 and int(items[1:, 0].sum()) == 0
            gd = dispatch(t, [(x, ids)], t.A, quant_fn=dynamic_quant)
            n = int(items[0, 5])
            assert n == gd["rows"].shape[0] and torch.equal(recv[0][:n], gd["rows"])
            assert torch.equal(recv[1][:n], gd["scales"])
        finally:
            graph.synchronize()
            graph.reset()
        cam.ops.combine_recv(att, ids, w)  # the round completes (its rows are the loop's zeros)
