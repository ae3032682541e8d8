"""Elastic serving (docs/connector.md, "Elastic serving"): an FFN rank process SIGKILLed mid-run. With a replica of
each of its experts on another rank, the survivors re-form the plane without it and every round's result is bit for
bit what cam's ops give without the failure; with an expert whose only replica it held, the rounds not received are
reported lost by count, naming the experts, and no partial result is returned. Processes as ranks over the shm
transport, FFN ranks serving with the real ops (cam.serve_ffn: dispatch_recv, W1, W2, combine_send)."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import torch

from cam import convert
from cam.integrations.plane import routed_local
from cam.placement import ExpertsLostError, Placement

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _elastic_rank import round_inputs, world  # noqa: E402

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")]

SCRIPT = pathlib.Path(__file__).with_name("_elastic_rank.py")
SPEC = {"E": 6, "F": 3, "L": 2, "K": 2, "H": 64, "I": 32, "B": 6, "rounds": 12, "replicated": True}


def run_world(tmp_path, spec, kill=-1, kill_after=0, group="elastic", extra=(), gone=None):
    """Starts every rank as a process; returns each rank's saved result, keyed by rank. ``gone``: the ranks killed
    (default ``kill``)."""
    topo, _, _ = world(spec)
    gone = (kill,) if gone is None else gone
    procs = []
    for r in range(topo.world_size):
        cmd = [sys.executable, str(SCRIPT), "--store", str(tmp_path / "store"), "--rank", str(r), "--spec",
               json.dumps(spec), "--out", str(tmp_path / f"r{r}.pt"), "--group", group, "--kill", str(kill),
               "--kill-after", str(kill_after), *extra]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    logs = {}
    try:
        if "--kill-with" in extra:  # the killer stopped every other rank, killed its victim, then itself
            assert procs[kill].wait(120) == -9
            for r, p in enumerate(procs):
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGCONT)
        if "--stop-with" in extra:  # the killer stopped a rank and died: once the survivors agreed on whom to
            # drop (that set is in the store), the stopped rank dies too, while they form the successor
            stopped = int(extra[extra.index("--stop-with") + 1])
            assert procs[kill].wait(120) == -9
            store = tmp_path / "store"
            deadline = time.monotonic() + 60
            while b"/failover" not in store.read_bytes():
                assert time.monotonic() < deadline, "the survivors never agreed on the dead ranks"
                time.sleep(0.01)
            os.kill(procs[stopped].pid, signal.SIGKILL)
        for r, p in enumerate(procs):
            logs[r] = p.communicate(timeout=240)[0].decode(errors="replace")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
    results = {}
    for r in range(topo.world_size):
        path = tmp_path / f"r{r}.pt"
        if r in gone:
            assert procs[r].returncode == -9 and not path.exists(), (r, procs[r].returncode, logs[r][-2000:])
            continue
        assert path.exists(), (r, procs[r].returncode, logs[r][-3000:])
        results[r] = torch.load(path, weights_only=False)
    return results, logs


def golden(spec):
    _, _, layers = world(spec)
    w1, w2 = convert.layer_weights(layers)
    return [routed_local(x, ids, w, w1, w2, layer) for x, ids, w, layer in
            (round_inputs(spec, i) for i in range(spec["rounds"]))]


@pytest.mark.parametrize("kill", [1, 2, 3], ids=["ffn0", "ffn1", "ffn2"])
def test_a_killed_ffn_rank_with_replicas_costs_no_round(tmp_path, kill):
    # FFN rank `kill` dies after serving 3 work items, with rounds in flight: every round is received once, equal
    # to the failure-free golden bit for bit, and every survivor moved to the one successor world.
    results, logs = run_world(tmp_path, SPEC, kill=kill, kill_after=3)
    att = results[0]
    assert "error" not in att, (att.get("error"), logs[0][-3000:])
    want = golden(SPEC)
    assert len(att["outputs"]) == SPEC["rounds"]
    for i, (got, ref) in enumerate(zip(att["outputs"], want)):
        assert torch.equal(got, ref), f"round {i} differs from the failure-free golden"
    (failover,) = att["failovers"]
    assert failover["dead_rank"] == kill and 1 <= failover["redispatched"] <= 2, failover
    for r, res in results.items():
        if r == 0:
            continue
        assert "error" not in res and res["reason"] == "attention finished", (r, res, logs[r][-3000:])
        assert [f["world_joined"] for f in res["failovers"]] == [failover["world_joined"]]
        assert res["final_rank"] == (r - 1 if r > kill else r)


def test_a_killed_ffn_rank_without_replicas_reports_the_lost_rounds_by_count_and_expert(tmp_path):
    # Contiguous placement: FFN rank 2 (index 1) holds experts 2, 3 alone. Its death loses the rounds not yet
    # received, reported by count and naming those experts, never returned partial; the survivors stop naming
    # them too.
    spec = {**SPEC, "replicated": False}
    results, logs = run_world(tmp_path, spec, kill=2, kill_after=3)
    att = results[0]
    assert att.get("error", "").startswith("RoundsLostError"), (att, logs[0][-3000:])
    assert att["lost"] == {0: (2, 3), 1: (2, 3)}, att["lost"]
    assert att["lost_rounds"] >= 1 and len(att["outputs"]) + att["lost_rounds"] <= spec["rounds"]
    assert "round(s) lost: FFN rank 2 died holding the last replica of layer 0: expert(s) 2, 3" in att["error"]
    want = golden(spec)
    for i, got in enumerate(att["outputs"]):  # what was received before the death is exact
        assert torch.equal(got, want[i]), i
    for r in (1, 3):
        assert "ExpertsLostError" in results[r]["error"] and "expert(s) 2, 3" in results[r]["error"], results[r]


def test_the_table_without_a_rank_keeps_every_survivors_slots_and_names_lost_experts():
    table = Placement.balanced(6, 3, 2, replicate=range(6))
    for f in range(3):
        new = table.without(f)
        assert new.ffn_ranks == 2 and new.slots_per_rank == table.slots_per_rank
        for layer in range(2):
            survivors = [g for g in range(3) if g != f]
            for i, g in enumerate(survivors):  # each survivor serves the new table with the slots it holds
                assert new.slot_experts(layer, i) == table.slot_experts(layer, g)
    with pytest.raises(ExpertsLostError, match=r"FFN index 1 held the last replica of layer 0: expert\(s\) 2, 3; "
                                               r"layer 1: expert\(s\) 2, 3"):
        Placement.contiguous(6, 3, 2).without(1)
    with pytest.raises(ValueError, match="ffn_index must be an int in"):
        table.without(3)


def test_elastic_serving_is_refused_off_the_shm_transport():
    import cam
    from cam.connector import ConnectorConfig

    topo = cam.Topology(D=1, P=1, F=2, E=4, K=1, H=64, Bmax=4, L=1)
    with pytest.raises(ValueError, match="elastic serving needs the 'shm' transport .* got transport 'in_process'"):
        ConnectorConfig(topology=topo, transport="in_process", elastic=True)
    with pytest.raises(TypeError, match="elastic must be a bool"):
        ConnectorConfig(topology=topo, elastic="yes")
    assert ConnectorConfig(topology=topo, elastic=True).elastic  # control: the shm transport takes it


def test_cam_run_kills_an_ffn_rank_restarts_it_and_check_covers_every_request(tmp_path):
    # $CAM_RUN_KILL_FFN=3:3: FFN rank 3 SIGKILLs itself after 3 work items; with every expert replicated
    # (--placement hot:8) the others fail over, the launcher restarts it, it rejoins the running world with its old
    # slots and serves, the run ends 0 and --check passes over every request. The cost model's 100 ms of attention
    # per micro-batch and layer makes the run (about 12 s) outlast the restarted process's start (2-3 s here; at
    # 50 ms a loaded CI machine once served every request before the restarted rank joined).
    from test_run import cam_run

    out = tmp_path / "report.json"
    env = dict(os.environ, CAM_RUN_KILL_FFN="3:3")
    result = cam_run("--ffn", "3", "--placement", "hot:8", "--requests", "60", "--cost-model", "--attention-cost",
                     "0.1", "0", "0", "--check", "--quiet", "--json", str(out), cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert report["check"]["ok"] and report["requests"] == 60, report["check"]
    fault = report["fault"]
    assert fault["restarted"], fault
    events = {r: [("death" if x["dead_rank"] is not None else "join") for x in fs]
              for r, fs in fault["failovers"].items()}
    assert events == {"0": ["death", "join"], "1": ["death", "join"], "2": ["death", "join"],
                      "4": ["death", "join"], "3": ["join"]}, events
    assert [x["joined_rank"] for x in fault["failovers"]["3"]] == [4]  # the world's last FFN rank
    served = {f["rank"]: f["items"] for f in report["ffn"]}
    assert served[3] >= 1, served  # the restarted rank served after it joined
    assert "restarted, it rejoined and served" in result.stdout


def test_cam_run_refuses_a_kill_of_the_last_replica_by_name(tmp_path):
    from test_run import cam_run

    for value, needle in (("2:3", "FFN rank 2 holds the last replica of layer 0: expert(s) 0, 1, 2"),
                          ("1:3", "rank 1 is no FFN rank (FFN ranks are [2, 5))"),
                          ("3", "expected RANK:ROUND")):
        result = cam_run("--ffn", "3", "--quiet", cwd=tmp_path, env=dict(os.environ, CAM_RUN_KILL_FFN=value))
        assert result.returncode == 2 and needle in result.stderr, (value, result.stderr)


def test_a_restarted_ffn_rank_rejoins_the_running_world_and_serves(tmp_path):
    # FFN rank 2 is killed after 3 work items; the survivors fail over (F = 2). A new process then joins the running
    # world as the last FFN rank with the dead rank's slots (the running table with_rank them): every member admits
    # it at a round boundary, the plane is re-formed with F = 3, and the joined rank serves rounds after it. Every
    # round the Attention rank received, before, across and after both changes, equals the failure-free golden.
    spec = {**SPEC, "rounds": 8}
    topo, _, _ = world(spec)

    def start(r, *extra):
        cmd = [sys.executable, str(SCRIPT), "--store", str(tmp_path / "store"), "--rank", str(r), "--spec",
               json.dumps(spec), "--out", str(tmp_path / f"r{r}{'j' if extra and '--join' in extra else ''}.pt"),
               "--kill", "2", "--kill-after", "3", *extra]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    procs = {r: start(r, *(("--until-joined",) if r == 0 else ())) for r in range(topo.world_size)}
    try:
        assert procs[2].wait(120) == -9
        procs["join"] = start(2, "--join")
        logs = {r: p.communicate(timeout=240)[0].decode(errors="replace") for r, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(30)
    att = torch.load(tmp_path / "r0.pt", weights_only=False)
    joined = torch.load(tmp_path / "r2j.pt", weights_only=False)
    assert "error" not in att, (att.get("error"), logs[0][-3000:])
    assert "error" not in joined, (joined.get("error"), logs["join"][-3000:])
    assert [f["dead_rank"] for f in att["failovers"]] == [2, None]
    assert att["failovers"][1]["joined_rank"] == 3 and joined["final_rank"] == 3
    assert joined["served"] >= 1 and joined["reason"] == "attention finished", joined
    _, _, layers = world(spec)
    w1, w2 = convert.layer_weights(layers)
    assert len(att["outputs"]) >= spec["rounds"]
    for i, got in enumerate(att["outputs"]):
        x, ids, w, layer = round_inputs(spec, i)
        assert torch.equal(got, routed_local(x, ids, w, w1, w2, layer)), f"round {i}"
    for r in (1, 3):
        res = torch.load(tmp_path / f"r{r}.pt", weights_only=False)
        assert "error" not in res and len(res["failovers"]) == 2, (r, res, logs[r][-2000:])


def test_a_join_inside_a_rebalance_is_refused_by_name_and_admitted_after_it(tmp_path):
    # Every rank rebalances after round 3 (each replica to the next FFN index). A new FFN rank asks to join once
    # Attention rank 0 voted in that rebalance and before any FFN rank did: the FFN rank that decides refuses it,
    # naming the rebalance, and the rebalance goes on. The joiner asks again on the table the world publishes after
    # it (epoch 1) and is admitted at a round boundary, and serves. Every round, before, across the rebalance and
    # across the join, equals the failure-free golden bit for bit.
    spec = {**SPEC, "rounds": 8}
    topo, _, _ = world(spec)

    def start(r, out, *extra):
        cmd = [sys.executable, str(SCRIPT), "--store", str(tmp_path / "store"), "--rank", str(r), "--spec",
               json.dumps(spec), "--out", str(tmp_path / out), "--rebalance-at", "3", *extra]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    procs = {r: start(r, f"r{r}.pt", *(("--until-joined",) if r == 0 else ())) for r in range(topo.world_size)}
    procs["join"] = start(topo.world_size, "joiner.pt", "--join")
    try:
        logs = {r: p.communicate(timeout=240)[0].decode(errors="replace") for r, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(30)
    att = torch.load(tmp_path / "r0.pt", weights_only=False)
    joined = torch.load(tmp_path / "joiner.pt", weights_only=False)
    assert "error" not in att, (att.get("error"), logs[0][-3000:])
    assert "error" not in joined, (joined.get("error"), logs["join"][-3000:])
    assert att["epoch"] == 1  # the rebalance was adopted, not cut short by the join
    first = joined["refusals"][0]
    assert first.startswith("world ") and "is in a rebalance (rank(s) 0 voted in rebalance 1.0, rank " in first, \
        joined["refusals"]
    assert all("rebalance" in r for r in joined["refusals"]), joined["refusals"]
    assert [f["joined_rank"] for f in att["failovers"]] == [topo.world_size], att["failovers"]
    assert joined["final_rank"] == topo.world_size and joined["served"] >= 1, joined
    for r in range(topo.A, topo.world_size):
        res = torch.load(tmp_path / f"r{r}.pt", weights_only=False)
        assert "error" not in res and res["decided_in_rebalance"] is False, (r, res, logs[r][-2000:])
        assert [f["joined_rank"] for f in res["failovers"]] == [topo.world_size]
    _, _, layers = world(spec)
    w1, w2 = convert.layer_weights(layers)
    assert len(att["outputs"]) >= spec["rounds"]
    for i, got in enumerate(att["outputs"]):
        x, ids, w, layer = round_inputs(spec, i)
        assert torch.equal(got, routed_local(x, ids, w, w1, w2, layer)), f"round {i}"


def test_a_restarted_attention_replica_rejoins_in_its_slot_and_serves(tmp_path):
    # Two replicas (D = 2), two FFN ranks. Attention rank 1 dies after receiving 3 rounds, with rounds in flight:
    # its replica is fenced, replica 0 goes on. A new process asks to rejoin as rank 1: first with another
    # topology, another checkpoint identity and rank 0's (live) slot, each refused by name; then as itself, admitted
    # at a round boundary in the current world's successor. Its rounds, and every round of replica 0 before,
    # across and after the rejoin, equal the failure-free golden bit for bit.
    spec = {**SPEC, "D": 2, "F": 2, "rounds": 6}
    topo, _, _ = world(spec)
    assert topo.A == 2

    def start(r, out, *extra):
        cmd = [sys.executable, str(SCRIPT), "--store", str(tmp_path / "store"), "--rank", str(r), "--spec",
               json.dumps(spec), "--out", str(tmp_path / out), "--kill", "1", "--kill-after", "3", *extra]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    procs = {r: start(r, f"r{r}.pt", *(("--until-joined",) if r == 0 else ())) for r in range(topo.world_size)}
    try:
        assert procs[1].wait(120) == -9
        procs["join"] = start(1, "joiner.pt", "--join")
        logs = {r: p.communicate(timeout=240)[0].decode(errors="replace") for r, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(30)
    att = torch.load(tmp_path / "r0.pt", weights_only=False)
    joined = torch.load(tmp_path / "joiner.pt", weights_only=False)
    assert "error" not in att, (att.get("error"), logs[0][-3000:])
    assert "error" not in joined, (joined.get("error"), logs["join"][-3000:])
    wrong_topology, wrong_checkpoint, live_slot = joined["refused"]
    assert "cannot join world" in wrong_topology and "a different topology: H=128 (the world's H=64)" in \
        wrong_topology, wrong_topology
    assert "a different checkpoint: experts of decoder layer 1 'e2' (the world's 'e1')" in wrong_checkpoint, \
        wrong_checkpoint
    assert "refused rank 0: Attention rank 0 of world" in live_slot and "is held by live process" in live_slot, \
        live_slot
    assert [f["joined_rank"] for f in att["failovers"]] == [1] and joined["failovers"][0]["joined_rank"] == 1
    for r in range(topo.A, topo.world_size):
        res = torch.load(tmp_path / f"r{r}.pt", weights_only=False)
        assert "error" not in res and res["reason"] == "attention finished", (r, res, logs[r][-2000:])
        assert [f["joined_rank"] for f in res["failovers"]] == [1] and res["final_rank"] == r
    _, _, layers = world(spec)
    w1, w2 = convert.layer_weights(layers)
    assert len(joined["outputs"]) == spec["rounds"] and len(att["outputs"]) >= spec["rounds"]
    for rank, outs in ((0, att["outputs"]), (1, joined["outputs"])):
        for i, got in enumerate(outs):
            x, ids, w, layer = round_inputs(spec, i, rank)
            assert torch.equal(got, routed_local(x, ids, w, w1, w2, layer)), f"rank {rank} round {i}"


def _expect_golden(spec, outputs):
    want = golden(spec)
    for i, got in enumerate(outputs):
        assert torch.equal(got, want[i]), f"round {i} differs from the failure-free golden"


def test_an_attention_rank_that_finished_takes_part_in_a_later_failover(tmp_path):
    # Two replicas, two FFN ranks holding every expert: Attention rank 1 sends 2 rounds and finishes while rank 0
    # still sends; FFN rank 2 dies only once rank 1 finished. A finished rank is a member until the world ends
    # (every Attention rank finished): it follows the failover into the successor (nothing to dispatch again)
    # instead of exiting, so its orderly end is never taken for a death while the successor forms ("rank 1 died
    # before it published its pid" on every survivor).
    spec = {**SPEC, "D": 2, "F": 2, "rounds_of": {"1": 2}}
    results, logs = run_world(tmp_path, spec, kill=2, kill_after=3, extra=("--kill-once-finished", "1"))
    w1, w2 = convert.layer_weights(world(spec)[2])
    for r, rounds in ((0, spec["rounds"]), (1, 2)):
        att = results[r]
        assert "error" not in att, (r, att.get("error"), logs[r][-3000:])
        assert len(att["outputs"]) == rounds
        for i, got in enumerate(att["outputs"]):
            x, ids, w, layer = round_inputs(spec, i, r)
            assert torch.equal(got, routed_local(x, ids, w, w1, w2, layer)), (r, i)
        (failover,) = att["failovers"]
        assert failover["dead_rank"] == 2, failover
    assert results[1]["failovers"][0]["redispatched"] == 0
    for r in (3,):
        res = results[r]
        assert "error" not in res and res["reason"] == "attention finished", (r, res, logs[r][-3000:])
        assert [f["dead_rank"] for f in res["failovers"]] == [2]


def test_two_ffn_ranks_dying_at_one_boundary_cost_no_round_with_replicas(tmp_path):
    # Every expert on all three FFN ranks. FFN rank 2, after 3 work items, SIGKILLs rank 3 and then itself: the
    # first survivor to fail over finds both gone and every survivor drops both at once (F = 1), one successor
    # world. Every round equals the failure-free golden bit for bit.
    spec = {**SPEC, "replicated": "all"}
    results, logs = run_world(tmp_path, spec, kill=2, kill_after=3, extra=("--kill-with", "3"), gone=(2, 3))
    att = results[0]
    assert "error" not in att, (att.get("error"), logs[0][-3000:])
    assert len(att["outputs"]) == spec["rounds"]
    _expect_golden(spec, att["outputs"])
    (failover,) = att["failovers"]
    assert tuple(failover["dead_ranks"]) == (2, 3), failover
    res = results[1]
    assert "error" not in res and res["final_rank"] == 1, (res, logs[1][-3000:])
    assert [f["world_joined"] for f in res["failovers"]] == [failover["world_joined"]]


def test_two_ffn_ranks_dying_one_after_another_cost_no_round_with_replicas(tmp_path):
    # FFN rank 2 dies after 3 work items (the survivors fail over, F = 2), FFN rank 3 (then rank 2) after 6: a
    # second failover (F = 1). Every round equals the failure-free golden bit for bit.
    spec = {**SPEC, "replicated": "all", "rounds": 16}
    results, logs = run_world(tmp_path, spec, kill="2,3", kill_after="3,6", gone=(2, 3))
    att = results[0]
    assert "error" not in att, (att.get("error"), logs[0][-3000:])
    assert len(att["outputs"]) == spec["rounds"]
    _expect_golden(spec, att["outputs"])
    assert [f["dead_rank"] for f in att["failovers"]] == [2, 2], att["failovers"]  # rank 3 was renumbered 2
    res = results[1]
    assert "error" not in res and res["final_rank"] == 1 and len(res["failovers"]) == 2, (res, logs[1][-3000:])


def test_two_ffn_ranks_dying_at_one_boundary_with_last_replicas_report_the_lost_rounds(tmp_path):
    # Two replicas of each expert on three FFN ranks: FFN ranks 2 and 3 (indices 1 and 2) dying together take both
    # replicas of some experts. The rounds not received are reported lost by count, naming those experts (computed
    # here from the table), never returned partial; the survivor stops naming them too.
    spec = {**SPEC, "replicated": True}
    _, table, _ = world(spec)
    lost = {l: tuple(e for e in range(spec["E"]) if all(f in (1, 2) for f, _ in table.replicas(l, e)))
            for l in range(spec["L"])}
    lost = {l: es for l, es in lost.items() if es}
    assert lost, "the table must lose some expert for this test"
    results, logs = run_world(tmp_path, spec, kill=2, kill_after=3, extra=("--kill-with", "3"), gone=(2, 3))
    att = results[0]
    assert att.get("error", "").startswith("RoundsLostError"), (att, logs[0][-3000:])
    assert att["lost"] == lost and att["lost_rounds"] >= 1, att
    named = "; ".join(f"layer {l}: expert(s) {', '.join(map(str, es))}" for l, es in sorted(lost.items()))
    assert f"round(s) lost: FFN ranks 2, 3 died holding the last replica of {named}" in att["error"], att["error"]
    assert len(att["outputs"]) + att["lost_rounds"] <= spec["rounds"]
    _expect_golden(spec, att["outputs"])
    assert "ExpertsLostError" in results[1]["error"] and "FFN indices 1, 2 held the last replica" in \
        results[1]["error"], results[1]


def test_an_ffn_rank_dying_while_the_successor_forms_is_dropped_too(tmp_path):
    # FFN rank 2 stops rank 3 (alive to every watchdog) and dies after 3 work items: the survivors agree to drop
    # rank 2 alone and form that successor, expecting rank 3. Rank 3 is killed once they agreed: their handshake finds
    # it gone, and they form the successor of that one without it (F = 1). Every round equals the failure-free
    # golden bit for bit.
    spec = {**SPEC, "replicated": "all"}
    results, logs = run_world(tmp_path, spec, kill=2, kill_after=3, extra=("--stop-with", "3"), gone=(2, 3))
    att = results[0]
    assert "error" not in att, (att.get("error"), logs[0][-3000:])
    assert len(att["outputs"]) == spec["rounds"]
    _expect_golden(spec, att["outputs"])
    (failover,) = att["failovers"]
    assert tuple(failover["dead_ranks"]) == (2, 3), failover
    res = results[1]
    assert "error" not in res and res["final_rank"] == 1, (res, logs[1][-3000:])
    assert [f["world_joined"] for f in res["failovers"]] == [failover["world_joined"]]


_EXIT_RANK = """
import os, sys, time
from torch.distributed import FileStore
import cam
store_path, go, topo = sys.argv[1], sys.argv[2], cam.Topology(D=1, P=1, F=1, E=2, K=1, H=32, Bmax=2, L=1)
comm = cam.Comm(topo, 0, transport="shm", store=FileStore(store_path, 2), group="exit", timeout_s=60,
                join_timeout_s=60, isolate_replicas=False)
deadline = time.monotonic() + 60
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.01)
if sys.argv[3] == "die":
    os.kill(os.getpid(), 9)
comm.close()
"""


@pytest.mark.parametrize("how", ["exit", "die"])
def test_a_joined_rank_tells_an_attention_ranks_exit_after_the_run_ended_from_its_death(tmp_path, how):
    # The restarted FFN rank joins through a store that refuses once the launcher posted the run's end (a run that
    # ended before it joined must not keep it waiting); its connector and Comm keep that store. Order forced here:
    # the run has ended (the shutdown key set) before the watchdog polls the Attention rank's gone process. An
    # orderly exit (close sets its `left` key) is no death: the plane stays up (it was aborted, "rank 0 died", while
    # the join guard outlived the join). The control: the same rank killed without closing is found dead. As in
    # cam-run (no --keep-going), any death aborts the plane (isolate_replicas=False).
    import cam
    from torch.distributed import FileStore

    from cam.run.deaths import join_running_world

    topo, store_path, go = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=32, Bmax=2, L=1), tmp_path / "store", tmp_path / "go"
    attention = subprocess.Popen([sys.executable, "-c", _EXIT_RANK, str(store_path), str(go), how])
    store = FileStore(str(store_path), 2)

    class Joiner:  # the connector's join, as far as its Comm's store goes
        def join_running(self, store):
            self.comm = cam.Comm(topo, 1, transport="shm", store=store, group="exit", timeout_s=60,
                                 join_timeout_s=60, liveness_poll_s=0.05, isolate_replicas=False)

    joiner = Joiner()
    try:
        join_running_world(joiner, store, "run/shutdown")
        store.set("run/shutdown", "{}")  # every Attention rank finished: the launcher tells the FFN ranks to stop
        go.touch()
        assert attention.wait(60) == (0 if how == "exit" else -9)
        deadline = time.monotonic() + 1.0  # 20 liveness polls
        while joiner.comm.dead_rank is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if how == "exit":
            assert joiner.comm.dead_rank is None and joiner.comm.died is None, joiner.comm.status()
        else:
            assert joiner.comm.dead_rank == 0 and joiner.comm.died == 0, joiner.comm.status()
    finally:
        if attention.poll() is None:
            attention.kill()
            attention.wait(30)
        if getattr(joiner, "comm", None) is not None:
            joiner.comm.close()
