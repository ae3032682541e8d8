"""cam-run's schedule made visible, without processes: the lane recorder and its nesting check, the Chrome trace
writer, the participants' token split and output assembly, and the critical-path bound against hand-computed
values."""

import json

import pytest
import torch

from cam.models import PRESETS as MODEL_PRESETS
from cam.run.bound import critical_path, load_costs
from cam.run.participants import Participants, assemble, request_pieces, share
from cam.run.timeline import Lane, check_lanes
from cam.run.trace import trace_events
from cam.run.workload import Request, Workload
from cam.sim.costs import CostModel, OpCost


def span(name, start, end, **args):
    return {"name": name, "start_s": start, "end_s": end, "args": args}


def test_nested_and_disjoint_spans_pass_the_lane_check():
    check_lanes({0: [span("step", 0, 10), span("layer", 0, 4), span("attention", 0, 1), span("dispatch", 1, 2),
                     span("layer", 4, 10), span("combine_wait", 5, 10), span("idle", 10, 11)]})


@pytest.mark.parametrize("spans", [
    [span("a", 0, 2), span("b", 1, 3)],  # partial overlap
    [span("step", 0, 5), span("layer", 4, 6)],  # a child running past its parent
    [span("a", 2, 1)],  # ends before it starts
])
def test_overlapping_spans_are_refused(spans):
    with pytest.raises(ValueError, match="lane 7"):
        check_lanes({7: spans})


def test_lane_merges_touching_idle_intervals_only():
    lane = Lane(t0=0.0)
    lane.idle(0.0, 1.0)
    lane.idle(1.0, 2.0)
    lane.add("item", 2.0, 3.0, replica=0, layer=0, rows=4)
    lane.idle(3.0, 4.0)
    lane.idle(4.5, 5.0)  # a gap: a separate idle span
    assert [(s["name"], s["start_s"], s["end_s"]) for s in lane.spans] == [
        ("idle", 0.0, 2.0), ("item", 2.0, 3.0, ), ("idle", 3.0, 4.0), ("idle", 4.5, 5.0)]


def _results():
    attn = {"role": "attention", "rank": 0, "replica": 0, "participant": 0,
            "spans": [span("step", 0.0, 1.0, step=0, requests=[0], tokens=5), span("layer", 0.0, 1.0, layer=1),
                      span("attention", 0.0, 0.25, layer=1, stage=0, tokens=5),
                      span("combine_wait", 0.5, 1.0, layer=1, stage=0, tokens=5)]}
    ffn = {"role": "ffn", "rank": 1, "spans": [span("idle", 0.0, 0.5),
                                               span("item", 0.5, 0.75, replica=0, layer=0, rows=10),
                                               span("recv", 0.5, 0.6), span("compute", 0.6, 0.75)]}
    return {0: attn, 1: ffn}


def test_trace_is_chrome_trace_json_with_one_process_per_rank():
    report = {"mode": "async", "makespan_s": 1.0, "topology": {"D": 1, "P": 1, "F": 1}}
    trace = json.loads(json.dumps(trace_events(_results(), report)))  # survives a JSON round trip
    assert trace["displayTimeUnit"] == "ms"
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {0: "attention 0 (replica 0, participant 0)", 1: "ffn 1"}
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    for e in complete:
        assert {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"} <= e.keys()
        assert e["dur"] >= 0
    item = next(e for e in complete if e["args"]["phase"] == "item")
    assert item["name"] == "replica 0 layer 0 (10 rows)" and item["ts"] == 500000 and item["dur"] == 250000
    assert item["args"]["rows"] == 10 and item["cat"] == "work_item"
    assert {e["args"]["phase"] for e in complete if e["pid"] == 1} == {"idle", "item", "recv", "compute"}


def test_request_pieces_cover_a_participants_share():
    # Micro-batch of requests 7 (3 tokens), 8 (4 tokens), 9 (2 tokens); participant owns tokens [2, 8).
    assert request_pieces([7, 8, 9], [3, 4, 2], 2, 8) == [(7, 2, 0, 1), (8, 0, 1, 4), (9, 0, 5, 1)]
    assert request_pieces([7], [3], 1, 1) == []


def test_participant_shares_are_contiguous_and_balanced():
    assert [share(10, p, 3) for p in range(3)] == [(0, 4), (4, 7), (7, 10)]
    assert [share(1, p, 2) for p in range(2)] == [(0, 1), (1, 1)]  # an empty share: a B = 0 round
    one = Participants(None, 0, 0, 1, 1.0)
    rows = torch.arange(6.0).reshape(3, 2)
    assert one.gather(rows, 3) is rows
    with pytest.raises(ValueError, match="owns 3"):
        one.gather(rows[:2], 3)
    # An empty micro-batch (sync mode's padding step) needs no exchange, even with several participants.
    empty = torch.zeros(0, 2)
    assert Participants(None, 0, 0, 1, 1.0).gather(empty, 0) is empty


def test_assemble_refuses_missing_and_twice_delivered_tokens():
    a, b = torch.zeros(2, 4), torch.ones(3, 4)
    out = assemble([(5, 2, b), (5, 0, a)], {5: 5})
    assert torch.equal(out[5], torch.cat([a, b]))
    with pytest.raises(ValueError, match="request 5: tokens from 2 missing"):
        assemble([(5, 0, a), (5, 3, a)], {5: 5})
    with pytest.raises(ValueError, match="delivered twice"):
        assemble([(5, 0, b), (5, 2, b)], {5: 6})
    with pytest.raises(ValueError, match="2 tokens delivered, it has 5"):
        assemble([(5, 0, a)], {5: 5})


def _workload(lengths_by_replica):
    requests, batches = [], []
    for d, lens in enumerate(lengths_by_replica):
        batches.append([])
        for n in lens:
            rid = len(requests)
            requests.append(Request(rid, d, torch.zeros(n, dtype=torch.int64), 0.0))
            batches[d].append([rid])  # one request per batch: one micro-batch per layer
    return Workload(requests, batches)


def test_bound_matches_a_hand_computed_chain():
    # tiny: 3 layers, the first dense, 2 MoE layers. One request per batch = one micro-batch per layer.
    # Attention 1 s per micro-batch and layer (A only); every FFN work item 0.5 s (w1 fixed); nothing else costs.
    # A batch's chain: dense 1 + per MoE layer (1 attention + 0.5 FFN) = 4 s. Replica 0 runs 2 batches: 8 s,
    # replica 1 one batch: 4 s. FFN work: 3 batches x 2 MoE layers x F=2 ranks x 0.5 s = 6 s, 3 s per rank.
    costs = CostModel({"w1": OpCost(fixed_s=0.5)}, name="hand")
    b = critical_path(MODEL_PRESETS["tiny"], _workload([[4, 6], [5]]), D=2, P=1, F=2, slots=2, costs=costs,
                      attention_cost=(1.0, 0.0, 0.0))
    assert b["replica_chain_s"] == pytest.approx([8.0, 4.0])
    assert b["ffn_work_s"] == pytest.approx(6.0) and b["ffn_work_per_rank_s"] == pytest.approx(3.0)
    assert b["bound_s"] == pytest.approx(8.0) and b["binding"] == "replica chain"
    # One FFN rank, 2 s per item: a batch's chain is 1 + 2 x (1 + 2) = 7 s (replica 0: 14 s); FFN work
    # 3 batches x 2 MoE layers x 2 s = 12 s, below the chain.
    slow = critical_path(MODEL_PRESETS["tiny"], _workload([[4, 6], [5]]), D=2, P=1, F=1, slots=2,
                         costs=CostModel({"w1": OpCost(fixed_s=2.0)}), attention_cost=(1.0, 0.0, 0.0))
    assert slow["replica_chain_s"] == pytest.approx([14.0, 7.0])
    assert slow["ffn_work_s"] == pytest.approx(12.0)
    assert slow["bound_s"] == pytest.approx(14.0)


def test_bound_ffn_work_binds_with_many_replicas_on_one_rank():
    # 4 replicas x 1 batch, F = 1, item 2 s: each chain is 1 + 2 x (1 + 2) = 7 s, but the one FFN rank has
    # 4 x 2 items x 2 s = 16 s of work.
    b = critical_path(MODEL_PRESETS["tiny"], _workload([[3], [3], [3], [3]]), D=4, P=1, F=1, slots=2,
                      costs=CostModel({"w1": OpCost(fixed_s=2.0)}), attention_cost=(1.0, 0.0, 0.0))
    assert b["replica_chain_s"] == pytest.approx([7.0] * 4)
    assert b["bound_s"] == pytest.approx(16.0) and b["binding"] == "FFN work"


def test_bound_attention_share_per_participant():
    # P participants each attend for A + (B * tokens) / P: 10 tokens, B = 0.1 -> 1 s at P = 1, 0.5 s at P = 2
    # (plus A = 0). Three layers of attention, FFN free: 3 s vs 1.5 s.
    wl = _workload([[10]])
    one = critical_path(MODEL_PRESETS["tiny"], wl, D=1, P=1, F=1, slots=2, costs=CostModel({}),
                        attention_cost=(0.0, 0.1, 0.0))
    two = critical_path(MODEL_PRESETS["tiny"], wl, D=1, P=2, F=1, slots=2, costs=CostModel({}),
                        attention_cost=(0.0, 0.1, 0.0))
    assert one["bound_s"] == pytest.approx(3.0) and two["bound_s"] == pytest.approx(1.5)


def test_default_bound_costs_exist_and_a_bad_file_is_named(tmp_path):
    assert load_costs("twin-cpu").op("w1").fixed_s > 0
    bad = tmp_path / "costs.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="--bound-costs"):
        load_costs(str(bad))
    with pytest.raises(ValueError, match="--bound-costs"):
        load_costs(str(tmp_path / "missing.json"))


_GATHER_CHILD = """
import sys
from datetime import timedelta
import torch
from cam.run.participants import Participants
part, port = int(sys.argv[1]), int(sys.argv[2])
store = torch.distributed.TCPStore("127.0.0.1", port, is_master=part == 0, timeout=timedelta(seconds=60),
                                   wait_for_workers=False)
group = Participants(store, 3, part, 2, 60.0)
for tokens in (5, 1, 0, 4):  # uneven shares, an empty share, an empty micro-batch, even shares
    full = torch.arange(tokens * 2, dtype=torch.float32).reshape(tokens, 2) * 10 + 1
    start, end = group.own(tokens)
    got = group.gather(full[start:end].clone(), tokens)
    assert torch.equal(got, full), (tokens, got, full)
group.close()
print("ok", part)
"""


def test_two_participants_gather_their_rows_in_token_order(tmp_path):
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, "-c", _GATHER_CHILD, str(p), str(port)], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in range(2)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=120))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.startswith("ok"), out + err
