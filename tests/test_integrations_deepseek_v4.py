"""DeepSeek-V4's clamped SwiGLU (``swiglu_limit``) through cam, on transformers 5.19.0's own DeepseekV4 classes: a
tiny random checkpoint written with save_pretrained here (token ids only, no download), its routed experts
converted from the checkpoint's DeepSeek-named keys (``ffn.experts.<n>.w1/w3/w2``) and served with the clamp by FFN
ranks (threads running cam.serve_ffn), against the same model run natively with the same dequantized weights."""

import pytest
import torch
import transformers

import cam
from cam import convert
from cam.connector import AsyncAFDConnector, ConnectorConfig
from cam.integrations import transformers as camtf

from test_integrations_transformers import W8A8_REL_BOUND, World, _dequantize_experts, _init, _rel, _same_greedy

PROMPTS, SEQ = 4, 12
# Small enough that the clamp bites on a good share of this model's W1 outputs (about N(0, 1) here; the test
# checks the share), so a server that ignored it would be caught.
LIMIT = 0.75


def _config():
    return transformers.DeepseekV4Config(
        vocab_size=128, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=1, head_dim=32, q_lora_rank=32, num_experts_per_tok=2, n_routed_experts=8,
        n_shared_experts=1, o_groups=2, o_lora_rank=32, index_n_heads=2, index_head_dim=16, index_topk=8,
        sliding_window=8, max_position_embeddings=64, hc_mult=2, hc_sinkhorn_iters=3, swiglu_limit=LIMIT,
        num_nextn_predict_layers=0, mlp_layer_types=["hash_moe", "moe", "moe"], tie_word_embeddings=False)


def _model(seed=0):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(_config()).eval()
    _init(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for block in camtf.moe_blocks(model).values():
            if block.is_hash:  # the default table sends every token to expert 0 twice: give it distinct experts
                block.gate.tid2eid.copy_(torch.stack([torch.randperm(8, generator=g)[:2] for _ in range(128)]))
            else:
                block.gate.e_score_correction_bias.copy_(torch.randn(8, generator=g) * 0.1)
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("deepseek_v4")
    _model().save_pretrained(path)
    return str(path)


def _load(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _prompts():
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, 128, (1, SEQ), generator=g) for _ in range(PROMPTS)]


def test_checkpoint_experts_are_the_models_own(checkpoint):
    """The DeepSeek-named keys (w1 = gate, w3 = up, w2 = down) convert to what transformers itself loads into
    DeepseekV4Experts (its conversion mapping merges them), and the checkpoint's limit comes along."""
    layers, info = convert.load_checkpoint_experts(checkpoint)
    assert info["model_type"] == "deepseek_v4" and info["layers"] == [0, 1, 2] and info["swiglu_limit"] == LIMIT
    native = camtf.model_experts(_load(checkpoint))
    for got, want in zip(layers, native):
        assert torch.equal(got.w1, want.w1) and torch.equal(got.w2, want.w2)
        assert got.swiglu_limit == want.swiglu_limit == LIMIT
    assert convert.common_swiglu_limit(layers) == LIMIT


# The FFN ranks' loop: eager one item at a time, and replaying a captured batched iteration (the clamp is part of
# the captured W1 launch).
@pytest.mark.parametrize("mode", ["eager", "graph-batched"])
def test_block_adapter_with_the_clamp_matches_native(checkpoint, mode):
    native = _load(checkpoint)
    native_q = _load(checkpoint)
    _dequantize_experts(native_q)
    model = _load(checkpoint)
    captured = []
    fast = mode == "graph-batched"
    with World(checkpoint, SEQ, f"tf-dsv4-{mode}", graph=fast, batched=fast) as world, torch.no_grad():
        layers = world.layers
        assert world.ffn.swiglu_limit == LIMIT
        plane = camtf.AttentionPlane(world.attention, record=True)
        assert camtf.wrap_moe_blocks(model, plane) == [0, 1, 2]
        for i in range(3):
            assert model.model.layers[i].mlp.swiglu_limit == LIMIT
            model.model.layers[i].mlp.register_forward_hook(
                lambda mod, args, kwargs, out: captured.append(
                    (mod.layer, args[0].detach().clone(), kwargs.get("input_ids"), out.detach().clone())),
                with_kwargs=True)
        exact = 0
        for prompt in _prompts():
            exact += _same_greedy(model(prompt).logits[0, -1], native_q(prompt).logits[0, -1])
        assert exact >= PROMPTS - 1, exact
    # Each block against the float model's own block (its own routers, its own clamped experts) on the same input:
    # W8A8 error only. The clamp bit on a good share of the W1 outputs, so a server without it would be far off
    # (the last check: the same rows through cam's ops without the limit).
    native_blocks = list(camtf.moe_blocks(native).values())
    worst, unclamped, share = 0.0, 0.0, []
    with torch.no_grad():
        for layer, x, ids, out in captured:
            block = native_blocks[layer]
            worst = max(worst, _rel(out, block(x, input_ids=ids)))
            h = x.reshape(-1, x.shape[-1])
            c = h @ layers[layer].w1[0]
            share.append(float(((c[:, :32] > LIMIT) | (c[:, 32:].abs() > LIMIT)).float().mean()))
            tids, tw = camtf.route_float32(block, h, ids)
            w1, w2 = convert.layer_weights([layers[layer]])
            plain = camtf.routed_local(h, tids, tw, w1, w2) + block.shared_experts(h)
            unclamped = max(unclamped, _rel(plain.reshape(out.shape), out))
    print(f"DeepSeek-V4 blocks: worst rel error {worst:.4f} with the clamp, {unclamped:.3f} without; clamped share "
          f"of W1 outputs {min(share):.2f}-{max(share):.2f}")
    assert 0 < worst < W8A8_REL_BOUND, worst
    assert min(share) > 0.3, share
    assert unclamped > 4 * W8A8_REL_BOUND, unclamped
    shared = [s for s in plane.trace if s["name"] == "shared"]
    assert len(shared) == PROMPTS * 3


def test_experts_interface_applies_the_clamp(checkpoint):
    """The "cam" experts implementation in process (routed_local with the module's limit) on DeepseekV4Experts."""
    camtf.register()
    native_q = _load(checkpoint)
    _dequantize_experts(native_q)
    model = _load(checkpoint)
    model.set_experts_implementation(camtf.EXPERTS_IMPLEMENTATION)
    with torch.no_grad():
        got = [model(p).logits[0, -1] for p in _prompts()]
        want = [native_q(p).logits[0, -1] for p in _prompts()]
    assert sum(_same_greedy(g, w) for g, w in zip(got, want)) >= PROMPTS - 1


@pytest.mark.parametrize("limit", [-1.0, float("nan"), "0.75"])
def test_serve_ffn_refuses_a_bad_swiglu_limit_before_serving(limit):
    topo = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=64, Bmax=4, L=1)
    cfg = ConnectorConfig(topology=topo, timeout_s=5.0, idle_poll_s=0.01, group="v4-refuse", transport="in_process")
    store = torch.distributed.HashStore()
    conns = [AsyncAFDConnector(0, "attention", cfg), AsyncAFDConnector(1, "ffn", cfg)]
    from _connector_harness import init_connectors

    init_connectors(conns, store, 30.0)
    try:
        layers = [convert.ExpertFFN(torch.randn(2, 64, 64), torch.randn(2, 32, 64), swiglu_limit=LIMIT)]
        w1, w2 = convert.layer_weights(layers)
        for graph in (False, True):
            with pytest.raises(ValueError, match="swiglu_limit"):
                cam.serve_ffn(conns[1], w1, w2, graph=graph, swiglu_limit=limit)
        assert not store.check(["v4-refuse/serve/serving/1"])  # refused before it told anyone it serves
    finally:
        for c in conns:
            c.close()
