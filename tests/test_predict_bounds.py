"""Op bounds from semantics (cam/bench/bounds.py, docs/twin.md "Op bounds"), against goldens worked by hand for a
tiny plane, and the predict report's reading of a timing file (cam/bench/predict.py)."""

import glob
import json
import os
import re

import pytest
import torch

from cam.bench.bounds import ffn_chain_bound, op_bound, routing_stats
from cam.bench import predict

# 1 MAC/s cube, 100 B/s HBM, 10 B/s link: every term is easy to read.
DEV = {"aic_per_die": 1, "cube_int8_macs_per_cycle": 1, "core_clock_hz": 1, "hbm_bytes_per_s_die": 100,
       "link_bytes_per_s_rank": 10}
# 2 tokens, H 4, I 2, E 4 over F 2 (2 experts per rank), top-2: token 0 -> experts 0 (rank 0), 3 (rank 1);
# token 1 -> experts 1, 0 (both rank 0).
IDS = torch.tensor([[0, 3], [1, 0]], dtype=torch.int32)
SHAPE = dict(tokens=2, H=4, I=2, E=4, K=2, F=2)


def test_routing_stats_by_hand():
    s = routing_stats(IDS, E=4, F=2)
    assert s["rows"] == [3, 1]
    assert s["pairs"] == [2, 1]
    assert s["pairs_total"] == 3
    assert s["counts"] == [[2, 1], [0, 1]]


def test_empty_slots_route_nowhere():
    s = routing_stats(torch.tensor([[0, -1], [-1, -1]], dtype=torch.int32), E=4, F=2)
    assert s["rows"] == [1, 0] and s["pairs"] == [1, 0]


def _b(op, rank=0):
    s = routing_stats(IDS, E=4, F=2)
    return op_bound(op, **SHAPE, rows=s["rows"][rank], pairs=s["pairs"][rank], pairs_total=s["pairs_total"],
                    active_experts=sum(1 for c in s["counts"][rank] if c), device=DEV)


def test_bounds_by_hand():
    # dynamic_quant [2, 4]: 16 B bf16 in, 8 B int8 out, 8 B scales = 32 B over HBM.
    assert _b("dynamic_quant")["hbm_bytes"] == 32 and _b("dynamic_quant")["bound_s"] == pytest.approx(0.32)
    # dispatch_send: 3 (token, rank) rows of 4 + 4 bytes on the link = 24 B / 10 B/s.
    d = _b("dispatch_send")
    assert (d["link_bytes"], d["limit"]) == (24, "link") and d["bound_s"] == pytest.approx(2.4)
    # dispatch_recv on rank 0: 2 distinct tokens arrive (16 B ingress), 3 expert rows written (24 B) + 16 read.
    r = _b("dispatch_recv")
    assert (r["link_bytes"], r["hbm_bytes"]) == (16, 40) and r["bound_s"] == pytest.approx(1.6)
    # W1 on rank 0: 3 rows x H 4 x 2I 4 = 48 MACs at 1 MAC/s.
    w1 = _b("gmm_swiglu_quant_multi_layer")
    assert (w1["macs"], w1["limit"]) == (48, "cube") and w1["bound_s"] == pytest.approx(48)
    # W2 on rank 0: 3 x I 2 x H 4 = 24 MACs.
    assert _b("gmm_multi_layer")["macs"] == 24
    # combine_send on rank 0: 3 expert rows of 4 bf16 = 24 B out on the link.
    assert _b("combine_send")["link_bytes"] == 24
    # combine_recv: 2 tokens x 2 rows x 4 bf16 = 32 B in; HBM 32 + 16 out + 16 weights.
    c = _b("combine_recv")
    assert (c["link_bytes"], c["hbm_bytes"]) == (32, 64) and c["bound_s"] == pytest.approx(3.2)
    chain = {op: _b(op) for op in ("dispatch_recv", "gmm_swiglu_quant_multi_layer", "gmm_multi_layer",
                                   "combine_send")}
    assert ffn_chain_bound(chain) == pytest.approx(1.6 + 48 + 24 + 2.4)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="op 'gmm'"):
        op_bound("gmm", **SHAPE, rows=1, pairs=1, pairs_total=1, active_experts=1, device=DEV)
    with pytest.raises(ValueError, match="rows"):
        op_bound("dynamic_quant", **SHAPE, rows=-1, pairs=1, pairs_total=1, active_experts=1, device=DEV)


def _launch(kernel, device, l2, seconds, block_dim=2):
    return {"kernel": kernel, "device": device, "l2": l2, "block_dim": block_dim, "cube_blocks": 0,
            "seconds": seconds, "busy": {"S": seconds, "V": 0.5 * seconds}, "critical_busy": {"S": seconds,
            "V": 0.25 * seconds}, "critical_core": 0, "stalls": {"SyncAll": 1e-6}, "l2_hit_fraction": 0.5,
            "peer_waits": 0, "bandwidth_floor_seconds": 0.1 * seconds, "link_bytes": 0.0}


def test_report_sums_gmm_launches_and_takes_the_slowest_rank(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [{"constants": {"a3": {}, "a2": {}}}, {"marker": "gmm_multi_layer"},
             _launch("cam_gmm_split_int4", "a3", "lo", 3.0), _launch("cam_gmm_multi_layer", "a3", "lo", 1.0),
             {"marker": "plane"}, _launch("cam_dispatch_recv", "a3", "lo", 2.0),
             _launch("cam_dispatch_recv", "a3", "lo", 5.0), _launch("cam_dispatch_recv", "a3", "hi", 9.0)]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    parsed = predict._parse(str(path))
    w2 = predict._op_cost("gmm_multi_layer", parsed, "a3", "lo")
    assert w2["predicted_s"] == 4.0 and w2["launches"] == 2 and w2["critical_pipe"] == "S"
    assert predict._op_cost("dispatch_recv", parsed, "a3", "lo")["predicted_s"] == 5.0
    assert predict._op_cost("dispatch_send", parsed, "a3", "lo") is None


def test_with_several_attention_ranks_the_combine_is_costed_from_its_own_groups(tmp_path):
    # --attention 4: the plane section's combine launches are not the op's; combine_send's slowest work item in the
    # spread groups (3.0 s), combine_recv's slowest launch after them (4.0 s).
    path = tmp_path / "t.jsonl"
    lines = [{"constants": {"a3": {}, "a2": {}}}, {"marker": "plane"}, _launch("cam_dispatch_send", "a3", "lo", 1.0),
             _launch("cam_combine_send", "a3", "lo", 50.0), {"marker": "combine_spread"},
             _launch("cam_combine_send", "a3", "lo", 2.0), _launch("cam_combine_send", "a3", "lo", 3.0),
             {"marker": "combine_recv"}, _launch("cam_combine_recv", "a3", "lo", 4.0),
             _launch("cam_combine_recv", "a3", "lo", 1.5)]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    parsed = predict._parse(str(path))
    assert predict._op_cost("combine_send", parsed, "a3", "lo")["predicted_s"] == 3.0
    assert predict._op_cost("combine_recv", parsed, "a3", "lo")["predicted_s"] == 4.0
    assert predict._op_cost("dispatch_send", parsed, "a3", "lo")["predicted_s"] == 1.0
    # The shapes are cam-sim's models' (H, I, E, top-K), 8 FFN ranks each; deepseek-v3 is the record's default.
    assert predict.SHAPES["deepseek-v3"] == predict.SHAPE
    assert predict.SHAPES["deepseek-v4-flash"] == {"H": 4096, "I": 2048, "E": 256, "K": 6, "F": 8}


def test_link_floor_is_named_the_critical_resource():
    consts = {"link_bytes_per_s_rank": 10.0, "launch_seconds": 0.0}
    rec = _launch("cam_combine_send", "a3", "lo", 2.0)
    assert predict._critical(rec, consts) == "S"
    rec.update(bandwidth_floor_seconds=2.0, link_bytes=20.0)  # 20 B at 10 B/s: the whole launch
    assert predict._critical(rec, consts) == "link"
    rec.update(link_bytes=0.0)
    assert predict._critical(rec, consts) == "HBM/L2"


def test_a_launch_that_waited_on_peers_names_them():
    consts = {"link_bytes_per_s_rank": 10.0, "launch_seconds": 0.0}
    rec = _launch("cam_dispatch_recv", "a3", "lo", 2.0)
    rec["stalls"] = {"GM word landing": 0.9}  # less than half its time: its own pipes
    assert predict._critical(rec, consts) == "S"
    rec["stalls"] = {"GM word landing": 1.5}
    assert predict._critical(rec, consts) == "peers"


def test_routings_pick_k_distinct_experts_and_skew_loads_one_rank():
    for routing in ("uniform", "skewed"):
        ids = predict._ids(512, routing)
        assert ids.shape == (512, 8) and all(len(set(row.tolist())) == 8 for row in ids), routing
        assert int(ids.min()) >= 0 and int(ids.max()) < 256
    uniform = routing_stats(predict._ids(4096, "uniform"), E=256, F=8)["rows"]
    skewed = routing_stats(predict._ids(4096, "skewed"), E=256, F=8)["rows"]
    assert sum(uniform) == sum(skewed) == 4096 * 8
    assert max(skewed) > 1.5 * max(uniform)  # Zipf(1.2) puts about twice the uniform share on the hottest rank
    with pytest.raises(ValueError, match="routing 'zipf'"):
        predict._ids(4, "zipf")


def test_routing_stats_under_a_placement_by_hand():
    # token 0: expert 0 on (rank 1, slot 0), expert 3 on (rank 0, slot 1); token 1: both rows on (rank 1, slot 1).
    placed = torch.tensor([[[1, 0], [0, 1]], [[1, 1], [1, 1]]])
    s = routing_stats(IDS, E=4, F=2, placed=placed)
    assert s["rows"] == [1, 3] and s["pairs"] == [1, 2] and s["pairs_total"] == 3
    assert s["counts"] == [[0, 1], [1, 2]]


def test_routing_stats_counts_span_the_placements_slots_so_several_rounds_line_up():
    # One round uses slots 0..1 of each rank; a placement of 3 slots per rank: every rank's counts have 3 entries
    # (a round whose rows miss the last slot would otherwise give shorter lists, and zipping several Attention
    # ranks' counts would drop that slot's rows).
    placed = torch.tensor([[[1, 0], [0, 1]], [[1, 1], [1, 1]]])
    s = routing_stats(IDS, E=4, F=2, placed=placed, slots_per_rank=3)
    assert s["counts"] == [[0, 1, 0], [1, 2, 0]]
    assert [sum(c) for c in s["counts"]] == s["rows"]
    with pytest.raises(ValueError, match="slots_per_rank 1 is below the highest slot routed"):
        routing_stats(IDS, E=4, F=2, placed=placed, slots_per_rank=1)


def test_hottest_experts_by_hand():
    # loads: expert 2 x3, expert 0 x2, expert 5 x2, expert 1 x1; -1 is an empty slot, not an expert.
    ids = torch.tensor([[2, 0, -1], [2, 5, 1], [2, 0, 5]], dtype=torch.int32)
    assert predict.hottest(ids, E=6, count=3) == [2, 0, 5]  # 0 and 5 tie at 2 rows: the lower id first
    assert predict.hottest(ids, E=6, count=1) == [2]
    assert predict.hottest(ids, E=6, count=0) == []


def test_placed_routing_replicates_the_32_most_loaded_experts():
    assert predict.REPLICATED == 32  # the placement-table target's table
    ids = predict._ids(2048, "placed")
    load = torch.bincount(ids.flatten().to(torch.int64), minlength=256)
    p = predict._placement(ids, "placed")
    twice = [e for e in range(256) if len(p.replicas(0, e)) == 2]
    assert len(twice) == 32 and all(len(p.replicas(0, e)) == 1 for e in range(256) if e not in twice)
    # every replicated expert carries at least the load of every one left single
    assert min(int(load[e]) for e in twice) >= max(int(load[e]) for e in range(256) if e not in twice)
    assert p.slots_per_rank == (256 + 32) // 8
    assert len([e for e in range(256) if len(predict._placement(ids, "placed", replicated=8).replicas(0, e)) == 2]) == 8
    assert predict._placement(ids, "skewed") is None


def test_replicate_out_of_range_is_refused_naming_the_flag(capsys):
    from cam.bench import main as bench_main

    for bad in ("-1", "257"):
        with pytest.raises(SystemExit, match="--replicate"):
            bench_main(["predict", "--rounds", "8", "--routing", "placed", "--replicate", bad])


def test_bounds_at_two_attention_ranks_use_the_bounded_ranks_share():
    # Two Attention ranks of 2 tokens each (a 4-token round), H 4, I 2, E 4 over F 2, top-2.
    # Rank 0's ids [[0, 3], [1, 0]]: FFN rank 0 gets 3 rows / 2 tokens, FFN rank 1 1 row / 1 token: 3 pairs.
    # Rank 1's ids [[2, 3], [0, 1]]: FFN rank 0 gets 2 rows / 1 token, FFN rank 1 2 rows / 1 token: 2 pairs.
    # FFN rank 0 then holds 5 rows and 3 (token, rank) pairs in all, FFN rank 1 3 rows and 2.
    st = {"routing_stats": {"rows": [5, 3], "pairs": [3, 2], "pairs_total": 5}, "item_rows": [[3, 1], [2, 2]],
          "item_pairs_total": [3, 2], "critical_rank": 0, "critical_counts": [3, 2]}
    dims = dict(H=4, I=2, E=4, K=2, F=2)
    shapes = predict.bound_shapes(4, 2, dims, st)
    b = {op: op_bound(op, **shapes[op], device=DEV) for op in shapes}
    # dispatch_send, Attention rank 0 (the most pairs): 3 rows of 4 + 4 bytes = 24 B over 10 B/s, not the
    # round's 5 rows (4.0 s); its HBM 2 tokens x 4 x 2 B + 2 x 2 ids x 4 B = 32 B.
    assert (b["dispatch_send"]["link_bytes"], b["dispatch_send"]["hbm_bytes"]) == (24, 32)
    assert b["dispatch_send"]["bound_s"] == pytest.approx(2.4)
    # combine_recv: its 2 tokens x 2 rows x 4 x 2 B = 32 B in (the round's 4 tokens would be 64).
    assert b["combine_recv"]["link_bytes"] == 32 and b["combine_recv"]["bound_s"] == pytest.approx(3.2)
    # combine_send: the largest work item, 3 rows x 4 x 2 B = 24 B (FFN rank 0's 5 rows would be 40).
    assert b["combine_send"]["link_bytes"] == 24 and b["combine_send"]["bound_s"] == pytest.approx(2.4)
    # dynamic_quant on one rank's 2 tokens: 16 B in, 8 B out, 8 B scales.
    assert b["dynamic_quant"]["hbm_bytes"] == 32
    # The FFN side is the FFN rank's whatever the senders: dispatch_recv 3 pairs in (24 B), 5 rows written.
    assert (b["dispatch_recv"]["link_bytes"], b["dispatch_recv"]["hbm_bytes"]) == (24, 24 + 40)
    assert b["gmm_multi_layer"]["macs"] == 5 * 2 * 4
    # One Attention rank: every op on the round itself (5 pairs, 4 tokens).
    one = predict.bound_shapes(4, 1, dims, st)
    assert one["dispatch_send"]["pairs_total"] == 5 and one["combine_recv"]["tokens"] == 4
    assert one["combine_send"]["rows"] == 5


def test_chain_floor_with_one_attention_rank_by_hand():
    from cam.bench.bounds import ffn_chain_floor_one_sender

    b = {op: _b(op) for op in ("dispatch_send", "gmm_swiglu_quant_multi_layer", "gmm_multi_layer", "combine_recv")}
    # The Attention rank's egress carries all 3 (token, rank) rows of 8 B (2.4 s), W1 48 MACs (48 s), W2 24 (24 s),
    # its ingress 2 tokens x 2 rows x 4 bf16 (3.2 s): 77.6 s, above the chain bound's 1.6 + 48 + 24 + 2.4 = 76.
    assert ffn_chain_floor_one_sender(b) == pytest.approx(2.4 + 48 + 24 + 3.2)


def test_every_kernel_predict_names_is_a_kernel_the_library_declares():
    # A name left behind by a removed kernel costs nothing and traces nothing, silently: the default --trace would be
    # empty. Read from the checkout's kernel sources (an entry is `__global__ __aicore__ void cam_...`).
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    declared = set()
    for path in glob.glob(os.path.join(root, "kernels", "*", "*.cpp")):
        with open(path) as f:
            declared |= set(re.findall(r"__global__\s+__aicore__\s+void\s+(cam_\w+)", f.read()))
    assert "cam_gmm_multi_layer" in declared  # control: the scan finds the entries
    named = {k for kernels in predict._KERNELS.values() for k in kernels}
    assert named <= declared, f"predict.py names kernels no source declares: {sorted(named - declared)}"
    assert predict.TRACE_KERNEL in predict._KERNELS["gmm_swiglu_quant_multi_layer"]
