"""cam-run --assign: the coordinator's decisions (hand-worked), the replicas' side of the protocol on a real
TCPStore with threads as ranks (every request taken once, in the order assigned, within the token budget; lockstep
replicas agree on every step), and (slow, e2e) cam-run itself: each policy a valid assignment, --check passing, and
on a skewed closed batch an assignment that differs between the policies as worked out here by hand.

The decisions under arrivals depend on when replicas finish, which is timing: those runs are checked against the
policy's rule applied to what the coordinator logged it saw, and what it saw against when each batch really ended
(a request counted finished must have finished before the decision). Nothing here asserts a duration."""

import json
import os
import subprocess
import sys
import threading
import time
import types
from datetime import timedelta

import pytest
import torch

from cam.run import assign
from cam.sim.presets import PRESETS, assign_replica, schedule


def check_log(log, policy, lengths, replicas, ends=None):
    """Every decision of a coordinator's log is ``policy`` applied to the queues it logged, those queues follow
    from the earlier decisions and the finished counts it logged (a replica finishes its requests in the order it
    was given them), and (with ``ends``: request id -> when its batch ended, on the run's clock) every request it
    counted finished had finished before the decision."""
    given = [[] for _ in range(replicas)]
    seen = [0] * replicas
    assert sorted(e["rid"] for e in log) == list(range(len(lengths)))
    for e in log:
        fin = e["finished"]
        assert all(a >= b for a, b in zip(fin, seen)), "finished counts went backwards"
        seen = fin
        queued = [[lengths[x] for x in given[d][fin[d]:]] for d in range(replicas)]
        assert e["queued_requests"] == [len(q) for q in queued]
        assert e["queued_tokens"] == [sum(q) for q in queued]
        assert e["replica"] == assign_replica(policy, queued), e
        if ends is not None:
            for d in range(replicas):
                assert all(ends[x] <= e["at_s"] for x in given[d][:fin[d]]), (e, d)
        given[e["replica"]].append(e["rid"])
    return given


# ---------------------------------------------------------------------------------------------- the coordinator


def test_decisions_hand_worked():
    # D = 2; lengths 100, 5, 5, 5, one request per arrival, nothing finished. Fewest tokens: r0 -> 0 (tie, the
    # lower replica), r1 -> 1 (0 < 100), r2 -> 1 (5 < 100), r3 -> 1 (10 < 100). Shortest queue: r0 -> 0, r1 -> 1,
    # r2 -> 0 (1 = 1: the lower), r3 -> 1 (2 > 1): round robin's deal, as without completions it must be.
    for policy, expect in (("fewest-tokens", [0, 1, 1, 1]), ("shortest-queue", [0, 1, 0, 1])):
        c = assign.Coordinator(policy, [100, 5, 5, 5], [0.0, 0.1, 0.2, 0.3], 2)
        got = [c.decide([rid], [0, 0])[0][1] for rid in range(4)]
        assert got == expect, policy
        check_log(c.log, policy, [100, 5, 5, 5], 2)
    # Completions change the queues: r0 (100 tokens) finished before r2 arrives, so replica 0 is empty and both
    # policies give it r2; then r1 finished too: r3 goes to the lower of two empty replicas.
    for policy in ("fewest-tokens", "shortest-queue"):
        c = assign.Coordinator(policy, [100, 5, 5, 5], [0.0, 0.1, 0.2, 0.3], 2)
        assert c.decide([0], [0, 0])[0][1] == 0 and c.decide([1], [0, 0])[0][1] == 1
        assert c.decide([2], [1, 0]) == [(2, 0, 1)]  # (request, replica, its position in replica 0's queue)
        assert c.decide([3], [2, 1]) == [(3, 0, 2)]
        check_log(c.log, policy, [100, 5, 5, 5], 2)
    # A group arriving together is assigned in id order, each seeing the ones before it.
    c = assign.Coordinator("fewest-tokens", [30, 20, 20, 10, 10], [0.0] * 5, 2)
    assert c.groups() == [[0, 1, 2, 3, 4]]
    assert [d for _, d, _ in c.decide(c.groups()[0], [0, 0])] == [0, 1, 1, 0, 0]  # 0|0, 30|0, 30|20, 30|40, 40|40 (tie)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="round robin is static"):
        assign.Coordinator("round-robin", [1], [0.0], 1)
    with pytest.raises(ValueError, match="fewest-tokens or shortest-queue"):
        assign_replica("random", [[1]])
    c = assign.Coordinator("shortest-queue", [1, 1], [0.0, 0.0], 2)
    with pytest.raises(ValueError, match="one count per replica"):
        c.decide([0], [0])
    with pytest.raises(assign.AssignFailed, match="reports 1 requests finished of 0"):
        c.decide([0], [1, 0])  # a replica cannot have finished what it was never given


def test_groups_follow_arrival_order_and_ties():
    c = assign.Coordinator("shortest-queue", [1] * 5, [0.5, 0.0, 0.5, 0.2, 0.0], 2)
    assert c.groups() == [[1, 4], [3], [0, 2]]


# ---------------------------------------------------------------------------------------------- the protocol


@pytest.fixture
def store():
    s = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=30))
    yield s
    del s


def _threads_run(store, policy, lengths, arrivals, D, P, budget, lockstep, per_token_s=2e-4):
    """D x P Attention "ranks" as threads driving cam-run's step source (cam.run.worker._AssignedSteps) against
    one TCPStore; each batch "runs" for per_token_s per token. Returns what each rank took, the batch ends and
    rank 0's coordinator log."""
    from cam.run import worker
    from cam.run.timeline import Lane

    cfg = types.SimpleNamespace(timeout_s=30.0, assign=policy, master_addr="127.0.0.1", master_port=store.port,
                                workload_spec=lambda: types.SimpleNamespace(max_batch_tokens=budget))
    workload = types.SimpleNamespace(requests=[types.SimpleNamespace(tokens=torch.zeros(n), arrival_s=a)
                                               for n, a in zip(lengths, arrivals)])
    topo = types.SimpleNamespace(A=D * P, D=D, P=P)
    aborted: dict = {}
    connector = types.SimpleNamespace(abort=lambda: None)
    t0 = time.time() + 0.05
    took = {rank: [] for rank in range(D * P)}
    ends, logs, errors = {}, {}, []

    def rank_main(rank):
        try:
            group = types.SimpleNamespace(replica=rank // P, part=rank % P, count=P)
            client = torch.distributed.TCPStore("127.0.0.1", store.port, is_master=False,
                                                timeout=timedelta(seconds=30))
            src = worker._AssignedSteps(cfg, client, workload, topo, group, Lane(t0), t0, aborted, lockstep,
                                        connector, rank)
            try:
                for rids in src:
                    time.sleep(per_token_s * sum(lengths[r] for r in rids))
                    end = time.time() - t0
                    for r in rids:
                        ends.setdefault(r, end)
                    src.finished(rids)
                    took[rank].append(list(rids))
            finally:
                log = src.close()
            if log is not None:
                logs[rank] = log
        except BaseException as e:  # noqa: BLE001 - the test reports it
            aborted.setdefault("by", repr(e))
            errors.append(e)

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(D * P)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    assert not errors, errors
    return took, ends, logs[0]


@pytest.mark.parametrize("lockstep", [False, True], ids=["async", "lockstep"])
@pytest.mark.parametrize("policy", ["fewest-tokens", "shortest-queue"])
def test_protocol_every_request_once_in_order_within_budget(store, policy, lockstep):
    # 2 replicas x 2 participants; 14 requests, some arriving together, some alone after a gap (in lockstep, a
    # formation that finds nothing waits for the next assignment and forms again).
    lengths = [40, 8, 8, 30, 5, 5, 5, 60, 10, 10, 3, 3, 20, 7]
    arrivals = [0.0, 0.0, 0.0, 0.02, 0.02, 0.05, 0.05, 0.05, 0.15, 0.15, 0.16, 0.3, 0.3, 0.31]
    D, P, budget = 2, 2, 32
    took, ends, log = _threads_run(store, policy, lengths, arrivals, D, P, budget, lockstep)
    given = check_log(log, policy, lengths, D, ends)
    for d in range(D):
        parts = [took[d * P + p] for p in range(P)]
        assert all(x == parts[0] for x in parts), "participants of a replica ran different batches"
        # Its requests in the order they were given, each once, batches within the budget (or one request).
        assert [r for b in parts[0] for r in b] == given[d]
        for b in parts[0]:
            assert len(b) == 1 or sum(lengths[r] for r in b) <= budget, b
    if lockstep:  # one step for every replica each time: the same count everywhere
        assert len({len(took[r]) for r in took}) == 1
        assert all(any(b) for b in zip(*(took[d * P] for d in range(D)))), "a step that nobody had work for"
    else:
        assert all(b for r in took for b in took[r])


def test_closed_batch_is_assigned_before_any_completion(store):
    # Every request arrives at 0: one group, decided on zero completions, so the assignment is deterministic:
    # fewest tokens is the greedy deal worked out by hand; shortest queue is round robin's.
    lengths = [30, 20, 20, 10, 10]
    _, _, ft = _threads_run(store, "fewest-tokens", lengths, [0.0] * 5, 2, 1, 64, False)
    assert [e["replica"] for e in ft] == [0, 1, 1, 0, 0]
    assert all(e["finished"] == [0, 0] for e in ft)


def test_a_failing_rank_0_stops_its_coordinator(store):
    # The next arrival is 100 s away: without the stop, the coordinator would sleep until then and the failing rank
    # would wait for it (and its error be replaced by the join's). With it, close(failed=True) ends the thread within
    # the coordinator's 50 ms poll; the 5 s join bound is only a hang guard.
    from cam.run import worker
    from cam.run.timeline import Lane

    cfg = types.SimpleNamespace(timeout_s=30.0, assign="fewest-tokens", master_addr="127.0.0.1",
                                master_port=store.port,
                                workload_spec=lambda: types.SimpleNamespace(max_batch_tokens=8))
    workload = types.SimpleNamespace(requests=[types.SimpleNamespace(tokens=torch.zeros(4), arrival_s=a)
                                               for a in (0.0, 100.0)])
    topo = types.SimpleNamespace(A=1, D=1, P=1)
    group = types.SimpleNamespace(replica=0, part=0, count=1)
    aborted: dict = {}
    t0 = time.time()
    src = worker._AssignedSteps(cfg, store, workload, topo, group, Lane(t0), t0, aborted, False,
                                types.SimpleNamespace(abort=lambda: None), 0)
    assert next(iter(src)) == [0]  # the first request, assigned at 0
    assert src.close(failed=True) is None
    assert not src._thread.is_alive()
    assert "error" not in src._outcome or isinstance(src._outcome["error"], assign.AssignFailed)
    assert "by" not in aborted  # the rank's own error is the cause; the stop is not reported as another


# ---------------------------------------------------------------------------------------------- cam-run, e2e

RUN_TIMEOUT_S = 240


def cam_run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "cam.run.cli", *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, cwd=cwd)


def _ends(report_dir):
    """request id -> when its batch ended, from the Attention ranks' records."""
    ends = {}
    for name in os.listdir(report_dir):
        if name.startswith("result-"):
            r = json.loads((report_dir / name).read_text())
            for b in r.get("batches", []):
                for rid in b["requests"]:
                    ends[rid] = b["end_s"]
    return ends


@pytest.mark.slow
@pytest.mark.e2e
def test_cam_run_policies_differ_on_a_skewed_closed_batch(tmp_path):
    # The skewed preset deals odd requests 4x longer prompts (skew 3 over D = 2: replica 1's share under round
    # robin). All 16 arrive at 0, so every policy's assignment is fixed before the run: round robin puts every long
    # prompt on replica 1; shortest queue, with no completions, is round robin's deal; fewest tokens is the greedy
    # deal, computed here from the preset's lengths, which spreads the tokens evenly. Async, one FFN rank.
    spec = PRESETS["skewed"]
    plan = schedule(spec, 2)
    lengths = plan.length
    greedy, load = [], [0, 0]
    for n in lengths:
        d = 0 if load[0] <= load[1] else 1
        greedy.append(d)
        load[d] += n
    rr = [rid % 2 for rid in range(len(lengths))]
    assert greedy != rr
    reports = {}
    for policy in ("round-robin", "fewest-tokens", "shortest-queue"):
        keep = tmp_path / policy
        res = cam_run("--preset", "skewed", "--ffn", "1", "--assign", policy, "--check", "--quiet", "--keep",
                      str(keep), "--json", str(tmp_path / f"{policy}.json"), cwd=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        rep = json.loads((tmp_path / f"{policy}.json").read_text())
        assert rep["assign"] == policy and rep["check"]["ok"], rep.get("check")
        assert rep["requests"] == len(lengths) == rep["check"]["requests"]
        reports[policy] = rep
        if policy != "round-robin":
            check_log(rep["assign_log"], policy, lengths, 2, _ends(keep))
    got = {p: [r["assignment"][str(i)] for i in range(len(lengths))] for p, r in reports.items()}
    assert got["round-robin"] == rr
    assert got["shortest-queue"] == rr
    assert got["fewest-tokens"] == greedy
    per_replica = {p: [sum(n for n, d in zip(lengths, a) if d == x) for x in (0, 1)] for p, a in got.items()}
    assert max(per_replica["fewest-tokens"]) < max(per_replica["round-robin"]), per_replica


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("mode, policy, participants",
                         [("sync", "fewest-tokens", 1), ("colocated", "shortest-queue", 1), ("async", "fewest-tokens", 2)])
def test_cam_run_assign_under_arrivals(tmp_path, mode, policy, participants):
    # Poisson arrivals (the arrivals preset): decisions depend on completions, so they are checked against the
    # rule and the batch ends; --check compares every request with the reference for the batch it ran in (with
    # P = 2, the batch the first participant took and published). Every rank's spans nest or are disjoint.
    from cam.run.timeline import check_lanes

    keep = tmp_path / "keep"
    res = cam_run("--preset", "arrivals", "--mode", mode, "--assign", policy, "--participants", str(participants),
                  "--check", "--quiet", "--keep", str(keep), "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    rep = json.loads((tmp_path / "r.json").read_text())
    plan = schedule(PRESETS["arrivals"], 2)
    assert rep["check"]["ok"] and rep["requests"] == rep["check"]["requests"] == len(plan.length)
    given = check_log(rep["assign_log"], policy, plan.length, 2, _ends(keep))
    assert {int(k): v for k, v in rep["assignment"].items()} == {r: d for d in range(2) for r in given[d]}
    check_lanes({name: json.loads((keep / name).read_text())["spans"] for name in os.listdir(keep)
                 if name.startswith("result-")})
