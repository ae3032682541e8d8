"""cam.integrations.transformers on transformers' own DeepSeek-V3, Qwen2-MoE and Qwen3-MoE classes: tiny random
checkpoints written with save_pretrained here (weights std 1/sqrt(fan_in), token ids only, no download), run through
the block adapter over an in-process cam plane (one Attention rank, two FFN ranks as threads serving with
cam.serve_ffn on weights loaded from the checkpoint by cam.convert), against the same model run natively."""

import pytest
import torch
import transformers

import cam
from cam import convert
from cam.connector import AsyncAFDConnector, ConnectorConfig
from cam.integrations import transformers as camtf

from _connector_harness import ServingFFNRanks

W8A8_REL_BOUND = 0.05  # docs/numerics.md, "W8A8 against the float model"
TIMEOUT_S = 60.0  # every rank's device waits and every join below
PROMPTS, SEQ = 4, 12


def _config(family):
    common = dict(vocab_size=128, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=64, num_experts_per_tok=2, moe_intermediate_size=32,
                  tie_word_embeddings=False)
    if family == "deepseek_v3":
        return transformers.DeepseekV3Config(
            **{**common, "num_key_value_heads": 4}, intermediate_size=96, n_routed_experts=8, n_shared_experts=1,
            first_k_dense_replace=1, n_group=2, topk_group=1, q_lora_rank=None, kv_lora_rank=32,
            qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, routed_scaling_factor=2.5, norm_topk_prob=True)
    if family == "qwen2_moe":
        return transformers.Qwen2MoeConfig(**common, intermediate_size=96, num_experts=8,
                                           shared_expert_intermediate_size=48, decoder_sparse_step=1,
                                           norm_topk_prob=False)
    return transformers.Qwen3MoeConfig(**common, intermediate_size=96, num_experts=8, head_dim=16,
                                       decoder_sparse_step=1,
                                       norm_topk_prob=True)


def _init(model, seed):
    """std 1/sqrt(fan_in) on every matrix (fan_in is the last dim in both nn.Linear's and HF's fused experts'
    orientation), so the MoE output neither vanishes nor explodes through the layers; norms stay ones."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)


FAMILIES = ["deepseek_v3", "qwen2_moe", "qwen3_moe"]


@pytest.fixture(scope="module", params=FAMILIES)
def checkpoint(request, tmp_path_factory):
    family = request.param
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_config(family))
    _init(model, FAMILIES.index(family))
    path = tmp_path_factory.mktemp(family)
    model.save_pretrained(path)
    return family, str(path)


def _load(path, dtype=torch.float32):
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()


def _dequantize_experts(model):
    """The native model with cam's int8 weights (dequantized): it then differs from cam only in the activations."""
    with torch.no_grad():
        for block in camtf.moe_blocks(model).values():
            ffn = convert.dequantized(convert.from_hf_module(block.experts))
            block.experts.gate_up_proj.copy_(ffn.w1.transpose(1, 2))
            block.experts.down_proj.copy_(ffn.w2.transpose(1, 2))


class World:
    """One Attention rank (this thread) and two FFN ranks (threads running cam.serve_ffn), in process, serving the
    checkpoint at ``path`` as cam-ffn would (its experts by cam.convert, its ``swiglu_limit``); ``graph`` and
    ``batched`` pick the FFN ranks' loop (a batch of up to two work items' rows)."""

    def __init__(self, path, tokens, group, *, graph=False, batched=False):
        layers, info = convert.load_checkpoint_experts(path)
        e, h = layers[0].num_experts, layers[0].hidden
        self.topo = cam.Topology(D=1, P=1, F=2, E=e, K=info["top_k"], H=h, Bmax=tokens, L=len(layers))
        self.cfg = ConnectorConfig(topology=self.topo, timeout_s=TIMEOUT_S, idle_poll_s=0.01, group=group,
                                   transport="in_process")
        self.store = torch.distributed.HashStore()
        self.layers, self.info = layers, info
        self.ffn = ServingFFNRanks(self.cfg, self.store, layers, timeout_s=TIMEOUT_S, graph=graph,
                                   row_budget=2 * self.topo.recv_rows if batched else None,
                                   swiglu_limit=info["swiglu_limit"])

    def __enter__(self):
        self.ffn.start()
        self.attention = AsyncAFDConnector(0, "attention", self.cfg)
        self.attention.init_afd_connector(self.store)
        self.attention.wait_ffn_serving(TIMEOUT_S)
        return self

    def __exit__(self, *exc):
        try:
            self.attention.finish()
        finally:
            try:
                self.ffn.join()
            finally:
                self.attention.close()
        assert not self.ffn.errors, self.ffn.errors
        assert all(r.reason == "attention finished" for r in self.ffn.results.values()), self.ffn.results


def _prompts(vocab):
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, vocab, (1, SEQ), generator=g) for _ in range(PROMPTS)]


def _same_greedy(got, want) -> bool:
    """True when the greedy tokens agree. A differing one is allowed only as a near-tie: the native logits of the
    two tokens are closer than twice this prompt's own largest logit difference (int8 activations move logits by
    about 1 % of their scale here, and the top two of 128 random logits are often closer than that); the logit
    difference itself must stay within the W8A8 bound. Returns False for an allowed near-tie."""
    err = float((got - want).abs().max())
    assert err / float(want.abs().max()) < W8A8_REL_BOUND, (got.topk(3), want.topk(3))
    a, b = int(want.argmax()), int(got.argmax())
    if a == b:
        return True
    assert float(want[a] - want[b]) <= 2 * err, ("greedy token differs beyond a near-tie", got.topk(3), want.topk(3))
    return False


def _rel(got, want):
    return float((got.float() - want.float()).norm() / want.float().norm())


def test_block_adapter_matches_native(checkpoint):
    family, path = checkpoint
    native = _load(path)
    native_q = _load(path)
    _dequantize_experts(native_q)
    model = _load(path)
    captured = []
    with World(path, SEQ, f"tf-{family}") as world, torch.no_grad():
        plane = camtf.AttentionPlane(world.attention, record=True)
        decoder_ids = camtf.wrap_moe_blocks(model, plane)
        for block in camtf.moe_blocks(model):
            model.model.layers[block].mlp.register_forward_hook(
                lambda mod, args, out: captured.append((mod.layer, args[0].detach().clone(), out.detach().clone())))
        exact = 0
        for prompt in _prompts(model.config.vocab_size):
            got = model(prompt).logits[0, -1]
            want = native_q(prompt).logits[0, -1]
            exact += _same_greedy(got, want)
        assert exact >= PROMPTS - 1, (family, exact)
    assert decoder_ids == ([1, 2] if family == "deepseek_v3" else [0, 1, 2])
    # Each block against the float model's own block on the same input: W8A8 error only.
    native_blocks = list(camtf.moe_blocks(native).values())
    worst = 0.0
    with torch.no_grad():
        for layer, x, out in captured:
            worst = max(worst, _rel(out, native_blocks[layer](x)))
    assert 0 < worst < W8A8_REL_BOUND, worst
    # The shared expert ran after the round was dispatched and before its combine was awaited: while the routed
    # work was remote. Qwen3-MoE has no shared expert.
    spans = plane.trace
    shared = [s for s in spans if s["name"] == "shared"]
    assert len(shared) == (0 if family == "qwen3_moe" else PROMPTS * len(decoder_ids))
    for s in shared:
        before = [d for d in spans
                  if d["name"] == "dispatch" and d["layer"] == s["layer"] and d["end_s"] <= s["start_s"]]
        after = [c for c in spans if c["name"] == "combine" and c["layer"] == s["layer"] and c["start_s"] >= s["end_s"]]
        assert before and after
        d, c = before[-1], after[0]
        assert [x for x in spans if d["end_s"] <= x["start_s"] and x["end_s"] <= c["start_s"]] == [s]


def _cam_ffn_world(path, group, store, secret, topo):
    """Two ``cam-ffn`` processes serving the checkpoint directory over shm (rank 1 eager, one work item per
    iteration; rank 2 replaying a captured batched iteration), as a user starts them."""
    import os
    import subprocess
    import sys

    common = ["--checkpoint", path, "-D", "1", "-F", "2", "--max-tokens", str(topo.Bmax), "--master-port",
              str(store.port), "--group", group, "--idle-poll", "0.02", "--timeout", str(TIMEOUT_S)]
    batched = ["--graph", "--row-budget", str(2 * topo.recv_rows)]
    env = dict(os.environ, CAM_RUN_SECRET=secret.hex())
    return [subprocess.Popen([sys.executable, "-m", "cam.ffn_server", "--rank", str(r), *common,
                              *(batched if r == 2 else [])], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env, stdin=subprocess.DEVNULL) for r in (1, 2)]


def test_block_adapter_with_cam_ffn_processes(checkpoint):
    """The same models with their FFN ranks as two ``cam-ffn`` processes over shm (about 4 s: each imports torch
    and cam): the last-position logits equal, bit for bit, those of the in-process world (same quantizer, same
    kernels, same row and combine order), so the greedy tokens equal native's as in the test above."""
    import os

    from cam.connector import loopback_store

    family, path = checkpoint
    model = _load(path)
    prompts = _prompts(model.config.vocab_size)
    with World(path, SEQ, f"tf-local-{family}") as world, torch.no_grad():
        camtf.wrap_moe_blocks(model, camtf.AttentionPlane(world.attention))
        want = [model(p).logits[0, -1] for p in prompts]
        topo = world.topo
    model = _load(path)
    store = loopback_store(0, TIMEOUT_S)
    secret = os.urandom(16)
    group = f"tf-proc-{family}"
    procs = _cam_ffn_world(path, group, store, secret, topo)
    try:
        cfg = ConnectorConfig(topology=topo, master_port=store.port, timeout_s=TIMEOUT_S, idle_poll_s=0.02,
                              group=group, secret=secret)
        attention = AsyncAFDConnector(0, "attention", cfg)
        attention.init_afd_connector(store)
        try:
            plane = camtf.AttentionPlane(attention, record=True)
            camtf.wrap_moe_blocks(model, plane)
            with torch.no_grad():
                got = [model(p).logits[0, -1] for p in prompts]
            attention.finish()
        finally:
            attention.close()
        outs = [p.communicate(timeout=TIMEOUT_S) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(TIMEOUT_S)
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr
        assert '"reason": "attention finished"' in stdout, stdout
    assert "graph replay" in outs[1][1] and "batches of up to" in outs[1][1]
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    assert len([s for s in plane.trace if s["name"] == "shared"]) == (0 if family == "qwen3_moe" else
                                                                       PROMPTS * len(camtf.moe_blocks(model)))


def test_experts_interface_local_and_over_the_plane():
    """transformers' own extension point: the registered "cam" experts run in process, and over a plane."""
    camtf.register()
    assert camtf.EXPERTS_IMPLEMENTATION in transformers.integrations.moe.ALL_EXPERTS_FUNCTIONS
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_config("qwen3_moe")).eval()
    _init(model, 7)
    native_q = transformers.AutoModelForCausalLM.from_config(_config("qwen3_moe")).eval()
    native_q.load_state_dict(model.state_dict())
    _dequantize_experts(native_q)
    model.set_experts_implementation(camtf.EXPERTS_IMPLEMENTATION)
    prompts = _prompts(model.config.vocab_size)
    with torch.no_grad():
        want = [native_q(p).logits[0, -1] for p in prompts]
        assert sum(_same_greedy(model(p).logits[0, -1], w) for p, w in zip(prompts, want)) >= PROMPTS - 1
        import tempfile

        with tempfile.TemporaryDirectory() as path:
            model.save_pretrained(path)
            with World(path, SEQ, "tf-interface") as world:
                camtf.attach_plane(model, camtf.AttentionPlane(world.attention))
                assert sum(_same_greedy(model(p).logits[0, -1], w) for p, w in zip(prompts, want)) >= PROMPTS - 1
                camtf.attach_plane(model, None)


def test_router_float32_and_the_bf16_flip_rate():
    """A bf16 gate flips expert choices (reference anchors §4): measured here both ways on a bf16 model, the native
    bf16 router against a float64 router (some tokens flip), and cam's float32 router against it (none do)."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_config("qwen3_moe"))
    _init(model, 11)
    model = model.to(torch.bfloat16)
    block = list(camtf.moe_blocks(model).values())[0]
    h = torch.randn(4096, 64, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    with torch.no_grad():
        _, _, native_ids = block.gate(h)
        ids, weights = camtf.route_float32(block, h)
        exact = torch.topk(torch.softmax(h.double() @ block.gate.weight.double().T, -1), 2, dim=-1)[1]

    def flips(a):
        return float((a.sort(-1)[0] != exact.sort(-1)[0]).any(-1).float().mean())

    bf16_rate, fp32_rate = flips(native_ids), flips(ids.long())
    print(f"router flip rate against float64: bf16 {bf16_rate:.4f}, float32 {fp32_rate:.4f}")
    assert bf16_rate > 0.001 and fp32_rate == 0.0
    assert weights.dtype == torch.float32 and ids.dtype == torch.int32


def test_unsupported_blocks_refused_by_name():
    cfg = transformers.Qwen3MoeConfig(vocab_size=16, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=1, head_dim=8, moe_intermediate_size=8, num_experts=4,
                                      num_experts_per_tok=2)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    block = list(camtf.moe_blocks(model).values())[0]
    block.experts.config.swiglu_limit = 7.0
    with pytest.raises(convert.UnsupportedModelError, match="swiglu_limit"):
        camtf.CamMoEBlock(block, 0, plane=None)
    with pytest.raises(convert.UnsupportedModelError, match="no block adapter for Linear"):
        camtf.CamMoEBlock(torch.nn.Linear(2, 2), 0, plane=None)
