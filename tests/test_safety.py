"""Nothing a kernel dereferences is trusted from memory a user or peer can write, nothing is freed while a
kernel may still use it, and every refusal leaves the plane usable. Threads as ranks; the ops are called from the
test thread on the ranks' Comms, so a test can interleave ranks step by step."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cam
from _window_layout import IDENTITY_OFF, WindowLayout
from cam.reference.dispatch_combine import round_trip_plane
from cam.reference.dynamic_quant import dynamic_quant
from _dataplane_harness import expert_fn, unique_group
from _topology import topology_with

pytestmark = pytest.mark.timeout(180)

T = dict(D=1, P=2, F=2, E=4, K=2, H=32, Bmax=4, L=2, slots=1)


topo = topology_with(**T)


@contextlib.contextmanager
def plane(t: cam.Topology, *, group=None, rank_kw=None, **kw):
    """Every rank's Comm, created on a thread per rank (in-process joining blocks until all joined) and kept open
    until the block ends. The ops are called by the test on these Comms."""
    group = group or unique_group("safety")
    comms, errors = {}, {}
    ready = threading.Barrier(t.world_size + 1, timeout=60)
    release = threading.Event()

    def main(r):
        try:
            with cam.Comm(t, r, group=group, **{**kw, **(rank_kw or {}).get(r, {})}) as c:
                comms[r] = c
                ready.wait()
                release.wait(300)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            errors[r] = e
            ready.abort()

    threads = [threading.Thread(target=main, args=(r,), daemon=True) for r in range(t.world_size)]
    for th in threads:
        th.start()
    try:
        try:
            ready.wait()
        except threading.BrokenBarrierError:
            for th in threads:
                th.join(60)
            raise AssertionError(f"plane creation failed: {errors}") from next(iter(errors.values()), None)
        yield comms
    finally:
        release.set()
        for th in threads:
            th.join(60)
        assert not any(th.is_alive() for th in threads), "a rank did not close"
    assert not errors, errors


def make_round(t, a, seed, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed * 100 + a)
    x = (torch.randn((t.Bmax - 1, t.H), generator=g) * 3).to(dtype)
    ids = torch.randint(-1, t.E, (t.Bmax - 1, t.K), generator=g, dtype=torch.int32)
    ids[0, 0] = a % t.E  # every participant sends at least one row
    w = torch.rand((t.Bmax - 1, t.K), generator=g, dtype=torch.float32)
    return x, ids, w


def recv_work(comm, deadline_s=30.0):
    end = time.monotonic() + deadline_s
    while True:
        ex, sc, cnt, wi = cam.ops.dispatch_recv(comm)
        if cam.WorkItem(wi).kind == 1:
            return ex, sc, cnt, wi
        cam.ops.combine_send(comm, torch.zeros((comm.topology.recv_rows, comm.topology.H), dtype=comm.dtype), wi)
        assert time.monotonic() < end, "no work item arrived"


def expert_out(comm, ex, sc, cnt, wi):
    t = comm.topology
    f = comm.rank - t.A
    n = cam.WorkItem(wi).rows
    out = torch.zeros((t.recv_rows, t.H), dtype=comm.dtype)
    e = torch.repeat_interleave(torch.arange(t.R), cnt) + f * t.R
    out[:n] = expert_fn(t.quantized, comm.dtype)(e, ex[:n], sc[:n] if t.quantized else None)
    return out


def golden_out(t, rounds, dtype=torch.bfloat16):
    return round_trip_plane(t, rounds, expert_fn(t.quantized, dtype), quant_fn=dynamic_quant, global_ids=True)["out"]


def windows(comms):
    return {r: c.window.clone() for r, c in comms.items()}


def assert_unchanged(before, comms, what):
    for r, c in comms.items():
        assert torch.equal(before[r], c.window), f"{what}: rank {r}'s window changed"


def finish_round(t, comms, rounds, served):
    """Serves every FFN rank not in `served` and checks every Attention output against the golden round trip."""
    for f in range(t.F):
        r = t.A + f
        if r not in served:
            item = recv_work(comms[r])
            cam.ops.combine_send(comms[r], expert_out(comms[r], *item), item[3])
    gold = golden_out(t, rounds)
    for a in range(t.A):
        got = cam.ops.combine_recv(comms[a], rounds[a][1], rounds[a][2])
        assert torch.equal(got, gold[a]), f"combine output of rank {a}"


# ----------------------------------------------------------------------------- item 1: forged work items

def tamper_values(v: int):
    vals = [v + 1, v - 1, -1, -(2**62), 2**40, 7, 0]
    return [x for x in dict.fromkeys(vals) if x != v]


def refused_unchanged(comms, ffn, out, forged, what):
    """combine_send of a forged work item: refused (DeviceArgumentError, or CommProtocolError for a seq the FFN
    state says is stale), nothing written on any rank, the Comm still usable (status cleared, no abort)."""
    before = windows(comms)
    with pytest.raises((cam.DeviceArgumentError, cam.CommProtocolError)) as info:
        cam.ops.combine_send(comms[ffn], out, forged)
    assert "combine_send on rank" in str(info.value) and "stays usable" in str(info.value), (what, str(info.value))
    assert_unchanged(before, comms, what)
    st_ = comms[ffn].status()
    assert st_["code"] == 0 and st_["abort"] == 0, (what, st_)


@contextlib.contextmanager
def published_round(seed=1, timeout_s=120, **kw):
    """A plane with one round (layer 1) dispatched by every Attention rank; FFN rank A has received nothing."""
    t = topo(**kw)
    with plane(t, timeout_s=timeout_s) as comms:
        rounds = [make_round(t, a, seed) for a in range(t.A)]
        for a in range(t.A):
            cam.ops.dispatch_send(comms[a], rounds[a][0], rounds[a][1], 1)
        yield t, comms, rounds, t.A


@contextlib.contextmanager
def dispatched_round(seed=1, **kw):
    """A plane with one round dispatched by every Attention rank and received by FFN rank A (not combined)."""
    with published_round(seed, **kw) as (t, comms, rounds, ffn):
        yield t, comms, rounds, ffn, recv_work(comms[ffn])


def test_combine_send_refuses_every_tampered_word_of_the_work_item():
    """Every word of the work item as the layout defines it (work_item_words, so words added later are covered),
    tampered one at a time with several values: refused before anything is written, and the genuine item then
    completes the round exactly."""
    with dispatched_round(seed=1) as (t, comms, rounds, ffn, item):
        out = expert_out(comms[ffn], *item)
        wi = item[3]
        assert wi.shape == (t.work_item_words,)
        trials = 0
        for w in range(t.work_item_words):
            for v in tamper_values(int(wi[w])):
                forged = wi.clone()
                forged[w] = v
                refused_unchanged(comms, ffn, out, forged, f"word {w} = {v}")
                trials += 1
        assert trials >= 5 * t.work_item_words
        cam.ops.combine_send(comms[ffn], out, wi)
        finish_round(t, comms, rounds, served={ffn})


def test_empty_work_item_with_a_tampered_word_is_refused():
    t = topo()
    with plane(t, timeout_s=120) as comms:
        ffn = t.A
        _, _, _, wi = cam.ops.dispatch_recv(comms[ffn])
        assert cam.WorkItem(wi).kind == 0
        out = torch.zeros((t.recv_rows, t.H), dtype=torch.bfloat16)
        for w in range(t.work_item_words):
            forged = wi.clone()
            forged[w] = int(wi[w]) + 5
            refused_unchanged(comms, ffn, out, forged, f"empty item word {w}")
        cam.ops.combine_send(comms[ffn], out, wi)  # the genuine empty item is a no-op


@pytest.mark.slow
def test_combine_send_refuses_randomly_forged_work_items():
    """Random forgeries (several words at once, any int64) of a real work item, hypothesis-driven."""
    with dispatched_round(seed=2) as (t, comms, rounds, ffn, item):
        out = expert_out(comms[ffn], *item)
        wi = item[3]
        words = t.work_item_words

        @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(st.lists(st.tuples(st.integers(0, words - 1), st.integers(-(2**63), 2**63 - 1)), min_size=1,
                        max_size=4))
        def forged_item(edits):
            forged = wi.clone()
            for w, v in edits:
                forged[w] = v
            if torch.equal(forged, wi):
                return
            refused_unchanged(comms, ffn, out, forged, f"edits {edits}")

        forged_item()
        cam.ops.combine_send(comms[ffn], out, wi)
        finish_round(t, comms, rounds, served={ffn})


def test_out_of_range_index_entry_written_into_a_window_is_refused():
    """The index table lives in the FFN window and is written by a peer: an entry pointing outside its round (as a
    rogue or corrupted peer would write) is a protocol error at dispatch_recv, never a wild read or write."""
    t = topo(P=1, D=1)
    with plane(t, timeout_s=120) as comms:
        x, ids, _ = make_round(t, 0, 3)
        cam.ops.dispatch_send(comms[0], x, ids, 0)
        ffn = t.A + int(ids[0, 0]) // t.R
        layout = WindowLayout(t)
        region = layout.ffn_region_off(0, 0)
        entry = (region + layout.region_index_off) // 4 + 1  # int32 field t*K + k of entry 0
        comms[ffn].window.view(torch.int32)[entry] = 2**30
        with pytest.raises(cam.CommProtocolError, match="index entry points outside its round"):
            cam.ops.dispatch_recv(comms[ffn])


def test_combine_send_refuses_a_work_item_whose_index_entry_was_changed_after_recv():
    with dispatched_round(seed=4) as (t, comms, rounds, ffn, item):
        out = expert_out(comms[ffn], *item)
        wi = item[3]
        p, a = 0, 0
        layout = WindowLayout(t)
        region = layout.ffn_region_off(a, 0)
        entry = (region + layout.region_index_off) // 4 + 1
        view = comms[ffn].window.view(torch.int32)
        rows = int(comms[ffn].window.view(torch.int64)[region // 8 + 5])
        assert rows > 0
        saved = int(view[entry])
        for bad in (-1, t.Bmax * t.K, 2**31 - 1):
            view[entry] = bad
            refused_unchanged(comms, ffn, out, wi, f"index entry = {bad}")
        view[entry] = saved
        cam.ops.combine_send(comms[ffn], out, wi)
        finish_round(t, comms, rounds, served={ffn})


# ----------------------------------------------------------------------------- item 4: plane instance

def test_work_item_of_another_plane_with_the_same_topology_is_refused():
    t = topo()
    with plane(t, timeout_s=120) as c1, plane(t, timeout_s=120) as c2:
        assert c1[0].plane_id != c2[0].plane_id
        assert len({c.plane_id for c in c1.values()}) == 1 and len({c.plane_id for c in c2.values()}) == 1
        r1 = [make_round(t, a, 5) for a in range(t.A)]
        r2 = [make_round(t, a, 6) for a in range(t.A)]
        for comms, rounds in ((c1, r1), (c2, r2)):
            for a in range(t.A):
                cam.ops.dispatch_send(comms[a], rounds[a][0], rounds[a][1], 1)
        ffn = t.A
        item1 = recv_work(c1[ffn])
        item2 = recv_work(c2[ffn])
        assert int(item1[3][7]) == c1[ffn].plane_id
        out2 = expert_out(c2[ffn], *item2)
        before = windows(c2)
        with pytest.raises(cam.DeviceArgumentError, match="another rank or plane"):
            cam.ops.combine_send(c2[ffn], out2, item1[3])
        assert_unchanged(before, c2, "foreign work item")
        cam.ops.combine_send(c2[ffn], out2, item2[3])
        cam.ops.combine_send(c1[ffn], expert_out(c1[ffn], *item1), item1[3])
        finish_round(t, c1, r1, served={ffn})
        finish_round(t, c2, r2, served={ffn})


# ----------------------------------------------------------------------------- item 5: dtype in the identity

@pytest.mark.parametrize("odd_rank", [0, 2])
def test_dtype_mismatch_fails_at_creation_naming_the_rank(odd_rank):
    t = topo()
    group = unique_group("dtype")
    errors = {}

    def main(r):
        try:
            cam.Comm(t, r, group=group, dtype=torch.float16 if r == odd_rank else torch.bfloat16,
                     join_timeout_s=30).close()
        except BaseException as e:  # noqa: BLE001
            errors[r] = e

    threads = [threading.Thread(target=main, args=(r,), daemon=True) for r in range(t.world_size)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert sorted(errors) == list(range(t.world_size)), errors
    for r, e in errors.items():
        assert "dtype" in str(e), str(e)
        named = odd_rank if r != odd_rank else 0 if odd_rank != 0 else 1
        assert f"rank {named} was created with activation dtype" in str(e), (r, str(e))


def test_identity_line_carries_dtype_nonce_and_plane_id():
    t = topo()
    with plane(t, rank_kw={}, dtype=torch.float16) as comms:
        base = IDENTITY_OFF // 8
        nonces = set()
        for r, c in comms.items():
            ident = c.window.view(torch.int64)[base:base + 8].tolist()
            assert ident[5] == 1  # ACL_FLOAT16
            nonces.add(ident[6])
            assert ident[7] == c.plane_id != 0
        assert len(nonces) == t.world_size


# ----------------------------------------------------------------------------- item 6: combine_recv ids

def test_combine_recv_with_other_ids_of_the_same_shape_is_refused():
    t = topo()
    with plane(t, timeout_s=120) as comms:
        rounds = [make_round(t, a, 7) for a in range(t.A)]
        for a in range(t.A):
            cam.ops.dispatch_send(comms[a], rounds[a][0], rounds[a][1], 0)
        for f in range(t.F):
            item = recv_work(comms[t.A + f])
            cam.ops.combine_send(comms[t.A + f], expert_out(comms[t.A + f], *item), item[3])
        other = rounds[0][1].flip(0).contiguous()
        assert not torch.equal(other, rounds[0][1])
        before = windows(comms)
        with pytest.raises(cam.DeviceArgumentError, match="topk_ids differ from the ids dispatched"):
            cam.ops.combine_recv(comms[0], other, rounds[0][2])
        assert_unchanged(before, comms, "other ids")
        swapped = rounds[0][1].clone()
        swapped[0, 0], swapped[0, 1] = int(rounds[0][1][0, 1]), int(rounds[0][1][0, 0])
        if not torch.equal(swapped, rounds[0][1]):
            with pytest.raises(cam.DeviceArgumentError, match="topk_ids differ"):
                cam.ops.combine_recv(comms[0], swapped, rounds[0][2])
        gold = golden_out(t, rounds)
        for a in range(t.A):
            assert torch.equal(cam.ops.combine_recv(comms[a], rounds[a][1], rounds[a][2]), gold[a])


# ----------------------------------------------------------------------------- item 2: the timeout chain

def test_timeout_chain_is_checked_where_the_comm_is_created(monkeypatch):
    t = topo()
    monkeypatch.delenv("CAM_SYNC_TIMEOUT_S", raising=False)
    with pytest.raises(ValueError, match="timeout_s .* CAM_SYNC_TIMEOUT_S"):
        cam.Comm(t, 0, group=unique_group("chain"), timeout_s=580.0)
    with pytest.raises(ValueError, match="idle_poll_s"):
        cam.Comm(t, 0, group=unique_group("chain"), timeout_s=1.0, idle_poll_s=float("inf"))
    with pytest.raises(ValueError, match="timeout_s"):
        cam.Comm(t, 0, group=unique_group("chain"), timeout_s=float("nan"))
    monkeypatch.setenv("CAM_SYNC_TIMEOUT_S", "1500")
    with pytest.raises(ValueError, match="AI Core op timeout"):
        cam.Comm(t, 0, group=unique_group("chain"), timeout_s=1.0)
    monkeypatch.setenv("CAM_SYNC_TIMEOUT_S", "nan")
    with pytest.raises(ValueError, match="CAM_SYNC_TIMEOUT_S"):
        cam.ops.dynamic_quant(torch.zeros((2, 32), dtype=torch.bfloat16))


def test_sync_timeout_ends_the_kernel_before_releasing_its_buffers(monkeypatch):
    """A data-plane wait outlives the host's sync bound (the bound is lowered after creation, as a misconfigured
    process would): the host aborts the Comm, the kernel ends, and only then does the op raise, so nothing is
    left running on memory Python may reuse. Before the fix the kernel kept running after SyncTimeoutError."""
    t = topo()
    with plane(t, timeout_s=60) as comms:
        x, ids, w = make_round(t, 0, 9)
        cam.ops.dispatch_send(comms[0], x, ids, 0)
        monkeypatch.setenv("CAM_SYNC_TIMEOUT_S", "0.5")
        start = time.monotonic()
        with pytest.raises(cam.SyncTimeoutError, match="aborted its communicator; the kernel then ended"):
            cam.ops.combine_recv(comms[0], ids, w)  # no FFN rank serves: the device wait would last 60 s
        assert time.monotonic() - start < 30
        comms[0].stream.synchronize(0.01)  # drained: nothing of that launch is still running or queued
        assert comms[0].status()["abort"] != 0
        with pytest.raises(cam.CommAbortedError):
            cam.ops.dispatch_send(comms[1], x, ids, 0)


def test_sync_timeout_of_a_compute_op_waits_for_the_kernel(monkeypatch):
    # Big enough that the kernel is still running when the host starts its 1 µs wait, even if the host thread is
    # descheduled for a few ms after the launch on a loaded machine (the SIMD vector unit quantizes 512 x 4096 in ~2 ms).
    x = torch.randn((4096, 4096)).to(torch.bfloat16)
    monkeypatch.setenv("CAM_SYNC_TIMEOUT_S", "0.000001")
    with pytest.raises(cam.SyncTimeoutError, match="no communicator to abort; the kernel then ended"):
        cam.ops.dynamic_quant(x)
    monkeypatch.delenv("CAM_SYNC_TIMEOUT_S")
    q, s = cam.ops.dynamic_quant(x[:4])  # this thread's stream is healthy again
    assert q.shape == (4, 4096)


# ----------------------------------------------------------------------------- item 7: fork

def _in_forked_child(fn, timeout_s=60.0) -> int:
    """Runs fn() in a forked child (alarm-bounded), returns its exit status (0 = fn returned True)."""
    import os
    import signal

    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            signal.alarm(int(timeout_s))
            code = 0 if fn() else 2
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            code = 3
        finally:
            os._exit(code)
    end = time.monotonic() + timeout_s + 10
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("forked child did not finish")


def test_forked_child_runs_ops_and_refuses_inherited_comms(monkeypatch):
    x = torch.randn((8, 64)).to(torch.bfloat16)
    q0, s0 = cam.ops.dynamic_quant(x)  # the parent's per-thread stream exists before the fork
    t = topo()
    with plane(t) as comms:
        monkeypatch.setenv("CAM_SYNC_TIMEOUT_S", "20")

        def child():
            q, s = cam.ops.dynamic_quant(x)  # a fresh stream: before the fix this waited for the sync timeout
            if not (torch.equal(q, q0) and torch.equal(s, s0)):
                return False
            try:
                cam.ops.dispatch_send(comms[0], x[:, :t.H].contiguous(), torch.zeros((8, 2), dtype=torch.int32), 0)
            except RuntimeError as e:
                if "forked child" not in str(e) or "create a new cam.Comm" not in str(e):
                    return False
            else:
                return False
            comms[0].close()  # dropped without touching the parent's plane
            return True

        assert _in_forked_child(child) == 0
        assert comms[0].status()["abort"] == 0  # the parent's plane is untouched


# ----------------------------------------------------------------------------- item 11 (Comm parts)

def test_shm_join_timeout_names_the_missing_ranks():
    t = topo()
    store = torch.distributed.HashStore()
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"rank\(s\) 1, 2, 3 never published its pid"):
        cam.Comm(t, 0, transport="shm", store=store, group=unique_group("join"), join_timeout_s=0.5)
    assert time.monotonic() - start < 30


def test_close_honours_its_bound_during_an_idle_poll():
    """An FFN rank's thread sits in a 20 s idle poll; close(wait_s=0.5) ends it (abort) instead of waiting it out,
    and only returns once the kernel has ended."""
    t = topo()
    with plane(t, timeout_s=1.0, idle_poll_s=20.0) as comms:
        ffn = comms[t.A]
        seen = []

        def poll():
            try:
                cam.ops.dispatch_recv(ffn)
            except BaseException as e:  # noqa: BLE001
                seen.append(e)

        th = threading.Thread(target=poll, daemon=True)
        th.start()
        from cam import _runtime

        end = time.monotonic() + 30
        while not _runtime.stream_lock(ffn.stream).locked():  # the poll is running on the Comm's stream
            assert time.monotonic() < end and th.is_alive(), seen
            time.sleep(0.01)
        time.sleep(0.2)
        start = time.monotonic()
        ffn.close(wait_s=0.5)
        took = time.monotonic() - start
        th.join(30)
        assert not th.is_alive()
        assert took < 10, f"close took {took:.1f} s during a 20 s idle poll"
        assert seen and isinstance(seen[0], cam.CommAbortedError), seen


@pytest.mark.parametrize("layer", [-1, 2, 2**40])
def test_gmm_ops_refuse_a_work_item_whose_layer_word_was_forged(layer):
    """The other ops that read a work item (its word 2 is the GMM layer_index): a forged layer outside [0, L) is
    refused by both layer-select GMMs before they write, and the genuine item still completes the round."""
    from cam.connector import ffn_compute, ffn_work_item as _work_item

    with dispatched_round(seed=8) as (t, comms, rounds, ffn, item):
        assert t.L == 2
        g = torch.Generator().manual_seed(3)
        n1 = 2 * t.H
        w1 = cam.LayerWeights([torch.randint(-8, 8, (t.R, t.H, n1), generator=g, dtype=torch.int8)
                               for _ in range(t.L)], [torch.full((t.R, n1), 0.01) for _ in range(t.L)])
        w2 = cam.LayerWeights([torch.randint(-8, 8, (t.R, t.H, t.H), generator=g, dtype=torch.int8)
                               for _ in range(t.L)], [torch.full((t.R, t.H), 0.01) for _ in range(t.L)])
        forged = item[3].clone()
        forged[2] = layer
        with pytest.raises(cam.DeviceArgumentError, match="layer"):
            ffn_compute(_work_item(item[0], item[1], item[2], forged), w1, w2)
        ffn_compute(_work_item(*item), w1, w2)  # in range: runs
        cam.ops.combine_send(comms[ffn], expert_out(comms[ffn], *item), item[3])
        finish_round(t, comms, rounds, served={ffn})


def test_a_record_claiming_too_many_token_slots_is_refused_in_token_words():
    """A record whose distinct-token count exceeds its region's token slots (rows within bounds) is refused by
    dispatch_recv in token words, naming window_tokens, not as a row overflow. Control: the untampered round is
    received."""
    from _window_layout import WindowLayout

    t = cam.Topology(D=1, P=1, F=1, E=2, K=2, H=32, Bmax=4, L=2, slots=1)
    lay = WindowLayout(t)
    ids = torch.tensor([[0, 1], [1, -1]], dtype=torch.int32)
    for tamper in (False, True):
        with plane(t, timeout_s=30) as comms:
            cam.ops.dispatch_send(comms[0], torch.ones((2, t.H), dtype=torch.bfloat16), ids, 1)
            w = comms[1].window.view(torch.int64)
            hdr = lay.ffn_region_off(0, 0) // 8
            if not tamper:
                assert int(cam.ops.dispatch_recv(comms[1])[3][5]) == 3
                continue
            w[hdr + 6] = lay.region_token_slots + 1  # kHdrTokenSlots: distinct tokens stored for this FFN rank
            with pytest.raises(cam.DeviceArgumentError) as info:
                cam.ops.dispatch_recv(comms[1])
            msg = str(info.value)
            assert f"more distinct tokens than the region's {lay.region_token_slots} token slots" in msg, msg
            assert "window_tokens" in msg and " rows" not in msg.split("dispatch_recv", 1)[1], msg


# ----------------------------------------------------------------------------- the placement table

def test_dispatch_send_refuses_every_tampered_word_of_the_placement_table():
    """Every word of the layer's device table that dispatch_send reads, set one at a time to a value outside its
    bound (replica count outside [1, F], FFN index outside [0, F), slot outside [0, R)): refused by the pre-pass
    naming the placement, no window written, the Comm usable. Words it does not read (pairs past the count, other
    layers) stay harmless: the round after the tampers, with such words changed, is bit-exact against the golden.
    Token 1 of every round names the replicated expert 1 twice, so the pre-pass's scan for the token's first index
    of an expert (docs/protocol.md §15) runs under every tamper and in the final round."""
    from cam.placement import Placement
    from _dataplane_harness import slot_experts

    t = topo(E=3, expert_slots=2)
    p = Placement(3, 2, 2, [[[(0, 0), (1, 1)], [(1, 0)], [(0, 1)]],
                            [[(1, 1)], [(0, 0), (1, 0)], [(0, 1)]]])
    with plane(t, placement=p) as comms:
        rounds = [make_round(t, a, seed=41) for a in range(t.A)]
        for _, ids, _ in rounds:
            ids[1] = 1
        table = comms[0].placement_table
        W, layer = t.placement_width, 1
        before = windows(comms)
        tampered = 0
        for e in range(t.E):
            n = int(table[layer, e, 0])
            for c in range(1 + 2 * n):  # the words the kernel reads for expert e
                bound = t.F if c % 2 == 1 else t.R  # c odd: an FFN index, c even > 0: a slot
                bad = [0, t.F + 1, -1, 2**40] if c == 0 else [-1, bound, -(2**62)]
                keep = int(table[layer, e, c])
                for v in bad:
                    table[layer, e, c] = v
                    with pytest.raises(cam.DeviceArgumentError, match="placement table of layer 1"):
                        cam.ops.dispatch_send(comms[0], rounds[0][0], rounds[0][1], layer)
                    assert_unchanged(before, comms, f"placement word ({e}, {c}) = {v}")
                    tampered += 1
                table[layer, e, c] = keep
        assert tampered == 3 * 4 + 8 * 3  # 3 counts, 4 (f, slot) pairs read
        table[layer, 2, 3:] = 2**40  # past expert 2's one replica: never read
        table[0] = -7  # another layer: never read for a layer-1 round
        for a in range(t.A):
            cam.ops.dispatch_send(comms[a], rounds[a][0], rounds[a][1], layer)
        fn = expert_fn(t.quantized, torch.bfloat16)
        for f in range(t.F):
            ex, sc, cnt, wi = recv_work(comms[t.A + f])
            n = cam.WorkItem(wi).rows
            out = torch.zeros((t.recv_rows, t.H), dtype=torch.bfloat16)
            out[:n] = fn(torch.repeat_interleave(slot_experts(comms[t.A + f], layer), cnt), ex[:n], sc[:n])
            cam.ops.combine_send(comms[t.A + f], out, wi)
        gold = round_trip_plane(t, rounds, fn, quant_fn=dynamic_quant, global_ids=True, placement=p,
                                layer=layer)["out"]
        for a in range(t.A):
            assert torch.equal(cam.ops.combine_recv(comms[a], rounds[a][1], rounds[a][2]), gold[a]), a


def test_dispatch_send_refuses_a_tampered_epoch_word_of_the_placement_table():
    """The table's epoch word (docs/protocol.md §15), set one value at a time: a negative one (-1 is a table being
    rewritten) is refused by the pre-pass naming the epoch word, nothing written, the Comm usable. A non-negative
    one is an epoch, so dispatch_send publishes the round carrying it: the FFN rank, whose weights are at epoch 0,
    holds it back (never computes it with weights of another epoch) until its weights epoch says the same, then
    the round is bit-exact."""
    from cam.placement import Placement
    from _window_layout import HDR_EPOCH

    t = topo(E=3, expert_slots=2)
    p = Placement(3, 2, 2, [[[(0, 0), (1, 1)], [(1, 0)], [(0, 1)]]] * 2)
    lay = WindowLayout(t)
    with plane(t, placement=p) as comms:
        rounds = [make_round(t, a, seed=43) for a in range(t.A)]
        before = windows(comms)
        for v in (-1, -2, -(2**62)):
            comms[0].placement_buffer[0] = v
            with pytest.raises(cam.DeviceArgumentError, match=f"placement table's epoch word is {v}"):
                cam.ops.dispatch_send(comms[0], rounds[0][0], rounds[0][1], 1)
            assert_unchanged(before, comms, f"epoch word = {v}")
        big = 2**40
        for a in range(t.A):
            comms[a].placement_buffer[0] = big
            cam.ops.dispatch_send(comms[a], rounds[a][0], rounds[a][1], 1)
        for f in range(t.F):
            r = t.A + f
            hdr = lay.ffn_region_off(0, 0) // 8
            assert int(comms[r].window.view(torch.int64)[hdr + HDR_EPOCH]) == big  # the record carries it
            wi = cam.ops.dispatch_recv(comms[r])[3]
            assert cam.WorkItem(wi).kind == 0, "a round of another epoch was served"
            cam.ops.combine_send(comms[r], torch.zeros((t.recv_rows, t.H), dtype=torch.bfloat16), wi)
            comms[r]._c.set_weights_epoch(big)
        from cam.reference.dispatch_combine import round_trip_plane as golden_plane
        fn = expert_fn(t.quantized, torch.bfloat16)
        from _dataplane_harness import slot_experts
        for f in range(t.F):
            ex, sc, cnt, wi = recv_work(comms[t.A + f])
            assert int(wi[lay.work_item_epoch]) == big
            n = cam.WorkItem(wi).rows
            out = torch.zeros((t.recv_rows, t.H), dtype=torch.bfloat16)
            out[:n] = fn(torch.repeat_interleave(slot_experts(comms[t.A + f], 1), cnt), ex[:n], sc[:n])
            cam.ops.combine_send(comms[t.A + f], out, wi)
        gold = golden_plane(t, rounds, fn, quant_fn=dynamic_quant, global_ids=True, placement=p, layer=1)["out"]
        for a in range(t.A):
            assert torch.equal(cam.ops.combine_recv(comms[a], rounds[a][1], rounds[a][2]), gold[a]), a


@pytest.mark.parametrize("value", [-1, -3, 1, 2**40])
def test_a_tampered_record_epoch_is_held_back_or_a_named_fault(value):
    """A participant's record epoch (kHdrEpoch, in the FFN window a peer writes) changed after it was published,
    one value at a time, with the FFN rank's weights at epoch 0: a larger epoch holds the round back (empty items,
    no state moved), and restored the round is served exactly; a negative one is a fault at dispatch_recv naming
    the participant and both epochs."""
    from _window_layout import HDR_EPOCH

    with published_round(seed=44, timeout_s=60) as (t, comms, rounds, ffn):
        lay = WindowLayout(t)
        w = comms[ffn].window.view(torch.int64)
        word = lay.ffn_region_off(1, 0) // 8 + HDR_EPOCH  # participant 1's record
        assert int(w[word]) == 0
        w[word] = value
        if value < 0:
            with pytest.raises(cam.CommProtocolError) as info:
                cam.ops.dispatch_recv(comms[ffn])
            msg = str(info.value)
            assert f"published by rank 1 was routed by placement epoch {value}" in msg and "at epoch 0" in msg, msg
            return
        state = comms[ffn].window[:lay.ffn_ready_off].clone()
        wi = cam.ops.dispatch_recv(comms[ffn])[3]
        assert cam.WorkItem(wi).kind == 0 and torch.equal(comms[ffn].window[:lay.ffn_ready_off], state)
        cam.ops.combine_send(comms[ffn], torch.zeros((t.recv_rows, t.H), dtype=torch.bfloat16), wi)
        w[word] = 0
        finish_round(t, comms, rounds, served=set())


def test_a_record_epoch_changed_after_dispatch_recv_refuses_combine_send():
    """combine_send recomputes the item from the records: a record epoch changed after dispatch_recv (so the item's
    epoch word no longer matches) is refused as a forged item, nothing written, and restored the item completes."""
    from _window_layout import HDR_EPOCH

    with dispatched_round(seed=45) as (t, comms, rounds, ffn, item):
        lay = WindowLayout(t)
        out = expert_out(comms[ffn], *item)
        w = comms[ffn].window.view(torch.int64)
        word = lay.ffn_region_off(0, 0) // 8 + HDR_EPOCH
        for v in (1, -1):
            w[word] = v
            refused_unchanged(comms, ffn, out, item[3], f"record epoch = {v}")
        w[word] = 0
        cam.ops.combine_send(comms[ffn], out, item[3])
        finish_round(t, comms, rounds, served={ffn})


@pytest.mark.parametrize("when,value", [("recv", -1), ("recv", 5), ("recv", -9), ("combine", 5), ("combine", -1),
                                        ("combine", -9)])
def test_a_tampered_weights_epoch_line_is_a_hold_back_or_a_named_fault(when, value):
    """The FFN rank's weights-epoch line (its own window, which peers can write), one value at a time. Before
    dispatch_recv: -1 (weights moving) holds the round back, and restored it is served exactly; any other value is
    not the round's epoch 0, a fault naming both. Between dispatch_recv and combine_send: any value but 0 fails
    combine_send naming both epochs before it writes a row or a signal."""
    with published_round(seed=46, timeout_s=60) as (t, comms, rounds, ffn):
        lay = WindowLayout(t)
        line = comms[ffn].window.view(torch.int64)[lay.ffn_weights_epoch_off // 8:lay.ffn_weights_epoch_off // 8 + 1]
        if when == "combine":
            item = recv_work(comms[ffn])
            out = expert_out(comms[ffn], *item)
            before = {a: comms[a].window[256:].clone() for a in range(t.A)}
            line[0] = value
            with pytest.raises(cam.CommProtocolError, match=f"routed by placement epoch 0, but this FFN rank's "
                                                            f"slot weights are at epoch {value}"):
                cam.ops.combine_send(comms[ffn], out, item[3])
            for a in range(t.A):
                assert torch.equal(comms[a].window[256:], before[a]), f"combine_send wrote into rank {a}"
            return
        line[0] = value
        if value != -1:
            with pytest.raises(cam.CommProtocolError, match=f"routed by placement epoch 0, but this FFN rank's slot "
                                                            f"weights are at epoch {value}"):
                cam.ops.dispatch_recv(comms[ffn])
            return
        wi = cam.ops.dispatch_recv(comms[ffn])[3]
        assert cam.WorkItem(wi).kind == 0, "a round was served while the weights were moving"
        cam.ops.combine_send(comms[ffn], torch.zeros((t.recv_rows, t.H), dtype=torch.bfloat16), wi)
        line[0] = 0
        finish_round(t, comms, rounds, served=set())


def test_fork_while_an_unclosed_comms_stream_is_held_only_by_its_aborter():
    """What the suite once hit: a Comm never closed is kept alive only by the runtime's aborter table (its bound
    abort); the fork handler clearing that table freed it in the child, whose stream destruction then waited forever
    on a condition variable the parent's worker thread was waiting on. Control: the same object freed in the parent
    (its worker exists there) returns at once."""
    import gc

    from cam import _runtime

    class Holder:  # stands for a Comm: owns a stream with a live worker, registered by its bound abort
        def __init__(self):
            self.stream = cam._C.Stream()

        def abort(self):
            pass

    holder = Holder()
    stream_id = id(holder.stream)
    _runtime.set_aborter(holder.stream, holder.abort)
    del holder
    gc.collect()
    try:
        assert _in_forked_child(lambda: True, timeout_s=20.0) == 0
    finally:
        control = _runtime._aborters.pop(stream_id)  # the parent drops it: the stream is destroyed here
        del control
        gc.collect()


# ----------------------------------------------------------------------------- seals: a round's writes in order

def _late_write(comm, data, seals, stale=0x5A, delay_s=0.4):
    """Rewinds the byte ranges `data` and the int64 seal words `seals` of comm's window to what they held before
    the round's writes landed (bytes `stale`, seal 0), as if those writes were still on their way after the ready (or
    done) word arrived; returns a function that lands them later: the data first, then the seals, as the writing
    block's MTE3 queue orders them."""
    w = comm.window
    words = w.view(torch.int64)
    kept = [(r, w[r].clone()) for r in data]
    sealed = [(s, int(words[s])) for s in seals]
    for s, value in sealed:
        assert value == 1, f"seal word {s} holds {value}, not round seq 1"
        words[s] = 0
    for r, _ in kept:
        w[r] = stale

    def land():
        time.sleep(delay_s)
        for r, b in kept:
            w[r] = b
        time.sleep(0.05)
        for s, value in sealed:
            words[s] = value

    return land


def _in_thread(fn):
    out, err = {}, {}

    def run():
        try:
            out["v"] = fn()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            err["e"] = e

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out, err


def _waits_then_lands(th, out, err, land):
    time.sleep(0.3)
    assert th.is_alive() and not out and not err, f"the op returned before the seal arrived: {out or err}"
    land()
    th.join(60)
    assert not th.is_alive() and not err, err
    return out["v"]


def test_dispatch_recv_waits_for_a_token_row_that_lands_after_the_ready_word():
    """A token row and its scale of participant 0 land on the FFN rank after the ready word: dispatch_recv must not
    read them before their seal says so, and the round trip stays bit-exact against the golden. Without the
    receiver's seal check it reads the stale row and the output differs."""
    with published_round(seed=6) as (t, comms, rounds, ffn):
        assert t.quantized
        lay = WindowLayout(t)
        region = lay.ffn_region_off(0, 0)
        row, scale = region + lay.region_tokens_off, region + lay.region_scales_off  # token slot 0: token 0
        land = _late_write(comms[ffn], [slice(row, row + lay.dispatch_row_bytes), slice(scale, scale + 4)],
                           [(region + lay.region_token_seal_off(0)) // 8])
        item = _waits_then_lands(*_in_thread(lambda: recv_work(comms[ffn])), land)
        cam.ops.combine_send(comms[ffn], expert_out(comms[ffn], *item), item[3])
        finish_round(t, comms, rounds, served={ffn})


def test_dispatch_recv_waits_for_a_record_that_lands_after_the_ready_word():
    """The record and index table of participant 1 land after the ready word (the window held zeros there): nothing
    of them is read (not even the epoch the hold-back compares) before the tables seal. Without the check the zero
    record is a topology-mismatch fault."""
    with published_round(seed=7) as (t, comms, rounds, ffn):
        lay = WindowLayout(t)
        region = lay.ffn_region_off(1, 0)
        land = _late_write(comms[ffn], [slice(region, region + lay.region_tokens_off)],
                           [(region + lay.region_tables_seal_off) // 8], stale=0)
        item = _waits_then_lands(*_in_thread(lambda: recv_work(comms[ffn])), land)
        cam.ops.combine_send(comms[ffn], expert_out(comms[ffn], *item), item[3])
        finish_round(t, comms, rounds, served={ffn})


def test_combine_recv_waits_for_a_combine_row_that_lands_after_the_done_word():
    """A combine row lands on the Attention rank after every done word: combine_recv must not read it before its
    seal, and its output stays bit-exact against the golden. Without the seal check it sums the stale row."""
    with published_round(seed=8) as (t, comms, rounds, _):
        for f in range(t.F):
            item = recv_work(comms[t.A + f])
            cam.ops.combine_send(comms[t.A + f], expert_out(comms[t.A + f], *item), item[3])
        lay = WindowLayout(t)
        row = lay.attn_combine_row_off(0, 0)  # token 0, top-k slot 0: make_round gives it an expert
        land = _late_write(comms[0], [slice(row, row + lay.combine_row_bytes)], [lay.attn_combine_seal_off(0, 0) // 8])
        gold = golden_out(t, rounds)
        got = _waits_then_lands(*_in_thread(lambda: cam.ops.combine_recv(comms[0], rounds[0][1], rounds[0][2])), land)
        assert torch.equal(got, gold[0])
        assert torch.equal(cam.ops.combine_recv(comms[1], rounds[1][1], rounds[1][2]), gold[1])


@pytest.mark.parametrize("side", ["dispatch", "combine"])
def test_a_seal_that_never_arrives_is_a_timeout_naming_what_is_awaited(side):
    """A seal that never comes ends the receiver's wait at the op's timeout, with an error saying what it waited
    for; nothing stale is read."""
    t = topo(P=1)
    with plane(t, timeout_s=1.0) as comms:
        x, ids, w = make_round(t, 0, 9)
        cam.ops.dispatch_send(comms[0], x, ids, 1)
        lay = WindowLayout(t)
        if side == "dispatch":
            ffn = t.A + int(ids[0, 0]) // t.R
            comms[ffn].window.view(torch.int64)[(lay.ffn_region_off(0, 0) + lay.region_token_seal_off(0)) // 8] = 0
            with pytest.raises(cam.CommTimeoutError, match="participant rank 0 has not published it .*seals"):
                recv_work(comms[ffn])
            return
        for f in range(t.F):
            item = recv_work(comms[t.A + f])
            cam.ops.combine_send(comms[t.A + f], expert_out(comms[t.A + f], *item), item[3])
        comms[0].window.view(torch.int64)[lay.attn_combine_seal_off(0, 0) // 8] = 0
        with pytest.raises(cam.CommTimeoutError, match="a row's seal has not arrived"):
            cam.ops.combine_recv(comms[0], ids, w)
