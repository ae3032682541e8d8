"""cam-sim's serving-engine mechanisms (docs/sim.md §11), each against the engine behaviour it models.

Expected timelines are worked out by hand from the cited behaviour, not by running the simulator."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cam.sim import CostModel, ModelShape, OpCost, SimTopology, SimWorkload, simulate
from cam.sim import cli as sim_cli
from cam.sim.engine import attention_len2


def dense_model():
    # One dense layer (no MoE round): a step's time is its attention alone, which the tests cost by hand.
    return ModelShape(layers=1, first_dense=1, hidden=8, experts=4, top_k=1, moe_intermediate=8, shared_experts=0,
                      shared_intermediate=0, dense_intermediate=8, attn_params=0, attn_pair_flops=0)


def one_replica(mode):
    return SimTopology(D=1, F=1, ubatches=1)


def requests(lengths, budget, chunked):
    n = len(lengths)
    return SimWorkload(np.zeros(n), np.array(lengths, dtype=np.int64), np.zeros(n, dtype=np.int64),
                       token_budget=budget, chunked=chunked)


@pytest.mark.parametrize("mode", ["async", "sync", "colocated"])
def test_a_long_prompt_is_split_by_the_budget_and_its_ttft_is_its_last_chunks(mode):
    # vLLM's chunked prefill: per step at most max_num_batched_tokens (4) tokens; the partly prefilled request goes
    # first, waiting ones take what is left. Prompts A = 10, B = 3 tokens, both at t = 0; attention 1 s per token.
    # Steps: A[0:4] -> 4 s; A[4:8] -> 8 s; A[8:10] + B[0:2] -> 12 s (A's last chunk: TTFT 12); B[2:3] -> 13 s.
    c = CostModel({"attention": OpCost(per_token_s=1.0)}, name="test")
    r = simulate(dense_model(), one_replica(mode), requests([10, 3], 4, True), c, mode=mode, per_request=True)
    assert [r["ttft_per_request_s"][k] for k in "01"] == pytest.approx([12.0, 13.0])
    assert r["batches"] == 4
    # Without chunking the same budget runs A alone (10 tokens > 4), then B: TTFTs 10 and 13.
    r = simulate(dense_model(), one_replica(mode), requests([10, 3], 4, False), c, mode=mode, per_request=True)
    assert [r["ttft_per_request_s"][k] for k in "01"] == pytest.approx([10.0, 13.0])
    assert r["batches"] == 2


@pytest.mark.parametrize("mode", ["async", "colocated"])
def test_a_chunks_attention_grows_with_the_context_already_processed(mode):
    # Attention's quadratic term costs per_len2_s per unit of len2 = 2 x causal (query, key) pairs. A chunk of c
    # tokens after p processed ones has c*p + c^2/2 pairs: len2 = c^2 + 2cp. Same steps as above, per_len2_s = 1:
    # A[0:4]: 16; A[4:8]: 16 + 2*4*4 = 48; A[8:10] + B[0:2]: (4 + 2*2*8) + 4 = 40; B[2:3]: 1 + 2*1*2 = 5.
    # A: 16 + 48 + 40 = 104; B: 109. (Counting the chunk alone would give A 16 + 16 + 8 = 40.)
    c = CostModel({"attention": OpCost(per_len2_s=1.0)}, name="test")
    r = simulate(dense_model(), one_replica(mode), requests([10, 3], 4, True), c, mode=mode, per_request=True)
    assert [r["ttft_per_request_s"][k] for k in "01"] == pytest.approx([104.0, 109.0])
    # A prompt's chunks together hold exactly its causal pairs, however it is cut.
    assert attention_len2([4, 4, 2], [0, 4, 8]) == 10 * 10
    assert attention_len2([3, 3, 3, 1], [0, 3, 6, 9]) == 10 * 10


def test_engine_defaults_set_the_budget_and_chunking(tmp_path):
    # --engine vllm: chunked prefill with vLLM's max_num_batched_tokens (8192) unless --token-budget is given;
    # --engine none (the default) keeps whole-prompt batches of 16384 tokens.
    def run(*extra):
        out = tmp_path / "r.json"
        assert sim_cli.main(["--model", "tiny", "--costs", "twin-cpu", "-D", "1", "-F", "1", "--requests", "4",
                             "--lengths", "fixed", "--mean-len", "20000", "--max-len", "20000", "--mode", "async",
                             "--json", str(out), "--quiet", *extra]) == 0
        return json.loads(out.read_text())["runs"][0]
    assert "chunked" not in run()["workload"] and "token budget 16384" in run()["workload"]
    assert "token budget 8192 (chunked prefill)" in run("--engine", "vllm")["workload"]
    assert run("--engine", "vllm")["batches"] == 10  # 80,000 tokens in steps of 8192
    assert "token budget 1000 (chunked prefill)" in run("--engine", "vllm", "--token-budget", "1000")["workload"]


def test_mla_re_expands_the_cached_context_of_every_chunk():
    # vLLM's MLA prefill over a cached context up-projects the context's latent KV (kv_b_proj) once per chunk:
    # context_flops_per_token FLOPs per cached token, besides the (query, key) pairs. Attention at 1 FLOP/s,
    # attn_pair_flops 2, context 1 FLOP per cached token; one prompt of 6 tokens, budget 4:
    # step 1: 4 tokens, p = 0: 2 * 16 / 2 = 16; step 2: 2 tokens, p = 4: 2 * (4 + 16) / 2 + 4 = 24. TTFT 40.
    m = ModelShape(layers=1, first_dense=1, hidden=8, experts=4, top_k=1, moe_intermediate=8, shared_experts=0,
                   shared_intermediate=0, dense_intermediate=8, attn_params=0, attn_pair_flops=2,
                   context_flops_per_token=1)
    c = CostModel({"attention": OpCost(tflops=1e-12)}, name="test")
    r = simulate(m, one_replica("async"), requests([6], 4, True), c, per_request=True)
    assert r["ttft_per_request_s"]["0"] == pytest.approx(40.0)
    # DeepSeek-V3 (config.json): kv_lora_rank 512, 128 heads, qk_nope_head_dim 128, v_head_dim 128.
    from cam.sim.shapes import DEEPSEEK_V3
    assert DEEPSEEK_V3.context_flops_per_token == 2 * 512 * 128 * (128 + 128)


def tp_costs():
    # Attention 0.1 s per token of a rank; the TP collective at 160 bytes/s (net_gbps 1.6e-7), nothing else costs.
    return CostModel({"attention": OpCost(per_token_s=0.1), "tp_all_reduce": OpCost(net_gbps=1.6e-7)}, name="test")


@pytest.mark.parametrize("mode", ["async", "sync", "colocated"])
def test_tp_inside_a_replica_adds_its_all_reduce(mode):
    # One 10-token prompt, H = 8, a replica of P = 2 tensor-parallel ranks. Each rank's attention covers half the
    # work (0.5 s); the row-parallel projection ends in a ring all-reduce of the micro-batch's bf16 activations
    # (10 * 8 * 2 = 160 B), of which 2 (P-1)/P = 160 B leave each rank: 1 s. Dense layer: + the MLP's all-reduce,
    # 1 s: 2.5 s. MoE layer (the experts free): attention 0.5 + all-reduce 1, then the all-gather of the combined
    # rows, (P-1)/P * 160 = 80 B: 0.5 s: 2.0 s. On AFD the replica's 2 ranks are Attention ranks (F = 1 FFN rank);
    # colocated they are 2 of the F = 2 devices, each an expert shard.
    F = 2 if mode == "colocated" else 1
    dense = dense_model()
    moe = ModelShape(layers=1, first_dense=0, hidden=8, experts=2, top_k=1, moe_intermediate=8, shared_experts=0,
                     shared_intermediate=0, dense_intermediate=8, attn_params=0, attn_pair_flops=0)
    wl = requests([10], 100, False)
    for model, expect in ((dense, 2.5), (moe, 2.0)):
        r = simulate(model, SimTopology(D=1, F=F, P=2, ubatches=1), wl, tp_costs(), mode=mode, routing="balanced")
        assert r["makespan_s"] == pytest.approx(expect)
        # TP 1: no collective, the whole attention on one rank.
        r1 = simulate(model, SimTopology(D=F, F=F, ubatches=1) if mode == "colocated" else
                      SimTopology(D=1, F=1, ubatches=1), wl, tp_costs(), mode=mode, routing="balanced")
        assert r1["makespan_s"] == pytest.approx(1.0)


def test_colocated_baseline_runs_each_dp_x_tp_and_compares_afd_with_the_best(tmp_path):
    # --colocated-tp 1,2,4 on 4 devices: DP4xTP1, DP2xTP2, DP1xTP4, each an expert shard per device; AFD's
    # comparison takes, per rate, the colocated run with the highest SLO-compliant throughput.
    out = tmp_path / "r.json"
    assert sim_cli.main(["--model", "tiny", "--costs", "twin-cpu", "-D", "2", "-F", "2", "--requests", "8",
                         "--mean-len", "32", "--max-len", "64", "--rates", "4", "--slo", "5", "--mode",
                         "async,colocated", "--colocated-tp", "1,2,4", "--json", str(out), "--quiet"]) == 0
    res = json.loads(out.read_text())
    colo = [r for r in res["runs"] if r["mode"] == "colocated"]
    assert sorted((r["topology"]["D"], r["topology"]["P"]) for r in colo) == [(1, 4), (2, 2), (4, 1)]
    assert all(r["devices"] == 4 and r["topology"]["F"] == 4 for r in colo)
    best = max(colo, key=lambda r: r["slo"]["goodput_tok_s"])
    (vs,) = res["summary"]["afd_over_colocated"]
    assert vs["colocated_tp"] == best["topology"]["P"]
    with pytest.raises(ValueError, match="--colocated-tp 3"):
        sim_cli.simulate_grid(sim_cli._parse(["--model", "tiny", "--costs", "twin-cpu", "-D", "2", "-F", "2",
                                              "--mode", "colocated", "--colocated-tp", "3"]))


def overlap_case(overlap, split="tokens", field="makespan_s"):
    # N = 2 devices, one MoE layer, E = 2 (an expert per device), top-1, balanced routing; one 4-token prompt per
    # device, token-split into two micro-batches of 2 tokens. Attention 1 s per micro-batch, each all-to-all 1 s,
    # the experts 1 s per launch, nothing else.
    m = ModelShape(layers=1, first_dense=0, hidden=8, experts=2, top_k=1, moe_intermediate=8, shared_experts=0,
                   shared_intermediate=0, dense_intermediate=8, attn_params=0, attn_pair_flops=0)
    c = CostModel({"attention": OpCost(fixed_s=1.0), "w1": OpCost(fixed_s=1.0), "all_to_all": OpCost(fixed_s=1.0)},
                  name="test")
    wl = SimWorkload(np.zeros(2), np.array([4, 4]), np.array([0, 1]), token_budget=100)
    topo = SimTopology(D=2, F=2, ubatch_split=split, overlap=overlap)
    return simulate(m, topo, wl, c, mode="colocated", routing="balanced")[field]


def test_colocated_overlaps_one_micro_batchs_all_to_all_with_the_others_compute():
    # DeepSeek-V3's prefill overlaps the attention and MoE of one micro-batch with the dispatch and combine of the
    # other. Compute stream: attn0 [0,1], attn1 [1,2], experts0 [2,3] (dispatch0 [1,2]), experts1 [3,4] (dispatch1
    # [2,3]); communication stream: combine0 [3,4], combine1 [4,5]: the layer ends at 5 s.
    assert overlap_case(True) == pytest.approx(5.0)
    # Serialised on one timeline (today's schedule), each micro-batch takes 1 + 1 + 1 + 1: 8 s.
    assert overlap_case(False) == pytest.approx(8.0)
    # Split by requests, one prompt per device is one micro-batch: nothing to overlap, 4 s either way.
    assert overlap_case(True, "requests") == overlap_case(False, "requests") == pytest.approx(4.0)


def test_token_split_cuts_the_steps_tokens_into_equal_spans():
    from cam.sim.workload import split_pieces
    # A 10-token and a 3-token prompt: 13 tokens in spans of 6 and 7; the long prompt's second part attends to its
    # first 6 tokens.
    assert split_pieces([(0, 10, 0), (1, 3, 0)], 2, "tokens") == [[(0, 6, 0)], [(0, 4, 6), (1, 3, 0)]]
    assert split_pieces([(0, 1, 0)], 2, "tokens") == [[(0, 1, 0)]]
    assert split_pieces([(0, 10, 0), (1, 3, 0)], 2, "requests") == [[(0, 10, 0)], [(1, 3, 0)]]


def test_engine_presets_set_the_micro_batch_split_and_the_colocated_overlap(tmp_path):
    def topo(*extra):
        out = tmp_path / "r.json"
        assert sim_cli.main(["--model", "tiny", "--costs", "twin-cpu", "-D", "1", "-F", "1", "--requests", "2",
                             "--mean-len", "32", "--max-len", "64", "--mode", "async,colocated", "--json", str(out),
                             "--quiet", *extra]) == 0
        return {r["mode"]: r["topology"] for r in json.loads(out.read_text())["runs"]}
    t = topo()
    assert t["async"]["ubatch_split"] == t["colocated"]["ubatch_split"] == "requests"
    assert not t["colocated"]["overlap"]
    t = topo("--engine", "vllm-afd-recipe")
    assert t["async"]["ubatch_split"] == "tokens" and t["colocated"]["overlap"] and not t["async"]["overlap"]
    t = topo("--engine", "vllm-afd-recipe", "--colocated-overlap", "off", "--ubatch-split", "requests")
    assert t["async"]["ubatch_split"] == "requests" and not t["colocated"]["overlap"]


@pytest.mark.parametrize("mode", ["async", "sync", "colocated"])
def test_every_engine_step_pays_the_engines_overhead(mode):
    # The chunked case above (4 steps: TTFTs 12 and 13 s) with 0.5 s of host time before each step: A's last chunk
    # ends after 3 steps (12 + 1.5), B's after 4 (13 + 2).
    c = CostModel({"attention": OpCost(per_token_s=1.0)}, name="test")
    r = simulate(dense_model(), one_replica(mode), requests([10, 3], 4, True), c, mode=mode, per_request=True,
                 step_overhead_s=0.5)
    assert [r["ttft_per_request_s"][k] for k in "01"] == pytest.approx([13.5, 15.0])
    assert r["critical_path_s"] <= r["makespan_s"] + 1e-9


def test_step_overhead_flag_is_checked(capsys):
    assert sim_cli.main(["--step-overhead", "nan"]) == 2
    assert "--step-overhead" in capsys.readouterr().err


def test_the_critical_path_has_one_definition_in_every_mode():
    # max(longest replica chain, busiest device's work). Colocated, a device takes part in every collective: on one
    # timeline its work is attention 2 + experts 2 + four 1 s all-to-alls = 8 s, the makespan (nothing contends);
    # with the overlap its compute (4 s) and the collectives (4 s) run beside each other: bound 4 s <= 5 s.
    assert overlap_case(False, field="critical_path_s") == pytest.approx(8.0)
    assert overlap_case(True, field="critical_path_s") == pytest.approx(4.0)
    # AFD, one replica and nothing contending: the replica's chain is the schedule (tests/test_sim.py's timelines).
    c = CostModel({"attention": OpCost(per_token_s=1.0)}, name="test")
    r = simulate(dense_model(), one_replica("async"), requests([10, 3], 4, True), c)
    assert r["critical_path_s"] == pytest.approx(r["makespan_s"]) == pytest.approx(13.0)


def test_model_json_refuses_unknown_and_missing_fields_by_name(tmp_path, capsys):
    from cam.sim.shapes import DEEPSEEK_V3
    good = DEEPSEEK_V3.to_dict()
    cases = [(dict(good, num_heads=128), "unknown field(s) ['num_heads']"),
             ({k: v for k, v in good.items() if k != "top_k"}, "missing field(s) ['top_k']"),
             (dict(good, hidden="7168"), "field 'hidden' must be an integer"),
             ([1, 2], "expected a JSON object")]
    for i, (d, message) in enumerate(cases):
        path = tmp_path / f"m{i}.json"
        path.write_text(json.dumps(d))
        assert sim_cli.main(["--model-json", str(path), "--requests", "1", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "--model-json" in err and message in err, err
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert sim_cli.main(["--model-json", str(bad), "--requests", "1", "--quiet"]) == 2
    assert "not JSON" in capsys.readouterr().err
    # The optional field may be left out; a valid file runs.
    path = tmp_path / "ok.json"
    path.write_text(json.dumps({k: v for k, v in good.items() if k != "context_flops_per_token"}))
    assert ModelShape.from_dict(json.loads(path.read_text())).context_flops_per_token == 0


def test_the_study_preset_is_the_flags_of_the_public_measurements_setting(tmp_path, capsys):
    from cam.sim import serving
    argv = serving.expand_study(["--study", "afd-a3", "--requests", "8", "--loads", "1.0"])
    args = sim_cli._parse(argv)
    # The command line's own flags win; the rest is the setting (docs/sim.md §11).
    assert args.requests == 8 and args.loads == [1.0]
    assert (args.replicas, args.participants, args.ffn, args.mode) == (4, 2, 8, ["async", "sync", "colocated"])
    assert args.colocated_tp == [4, 2, 8] and args.engine == "vllm-afd-recipe" and sim_cli.token_budget(args) == 65536
    assert (args.mean_len, args.max_len, args.slo, args.sustain) == (10288, 63778, 10.0, 0.65)
    assert sim_cli.main(["--study", "bogus"]) == 2
    assert "--study must be one of ['afd-a3']" in capsys.readouterr().err


def test_two_stage_micro_batches_go_on_after_their_own_combine():
    # The AFD plugin's two-stage scheduler: s0 dispatch L, s1 dispatch L, s0 combine L, s0 dispatch L+1, s1 combine
    # L, s1 dispatch L+1, ... One replica, one FFN rank, two MoE layers, two requests (two micro-batches);
    # attention 1 s per micro-batch, the FFN work item 2 s, nothing else.
    m = ModelShape(layers=2, first_dense=0, hidden=8, experts=4, top_k=1, moe_intermediate=8, shared_experts=0,
                   shared_intermediate=0, dense_intermediate=8, attn_params=0, attn_pair_flops=0)
    c = CostModel({"attention": OpCost(fixed_s=1.0), "w1": OpCost(fixed_s=2.0)}, name="test")
    wl = SimWorkload(np.zeros(2), np.array([4, 4]), np.zeros(2, dtype=np.int64), token_budget=100)
    topo = SimTopology(D=1, F=1)
    # Layer by layer (cam-run's schedule): A0 [0,1] A1 [1,2]; FFN r0 [1,3] r1 [3,5]; layer 1 waits for r1:
    # A0 [5,6] A1 [6,7]; FFN [6,8] [8,10]: 10 s.
    r = simulate(m, topo, wl, c, routing="balanced")
    assert r["makespan_s"] == pytest.approx(10.0)
    # Two-stage: combine 0 at 3, A0 of layer 1 [3,4] (round at 4), combine 1 at 5, A1 [5,6]; FFN: r2 [5,7],
    # r3 [7,9]: 9 s. Nothing else contends, so the chain is the schedule.
    r = simulate(m, topo, wl, c, routing="balanced", two_stage=True)
    assert r["makespan_s"] == pytest.approx(9.0)
    assert r["critical_path_s"] == pytest.approx(9.0)
    assert r["serving"]["two_stage"]
    # A single micro-batch has nothing to pipeline: 1 + 2 per layer either way.
    one = SimWorkload(np.zeros(1), np.array([4]), np.zeros(1, dtype=np.int64), token_budget=100)
    assert simulate(m, topo, one, c, two_stage=True)["makespan_s"] == simulate(m, topo, one, c)["makespan_s"] == \
        pytest.approx(6.0)


@pytest.mark.parametrize("seed", range(6))
def test_two_stage_runs_serve_every_request_and_respect_the_bound(seed):
    # Random deployments (chunked items, batched launches, token split, arrivals): every request is served, every
    # FFN rank consumes every round, and the critical-path bound stays below the makespan.
    rng = np.random.default_rng(seed)
    D, F, n = int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(3, 12))
    m = ModelShape(layers=3, first_dense=1, hidden=8, experts=4 * F, top_k=2, moe_intermediate=8, shared_experts=1,
                   shared_intermediate=8, dense_intermediate=8, attn_params=64, attn_pair_flops=8)
    c = CostModel({"attention": OpCost(fixed_s=0.01, per_token_s=0.002), "w1": OpCost(fixed_s=0.02, per_row_s=1e-3),
                   "shared": OpCost(fixed_s=0.005), "combine_recv": OpCost(fixed_s=0.001)}, name="test")
    wl = SimWorkload(np.sort(rng.uniform(0, 0.3, n)), rng.integers(1, 40, n), np.arange(n) % D, token_budget=32,
                     chunked=bool(seed % 2))
    topo = SimTopology(D=D, F=F, capacity=int(rng.integers(4, 40)), ubatch_split="tokens" if seed % 3 else "requests")
    # A row budget holds one work item (the serving path's rule): at least the capacity.
    r = simulate(m, topo, wl, c, two_stage=True,
                 batch_rows=max(topo.capacity, int(rng.integers(8, 64))) if seed % 2 else None,
                 per_request=True)
    assert len(r["ttft_per_request_s"]) == n and all(v > 0 for v in r["ttft_per_request_s"].values())
    assert r["critical_path_s"] <= r["makespan_s"] + 1e-9


def test_compressed_sparse_attention_counts_window_selected_and_compressed_rows():
    # 4 layers: 2 window-only, 1 CSA (ratio 2, top-1, indexer 1 FLOP per scored row), 1 HCA (ratio 4); window 2.
    # One 8-token prompt, queries seeing i = 1..8 keys: window min(i, 2) = 15 pairs per layer; CSA
    # min(1, i // 2) = 7 more, scoring i // 2 = 16 rows; HCA i // 4 = 6 more. Per layer on average:
    # 15 + (7 + 6) / 4 = 18.25 pairs and 16 / 4 = 4 indexer FLOPs. At 2 FLOPs per pair, 1 FLOP/s: 40.5 s a layer.
    m = ModelShape(layers=4, first_dense=4, hidden=8, experts=4, top_k=1, moe_intermediate=8, shared_experts=0,
                   shared_intermediate=0, dense_intermediate=8, attn_params=0, attn_pair_flops=2, attn_window=2,
                   csa_layers=1, csa_ratio=2, csa_topk=1, index_pair_flops=1, hca_layers=1, hca_ratio=4)
    c = CostModel({"attention": OpCost(tflops=1e-12)}, name="test")
    whole = simulate(m, one_replica("async"), requests([8], 100, False), c)["makespan_s"]
    assert whole == pytest.approx(4 * 40.5)
    # Chunked (4 + 4 tokens), the second chunk's queries see the first's keys: the same work in two steps.
    assert simulate(m, one_replica("async"), requests([8], 4, True), c)["makespan_s"] == pytest.approx(whole)


def test_deepseek_v4_flash_is_its_public_config_and_its_long_prompt_attention_is_not_mlas():
    from cam.sim.engine import attention_len2, sparse_attention
    from cam.sim.shapes import DEEPSEEK_V3, DEEPSEEK_V4_FLASH as v4
    assert (v4.layers, v4.hidden, v4.experts, v4.top_k, v4.moe_intermediate) == (43, 4096, 256, 6, 2048)
    # 64 query heads over one KV head of 512: scores and values; q_lora 1024, o_lora 1024 in 8 groups.
    assert v4.attn_pair_flops == 2 * 64 * 512 * 2
    assert v4.attn_params == 4096 * 1024 + 1024 * 64 * 512 + 4096 * 512 + 8 * (8 * 512) * 1024 + 8 * 1024 * 4096
    assert (v4.attn_window, v4.csa_layers, v4.hca_layers, v4.csa_topk) == (128, 21, 20, 512)
    # A 64k-token prompt: DeepSeek-V3's MLA pays for every causal pair; V4-Flash's window, 512 selected rows and
    # 1/128 compressed rows are about 20x fewer attention FLOPs per layer.
    n = 65536
    pairs, index = sparse_attention(v4, [n])
    v4_flops = pairs * v4.attn_pair_flops + index
    v3_flops = attention_len2([n]) / 2 * DEEPSEEK_V3.attn_pair_flops
    assert 15 < v3_flops / v4_flops < 25
    assert "deepseek-v4-flash" in sim_cli.model_presets()
