"""cam-run --checkpoint DIR: the main job (processes as ranks) on tiny random transformers checkpoints written with
save_pretrained here (DeepSeek-V3, DeepSeek-V4 and Qwen3-MoE; token ids only, no download), checked against the
single-process reference and against the transformers model itself run natively with the same dequantized experts.
DeepSeek-V4's: its hyper-connection residual taken from transformers' own decoder layer, and its clamped SwiGLU on
every FFN rank, on each path of the FFN loop; without the clamp the run fails its check."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch
import transformers

import test_integrations_deepseek_v4 as dsv4
from test_integrations_transformers import FAMILIES, _config, _init

RUN_TIMEOUT_S = 300  # the whole cam-run: four rank processes each loading the model, on a shared 2-CPU machine


def _deepseek_v4():
    """test_integrations_deepseek_v4's tiny DeepSeek-V4 (its swiglu_limit bites on a good share of W1's outputs;
    a hash-routed layer, then two top-k ones), with each of V4's attention kinds: sliding window only, compressed
    sparse (rate 4, with its indexer), and heavily compressed at rate 8, which these prompts (8 to 48 tokens) reach
    (the default 128 would compress nothing)."""
    config = dsv4._config()
    config.layer_types = ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"]
    config.compress_rates = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8}
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    _init(model, 0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in model.model.layers:
            block = layer.mlp
            if block.is_hash:  # the default table sends every token to expert 0 twice: give it distinct experts
                block.gate.tid2eid.copy_(torch.stack([torch.randperm(8, generator=g)[:2] for _ in range(128)]))
            else:
                block.gate.e_score_correction_bias.copy_(torch.randn(8, generator=g) * 0.1)
    return model


def _checkpoint(family, path):
    if family == "deepseek_v4":
        model = _deepseek_v4()
    else:
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(_config(family))
        _init(model, FAMILIES.index(family))
    model.save_pretrained(path)
    return str(path)


def _cam_run(path, tmp_path, *extra, python=(), env=None):
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, *python, "--checkpoint", path, "--check", "--requests", "4", "--quiet",
                           "--json", str(out), *extra], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          cwd=tmp_path, env=env)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


# DeepSeek-V4 on each path of the FFN loop, each a call site of the clamp: one work item at a time (ffn_compute),
# the batched receive (ffn_step) and the captured iteration replayed (capture_ffn).
@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("family, flags", [("deepseek_v3", ()), ("qwen3_moe", ()), ("deepseek_v4", ()),
                                           ("deepseek_v4", ("--batch-items",)), ("deepseek_v4", ("--graph",))],
                         ids=["deepseek_v3", "qwen3_moe", "deepseek_v4", "deepseek_v4-batch-items",
                              "deepseek_v4-graph"])
def test_cam_run_on_a_checkpoint_matches_native(family, flags, tmp_path):
    path = _checkpoint(family, tmp_path / family)
    proc, report = _cam_run(path, tmp_path, *flags, python=("-m", "cam.run.cli"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["checkpoint"] == os.path.abspath(path) and report["model"] is None
    assert report["requests"] == 4 and report["topology"]["E"] == 8 and report["topology"]["H"] == 64
    assert report["topology"]["L"] == (2 if family == "deepseek_v3" else 3)
    assert report["swiglu_limit"] == (dsv4.LIMIT if family == "deepseek_v4" else None)
    assert report["graph"] == ("--graph" in flags) and (report["batch_rows"] is not None) == ("--batch-items" in flags)
    check = report["check"]
    assert check["ok"] and check["reference_ok"], check
    native = check["native"]
    assert native["ok"] and native["requests"] == 4, native
    assert native["greedy_equal"] + native["greedy_near_ties"] == 4 and native["greedy_equal"] >= 3, native
    assert native["tokens_bounded"] > 0 and 0 < native["max_rel_diff"] < native["tolerance"]["max_rel_diff"]
    assert 0 < native["max_block_rel_diff"] < native["tolerance"]["max_block_rel_diff"]
    assert "native      PASS" in proc.stdout
    # What each rank read of the checkpoint: the Attention ranks (0, 1) the model without its routed experts, the
    # FFN ranks (2, 3) their own 4 of the 8 experts
    loaded = report["wall_s"]["loaded"]
    assert {r: set(x) for r, x in loaded.items()} == {"0": {"attention"}, "1": {"attention"}, "2": {"experts"},
                                                       "3": {"experts"}}, loaded
    assert [loaded[r]["experts"]["experts"] for r in ("2", "3")] == [4, 4]
    assert "loaded      attention model without routed experts" in proc.stdout


@pytest.mark.slow
@pytest.mark.e2e
def test_cam_run_fails_its_check_when_the_ffn_ranks_drop_the_clamp(tmp_path):
    """The same DeepSeek-V4 run with the FFN ranks serving the plain SwiGLU (the worker's limit replaced by None in
    the launcher before it forks the ranks, so only they compute without it): both comparisons fail on a numerical
    mismatch, the run exits 4 (check failed), nothing passes silently."""
    path = _checkpoint("deepseek_v4", tmp_path / "deepseek_v4")
    drop = ("import sys; from cam.run import cli, worker; worker.ffn_swiglu_limit = lambda model: None; "
            "sys.exit(cli.main(sys.argv[1:]))")
    # Forked ranks (the default where there is fork) inherit the patched worker.
    proc, report = _cam_run(path, tmp_path, python=("-c", drop), env=dict(os.environ, CAM_RUN_START="fork"))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    check = report["check"]
    assert report["swiglu_limit"] == dsv4.LIMIT  # what the launcher's model (the golden, native's) clamps with
    assert not check["ok"] and not check["reference_ok"], check
    assert check["max_rel_diff"] > 2 * check["tolerance"]["max_rel_diff"], check
    native = check["native"]
    assert not native["ok"] and native["max_rel_diff"] > 4 * native["tolerance"]["max_rel_diff"], native
    assert "check       FAIL" in proc.stdout and "native      FAIL" in proc.stdout


def _refused(argv, match):
    from cam.run import cli

    with pytest.raises(ValueError, match=match):
        cli.check_args(cli._parse(argv))


def test_checkpoint_flags_refused_by_name(tmp_path):
    _refused(["--checkpoint", str(tmp_path / "missing")], "--checkpoint .* is not a directory with a config.json")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mixtral"}))
    _refused(["--checkpoint", str(tmp_path)], "model_type 'mixtral' is not supported by cam-run")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "deepseek_v4", "swiglu_limit": -1.0}))
    _refused(["--checkpoint", str(tmp_path)], "swiglu_limit must be None or a number >= 0")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_moe", "hidden_act": "gelu"}))
    _refused(["--checkpoint", str(tmp_path)], "hidden_act")
    _refused(["--checkpoint", str(tmp_path), "--model", "tiny"], "--checkpoint replaces --model")
    _refused(["--checkpoint", str(tmp_path), "--cost-model"], "--cost-model with --checkpoint")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_moe"}))
    _refused(["--checkpoint", str(tmp_path)], r"no \*.safetensors")


def test_native_check_fails_on_a_layer_off_by_one(tmp_path):
    """The comparison with the engine can fail: the same CheckpointModel with its MoE layers' experts shifted by
    one (layer j computing with layer j+1's weights, the mistake the layer index invites) is outside the bound,
    while the model as loaded is within it."""
    from cam.run.checkpoint import CheckpointModel, native_check

    model = CheckpointModel(_checkpoint("qwen2_moe", tmp_path / "q2"))
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 128, (n,), generator=g) for n in (9, 14)]
    good = native_check(model, prompts, model.forward_reference(prompts))
    assert good["ok"] and good["tokens_bounded"] > 0, good
    for name in ("w1", "w1_scale", "w2", "w2_scale"):
        ws = getattr(model, name)
        setattr(model, name, ws[1:] + ws[:1])
    bad = native_check(model, prompts, model.forward_reference(prompts))
    assert not bad["ok"] and bad["max_block_rel_diff"] > 10 * good["max_block_rel_diff"], (good, bad)


@pytest.mark.parametrize("family", ["deepseek_v3", "deepseek_v4", "qwen2_moe", "qwen3_moe"])
def test_each_rank_reads_only_its_part(family, tmp_path):
    """An Attention rank's transformers model is everything of the checkpoint but the routed experts, which stay on
    the meta device (unread, unallocated, a call refused by name), the shared expert, routers and attention equal
    to a whole load's; an FFN rank reads only its own experts, equal to the same experts of a whole load."""
    from cam.run.checkpoint import _load_native, load_model

    path = _checkpoint(family, tmp_path / family)
    whole = _load_native(path)
    model = load_model(path)
    hf = model.hf
    state, full = hf.state_dict(), whole.state_dict()
    routed = sorted(k for k, t in state.items() if t.is_meta)
    assert routed and all(".mlp.experts." in k for k in routed), routed
    assert not any(".mlp.experts." in k for k, t in state.items() if not t.is_meta)
    for key, t in state.items():
        if not t.is_meta:
            assert torch.equal(t, full[key]), key
    expert_bytes = sum(full[k].numel() * full[k].element_size() for k in routed)
    assert model.loaded["attention"]["bytes"] == sum(t.numel() * t.element_size() for t in full.values()) - \
        expert_bytes
    assert any(".shared_expert" in k for k in state) == (family != "qwen3_moe")
    with pytest.raises(RuntimeError, match="routed experts are not loaded"):
        block = next(iter(model.blocks.values()))
        block.experts(torch.zeros(2, 64), torch.zeros(2, 2, dtype=torch.long), torch.ones(2, 2))
    # An FFN rank of 2 (experts 4..7 of 8), then the launcher's whole build
    mine = model.routed_weights(4, 4)
    assert model.loaded["experts"]["experts"] == 4
    assert model.loaded["experts"]["bytes"] == expert_bytes // 2
    assert "w1" not in model.__dict__  # nothing of the other experts was built
    every = load_model(path).routed_weights(0, 8)
    for got, want in zip(mine, every):
        for g, w in zip(got, want):
            assert torch.equal(g, w[4:8])


@pytest.mark.slow
@pytest.mark.e2e
def test_cam_run_prints_one_line_per_phase_and_no_progress_bar(tmp_path):
    """Without --quiet the launcher says each phase once, in order, with the seconds since the command started;
    nothing of transformers' progress bars reaches the output (the ranks' model loads, the launcher's --check)."""
    from cam.run.cli import PHASES

    path = _checkpoint("deepseek_v3", tmp_path / "deepseek_v3")
    proc = subprocess.run([sys.executable, "-m", "cam.run.cli", "--checkpoint", path, "--check", "--requests", "2"],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [re.fullmatch(r"cam-run: +(\d+\.\d\d) s  ([a-z ]+)(: .*)?", line)
             for line in proc.stdout.splitlines() if line.startswith("cam-run: ")]
    assert all(lines), proc.stdout
    assert [m.group(2) for m in lines] == list(PHASES), proc.stdout
    seconds = [float(m.group(1)) for m in lines]
    assert seconds == sorted(seconds) and seconds[0] > 0, proc.stdout
    for bar in ("Loading weights", "it/s]", "%|"):
        assert bar not in proc.stdout + proc.stderr, (bar, proc.stderr)


def test_joined_ranks_counts_the_joined_states():
    """The launcher's "joined" phase: the ranks whose join status (cam.rank_status) says joined, read through the
    run's signed store as the ranks write it."""
    from cam.rank_status import StatusPublisher
    from cam.run.cli import joined_ranks
    from cam.serve.store import SignedStore

    store = SignedStore(torch.distributed.HashStore(), b"s" * 32, "afd")
    pubs = [StatusPublisher(store, "afd", "attention" if r < 2 else "ffn", 1000 + r, r, {"D": 2}) for r in range(4)]
    try:
        assert joined_ranks(store, "afd") == 0
        for pub in pubs[:3]:
            pub.set_state("joining")
        pubs[0].set_state("joined")
        pubs[2].set_state("joined")
        assert joined_ranks(store, "afd") == 2
        assert joined_ranks(store, "other") == 0
    finally:
        for pub in pubs:
            pub.close()


@pytest.fixture(scope="module")
def deepseek_v4(tmp_path_factory):
    return _checkpoint("deepseek_v4", tmp_path_factory.mktemp("deepseek_v4"))


def _prompts(lengths=(9, 20, 48)):
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 128, (n,), generator=g) for n in lengths]


def test_deepseek_v4_pieces_are_the_native_decoder_layers(deepseek_v4):
    """DeepseekV4CheckpointModel's pieces against transformers' own forward, layer by layer, bit for bit: on each
    native decoder layer's input, pre_moe gives the native MoE block's input (as the bf16 the experts get), and
    moe_output of the native block's output gives the native layer's output; the embedding and the final hc_head and
    norm are the model's. So the residual (hyper-connection streams mixed by Sinkhorn weights, comb transposed) is the
    engine's, not a guess; only the routed experts' numerics are cam's."""
    from cam.run.checkpoint import CheckpointModel, DeepseekV4CheckpointModel, _load_native, load_model

    model = load_model(deepseek_v4)
    assert type(model) is DeepseekV4CheckpointModel and model.swiglu_limit == dsv4.LIMIT
    with pytest.raises(ValueError, match="CheckpointModel runs model_type .*, not 'deepseek_v4'"):
        CheckpointModel(deepseek_v4)  # the plain residual's class never runs V4's layers
    native = _load_native(deepseek_v4)
    seen = []
    hooks = [m.register_forward_hook(lambda mod, args, kwargs, out: seen.append(
        (args[0][0], out[0], kwargs.get("input_ids"))), with_kwargs=True)
        for layer in native.model.layers for m in (layer, layer.mlp)]
    try:
        with torch.no_grad():
            for tokens in _prompts():
                seen.clear()
                want = native.model(input_ids=tokens[None]).last_hidden_state[0]
                # A layer's hook fires after its MoE block's: per layer, the block's record, then the layer's.
                assert torch.equal(model.embed_tokens(tokens), seen[1][0])
                for layer in range(3):
                    (h, routed_and_shared, ids), (x, out, _) = seen[2 * layer], seen[2 * layer + 1]
                    assert torch.equal(ids[0], tokens)
                    state, h_bf16, _, _ = model.pre_moe(layer, x, [tokens.numel()], tokens)
                    assert torch.equal(h_bf16, h.to(torch.bfloat16)), layer
                    zero = torch.zeros_like(h_bf16)
                    assert torch.equal(model.moe_output(layer, state, zero, routed_and_shared), out), layer
                assert torch.equal(model.finish(seen[-1][1]), want)
    finally:
        for hook in hooks:
            hook.remove()


def test_native_check_fails_without_the_clamp(deepseek_v4):
    """The comparison with the engine sees the clamp: cam's outputs computed with the plain SwiGLU on the routed
    experts (what FFN ranks that dropped the limit would return) are far outside the bound, while the outputs with
    the checkpoint's limit are within it. A hash-routed layer needs the token ids: pre_moe refuses a batch without."""
    from cam.run.checkpoint import load_model, native_check

    model = load_model(deepseek_v4)
    prompts = _prompts()
    good = native_check(model, prompts, model.forward_reference(prompts))
    assert good["ok"] and good["tokens_bounded"] > 0 and good["max_rel_diff"] > 0, good
    model.swiglu_limit = None
    plain = model.forward_reference(prompts)
    model.swiglu_limit = dsv4.LIMIT
    bad = native_check(model, prompts, plain)
    assert not bad["ok"] and bad["max_rel_diff"] > 10 * good["max_rel_diff"], (good, bad)
    with pytest.raises(ValueError, match="tokens must hold the batch's 9 token ids"):
        model.pre_moe(0, model.embed_tokens(prompts[0]), [9])


def test_native_check_stops_at_an_indexer_flip(deepseek_v4):
    """DeepSeek-V4's lightning indexer (its compressed-sparse-attention layer) picks the top index_topk compressed
    blocks each query attends to: a discrete choice like a router's, which a near-tie flips under cam's int8
    activations once a prompt has more compressed blocks than index_topk (8 here: more than 32 tokens). On this
    96-token prompt the first choice that differs from native's is an indexer's, no router's before it; the token
    where it does is far outside the W8A8 bound (other blocks attended, not a rounding), the tokens before it within.
    native_check bounds exactly those tokens and says the indexer flipped first."""
    from cam.run.checkpoint import W8A8_REL_BOUND, _load_native, load_model, native_check
    from test_integrations_transformers import _dequantize_experts

    model = load_model(deepseek_v4)
    prompt = torch.randint(0, 128, (96,), generator=torch.Generator().manual_seed(0))
    got = model.forward_reference([prompt])[0]
    result = native_check(model, [prompt], [got])
    assert result["ok"] and result["first_flip"] == {"router": 0, "indexer": 1}, result
    at = result["tokens_bounded"]
    assert 0 < at < 96 and result["tokens_after_a_flip"] == 96 - at, result
    native = _load_native(deepseek_v4)
    _dequantize_experts(native)
    with torch.no_grad():
        want = native.model(input_ids=prompt[None]).last_hidden_state[0]
    rel = (got - want).norm(dim=-1) / want.norm(dim=-1)
    assert float(rel[:at].max()) == pytest.approx(result["max_rel_diff"]) and result["max_rel_diff"] < W8A8_REL_BOUND
    assert float(rel[at]) > 2 * W8A8_REL_BOUND, (at, float(rel[at]))


class _Joined(Exception):
    """Raised by a stand-in connector: what the vLLM plugin would have joined the plane with."""


@pytest.mark.parametrize("family", ["deepseek_v3", "deepseek_v4", "qwen2_moe", "qwen3_moe"])
def test_every_route_reads_one_topology_from_a_checkpoint(family, tmp_path, monkeypatch):
    """Topology.from_checkpoint, Topology.from_config (on config.json, and nested as a wrapper's text_config),
    cam-run --checkpoint's plan, cam-ffn's and the vLLM plugin's topology are one Topology for each tiny family;
    the expected one is written from the writers' configs (8 experts, top 2, hidden 64; DeepSeek-V3's first layer
    dense)."""
    import cam
    from cam import connector as camconnector
    from cam import convert, ffn_server
    from cam.integrations import vllm as camvllm
    from cam.run import cli
    from cam.run.setup import plan

    path = _checkpoint(family, tmp_path / family)
    L = 2 if family == "deepseek_v3" else 3
    want = cam.Topology(D=2, P=1, F=2, E=8, K=2, H=64, Bmax=16, L=L)
    assert cam.Topology.from_checkpoint(path, D=2, F=2, Bmax=16) == want
    config = json.loads((tmp_path / family / "config.json").read_text())
    layers = convert.checkpoint_moe_layers(path)
    assert cam.Topology.from_config(config, moe_layers=layers, D=2, F=2, Bmax=16) == want
    assert cam.Topology.from_config(config, moe_layers=L, D=2, F=2, Bmax=16) == want
    nested = {"model_type": "wrapper", "text_config": config}
    assert cam.Topology.from_config(nested, moe_layers=layers, D=2, F=2, Bmax=16) == want
    # cam-run --checkpoint: the launcher's plan (its Bmax is the workload's, so compared field by field)
    run_topo = plan(cli._config(cli._parse(["--checkpoint", path, "--replicas", "2", "--ffn", "2"]),
                                str(tmp_path), 1))[1]
    assert (run_topo.E, run_topo.K, run_topo.H, run_topo.L, run_topo.F, run_topo.D) == (8, 2, 64, L, 2, 2)
    # cam-ffn
    args = ffn_server._parser().parse_args(["--checkpoint", path, "--rank", "2", "-D", "2", "-F", "2",
                                            "--max-tokens", "16"])
    assert ffn_server._load(args)[0].topology == want
    # the vLLM plugin, stopped where it would join the plane
    monkeypatch.setenv(camvllm.CONFIG_ENV, json.dumps({"rank": 0, "replicas": 2, "ffn_ranks": 2, "max_tokens": 16}))

    def joined(rank, role, cfg):
        raise _Joined(cfg.topology)

    monkeypatch.setattr(camconnector, "AsyncAFDConnector", joined)
    monkeypatch.setitem(camvllm._state, "plane", None)
    with pytest.raises(_Joined) as got:
        camvllm._plane(path)
    assert got.value.args[0] == want


def test_a_config_without_the_experts_count_is_refused_naming_the_keys(tmp_path):
    """The user's first try on a config that names no routed-expert count: an error naming the keys looked for,
    not "Topology.E must be an int, got None"; a string is said to be one; two keys that disagree are named."""
    import cam
    from cam.checkpoint_config import CheckpointConfigError

    base = {"model_type": "qwen3_moe", "hidden_size": 64, "num_experts_per_tok": 2}
    with pytest.raises(CheckpointConfigError, match="no n_routed_experts / num_local_experts / num_experts"):
        cam.Topology.from_config(base, moe_layers=2, D=1, F=2, Bmax=4)
    with pytest.raises(CheckpointConfigError, match="hidden_size is the string '64', not an int"):
        cam.Topology.from_config({**base, "num_experts": 8, "hidden_size": "64"}, moe_layers=2, D=1, F=2, Bmax=4)
    with pytest.raises(CheckpointConfigError, match="n_routed_experts = 8 and num_experts = 16 disagree"):
        cam.Topology.from_config({**base, "n_routed_experts": 8, "num_experts": 16}, moe_layers=2, D=1, F=2, Bmax=4)
    # F not dividing E: the contiguous table's ceil(E / F) slots
    assert cam.Topology.from_config({**base, "num_experts": 8}, moe_layers=2, D=1, F=3, Bmax=4).R == 3
    (tmp_path / "config.json").write_text(json.dumps(base))
    with pytest.raises(CheckpointConfigError, match=r"no \*.safetensors"):
        cam.Topology.from_checkpoint(str(tmp_path), D=1, F=2, Bmax=4)
