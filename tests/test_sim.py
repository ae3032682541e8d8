"""cam-sim: hand-computed schedules, the protocol's rules (round robin bound, in-order rounds, chunks, sync barrier),
determinism, cost files and the CLI; and (slow) the prediction of real cam-run runs within 15%.

The expected timelines below are worked out by hand from docs/sim.md's schedule, not by running the simulator."""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cam.sim import (CostModel, ModelShape, OpCost, Placement, RowSplit, Simulation, SimTopology, SimWorkload, Work,
                     chunks, device_files, model_presets, simulate)
from cam.sim.placement import one_layer, placement_from_json, placement_to_dict, replicate_hottest
from cam.sim import cli as sim_cli

SIM_DIR = pathlib.Path(__file__).resolve().parent.parent / "cam" / "sim"


def shape(layers=1, first_dense=0, experts=4, top_k=1, **kw):
    base = dict(layers=layers, first_dense=first_dense, hidden=8, experts=experts, top_k=top_k, moe_intermediate=8,
                shared_experts=0, shared_intermediate=0, dense_intermediate=8, attn_params=0, attn_pair_flops=0)
    base.update(kw)
    return ModelShape(**base)


def costs(**ops):
    return CostModel({k: OpCost(**v) for k, v in ops.items()}, name="test")


def workload(arrivals, lengths, replicas, budget=None, batches=None):
    a = np.array(arrivals, dtype=float)
    n = np.array(lengths, dtype=np.int64)
    r = np.array(replicas, dtype=np.int64)
    return SimWorkload(a, n, r, token_budget=budget, batches=batches)


# ---------------------------------------------------------------------------------------------- hand-computed

def test_single_round_timeline():
    # attention 1.0 -> dispatch_send 0.5 (publish at 1.5) -> shared 0.25 (Attention free at 1.75);
    # FFN: W1 2.0 from 1.5 to 3.5; combine_recv 0.125 after max(1.75, 3.5): TTFT 3.625.
    m = shape(shared_experts=1, shared_intermediate=8)
    c = costs(attention={"fixed_s": 1.0}, dispatch_send={"fixed_s": 0.5}, shared={"fixed_s": 0.25},
              w1={"fixed_s": 2.0}, combine_recv={"fixed_s": 0.125})
    r = simulate(m, SimTopology(D=1, F=1), workload([0.0], [5], [0], budget=100), c, mode="async")
    assert r["makespan_s"] == pytest.approx(3.625)
    assert r["ttft_s"]["mean"] == pytest.approx(3.625)
    assert r["ffn_utilisation"] == pytest.approx(2.0 / 3.625)
    assert r["attention_utilisation"] == pytest.approx((1.0 + 0.5 + 0.25 + 0.125) / 3.625)
    assert r["rounds"] == 1 and r["work_items"] == 1
    # Nothing contends, so the schedule *is* the critical path.
    assert r["critical_path_s"] == pytest.approx(3.625)


def test_two_microbatches_combine_in_dispatch_order():
    # Two requests -> two micro-batches of 4 and 2 tokens; attention 0.1 s/token, W1 1.0 s per item.
    # ub0: attention 0..0.4, publish 0.4; ub1: attention 0.4..0.6, publish 0.6.
    # FFN: ub0 0.4..1.4, ub1 1.4..2.4 (in order); combine_recv 0: max(0.6, 1.4) -> 1.4; ub1: 2.4.
    m = shape()
    c = costs(attention={"per_token_s": 0.1}, w1={"fixed_s": 1.0})
    r = simulate(m, SimTopology(D=1, F=1), workload([0.0, 0.0], [4, 2], [0, 0], budget=100), c)
    assert r["makespan_s"] == pytest.approx(2.4)
    assert r["rounds"] == 2


def test_sync_barrier_vs_async():
    # Dense-only model (no FFN rounds), 2 layers, attention 0.1 s/token: replica 0 runs 10 tokens (1 s per layer),
    # replica 1 runs 30 tokens (3 s per layer). Async: 2 s and 6 s. Sync: layer 1 starts for both at 3 s (barrier),
    # so replica 0 ends at 4 s.
    m = shape(layers=2, first_dense=2)
    c = costs(attention={"per_token_s": 0.1})
    wl = workload([0.0, 0.0], [10, 30], [0, 1], budget=100)
    a = simulate(m, SimTopology(D=2, F=1), wl, c, mode="async", per_request=True)
    s = simulate(m, SimTopology(D=2, F=1), wl, c, mode="sync", per_request=True)
    assert [a["ttft_per_request_s"][k] for k in "01"] == pytest.approx([2.0, 6.0])
    assert [s["ttft_per_request_s"][k] for k in "01"] == pytest.approx([4.0, 6.0])
    # With a barrier cost of 0.5 s before each layer: 0.5 + 3 + 0.5 + 1 = 5 s and 0.5 + 3 + 0.5 + 3 = 7 s.
    c2 = costs(attention={"per_token_s": 0.1}, barrier={"fixed_s": 0.5})
    s2 = simulate(m, SimTopology(D=2, F=1), wl, c2, mode="sync", per_request=True)
    assert [s2["ttft_per_request_s"][k] for k in "01"] == pytest.approx([5.0, 7.0])


def test_sync_empty_replica_still_sends_rounds():
    # In sync mode a replica without a batch runs an empty one: its MoE rounds (0 rows) are consumed by every FFN
    # rank (protocol §2), so with W1 fixed 1 s per item the single FFN rank serves 2 items per layer, not 1.
    m = shape()
    c = costs(w1={"fixed_s": 1.0})
    wl = workload([0.0], [3], [0], budget=100)
    a = simulate(m, SimTopology(D=2, F=1), wl, c, mode="async")
    s = simulate(m, SimTopology(D=2, F=1), wl, c, mode="sync")
    assert a["work_items"] == 1 and s["work_items"] == 2
    assert a["makespan_s"] == pytest.approx(1.0)
    # FFN serves replica 0's round (published first, tie broken by schedule order) at 0..1, replica 1's empty round
    # at 1..2: replica 0's combine waits only for its own round.
    assert s["makespan_s"] == pytest.approx(1.0)


def test_dynamic_batching_token_budget():
    # One replica, budget 10, dense 1-layer model, 0.1 s/token. t=0: only r0 (6) arrived -> batch [r0], ends 0.6.
    # t=0.6: r1 (6, arrived 0.5) and r2 (3, arrived 0.6) fit (9 <= 10) -> micro-batches [6], [3]: 0.9 s, ends 1.5.
    # r3 (5, arrived 0.7) does not fit with them; starts at 1.5, ends 2.0.
    m = shape(layers=1, first_dense=1)
    c = costs(attention={"per_token_s": 0.1})
    wl = workload([0.0, 0.5, 0.6, 0.7], [6, 6, 3, 5], [0, 0, 0, 0], budget=10)
    r = simulate(m, SimTopology(D=1, F=1), wl, c, per_request=True)
    got = [r["ttft_per_request_s"][str(i)] for i in range(4)]
    assert got == pytest.approx([0.6, 1.0, 0.9, 1.3])
    assert r["batches"] == 3


def test_static_batches_wait_for_last_arrival():
    # cam-run's static batches start once their last request arrived: batch [r0, r1] waits for t=2.
    m = shape(layers=1, first_dense=1)
    c = costs(attention={"per_token_s": 0.1})
    wl = workload([0.0, 2.0], [10, 10], [0, 0], batches=[[[0, 1]]])
    r = simulate(m, SimTopology(D=1, F=1), wl, c, per_request=True)
    assert r["ttft_per_request_s"]["0"] == pytest.approx(4.0)
    assert r["ttft_per_request_s"]["1"] == pytest.approx(2.0)


def test_critical_path_bound_when_ffn_bound():
    # Two replicas publish one round each at t=0 (free attention); the single FFN rank needs 1 s per item. Each
    # replica alone would finish at 1 s, but the FFN rank's 2 s of work bound the makespan, which the round robin
    # meets exactly: replica 0 at 1 s, replica 1 at 2 s.
    m = shape()
    c = costs(w1={"fixed_s": 1.0})
    r = simulate(m, SimTopology(D=2, F=1), workload([0.0, 0.0], [1, 1], [0, 1], budget=4), c, per_request=True)
    assert r["critical_path_s"] == pytest.approx(2.0) and r["makespan_s"] == pytest.approx(2.0)
    assert sorted(r["ttft_per_request_s"].values()) == pytest.approx([1.0, 2.0])
    assert r["ffn_utilisation"] == pytest.approx(1.0)


def test_participants_split_tokens():
    # P = 2 participants each run half of the replica's 10 tokens: 0.5 s per dense layer instead of 1 s.
    m = shape(layers=2, first_dense=2)
    c = costs(attention={"per_token_s": 0.1})
    wl = workload([0.0], [10], [0], budget=100)
    assert simulate(m, SimTopology(D=1, F=1, P=2), wl, c)["makespan_s"] == pytest.approx(1.0)
    assert simulate(m, SimTopology(D=1, F=1, P=1), wl, c)["makespan_s"] == pytest.approx(2.0)


def test_expert_skew_loads_one_ffn_rank_more():
    # Zipf popularity concentrates rows on a few experts: the busiest FFN rank works longer than under uniform
    # routing, and a FFN-bound run gets slower (same seed, same workload).
    m = shape(layers=2, first_dense=0, experts=16, top_k=2)
    c = costs(w1={"per_row_s": 0.001})
    wl = SimWorkload.generate(40, 2, lengths="fixed", mean_len=64, token_budget=128, seed=0)
    flat = Simulation(m, SimTopology(D=2, F=4), wl, c, seed=1)
    flat_raw = flat.run()
    hot = Simulation(m, SimTopology(D=2, F=4), wl, c, seed=1, expert_skew=1.5)
    hot_raw = hot.run()
    assert max(hot_raw["ffn_busy_s"]) > 1.5 * max(flat_raw["ffn_busy_s"])
    assert sum(hot_raw["ffn_busy_s"]) == pytest.approx(sum(flat_raw["ffn_busy_s"]))  # same rows in total
    assert hot_raw["makespan_s"] > flat_raw["makespan_s"]


# ---------------------------------------------------------------------------------------------- FFN-side rules

def _traced(model, topo, wl, c, **kw):
    sim = Simulation(model, topo, wl, c, trace=True, **kw)
    sim.run()
    return sim


def test_round_robin_order_over_ready_replicas():
    # Three replicas publish at once (attention free); one FFN rank serves 0, 1, 2 in round-robin order, then each
    # replica's second micro-batch round again as 0, 1, 2 (rounds of a replica in order).
    m = shape()
    c = costs(w1={"fixed_s": 1.0})
    wl = workload([0.0] * 6, [1] * 6, [0, 1, 2, 0, 1, 2], budget=100)
    sim = _traced(m, SimTopology(D=3, F=1), wl, c)
    served = [d for (_, d, _, _, _, _) in sim.trace["items"]]
    assert served == [0, 1, 2, 0, 1, 2]


@settings(max_examples=25, deadline=None)
@given(D=st.integers(1, 5), F=st.sampled_from([1, 2, 4]), n=st.integers(1, 14), seed=st.integers(0, 1000),
       cap=st.sampled_from([None, 1, 3]), mode=st.sampled_from(["async", "sync"]))
def test_protocol_rules_hold(D, F, n, seed, cap, mode):
    """On random small runs: every FFN rank consumes every round exactly once, a replica's rounds in order; a
    replica ready when a selection begins is served within D selections (protocol §7); the critical-path bound
    never exceeds the makespan; utilisations are fractions."""
    rng = np.random.default_rng(seed)
    m = shape(layers=3, first_dense=1, experts=4, top_k=2)
    c = costs(attention={"fixed_s": 0.01, "per_token_s": 0.003}, w1={"fixed_s": 0.002, "per_row_s": 0.001},
              combine_recv={"fixed_s": 0.001}, ffn_wake={"fixed_s": 0.0005}, barrier={"fixed_s": 0.001})
    wl = SimWorkload(np.sort(rng.uniform(0, 0.5, n)), rng.integers(1, 12, n), np.arange(n) % D, token_budget=16)
    topo = SimTopology(D=D, F=F, capacity=cap)
    sim = _traced(m, topo, wl, c, mode=mode, seed=seed)
    pub = {g: (d, t) for g, d, t in sim.trace["publish"]}
    assert len(pub) == len(sim.round_replica)
    for f in range(F):
        items = [it for it in sim.trace["items"] if it[0] == f]
        done = [it[2] for it in items if it[5]]
        assert sorted(done) == sorted(pub)  # every round once (its last chunk)
        for d in range(D):
            own = [g for g in done if pub[g][0] == d]
            assert own == sorted(own)  # in order
        # Round robin bound: for each selection, every replica with a published, unserved round at that moment is
        # served by one of the next D selections (a chunked round counts as served at its first chunk).
        for i, (_, _, _, start, _, _) in enumerate(items):
            served_before = {it[2] for it in items[:i]}
            waiting = {pub[g][0] for g in pub if pub[g][1] <= start and g not in served_before}
            nxt = {it[1] for it in items[i:i + D]}
            assert waiting <= nxt
    r = simulate(m, topo, wl, c, mode=mode, seed=seed)
    assert r["critical_path_s"] <= r["makespan_s"] * (1 + 1e-12)
    assert 0 < r["ffn_utilisation"] <= 1 and 0 < r["attention_utilisation"] <= 1
    assert np.isfinite(r["ttft_s"]["max"])


def test_chunks_golden():
    # capacity 4, per-expert rows [3, 10, 2, 0, 4]: expert 0 (3) opens a chunk; expert 1 (10 > 4) is split: 1 row
    # fills that chunk [3+1], then two full chunks [4], [4], and its last row opens a chunk that expert 2 (2) joins
    # [1+2]; expert 4 (4) does not fit there and is not split (it fits a chunk alone): [4].
    assert chunks(np.array([3, 10, 2, 0, 4]), 4) == [(4, 2), (4, 1), (4, 1), (3, 2), (4, 1)]
    assert chunks(np.array([0, 0]), 4) == [(0, 0)]
    assert chunks(np.array([8]), 4) == [(4, 1), (4, 1)]
    assert chunks(np.array([2, 3, 2]), 4) == [(2, 1), (3, 1), (2, 1)]  # whole experts: 2+3 > 4, 3+2 > 4
    # The open chunk is exactly full when a split expert arrives: none of its rows join it.
    assert chunks(np.array([4, 10]), 4) == [(4, 1), (4, 1), (4, 1), (2, 1)]


@given(counts=st.lists(st.integers(0, 50), min_size=1, max_size=12), cap=st.integers(1, 40))
def test_chunks_cover_rows_within_capacity(counts, cap):
    out = chunks(np.array(counts), cap)
    assert sum(r for r, _ in out) == sum(counts)
    assert all(r <= cap for r, _ in out)
    assert len(out) >= math.ceil(sum(counts) / cap)
    # Experts are cut only when larger than a chunk: at most one chunk per fitting expert, ceil(c / cap) + 1 per
    # split one (the piece filling the open chunk).
    assert len(out) <= max(1, sum(math.ceil(c / cap) for c in counts if c) + sum(1 for c in counts if c))


def test_chunked_round_costs_one_item_per_chunk():
    # Balanced routing: 6 tokens x K=1 over 2 experts of the single FFN rank -> 3 rows each. Capacity 2: expert 0
    # gives [2] and its last row opens a chunk that expert 1's first row fills [1+1], then expert 1's [2]: 3 items.
    m = shape(experts=2)
    c = costs(w1={"fixed_s": 1.0})
    wl = workload([0.0], [6], [0], budget=100)
    assert chunks(np.array([3, 3]), 2) == [(2, 1), (2, 2), (2, 1)]
    r = simulate(m, SimTopology(D=1, F=1, capacity=2), wl, c, routing="balanced")
    assert r["work_items"] == 3 and r["makespan_s"] == pytest.approx(3.0)
    r = simulate(m, SimTopology(D=1, F=1), wl, c, routing="balanced")
    assert r["work_items"] == 1 and r["makespan_s"] == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------- inputs and outputs

def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="deadlock"):
        SimTopology(D=1, F=1, slots=1, ubatches=2)
    SimTopology(D=1, F=1, slots=1, ubatches=1)
    with pytest.raises(ValueError, match="below one work item's rows"):
        simulate(shape(top_k=2), SimTopology(D=1, F=1), workload([0.0], [1], [0], budget=4), costs(), batch_rows=1)
    with pytest.raises(ValueError, match="capacity"):
        SimTopology(D=1, F=1, capacity=0)
    with pytest.raises(ValueError, match="top_k"):
        shape(experts=2, top_k=3)
    with pytest.raises(ValueError, match="token_budget"):
        workload([0.0], [1], [0], budget=0)
    with pytest.raises(ValueError, match="exactly one"):
        workload([0.0], [1], [0])
    with pytest.raises(ValueError, match="mode"):
        simulate(shape(), SimTopology(D=1, F=1), workload([0.0], [1], [0], budget=4), costs(), mode="lockstep")
    with pytest.raises(ValueError, match="ops.w1 has unknown term"):
        CostModel.from_dict({"ops": {"w1": {"fixed": 1}}})
    with pytest.raises(ValueError, match="unknown op"):
        CostModel.from_dict({"ops": {"w3": {"fixed_s": 1}}})
    with pytest.raises(ValueError, match="fixed_s must be a number >= 0"):
        CostModel.from_dict({"ops": {"w1": {"fixed_s": -1}}})


def test_determinism_and_seed():
    m = model_presets()["deepseek-v3"]
    c = CostModel.load("ascend-a3-like")
    wl = SimWorkload.generate(16, 2, rate=2.0, seed=3, token_budget=8192, max_len=4096)
    topo = SimTopology(D=2, F=4, capacity=2048)  # long prompts' rounds are chunked
    a = simulate(m, topo, wl, c, seed=7, slo_s=5.0, per_request=True)
    b = simulate(m, topo, wl, c, seed=7, slo_s=5.0, per_request=True)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    other = simulate(m, topo, wl, c, seed=8, slo_s=5.0, per_request=True)
    assert other["ttft_per_request_s"] != a["ttft_per_request_s"]
    assert a["work_items"] > a["rounds"] * 4  # chunks happened
    w2 = SimWorkload.generate(16, 2, rate=2.0, seed=3, token_budget=8192, max_len=4096)
    assert np.array_equal(w2.arrival_s, wl.arrival_s) and np.array_equal(w2.length, wl.length)


def test_workload_distributions(tmp_path):
    fixed = SimWorkload.generate(10, 2, lengths="fixed", mean_len=100)
    assert set(fixed.length.tolist()) == {100} and not fixed.arrival_s.any()
    uni = SimWorkload.generate(500, 2, lengths="uniform", min_len=5, max_len=9, seed=1)
    assert set(uni.length.tolist()) == set(range(5, 10))
    logn = SimWorkload.generate(20000, 2, lengths="lognormal", mean_len=1000, sigma=0.5, min_len=1,
                                max_len=10 ** 9, rate=4.0, seed=1)
    assert logn.length.mean() == pytest.approx(1000, rel=0.03)  # 20k draws: sd of the mean ~0.4%
    assert logn.num_requests / logn.arrival_s[-1] == pytest.approx(4.0, rel=0.03)
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,length\n0.5,10\n0.0,20\n")
    t = SimWorkload.generate(0, 2, lengths="trace", trace=str(trace))
    assert t.arrival_s.tolist() == [0.0, 0.5] and t.length.tolist() == [20, 10]
    trace.write_text("0.5,ten\n")
    with pytest.raises(ValueError, match="trace"):
        SimWorkload.generate(0, 2, lengths="trace", trace=str(trace))


def test_cam_run_workload_is_imported_not_copied():
    from cam.models import PRESETS as MODELS
    from cam.run.workload import PRESETS, make_workload

    wl = SimWorkload.from_cam_run("imbalanced", 3)
    ref = make_workload(PRESETS["imbalanced"], 3, MODELS["tiny"].vocab_size)
    assert wl.batches == ref.batches
    assert wl.length.tolist() == [int(r.tokens.numel()) for r in ref.requests]
    assert model_presets()["tiny"].experts == MODELS["tiny"].num_experts


def test_cost_files(tmp_path):
    dev = CostModel.load("ascend-a3-like")
    assert "ascend-a3-like" in device_files() and "ascend-a2-like" in device_files()
    for name in ("ascend-a3-like", "ascend-a2-like"):
        meta = CostModel.load(name).meta
        assert "MODELLED from cam's kernels" in meta["status"] and "ASSUMPTIONS" in meta["status"]
        assert set(meta["modelled_ops"]) == {"dispatch_send", "combine_recv", "dispatch_recv", "w1", "w2",
                                             "combine_send", "all_to_all"}
    p = tmp_path / "c.json"
    dev.save(str(p))
    assert CostModel.load(str(p)).to_dict() == dev.to_dict()
    # The roofline: max(compute, memory), plus the link.
    op = OpCost(fixed_s=1.0, tflops=1.0, gbps=1.0, net_gbps=2.0)
    assert op.seconds(Work(flop=3e12, byte=1e9, net_byte=4e9)) == pytest.approx(1.0 + 3.0 + 2.0)
    assert op.seconds(Work(flop=1e12, byte=5e9)) == pytest.approx(1.0 + 5.0)


def test_simulator_does_not_import_kernels():
    """The simulator must run without kernels: no cam.sim module imports cam._C or anything that launches them."""
    banned = {"_C", "ops", "comm", "connector", "_runtime", "cli"}
    for path in SIM_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 2:  # from ..x import y  (cam.x)
                mods = [node.module or ""] + ([a.name for a in node.names] if not node.module else [])
                for mod in mods:
                    head = mod.split(".")[0]
                    # cam.run imports cam.sim (its critical-path bound): one direction, so never the other.
                    assert head not in banned and head != "run", f"{path.name} imports cam.{mod}"
            if isinstance(node, ast.Import):
                for a in node.names:
                    assert not a.name.startswith("cam."), f"{path.name}: use relative imports"


def test_cli_sweep_json(tmp_path):
    out = tmp_path / "r.json"
    argv = ["--model", "deepseek-v3", "--replicas", "2", "--ffn", "4", "--sweep", "--total-ranks", "6",
            "--requests", "24", "--rates", "0,4", "--slo", "10", "--json", str(out), "--quiet"]
    assert sim_cli.main(argv) == 0
    res = json.loads(out.read_text())
    splits = {(r["topology"]["D"], r["topology"]["F"]) for r in res["runs"]}
    assert splits == {(5, 1), (4, 2), (2, 4)}  # F | 256 and D = 6 - F
    assert len(res["runs"]) == 3 * 2 * 2
    assert {g["rate"] for g in res["summary"]["async_gain"]} == {0.0, 4.0}
    assert set(res["summary"]["best_split"]) == {"async@0", "async@4", "sync@0", "sync@4"}
    for r in res["runs"]:
        assert r["slo"]["goodput_tok_s"] <= r["throughput_tok_s"] * (1 + 1e-12)
    # Any F: 3 does not divide 256 (ranks hold 85 or 86 experts); the sweep's default list stays the divisors.
    assert sim_cli.main(["--ffn", "3", "--requests", "2", "--quiet"]) == 0
    assert sim_cli.main(["--sweep", "--sweep-ffn", "3", "--requests", "2", "--quiet"]) == 0
    assert sim_cli.main(["--sweep", "--sweep-ffn", "3", "--total-ranks", "3", "--requests", "2", "--quiet"]) == 2
    assert sim_cli.main(["--batch-items", "--batch-rows", "7", "--requests", "2", "--quiet"]) == 2  # < top-8
    assert sim_cli.main(["--placement", "hot:x", "--requests", "2", "--quiet"]) == 2
    assert sim_cli.main(["--placement", str(tmp_path / "nosuch.json"), "--requests", "2", "--quiet"]) == 2
    assert sim_cli.main(["--cam-run-preset", "default", "--quiet"]) == 2  # deepseek-v3 is not a cam-run model


def test_cli_cam_run_preset(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert sim_cli.main(["--cam-run-preset", "skewed", "--model", "tiny", "-D", "2", "-F", "2", "--costs",
                         str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "sim" / "results" /
                             "twin-calibrated.json"), "--json", str(out), "--quiet"]) == 0
    res = json.loads(out.read_text())
    assert [r["requests"] for r in res["runs"]] == [16, 16]  # the preset's requests, both modes
    # With --assign (as cam-run --assign): the same requests, batched dynamically up to the preset's
    # max_batch_tokens (80), no longer its static batches.
    from cam.sim.presets import PRESETS as CAM_RUN_PRESETS

    wl = SimWorkload.from_cam_run("skewed", 2, dynamic=True)
    assert wl.batches is None and wl.token_budget == CAM_RUN_PRESETS["skewed"].max_batch_tokens == 80
    assert wl.length.tolist() == SimWorkload.from_cam_run("skewed", 2).length.tolist()
    assert sim_cli.main(["--cam-run-preset", "skewed", "--model", "tiny", "-D", "2", "-F", "2", "--costs",
                         "twin-cpu", "--assign", "fewest-tokens", "--mode", "async", "--json", str(out),
                         "--quiet"]) == 0
    run = json.loads(out.read_text())["runs"][0]
    assert run["assign"] == "fewest-tokens" and run["requests"] == 16


def test_cli_plots(tmp_path):
    if os.environ.get("CI"):  # CI installs the viz extra (the README's first line): the plots must be drawn there
        import matplotlib  # noqa: F401
    else:
        pytest.importorskip("matplotlib")
    plots = tmp_path / "plots"
    argv = ["--model", "deepseek-v3", "--sweep", "--total-ranks", "6", "--sweep-ffn", "2,4", "--requests", "12",
            "--rates", "1,4", "--slo", "10", "--plot-dir", str(plots), "--quiet"]
    assert sim_cli.main(argv) == 0
    assert sorted(os.listdir(plots)) == ["throughput_vs_rate.png", "ttft_cdf.png", "utilisation_vs_af.png"]


# ---------------------------------------------------------------------------------------------- against cam-run

def _calibrate_and_validate(tmp_path, trial: int):
    """One trial: calibrate on ``default`` (both modes), predict fresh ``imbalanced`` runs (both modes). Returns the
    cam-sim report, the fitted costs and the (label, metric) pairs outside 15%."""
    out = tmp_path / f"validation-{trial}.json"
    cost = tmp_path / f"costs-{trial}.json"
    argv = ["--calibrate", str(cost), "--calibrate-presets", "default", "--validate-presets", "imbalanced",
            "--cam-run-requests", "8", "--cam-run-timeout", "300", "--json", str(out), "--quiet"]
    assert sim_cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert {(v["preset"], v["mode"]) for v in res["validation"]} == {("imbalanced", "async"), ("imbalanced", "sync")}
    misses = []
    for v in res["calibration"] + res["validation"]:
        for metric, err in v["rel_error"].items():
            if abs(err) > 0.15:
                misses.append(f"{v['preset']} {v['mode']} {metric}: predicted {v['predicted'][metric]:.3f} vs "
                              f"measured {v['measured'][metric]:.3f} ({err:+.0%})")
    return res, CostModel.load(str(cost)), misses


def _longest_spans(res, count: int = 6) -> str:
    """Where a run's time went, for a failure message: the longest spans over every rank of every measured run."""
    spans = []
    for run in res["calibration_runs"] + res["validation_runs"]:
        tag = f"{run['spec']['preset']}/{run['spec']['mode']}"
        for rank, rec in run["ranks"].items():
            for s in rec["spans"]:
                if s["name"] not in ("step", "layer", "idle"):
                    spans.append((s["end_s"] - s["start_s"], f"{tag} rank {rank} {s['name']} {s['args']}"))
    spans.sort(reverse=True)
    return "; ".join(f"{d:.2f} s {what}" for d, what in spans[:count])


# Four cam-run worlds (about 45 s on a quiet 2-CPU machine, 86 s loaded): CI runs this in its own timed stage,
# long-tests (.ci/run), so the README's test tier stays within its budget.
LONG_TESTS = os.environ.get("CAM_LONG_TESTS") == "1"


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.skipif(not LONG_TESTS, reason="the prediction of cam-run runs with CAM_LONG_TESTS=1 (CI's long-tests "
                                           "stage)")
def test_predicts_cam_run_within_15_percent(tmp_path):
    """Calibrate on cam-run's ``default`` preset (both modes), then predict fresh runs of the ``imbalanced`` preset
    (both modes): makespan and mean TTFT within 15%. cam-run runs as a subprocess from a scratch directory, each run
    bounded by a timeout. The tolerance is the issue's; single cam-run runs on this shared 2-CPU machine vary by
    about that much (benchmarks/README.md), which is why the emulated attention (known exactly) is made to dominate
    the CPU-bound work (--cam-run-attention-cost).

    One fresh trial is allowed when the first misses. The simulator predicts an undisturbed machine, and a CI machine
    once stalled one of the four runs for about 24 s (imbalanced/sync measured 34.1 s against 10.2 s predicted, the
    other three within 15%; the same run measures 10.3-10.9 s here quiet or with both CPUs loaded). A stall only ever
    adds time to one run; a wrong model misses in both trials, and the failure then shows both trials' misses and
    where the longest spans of each went."""
    res, fitted, misses = _calibrate_and_validate(tmp_path, 1)
    if misses:
        first = f"trial 1 missed: {misses}; longest spans: {_longest_spans(res)}"
        print(first)
        res, fitted, misses = _calibrate_and_validate(tmp_path, 2)
        assert not misses, f"{first}\ntrial 2 missed: {misses}; longest spans: {_longest_spans(res)}"
    # The fitted FFN work item costs something (its per-row slope may come out 0: rows explain little of the item
    # time on a busy shared machine, and the fit never goes negative).
    assert fitted.op("w1").per_row_s >= 0 and fitted.seconds("w1", Work(rows=40)) > 0


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.skipif(not LONG_TESTS, reason="the prediction of cam-run runs with CAM_LONG_TESTS=1 (CI's long-tests "
                                           "stage)")
def test_predicts_afd_against_colocated_at_equal_devices():
    """Two devices each way on the twin: async AFD (one replica + one FFN rank) and colocated (two devices, each
    both), calibrated on one run of each (``default``), then fresh runs, 3 per deployment and preset, judged on their
    medians: makespan and mean TTFT within 15% (the async and sync models' tolerance, test above), and the winner by
    mean TTFT predicted right both ways: colocated wins the closed batch (twice the attention capacity), AFD wins
    ``arrivals`` (a colocated step waits for both devices' batches to arrive). 14 cam-run worlds of 2 processes
    (about 3 min loaded): long-tests stage."""
    from cam.sim.calibrate import equal_devices_validation

    def trial():
        res = equal_devices_validation(("default", "arrivals"), repeats=3)
        winners = {row["preset"]: (row["measured_winner"], row["predicted_winner"]) for row in res["configs"]}
        misses = [f"{row['preset']} {name} {metric}: {err:+.0%} (runs {row[name]['measured_runs']})"
                  for row in res["configs"] for name in ("afd", "colocated")
                  for metric, err in row[name]["rel_error"].items() if abs(err) > 0.15]
        if winners != {"default": ("colocated", "colocated"), "arrivals": ("afd", "afd")}:
            misses.append(f"winners (measured, predicted): {winners}")
        assert all(row["colocated"]["devices"] == 2 and row["afd"]["devices"] == 2 for row in res["configs"])
        return misses

    # One fresh trial when the first misses, as the test above: contention only ever adds time to some runs
    # (docs/sim.md §8 records a loaded machine reversing the measured closed-batch winner); a wrong model misses
    # in both.
    first = trial()
    if first:
        second = trial()
        assert not second, f"trial 1 missed: {first}\ntrial 2 missed: {second}"


def test_scalar_and_vector_item_costs_agree():
    from cam.sim.engine import _Costs

    c = _Costs(CostModel.load("ascend-a3-like"), model_presets()["deepseek-v3"], SimTopology(D=2, F=8))
    m = np.array([0, 1, 7, 300, 4096])
    a = np.array([0, 1, 3, 32, 32])
    vec = c.ffn_items(m, a)
    assert [c.item(float(x), float(y)) for x, y in zip(m, a)] == pytest.approx(vec.tolist(), rel=1e-12)


# ---------------------------------------------------------------------------------------------- placement, batching

def test_contiguous_placement_is_cams_default_and_takes_any_e_and_f():
    p = Placement.contiguous(8, 4, layers=1)
    assert [p.replicas(0, e)[0] for e in range(8)] == [(e // 2, e % 2) for e in range(8)]  # rank e // R, slot e % R
    assert not RowSplit(p).replicated
    q = RowSplit(Placement.contiguous(60, 8, layers=1))  # E % F != 0: ranks hold 7 or 8 experts
    assert sorted(set(q.slots_per_rank.tolist())) == [7, 8] and q.slots_per_rank.sum() == 60
    # Every expert's rows land somewhere, exactly once.
    counts = np.arange(60)
    rows, active = q.split(counts)
    assert rows.sum() == counts.sum() and active.sum() == 59  # expert 0 has no rows


def test_replica_rule_and_split():
    p = one_layer(3, 3, [[(0, 0), (1, 0)], [(1, 1)], [(0, 1), (1, 2), (2, 0)]])
    # row (t, k) of expert e = row[k] -> replicas(e)[(t + k0) % r], k0 the token's first index naming e
    assert [p.replica(0, [0], t, 0) for t in range(4)] == [(0, 0), (1, 0), (0, 0), (1, 0)]
    assert p.replica(0, [1, 2], 1, 1) == (2, 0) and p.replica(0, [2], 3, 0) == (0, 1)
    assert p.replica(0, [0, 0, 0, 1], 5, 3) == (1, 1)
    # a token naming an expert twice: both rows on its first slot's replica ((t + k) % r would split them)
    assert p.replica(0, [0, 0], 0, 0) == p.replica(0, [0, 0], 0, 1) == (0, 0)
    assert p.replica(0, [2, 0, 2], 1, 0) == p.replica(0, [2, 0, 2], 1, 2) == (1, 2)
    assert p.replica(0, [2, 0, 2], 1, 1) == (0, 0)
    with pytest.raises(ValueError, match="top-k index 1 of the row"):
        p.replica(0, [0, -1], 0, 1)
    # The simulator's split is the rule's expectation: 7 rows of expert 2 over 3 replicas -> 3, 2, 2.
    rows, active = RowSplit(p).split(np.array([5, 1, 7]))
    assert rows.tolist() == [3 + 3, 2 + 1 + 2, 2] and active.tolist() == [2, 3, 1]
    assert RowSplit(p).slot_rows(np.array([5, 1, 7]), 1).tolist() == [2, 1, 2]


def test_the_simulators_replica_rule_routes_as_the_reference():
    """The table the simulator routes by (cam.placement.Placement.replica) and cam.reference.dispatch (which applies
    the rule of docs/protocol.md §15 on its own) send every (token, k) row of random rounds to the same (FFN rank,
    slot), with duplicate ids in the rows."""
    import torch

    import cam
    from cam.reference import dispatch

    table = [[(0, 0), (1, 0)], [(1, 1)], [(0, 1), (1, 2), (2, 0)], [(2, 1)]]
    sim = ref = one_layer(4, 3, table)
    topo = cam.Topology(D=1, P=1, F=3, E=4, K=3, H=8, Bmax=8, L=1, quantized=False, expert_slots=3)
    g = torch.Generator().manual_seed(6)
    dups = 0
    for _ in range(20):
        ids = torch.randint(-1, 4, (8, 3), generator=g, dtype=torch.int32)
        ids[:, 1] = torch.where(torch.rand(8, generator=g) < 0.5, ids[:, 0], ids[:, 1])
        x = torch.zeros(8, 8, dtype=torch.bfloat16)
        got = {}
        for f in range(3):
            d = dispatch(topo, [(x, ids)], topo.A + f, placement=ref, layer=0)
            got.update({(t, k): (f, int(j)) for j, (_, t, k) in zip(d["local_expert"], d["row_source"])})
        rows = ids.tolist()
        want = {(t, k): sim.replica(0, row, t, k) for t, row in enumerate(rows) for k, e in enumerate(row) if e >= 0}
        assert got == want
        dups += sum(row[0] == row[1] >= 0 and len(table[row[0]]) > 1 for row in rows)
    assert dups > 0  # rows (t, 1) that (t + k) % n would send elsewhere than (t, 0)


def test_bad_placements_are_refused_naming_the_fault(tmp_path):
    with pytest.raises(ValueError, match="outside the FFN set"):
        one_layer(2, 2, [[(0, 0)], [(2, 0)]])
    with pytest.raises(ValueError, match="expert 1 has zero replicas"):
        one_layer(2, 2, [[(0, 0)], []])
    with pytest.raises(ValueError, match="holds expert 0 and expert 1"):
        one_layer(2, 2, [[(0, 0)], [(0, 0)]])
    path = tmp_path / "p.json"
    path.write_text(json.dumps(placement_to_dict(Placement.contiguous(4, 2, layers=1))))
    assert placement_from_json(str(path), 4, 2).digest() == Placement.contiguous(4, 2, layers=1).digest()
    with pytest.raises(ValueError, match="made for F=2"):
        placement_from_json(str(path), 4, 3)
    with pytest.raises(ValueError, match="4 experts, the model has 8"):
        placement_from_json(str(path), 8, 2)


def test_replicating_the_hottest_experts_evens_the_ffn_ranks():
    # Zipf-skewed popularity: a second replica of each layer's 4 hottest experts takes load off the busiest FFN
    # rank, the total rows stay the same, and an FFN-bound run gets shorter (same seed, same workload).
    m = shape(layers=2, first_dense=0, experts=16, top_k=2)
    c = costs(w1={"per_row_s": 0.001})
    wl = SimWorkload.generate(40, 2, lengths="fixed", mean_len=64, token_budget=128, seed=0)
    hot = Simulation(m, SimTopology(D=2, F=4), wl, c, seed=1, expert_skew=1.5, placement="contiguous").run()
    rep = Simulation(m, SimTopology(D=2, F=4), wl, c, seed=1, expert_skew=1.5, placement="hot:4").run()
    assert max(rep["ffn_busy_s"]) < 0.8 * max(hot["ffn_busy_s"])
    assert sum(rep["ffn_busy_s"]) == pytest.approx(sum(hot["ffn_busy_s"]))
    assert rep["routed_rows"] == hot["routed_rows"] and rep["makespan_s"] < hot["makespan_s"]
    place = replicate_hottest(np.array([0.5, 0.1, 0.1, 0.3]), F=2, k=1)
    assert place.replicas(0, 0) == ((0, 0), (1, 2))  # the hottest, onto the other rank's next slot


def test_uneven_placement_runs_and_loads_ranks_by_their_experts():
    # E = 6 on F = 4 ranks (2, 1, 2, 1 experts), balanced routing: rows follow the expert counts.
    m = shape(experts=6, top_k=1)
    c = costs(w1={"per_row_s": 0.01})
    wl = workload([0.0], [60], [0], budget=100)
    r = Simulation(m, SimTopology(D=1, F=4, ubatches=1, slots=1), wl, c, routing="balanced").run()
    assert r["ffn_busy_s"] == pytest.approx([0.2, 0.1, 0.2, 0.1])


def test_batching_serves_every_ready_item_in_one_launch():
    # Three replicas publish one round each at t=0; the idle FFN rank notices at 0.5 s (ffn_wake); W1 costs 1 s per
    # launch. One item per dispatch_recv: 0.5 + 3 = 3.5 s. Batched (budget 8 rows, 1 row each): one launch, every
    # replica done at 1.5 s. Budget 2: 2 + 1 items in round-robin order (replicas 0, 1, then 2 at 2.5 s).
    m = shape()
    c = costs(w1={"fixed_s": 1.0}, ffn_wake={"fixed_s": 0.5})
    wl = workload([0.0] * 3, [1] * 3, [0, 1, 2], budget=100)
    # capacity 2: a budget of 2 holds a work item (the serving path's rule; the 1-row rounds are never chunked).
    topo = SimTopology(D=3, F=1, capacity=2)
    one = simulate(m, topo, wl, c, per_request=True)
    assert one["makespan_s"] == pytest.approx(3.5) and one["launches"] == 3
    big = simulate(m, topo, wl, c, per_request=True, batch_rows=8)
    assert big["makespan_s"] == pytest.approx(1.5) and big["launches"] == 1 and big["work_items"] == 3
    sim = _traced(m, topo, wl, c, batch_rows=2)
    assert [(ds, rows) for _, _, ds, rows in sim.trace["launches"]] == [([0, 1], 2), ([2], 1)]
    small = simulate(m, topo, wl, c, per_request=True, batch_rows=2)
    assert sorted(small["ttft_per_request_s"].values()) == pytest.approx([1.5, 1.5, 2.5])
    # A snapshot: with no wake-up delay the first publish starts a launch at once, and the rounds published at the
    # same instant after it are not waited for (they form the next launch).
    c0 = costs(w1={"fixed_s": 1.0})
    sim = _traced(m, topo, wl, c0, batch_rows=8)
    assert [ds for _, _, ds, _ in sim.trace["launches"]] == [[0], [1, 2]]


@settings(max_examples=20, deadline=None)
@given(D=st.integers(1, 5), F=st.sampled_from([1, 2, 3]), n=st.integers(1, 14), seed=st.integers(0, 1000),
       cap=st.sampled_from([None, 3]), budget=st.sampled_from([2, 5, 64]), mode=st.sampled_from(["async", "sync"]))
def test_batched_protocol_rules_hold(D, F, n, seed, cap, budget, mode):
    """Batching keeps the single-item mode's rules: every FFN rank consumes every round exactly once, a replica's
    rounds in order, a launch stays within its row budget unless it holds one item, and a replica ready when a
    launch begins is served by one of the next D launches (here F = 3 does not divide E = 4)."""
    rng = np.random.default_rng(seed)
    m = shape(layers=3, first_dense=1, experts=4, top_k=2)
    c = costs(attention={"fixed_s": 0.01, "per_token_s": 0.003}, w1={"fixed_s": 0.002, "per_row_s": 0.001},
              combine_recv={"fixed_s": 0.001}, ffn_wake={"fixed_s": 0.0005}, barrier={"fixed_s": 0.001})
    wl = SimWorkload(np.sort(rng.uniform(0, 0.5, n)), rng.integers(1, 12, n), np.arange(n) % D, token_budget=16)
    # A work item fits the budget (the serving path's rule): capped at the budget where the worst case, 16 tokens
    # of top-2, would not fit it.
    cap = min(cap, budget) if cap is not None else (None if 16 * 2 <= budget else budget)
    sim = _traced(m, SimTopology(D=D, F=F, capacity=cap), wl, c, mode=mode, seed=seed, batch_rows=budget)
    pub = {g: (d, t) for g, d, t in sim.trace["publish"]}
    for f in range(F):
        done = [it[2] for it in sim.trace["items"] if it[0] == f and it[5]]
        assert sorted(done) == sorted(pub)
        for d in range(D):
            own = [g for g in done if pub[g][0] == d]
            assert own == sorted(own)
        launches = [(t, ds, rows) for ff, t, ds, rows in sim.trace["launches"] if ff == f]
        items = [it for it in sim.trace["items"] if it[0] == f]
        served_before, pos = set(), 0
        for i, (start, ds, rows) in enumerate(launches):
            waiting = {pub[g][0] for g in pub if pub[g][1] <= start and g not in served_before}
            assert waiting <= {d for _, later, _ in launches[i:i + D] for d in later}
            served_before |= {it[2] for it in items[pos:pos + len(ds)]}
            pos += len(ds)
            assert len(ds) == 1 or rows <= budget
        assert pos == len(items)



@pytest.mark.parametrize("mode", ["async", "sync", "colocated"])
def test_assign_policies(mode):
    # Dense 1-layer model, 0.01 s/token, D = 2. a (100 tokens) at 0, b, c, d (5 each) at 0.01, 0.02, 0.03.
    # round robin: a, c -> replica 0; b, d -> 1. c waits for a (ends 1.05: TTFT 1.03); d runs after b (0.11: 0.08).
    # fewest tokens: c and d go to replica 1 (5 and 10 queued tokens < 100), which runs [b] then [c, d] (0.06 ->
    #   0.16). shortest queue: c ties (one request each) and goes to the lowest replica, 0, as round robin; d to 1.
    m = shape(layers=1, first_dense=1)
    c = costs(attention={"per_token_s": 0.01})
    wl = workload([0.0, 0.01, 0.02, 0.03], [100, 5, 5, 5], [0, 1, 0, 1], budget=100)
    got = {}
    for assign in ("round-robin", "fewest-tokens", "shortest-queue"):
        r = simulate(m, SimTopology(D=2, F=2 if mode == "colocated" else 1), wl, c, per_request=True,
                     assign=assign, mode=mode)
        got[assign] = [r["ttft_per_request_s"][str(i)] for i in range(4)]
    if mode == "async":
        assert got["round-robin"] == pytest.approx([1.0, 0.05, 1.03, 0.08])
        assert got["fewest-tokens"] == pytest.approx([1.0, 0.05, 0.14, 0.13])
        assert got["shortest-queue"] == pytest.approx(got["round-robin"])
    else:
        # Sync (and colocated, whose steps are lockstep too; a dense model has no collective to tell them apart):
        # the first step (t = 0) holds a only; the second starts at 1.0 with b, c, d. Round robin: replica 0
        # runs [c] (1.05), replica 1 [b, d] as two micro-batches (1.10). Fewest tokens put all three on replica 1:
        # micro-batches [b, d] and [c], 0.15 s, ends 1.15. The barrier makes the balanced choice the worse one here.
        assert got["round-robin"] == pytest.approx([1.0, 1.09, 1.03, 1.07])
        assert got["fewest-tokens"] == pytest.approx([1.0, 1.14, 1.13, 1.12])
        assert got["shortest-queue"] == pytest.approx(got["round-robin"])
    with pytest.raises(ValueError, match="assign must be one of"):
        simulate(m, SimTopology(D=2, F=2 if mode == "colocated" else 1), wl, c, assign="random", mode=mode)
    static = workload([0.0], [1], [0], batches=[[[0]]])
    with pytest.raises(ValueError, match="dynamically batched"):
        simulate(m, SimTopology(D=1, F=1), static, c, assign="fewest-tokens")


# The A3 figures of the published-figure device file (DeepEP-Ascend's bandwidths, assumed efficiencies of the cube
# and HBM peaks) that the policy test below is set at; the shipped device files are now modelled from cam's kernels.
_ASSUMED_A3 = {"ops": {
    "attention": {"fixed_s": 5e-05, "tflops": 188.0, "gbps": 1280.0},
    "dense_mlp": {"fixed_s": 2e-05, "tflops": 188.0, "gbps": 1280.0},
    "shared": {"fixed_s": 2e-05, "tflops": 413.6, "gbps": 1280.0},
    "dispatch_send": {"fixed_s": 3e-05, "gbps": 1280.0, "net_gbps": 125.0},
    "combine_recv": {"fixed_s": 2e-05, "gbps": 1280.0},
    "dispatch_recv": {"fixed_s": 2e-05, "gbps": 1280.0},
    "w1": {"fixed_s": 2e-05, "tflops": 413.6, "gbps": 1280.0},
    "w2": {"fixed_s": 2e-05, "tflops": 413.6, "gbps": 1280.0},
    "combine_send": {"fixed_s": 2e-05, "net_gbps": 125.0},
    "ffn_wake": {"fixed_s": 1e-05},
    "barrier": {"fixed_s": 3e-05},
    "all_to_all": {"fixed_s": 7e-05, "net_gbps": 103.0}}}


def test_assign_policies_on_a_long_tailed_workload_move_the_tail_as_the_model_says():
    # Lognormal prompts (mean 2048, log-std 1.2, up to 32k tokens), Poisson 2 req/s over 4 replicas, DeepSeek-V3 on
    # the assumed A3 figures (_ASSUMED_A3), balanced routing. Async AFD: round robin hands the next request to a replica whatever it
    # holds, so now and then short prompts queue behind a 20-30k-token prompt: those waits are the p99. Fewest
    # tokens sends them to a replica without one; shortest queue counts requests, not tokens, so it still puts a
    # request behind a long prompt whenever that replica's queue is no longer than the others'. Under the sync
    # barrier every replica waits for the step holding the longest prompt wherever it was assigned, so at this load
    # no policy moves the tail much. (Simulated here: RR p99 19.3 s, shortest queue 16.4 s, fewest tokens 4.6 s;
    # sync 22.9, 22.8 and 22.7 s. The bounds below leave room for the model to change, not for the mechanism to.)
    m = model_presets()["deepseek-v3"]
    c = CostModel.from_dict(_ASSUMED_A3)  # the load this mechanism is shown at: the assumed per-op figures
    wl = SimWorkload.generate(300, 4, lengths="lognormal", mean_len=2048, sigma=1.2, min_len=16, max_len=32768,
                              rate=2.0, token_budget=16384, seed=1)
    p99 = {(mode, a): simulate(m, SimTopology(D=4, F=4), wl, c, mode=mode, assign=a, routing="balanced")["ttft_s"]
           ["p99"] for mode in ("async", "sync") for a in ("round-robin", "fewest-tokens", "shortest-queue")}
    assert p99["async", "fewest-tokens"] < 0.5 * p99["async", "round-robin"]
    assert p99["async", "fewest-tokens"] < 0.5 * p99["async", "shortest-queue"] <= 0.5 * p99["async", "round-robin"]
    assert p99["sync", "fewest-tokens"] > 0.9 * p99["sync", "round-robin"]
    assert p99["sync", "shortest-queue"] > 0.9 * p99["sync", "round-robin"]


@pytest.mark.parametrize("mode", ["async", "sync", "colocated"])
def test_equal_prompts_give_identical_results_under_every_policy(mode):
    # Every prompt 3000 tokens: a replica's queued tokens are 3000 x its queued requests, so fewest tokens and
    # shortest queue make every decision alike, under arrivals too. In a closed batch (all at t = 0, nothing
    # finished) both deal the requests as round robin does (ties to the lowest replica), so all three runs are the
    # same schedule: every field of the report equal but the policy's name.
    m = model_presets()["deepseek-v3"]
    c = CostModel.load("ascend-a3-like")
    D = 8 if mode == "colocated" else 4
    topo = SimTopology(D=D, F=D if mode == "colocated" else 4)

    def run(rate, a):
        wl = SimWorkload.generate(120, D, lengths="fixed", mean_len=3000, rate=rate, token_budget=8192, seed=2)
        r = simulate(m, topo, wl, c, mode=mode, assign=a, per_request=True)
        assert r.pop("assign") == a
        return r

    closed = {a: run(0.0, a) for a in ("round-robin", "fewest-tokens", "shortest-queue")}
    assert closed["fewest-tokens"] == closed["shortest-queue"] == closed["round-robin"]
    assert run(3.0, "fewest-tokens") == run(3.0, "shortest-queue")


# ---------------------------------------------------------------------------------------------- colocated


def test_colocated_timeline_and_not_sync_relabelled():
    # N = 2 devices, one MoE layer, E = 2 (one expert per device), top-1, H = 8, balanced routing; one request of
    # 4 tokens per device at t = 0. Colocated, per device: attention 1.0; the dispatch all-to-all starts when both
    # arrived (1.0) and takes 0.5 + its bytes; experts (W1 2.0 for the rows of both devices); the combine all-to-all
    # 0.5 + bytes; combine_recv 0.125. Bytes: fanout = 1 (K = 1), half the rows cross devices (N = 2): dispatch
    # sends 4 * (8 + 4) / 2 = 24 B per device and receives 4 rows * 12 / 2 = 24 B; combine 4 * 16 / 2 = 32 B each
    # way. At 9.6e-8 GB/s, 24 B take 0.25 s and 32 B 1/3 s: TTFT 1 + 0.75 + 2 + (0.5 + 1/3) + 0.125 for both.
    m = shape(experts=2)
    c = costs(attention={"fixed_s": 1.0}, w1={"fixed_s": 2.0}, combine_recv={"fixed_s": 0.125},
              all_to_all={"fixed_s": 0.5, "net_gbps": 9.6e-8})
    wl = workload([0.0, 0.0], [4, 4], [0, 1], budget=100)
    colo = simulate(m, SimTopology(D=2, F=2), wl, c, mode="colocated", routing="balanced", per_request=True)
    expect = 1.0 + 0.75 + 2.0 + 0.5 + 1 / 3 + 0.125
    assert [colo["ttft_per_request_s"][k] for k in "01"] == pytest.approx([expect, expect])
    assert colo["devices"] == 2 and colo["rounds"] == 1 and colo["ffn_utilisation"] == pytest.approx(2.0 / expect)
    # Sync AFD on the same split (D = 2 replicas, F = 2 FFN ranks: 4 devices) serves the replicas' rounds as two
    # work items per FFN rank (2.0 each, replica 0's first) and has no all-to-all: TTFTs 3.125 and 5.125.
    sync = simulate(m, SimTopology(D=2, F=2), wl, c, mode="sync", routing="balanced", per_request=True)
    assert [sync["ttft_per_request_s"][k] for k in "01"] == pytest.approx([3.125, 5.125])
    assert sync["devices"] == 4
    # Shared experts: AFD hides them under the FFN work (Attention side, 1.0 during W1), the colocated device runs
    # them on its one timeline, after the combine.
    c2 = CostModel(dict(c.ops, shared=OpCost(fixed_s=1.0)), name="test")
    m2 = shape(experts=2, shared_experts=1, shared_intermediate=8)
    colo2 = simulate(m2, SimTopology(D=2, F=2), wl, c2, mode="colocated", routing="balanced")
    sync2 = simulate(m2, SimTopology(D=2, F=2), wl, c2, mode="sync", routing="balanced")
    assert colo2["makespan_s"] == pytest.approx(expect + 1.0)
    assert sync2["makespan_s"] == pytest.approx(5.125)


def test_colocated_idle_device_still_serves_experts_and_dense_layers_skip_the_collective():
    # N = 2, a dense layer then a MoE layer, attention 0.1 s/token, W1 fixed 1.0, all-to-all 0.25 fixed. Only
    # device 0 has a request (10 tokens). Dense: device 0 busy 1.0, device 1 idle (no collective, so it waits in
    # the next one). MoE: attention 1.0 more on device 0 (2.0); dispatch 2.0 -> 2.25; experts on both devices
    # (device 1 serves its shard for device 0's tokens) -> 3.25; combine -> 3.5.
    m = shape(layers=2, first_dense=1, experts=2)
    c = costs(attention={"per_token_s": 0.1}, w1={"fixed_s": 1.0}, all_to_all={"fixed_s": 0.25})
    r = simulate(m, SimTopology(D=2, F=2), workload([0.0], [10], [0], budget=100), c, mode="colocated",
                 routing="balanced")
    assert r["makespan_s"] == pytest.approx(3.5)
    assert r["ffn_utilisation"] == pytest.approx(1.0 / 3.5)  # each device 1.0 of experts over 3.5 s
    assert r["work_items"] == 2  # one collective, one expert launch per device


def test_colocated_refuses_what_it_does_not_model():
    m = shape(experts=2)
    c = costs(w1={"fixed_s": 1.0})
    wl = workload([0.0], [4], [0], budget=100)
    with pytest.raises(ValueError, match="D must equal F"):
        simulate(m, SimTopology(D=2, F=1), wl, c, mode="colocated")
    with pytest.raises(ValueError, match="P = 1"):
        simulate(m, SimTopology(D=2, F=2, P=2), wl, c, mode="colocated")
    with pytest.raises(ValueError, match="batch-items"):
        simulate(m, SimTopology(D=1, F=1), wl, c, mode="colocated", batch_rows=64)


def test_cli_compares_afd_with_colocated_at_equal_devices(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert sim_cli.main(["--model", "tiny", "--costs", "twin-cpu", "-D", "2", "-F", "2", "--requests", "8",
                         "--mean-len", "32", "--max-len", "64", "--rates", "4", "--slo", "5", "--mode", "all",
                         "--json", str(out), "--quiet"]) == 0
    res = json.loads(out.read_text())
    modes = {r["mode"]: r for r in res["runs"]}
    assert set(modes) == {"async", "sync", "colocated"}
    assert modes["colocated"]["devices"] == modes["async"]["devices"] == 4
    assert modes["colocated"]["topology"]["D"] == modes["colocated"]["topology"]["F"] == 4
    vs = res["summary"]["afd_over_colocated"]
    assert {v["mode"] for v in vs} == {"async", "sync"} and all(v["devices"] == 4 for v in vs)
    with pytest.raises(SystemExit):
        sim_cli.main(["--mode", "colocated,bogus"])
    assert "unknown mode 'bogus'" in capsys.readouterr().err


def test_load_axis_bisects_the_colocated_baseline(tmp_path, capsys):
    # --loads: the base rate is the highest rate the colocated baseline sustains (>= 90% within the SLO): the
    # baseline run at load 1 meets it, and the bisection's lowest failing rate is within 1/256 of its bracket above.
    out = tmp_path / "loads.json"
    # twin-cpu costs the FFN work only; batches of at most 64 tokens make a closed batch several steps long, so the
    # closed batch misses a 10 ms SLO and the sustained rate is finite.
    argv = ["--model", "tiny", "--costs", "twin-cpu", "-D", "2", "-F", "2", "--requests", "60", "--mean-len", "48",
            "--max-len", "256", "--token-budget", "64", "--slo", "0.01", "--loads", "0.5,1,2", "--mode", "all",
            "--json", str(out)]
    if importlib.util.find_spec("matplotlib") is not None:
        argv += ["--plot-dir", str(tmp_path / "plots")]
    assert sim_cli.main(argv) == 0
    printed = capsys.readouterr().out
    res = json.loads(out.read_text())
    la = res["load_axis"]
    assert la["slo_s"] == 0.01 and la["sustain"] == 0.9 and f"sustains {la['rate_req_s']:.4g} req/s" in printed
    assert {(r["mode"], r["load"]) for r in res["runs"]} == {(m, x) for m in ("async", "sync", "colocated")
                                                              for x in (0.5, 1.0, 2.0)}
    for r in res["runs"]:
        assert r["rate"] == pytest.approx(r["load"] * la["rate_req_s"])
    base = next(r for r in res["runs"] if r["mode"] == "colocated" and r["load"] == 1.0)
    assert base["slo"]["compliant_fraction"] >= 0.9
    failed = [t["rate_req_s"] for t in la["bisection"] if t["slo_attainment"] < 0.9]
    assert failed and min(failed) > la["rate_req_s"]
    assert min(failed) - la["rate_req_s"] <= la["closed_batch_req_s"] * 2 ** 10 / 256
    if "--plot-dir" in argv:
        assert (tmp_path / "plots" / "slo_vs_load.png").read_bytes().startswith(b"\x89PNG")
    assert sim_cli.main(["--model", "tiny", "--loads", "1", "--quiet"]) == 2  # no --slo
    assert "--loads needs --slo" in capsys.readouterr().err
    loose = argv[:argv.index("--slo") + 1] + ["10"] + argv[argv.index("--slo") + 2:]
    assert sim_cli.main(loose + ["--quiet"]) == 2  # the closed batch meets it: any rate is sustained
    assert "sustains any rate" in capsys.readouterr().err
