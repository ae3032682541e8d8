"""Replica isolation (docs/protocol.md §9): an Attention rank's death fences its replica. FFN ranks
drop the fenced replica's rounds (published, partly published, or already handed out) and keep serving the other
replicas with golden outputs; only the dead rank's replica mates are aborted; the FFN ranks count the dropped rounds
and the connector reports the lost replica. The in-process tests fence by hand (Comm.fence_dead_rank, what the shm
watchdog calls); the shm tests kill real processes (the opt-out and cam-run --keep-going here; the default is
tests/test_liveness.py)."""

from __future__ import annotations

import os
import time

import pytest
import torch

import cam
from _window_layout import WindowLayout
from test_safety import expert_out, golden_out, make_round, plane, recv_work, windows
from _topology import topology_with

pytestmark = pytest.mark.timeout(180)

# Replica 0 = ranks 0, 1 (survives); replica 1 = ranks 2, 3 (rank 3 dies); FFN ranks 4, 5.
T = dict(D=2, P=2, F=2, E=4, K=2, H=32, Bmax=4, L=2, slots=2)
DEAD, MATE = 3, 2


topo = topology_with(**T)


def serve(t, comms, ffn_ranks):
    """Every FFN rank in ffn_ranks serves one work item with the golden experts; returns their replicas."""
    got = []
    for r in ffn_ranks:
        item = recv_work(comms[r])
        got.append(int(item[3][1]))
        cam.ops.combine_send(comms[r], expert_out(comms[r], *item), item[3])
    return got


def assert_idle(t, comms):
    """No FFN rank is handed anything: dispatch_recv returns empty work items."""
    for f in range(t.F):
        for _ in range(3):
            _, _, cnt, wi = cam.ops.dispatch_recv(comms[t.A + f])
            view = cam.WorkItem(wi)
            assert view.kind == 0, f"FFN rank {t.A + f} was handed replica {view.replica}'s round {view.seq}"
            assert int(cnt.sum()) == 0
            cam.ops.combine_send(comms[t.A + f], torch.zeros((t.recv_rows, t.H), dtype=torch.bfloat16), wi)


def survivors_served(t, comms, seed):
    """One more round of replica 0, served and checked against the golden."""
    rounds = [make_round(t, a, seed) for a in range(t.A)]
    for a in (0, 1):
        cam.ops.dispatch_send(comms[a], rounds[a][0], rounds[a][1], 1)
    assert serve(t, comms, [t.A, t.A + 1]) == [0, 0]
    gold = golden_out(t, rounds)
    for a in (0, 1):
        assert torch.equal(cam.ops.combine_recv(comms[a], rounds[a][1], rounds[a][2]), gold[a]), a


def assert_fenced(t, comms, dropped=None):
    """Replica 1 is fenced on every rank; the FFN ranks count `dropped` of its rounds (exact: between iterations)."""
    for r, c in comms.items():
        assert c.fenced_replicas == {1: DEAD}, (r, c.fenced_replicas)
        if dropped is not None:
            assert c.dropped_rounds == ({} if r < t.A else {1: dropped}), (r, c.dropped_rounds)
            (lost,) = c.lost_replicas.values()
            assert (lost.replica, lost.dead_rank, lost.dropped_rounds) == (1, DEAD, None if r < t.A else dropped)
    for r in (0, 1, 4, 5):
        assert comms[r].status()["abort"] == 0, (r, comms[r].status())
    assert comms[MATE].status()["abort"] == -(1 + DEAD)


def test_published_round_of_a_fenced_replica_is_dropped_and_the_others_are_served():
    t = topo()
    with plane(t, timeout_s=120) as comms:
        rounds = [make_round(t, a, 1) for a in range(t.A)]
        for a in range(t.A):  # both replicas publish round 1
            cam.ops.dispatch_send(comms[a], rounds[a][0], rounds[a][1], 1)
        comms[0].fence_dead_rank(DEAD)  # what a survivor's watchdog does when rank 3's process is gone
        assert_fenced(t, comms, dropped=1)
        assert serve(t, comms, [t.A, t.A + 1]) == [0, 0]
        gold = golden_out(t, rounds)
        for a in (0, 1):
            assert torch.equal(cam.ops.combine_recv(comms[a], rounds[a][1], rounds[a][2]), gold[a]), a
        assert_idle(t, comms)  # replica 1's complete round 1 is never handed out
        with pytest.raises(cam.CommAbortedError, match=f"rank {DEAD} died"):
            cam.ops.combine_recv(comms[MATE], rounds[MATE][1], rounds[MATE][2])
        for seed in (2, 3, 4):  # more rounds than slots: the survivors keep going
            survivors_served(t, comms, seed)
        assert_fenced(t, comms, dropped=1)


def test_partly_published_round_of_a_fenced_replica_is_not_waited_for():
    t = topo()
    # timeout_s is short on purpose: without the fence, replica 1's partial round fails the FFN ranks with kTimeout
    with plane(t, timeout_s=2, idle_poll_s=0.05) as comms:
        x, ids, _ = make_round(t, MATE, 1)
        cam.ops.dispatch_send(comms[MATE], x, ids, 1)  # rank 3 dies before publishing its part
        comms[4].fence_dead_rank(DEAD)
        for _ in range(30):  # > timeout_s of idle polls
            assert_idle(t, comms)
        for seed in (2, 3, 4):
            survivors_served(t, comms, seed)
        assert_fenced(t, comms, dropped=1)  # published by one participant only: in flight, and dropped


def test_combine_send_of_an_item_handed_out_before_the_fence_is_a_no_op():
    t = topo()
    w = WindowLayout(t)
    with plane(t, timeout_s=120) as comms:
        rounds = [make_round(t, a, 1) for a in range(t.A)]
        for a in (MATE, DEAD):  # only replica 1 publishes: the FFN ranks hand out its round
            cam.ops.dispatch_send(comms[a], rounds[a][0], rounds[a][1], 1)
        items = {r: recv_work(comms[r]) for r in (t.A, t.A + 1)}
        assert all(int(it[3][1]) == 1 for it in items.values())
        comms[1].fence_dead_rank(DEAD)
        before = windows(comms)
        for r, it in items.items():
            cam.ops.combine_send(comms[r], expert_out(comms[r], *it), it[3])  # no error: dropped
            st = comms[r].status()
            assert st["code"] == 0 and st["abort"] == 0, st
            # it counts as combined: the replica's state stays ordered
            assert int(comms[r].window[w.ffn_combined_seq_off:].view(torch.int64)[1]) == 1
        for a in range(t.A):
            assert torch.equal(before[a], comms[a].window), f"rank {a}'s window was written"
        for seed in (2, 3):
            survivors_served(t, comms, seed)
        assert_fenced(t, comms, dropped=1)  # handed out, computed, and dropped by combine_send


def test_dropped_rounds_count_only_what_was_in_flight_at_the_fence():
    """Replica 1 completes round 1 (served, returned), then publishes rounds 2 and 3 (both slots); round 2 is handed
    out to one FFN rank before the fence. Every FFN rank drops rounds 2 and 3, never round 1, and says so."""
    t = topo()
    with plane(t, timeout_s=120) as comms:
        r1 = [make_round(t, a, 1) for a in range(t.A)]
        for a in range(t.A):
            cam.ops.dispatch_send(comms[a], r1[a][0], r1[a][1], 0)
        served = []
        while len(served) < 2 * t.F:  # both replicas' round 1 on both FFN ranks
            served += serve(t, comms, [t.A, t.A + 1])
        gold = golden_out(t, r1)
        for a in range(t.A):
            assert torch.equal(cam.ops.combine_recv(comms[a], r1[a][1], r1[a][2]), gold[a]), a
        assert all(c.dropped_rounds == {} and c.lost_replicas == {} for c in comms.values())
        later = {seed: [make_round(t, a, seed) for a in range(t.A)] for seed in (2, 3)}
        for seed, rounds in later.items():
            for a in (MATE, DEAD):
                cam.ops.dispatch_send(comms[a], rounds[a][0], rounds[a][1], 1)
        item = recv_work(comms[t.A])
        assert (int(item[3][1]), int(item[3][3])) == (1, 2)
        comms[t.A + 1].fence_dead_rank(DEAD)
        cam.ops.combine_send(comms[t.A], expert_out(comms[t.A], *item), item[3])  # dropped
        assert_idle(t, comms)
        assert_fenced(t, comms, dropped=2)
        lost = comms[t.A].lost_replicas[1]
        assert str(lost).startswith(f"replica 1 lost: Attention rank {DEAD} died; FFN rank {t.A} dropped 2 "), lost
        survivors_served(t, comms, 4)
        assert_fenced(t, comms, dropped=2)


def test_fence_refuses_ffn_ranks_and_self():
    t = topo()
    with plane(t, timeout_s=120) as comms:
        with pytest.raises(ValueError, match="not an Attention peer"):
            comms[0].fence_dead_rank(t.A)  # an FFN rank's death aborts the plane instead
        with pytest.raises(ValueError, match="not an Attention peer"):
            comms[0].fence_dead_rank(0)
        assert all(c.fenced_replicas == {} for c in comms.values())
        with pytest.raises(ValueError, match="replica 2 is not in"):
            comms[t.A]._c.dropped_rounds(2)
        survivors_served(t, comms, 1)


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(os.environ.get("CAM_LONG_TESTS") != "1",
                    reason="a whole-process dead-peer detection run (25 s; the isolated default runs in the README "
                           "tier, tests/test_liveness.py): runs with CAM_LONG_TESTS=1 (CI's long-tests stage)")
def test_opting_out_of_isolation_makes_a_dead_attention_rank_abort_the_plane(tmp_path):
    """Real processes, Comm(isolate_replicas=False): SIGKILL of an Attention rank aborts the whole plane, and every
    survivor's error names the dead rank (the default, isolation, is tests/test_liveness.py)."""
    from test_liveness import _detection_run, assert_plane_aborted_naming

    run = _detection_run(tmp_path, "--victims", "attention", "--no-isolate")
    assert not run["isolated"]
    assert_plane_aborted_naming(run, victim_is_ffn=False)


def test_connector_reports_the_lost_replica_and_finishes_the_others():
    """AsyncAFDConnector over an shm plane (ranks as threads, isolation on by default): rank 3 of replica 1 "dies"
    (fenced by hand, as a survivor's watchdog would) while its mate rank 2 waits for a round only it dispatched.
    Rank 2 gets ReplicaLostError naming the replica, the dead rank and its dropped round; replica 0 keeps running
    rounds that match the model's routed reference; each FFN rank reports the lost replica and its one dropped
    round."""
    import threading
    from datetime import timedelta

    from cam.connector import (AFDTransferContext, AFDTransferMetadata, AsyncAFDConnector, ConnectorConfig,
                               ReplicaLostError, expert_weights)
    from cam.models import PRESETS, MoEModel

    model = MoEModel(PRESETS["tiny"])
    c = model.config
    t = cam.Topology(D=2, P=2, F=2, E=c.num_experts, K=c.top_k, H=c.hidden, Bmax=8, L=len(c.moe_layers), slots=2)
    store = torch.distributed.HashStore()
    store.set_timeout(timedelta(seconds=120))
    cfg = ConnectorConfig(t, timeout_s=60.0, idle_poll_s=0.01, group="iso-conn")
    assert cfg.isolate_replicas
    conns = [AsyncAFDConnector(r, "attention" if r < t.A else "ffn", cfg) for r in range(t.world_size)]
    inits = [threading.Thread(target=conn.init_afd_connector, kwargs={"store": store}, daemon=True) for conn in conns]
    for th in inits:
        th.start()
    for th in inits:
        th.join(120)
    assert all(conn.is_initialized for conn in conns)
    stop, dispatched, errors, outcome = threading.Event(), threading.Event(), [], {}
    g = torch.Generator().manual_seed(3)

    def make(tokens):
        h = torch.randn(tokens, c.hidden, generator=g).to(torch.bfloat16)
        ids = torch.argsort(torch.rand(tokens, c.num_experts, generator=g), dim=1)[:, :c.top_k].to(torch.int32)
        return h, ids.contiguous(), torch.softmax(torch.randn(tokens, c.top_k, generator=g), -1)

    def ffn(conn):
        try:
            w1, w2 = expert_weights(model, t, conn.rank - t.A)
            while not stop.is_set():
                conn.ffn_step(w1, w2)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            errors.append(e)

    def mate():
        h, ids, w = make(4)
        conns[MATE].send_attn_output(h, AFDTransferContext(AFDTransferMetadata(0)), topk_ids=ids, topk_weights=w)
        dispatched.set()
        try:
            conns[MATE].recv_ffn_output(ubatch_idx=0)
            outcome[MATE] = "returned"
        except BaseException as e:  # noqa: BLE001 - checked below
            outcome[MATE] = e

    threads = [threading.Thread(target=ffn, args=(conns[r],), daemon=True) for r in (t.A, t.A + 1)]
    threads.append(threading.Thread(target=mate, daemon=True))
    try:
        for th in threads:
            th.start()
        assert dispatched.wait(60)
        time.sleep(0.5)  # the mate waits in combine_recv; its round is partly published (rank 3 never sends)
        assert MATE not in outcome
        conns[0].comm.fence_dead_rank(DEAD)
        threads[-1].join(60)
        err = outcome[MATE]
        assert isinstance(err, ReplicaLostError) and isinstance(err, cam.CommAbortedError), err
        assert (err.replica, err.dead_rank, err.dropped_rounds) == (1, DEAD, 1)
        assert f"replica 1 lost: Attention rank {DEAD} died; the 1 round(s) rank {MATE} had in flight" in str(err)
        for layer in range(t.L):  # replica 0 goes on, both stages; both participants send before either receives
            sent = {a: [make(3 + a), make(2)] for a in (0, 1)}
            for a in (0, 1):
                for s, (h, ids, w) in enumerate(sent[a]):
                    conns[a].send_attn_output(h, AFDTransferContext(AFDTransferMetadata(layer, s)), topk_ids=ids,
                                              topk_weights=w)
            for a in (0, 1):
                for s, (h, ids, w) in enumerate(sent[a]):
                    got = conns[a].recv_ffn_output(ubatch_idx=s)
                    want = model.routed_reference(layer, h, ids, w)
                    # W1's exp: fp32 in the kernel, float64 in the golden; one int8 level apart at most (docs/gmm.md)
                    scale = max([1.0] + want.abs().flatten().tolist())
                    torch.testing.assert_close(got.float(), want.float(), atol=2e-2 * scale, rtol=0)
    finally:
        stop.set()
        for th in threads:
            th.join(60)
        reports = {r: conns[r].lost_replicas for r in range(t.world_size)}
        for conn in conns:
            conn.close()
    assert not errors, errors
    for r in (t.A, t.A + 1):
        lost = reports[r][1]
        assert (lost.replica, lost.dead_rank, lost.dropped_rounds) == (1, DEAD, 1), lost
        assert f"replica 1 lost: Attention rank {DEAD} died; FFN rank {r} dropped 1 " in str(lost)
    assert reports[0][1].dropped_rounds is None


def test_cam_run_refuses_keep_going_in_sync_mode(capsys):
    from cam.run import cli

    assert cli.run(cli._parse(["--keep-going", "--mode", "sync", "--quiet"])) == 2
    assert "--keep-going needs --mode async" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(400)
def test_cam_run_keep_going_finishes_the_surviving_replicas(tmp_path):
    """cam-run --keep-going: Attention rank 1 (replica 1) is SIGKILLed mid-run. Replica 0's requests all finish and
    pass --check; the report names the lost replica, how its rank died, the requests excluded and the rounds each
    FFN rank dropped; every process ends well within --timeout and no window is left behind. (Without
    --keep-going the run fails naming the dead rank: tests/test_run.py.)"""
    import json
    import os
    import signal

    from test_run import Launcher, alive, leftover_windows

    path = tmp_path / "report.json"
    # --skew 2: replica 1's prompts are 3x longer, so it runs one request per step and is still busy when killed
    run = Launcher("--keep-going", "--check", "--cost-model", "--requests", "16", "--skew", "2", "--timeout", "60",
                   "--json", str(path), cwd=tmp_path)
    run.wait_for("[rank 1] replica 1 step 2/")
    pids = run.pids()
    os.kill(pids[1], signal.SIGKILL)
    start = time.monotonic()
    code, out, err = run.finish()
    assert time.monotonic() - start < 60, "the survivors must finish well within the timeout"
    assert code == 3, out + err
    report = json.loads(path.read_text())
    (lost,) = report["lost_replicas"]
    assert lost["replica"] == 1 and lost["ranks"] == [1], lost
    assert lost["how"] == ["rank 1 was killed by signal 9"], lost
    assert set(lost["dropped_rounds"]) == {"2", "3"} and all(n >= 0 for n in lost["dropped_rounds"].values()), lost
    assert all(rep.startswith("replica 1 lost: Attention rank 1 died; FFN rank ") for rep in lost["ffn_reports"])
    done = {int(r) for r in report["ttft_per_request_s"]}
    excluded = set(lost["requests_excluded"])
    assert done and not done & excluded and done | excluded == set(range(16)), (done, excluded)
    assert report["check"]["ok"] and report["check"]["requests"] == len(done), report["check"]
    assert "LOST        replica 1 (rank 1 was killed by signal 9)" in out and "check       PASS" in out, out
    assert not any(alive(pid) for pid in pids.values()), "no process may be left behind"
    assert leftover_windows(run.proc.pid) == [], "no shm window may be left behind"
