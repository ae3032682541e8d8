"""cam.convert: engine expert layouts to cam's orientation, and the int8 weight quantizer, against goldens written
here from the engines' own formulas (F.linear over nn.Linear-oriented weights) and numpy's rounding."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import cam
from cam import convert

# The W8A8 bound of docs/numerics.md ("W8A8 against the float model"): relative Frobenius error of a routed output.
W8A8_REL_BOUND = 0.05


def _hf_weights(e=4, h=64, i=32, seed=0):
    """HF's per-expert nn.Linear weights, std 1/sqrt(fan_in). h = 2i by default: the ambiguous shape."""
    g = torch.Generator().manual_seed(seed)
    gate = torch.randn(e, i, h, generator=g) / h ** 0.5
    up = torch.randn(e, i, h, generator=g) / h ** 0.5
    down = torch.randn(e, h, i, generator=g) / i ** 0.5
    return gate, up, down


def _hf_expert(x, gate, up, down, expert):
    """HF's expert MLP: down(silu(gate(x)) * up(x)), nn.Linear weights."""
    return F.linear(F.silu(F.linear(x, gate[expert])) * F.linear(x, up[expert]), down[expert])


def _rel(got, want):
    return float((got.float() - want.float()).norm() / want.float().norm())


def test_quantize_weight_recipe_matches_numpy():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(3, 40, 24, generator=g)
    w[1, :, 5] = 0.0  # a zero column: scale 0, q 0
    # A tie: with amax 127 the scale is 1 and 2.5 must round to 2, -3.5 to -4 (half to even).
    w[2, :, 7] = 0.0
    w[2, 0, 7], w[2, 1, 7], w[2, 2, 7] = 127.0, 2.5, -3.5
    q, s = convert.quantize_weight(w)
    wn = w.numpy().astype(np.float32)
    amax = np.abs(wn).max(axis=1)
    scale = (amax / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        qn = np.clip(np.rint(wn / scale[:, None, :]), -127, 127)
    qn = np.where(scale[:, None, :] > 0, qn, 0).astype(np.int8)
    assert s.dtype == torch.float32 and q.dtype == torch.int8
    np.testing.assert_array_equal(s.numpy(), scale)
    np.testing.assert_array_equal(q.numpy(), qn)
    assert int(q[2, 1, 7]) == 2 and int(q[2, 2, 7]) == -4 and float(s[1, 5]) == 0.0
    deq = convert.dequantize_weight(q, s)
    assert float(((deq - w).abs() - s[:, None, :] / 2).max()) <= 1e-6  # within half a step


def test_quantize_weight_refuses_bad_input():
    with pytest.raises(TypeError, match="weight"):
        convert.quantize_weight(torch.zeros(2, 3, 4, dtype=torch.int8))
    with pytest.raises(ValueError, match=r"\[E, K, N\]"):
        convert.quantize_weight(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="inf or nan"):
        convert.quantize_weight(torch.full((1, 2, 2), float("nan")))


def test_every_layout_gives_the_same_experts():
    gate, up, down = _hf_weights(h=48, i=16)
    fused = convert.from_hf_experts(torch.cat([gate, up], 1), down)
    per = convert.from_hf_per_expert(list(gate), list(up), list(down))
    vllm = convert.from_vllm(torch.cat([gate, up], 1), down)
    transposed = convert.from_hf_experts(torch.cat([gate, up], 1).transpose(1, 2), down.transpose(1, 2),
                                         is_transposed=True)
    inter = torch.stack([gate, up], dim=2).reshape(gate.shape[0], -1, gate.shape[2])  # g0, u0, g1, u1, ...
    interleaved = convert.from_hf_experts(inter, down, is_concatenated=False)
    for other in (per, vllm, transposed, interleaved):
        assert torch.equal(other.w1, fused.w1) and torch.equal(other.w2, fused.w2)
    x = torch.randn(5, 48)
    for e in range(4):
        torch.testing.assert_close(fused.reference(x, e), _hf_expert(x, gate, up, down, e), rtol=1e-5, atol=1e-5)


def test_state_dict_fused_and_per_expert():
    gate, up, down = _hf_weights()
    p = "model.layers.1.mlp.experts."
    fused = {p + "gate_up_proj": torch.cat([gate, up], 1), p + "down_proj": down}
    per = {f"{p}{e}.{n}.weight": t[e] for e in range(4) for n, t in
           (("gate_proj", gate), ("up_proj", up), ("down_proj", down))}
    a = convert.from_hf_state_dict(fused, p, hidden_size=64, intermediate_size=32)
    b = convert.from_hf_state_dict(per, p)
    assert torch.equal(a.w1, b.w1) and torch.equal(a.w2, b.w2)
    with pytest.raises(KeyError, match="experts 0..3"):
        convert.from_hf_state_dict({k: v for k, v in per.items() if not k.startswith(p + "2.up")}, p)
    with pytest.raises(ValueError, match="intermediate_size says 64"):
        convert.from_hf_state_dict(fused, p, intermediate_size=64)
    with pytest.raises(convert.UnsupportedModelError, match="bias"):
        convert.from_hf_state_dict({**fused, p + "down_proj_bias": torch.zeros(4, 64)}, p)


def test_shape_errors_name_the_argument():
    gate, up, down = _hf_weights(h=48, i=16)
    with pytest.raises(ValueError, match="down_proj"):
        convert.from_hf_experts(torch.cat([gate, up], 1), down.transpose(1, 2))
    with pytest.raises(ValueError, match="gate_up_proj"):
        convert.from_hf_experts(torch.cat([gate, up], 1)[:, :-1], down)
    with pytest.raises(TypeError, match="is_transposed"):
        convert.from_hf_experts(torch.cat([gate, up], 1), down, is_transposed=1)


def test_quantized_weights_are_refused_not_converted():
    """A float8 checkpoint's weights are floating point but stand for themselves times block scales kept beside them
    (DeepSeek-V3's released ``weight_scale_inv``): converted alone they would be silently wrong, so every converter
    refuses them by dtype (int8 and other integer weights too)."""
    gate, up, down = _hf_weights()
    f8 = torch.float8_e4m3fn
    with pytest.raises(TypeError, match="float8_e4m3fn: quantized weights are not converted"):
        convert.from_hf_experts(torch.cat([gate, up], 1).to(f8), down.to(f8))
    sd = {}
    for e in range(gate.shape[0]):
        sd[f"model.layers.0.mlp.experts.{e}.gate_proj.weight"] = gate[e].to(f8)
        sd[f"model.layers.0.mlp.experts.{e}.gate_proj.weight_scale_inv"] = torch.ones(1, 1)
        sd[f"model.layers.0.mlp.experts.{e}.up_proj.weight"] = up[e].to(f8)
        sd[f"model.layers.0.mlp.experts.{e}.down_proj.weight"] = down[e].to(f8)
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        convert.from_hf_state_dict(sd, "model.layers.0.mlp.experts.")
    with pytest.raises(TypeError, match="int8"):
        convert.from_vllm(torch.cat([gate, up], 1).to(torch.int8), down.to(torch.int8))
    with pytest.raises(TypeError, match="unquantized float"):
        convert.ExpertFFN(torch.zeros(1, 4, 4, dtype=f8), torch.zeros(1, 2, 4))


@pytest.mark.parametrize("config", [
    {"model_type": "deepseek_v3", "num_experts_per_tok": 8,
     "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}},
    {"model_type": "wrapper", "text_config": {"model_type": "qwen3_moe", "num_experts_per_tok": 2,
                                              "quantization_config": {"quant_method": "awq"}}},
])
def test_a_quantized_checkpoint_is_refused_by_name(tmp_path, config):
    import json

    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(convert.UnsupportedModelError, match="quantized checkpoint .*quant_method '(fp8|awq)'"):
        convert.checkpoint_config(str(tmp_path))
    with pytest.raises(convert.UnsupportedModelError, match="quantization_config"):
        convert.load_checkpoint_experts(str(tmp_path))


class _Cfg:
    def __init__(self, **kw):
        self.__dict__.update(kw)


@pytest.mark.parametrize("cfg, name", [
    # MiniMax-M3 clamps silu(gate) after the activation: not DeepSeek-V4's clamp, so its limit is refused
    (_Cfg(model_type="minimax_m3_vl", swiglu_limit=7.0, hidden_act="silu"), "swiglu_limit = 7.0 of model_type"),
    (_Cfg(model_type="step3p7", swiglu_limits=[0.0, 16.0], hidden_act="silu"), "swiglu_limits"),
    (_Cfg(model_type="gpt_oss", hidden_act="silu"), "GPT-OSS"),
    (_Cfg(model_type="x", hidden_act="gelu"), "hidden_act"),
])
def test_unsupported_configs_refused_by_name(cfg, name):
    with pytest.raises(convert.UnsupportedModelError, match=name):
        convert.check_supported_config(cfg)
    assert convert.check_supported_config(_Cfg(model_type="qwen3_moe", hidden_act="silu", swiglu_limit=None)) is None


def test_deepseek_v4_limit_accepted_and_checked():
    assert convert.check_supported_config(_Cfg(model_type="deepseek_v4", swiglu_limit=10, hidden_act="silu")) == 10.0
    assert convert.check_supported_config(_Cfg(model_type="deepseek_v4", hidden_act="silu")) is None
    with pytest.raises(ValueError, match="swiglu_limit"):
        convert.check_supported_config(_Cfg(model_type="deepseek_v4", swiglu_limit=-1.0, hidden_act="silu"))
    with pytest.raises(ValueError, match="swiglu_limit"):
        convert.ExpertFFN(torch.zeros(1, 4, 4), torch.zeros(1, 2, 4), swiglu_limit=float("nan"))
    with pytest.raises(ValueError, match="different swiglu_limit"):
        convert.common_swiglu_limit([convert.ExpertFFN(torch.zeros(1, 4, 4), torch.zeros(1, 2, 4), 1.0),
                                     convert.ExpertFFN(torch.zeros(1, 4, 4), torch.zeros(1, 2, 4), None)])


def _v4_experts(limit):
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Experts

    cfg = transformers.DeepseekV4Config(hidden_size=32, moe_intermediate_size=16, n_routed_experts=4,
                                        num_experts_per_tok=2, swiglu_limit=limit)
    experts = DeepseekV4Experts(cfg)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        experts.gate_up_proj.copy_(torch.randn(experts.gate_up_proj.shape, generator=g) / 32 ** 0.5)
        experts.down_proj.copy_(torch.randn(experts.down_proj.shape, generator=g) / 16 ** 0.5)
    experts.config = cfg
    return experts


def test_deepseek_v4_module_converted_with_its_clamp():
    """transformers' DeepseekV4Experts is the independent reference of the clamped expert: ExpertFFN.reference
    (cam's orientation, the clamp of cam.convert.swiglu) equals its own forward on inputs the clamp bites."""
    experts = _v4_experts(0.5)
    ffn = convert.from_hf_module(experts)
    assert ffn.swiglu_limit == 0.5
    x = torch.randn(24, 32, generator=torch.Generator().manual_seed(1)) * 2
    ids = torch.zeros(24, 1, dtype=torch.long)
    with torch.no_grad():
        want = experts(x, ids, torch.ones(24, 1))
    assert torch.allclose(ffn.reference(x, 0), want, rtol=1e-5, atol=1e-5)
    plain = convert.ExpertFFN(ffn.w1, ffn.w2)  # the same weights without the clamp: far off
    assert float((plain.reference(x, 0) - want).abs().max()) > 10 * float((ffn.reference(x, 0) - want).abs().max())


def test_own_gating_probed_not_trusted_by_name():
    """A class with its own _apply_gate is accepted only when it computes DeepSeek-V4's clamp: the same class with
    the clamp after the SiLU (as MiniMax-M3 and Step-3.7 clamp) is refused, as is a module limit that disagrees
    with the config's."""
    experts = _v4_experts(0.5)

    def clamp_after(self, gate_up):
        gate, up = gate_up.chunk(2, dim=-1)
        return self.act_fn(gate).clamp(max=self.limit) * up.clamp(min=-self.limit, max=self.limit)

    type(experts)._apply_gate, saved = clamp_after, type(experts)._apply_gate
    try:
        with pytest.raises(convert.UnsupportedModelError, match="_apply_gate"):
            convert.from_hf_module(experts)
    finally:
        type(experts)._apply_gate = saved
    experts = _v4_experts(0.5)
    experts.limit = 2.0
    with pytest.raises(convert.UnsupportedModelError, match="limit"):
        convert.from_hf_module(experts)


def test_biased_module_refused():
    m = torch.nn.Module()
    m.gate_up_proj = torch.nn.Parameter(torch.zeros(2, 8, 4))
    m.down_proj = torch.nn.Parameter(torch.zeros(2, 4, 4))
    m.has_bias = True
    with pytest.raises(convert.UnsupportedModelError, match="bias"):
        convert.from_hf_module(m)


# ----------------------------------------------------------------------------- through cam's numerics

def _cam_expert_out(w1, w2, x, layer, expert):
    """Rows ``x`` (all for local expert ``expert``) through cam.reference's W1 and W2 at ``layer``."""
    q, scale = cam.reference.dynamic_quant(x.to(torch.bfloat16))
    counts = torch.zeros(w1.num_experts, dtype=torch.int64)
    counts[expert] = x.shape[0]
    idx = torch.tensor([layer], dtype=torch.int64)
    w1q = [cam.reference.unpack_nz_reference(w, w1.k, w1.n) for w in w1.weights]
    w2q = [cam.reference.unpack_nz_reference(w, w2.k, w2.n) for w in w2.weights]
    y, ys, _ = cam.reference.gmm_swiglu_quant_multi_layer(q, scale, w1q, list(w1.scales), counts, idx)
    return cam.reference.gmm_multi_layer(y, ys, w2q, list(w2.scales), counts, idx)


def _layers(n=2, **kw):
    return [_hf_weights(seed=10 + j, **kw) for j in range(n)]


def _errors(layers_hf, converted, *, layer_shift=0):
    """Worst relative error over layers and experts of cam (reference numerics) against HF's float experts."""
    w1, w2 = convert.layer_weights(converted)
    x = torch.randn(16, layers_hf[0][0].shape[2], generator=torch.Generator().manual_seed(7))
    worst = 0.0
    for j, (gate, up, down) in enumerate(layers_hf):
        for e in range(gate.shape[0]):
            got = _cam_expert_out(w1, w2, x, (j + layer_shift) % len(layers_hf), e)
            worst = max(worst, _rel(got, _hf_expert(x.to(torch.bfloat16).float(), gate, up, down, e)))
    return worst


def test_converted_weights_match_hf_within_the_w8a8_bound():
    layers_hf = _layers()
    converted = [convert.from_hf_experts(torch.cat([g, u], 1), d) for g, u, d in layers_hf]
    assert _errors(layers_hf, converted) < W8A8_REL_BOUND


def test_layer_weights_select_experts_of_one_rank():
    converted = [convert.from_hf_experts(torch.cat([g, u], 1), d) for g, u, d in _layers()]
    w1, w2 = convert.layer_weights(converted, range(2, 4))
    w1_all, w2_all = convert.layer_weights(converted)
    assert w1.num_experts == 2 and w1.num_layers == 2 and (w1.k, w1.n, w2.k, w2.n) == (64, 64, 32, 64)
    assert torch.equal(w1.scales[1], w1_all.scales[1][2:4])
    with pytest.raises(ValueError, match="experts must be"):
        convert.layer_weights(converted, range(3, 5))


# Negative cases at H = 2I, where every mistake below has valid shapes: each must show as a numerical mismatch far
# above the W8A8 bound (the correct conversion of the same weights stays below it, test above).

def test_swapped_swiglu_halves_mismatch():
    layers_hf = _layers()
    swapped = [convert.from_hf_experts(torch.cat([u, g], 1), d) for g, u, d in layers_hf]
    assert _errors(layers_hf, swapped) > 4 * W8A8_REL_BOUND


def test_untransposed_weight_mismatch():
    layers_hf = _layers()
    # The caller says "transposed" (GPT-OSS-style [E, H, 2I]) but hands gate_up in nn.Linear orientation: at
    # H = 2I the shape is the same, so only the numbers can tell.
    wrong = [convert.from_hf_experts(torch.cat([g, u], 1), d.transpose(1, 2), is_transposed=True)
             for g, u, d in layers_hf]
    assert _errors(layers_hf, wrong) > 4 * W8A8_REL_BOUND


def test_layer_index_off_by_one_mismatch():
    layers_hf = _layers()
    converted = [convert.from_hf_experts(torch.cat([g, u], 1), d) for g, u, d in layers_hf]
    assert _errors(layers_hf, converted, layer_shift=1) > 4 * W8A8_REL_BOUND


def test_kernel_agrees_with_reference_on_converted_weights():
    """The twin's W1/W2 on converted weights equal the reference path within docs/gmm.md's exp tolerance (one int8
    level of y may move), so the bound above holds for the kernels too."""
    converted = [convert.from_hf_experts(torch.cat([g, u], 1), d) for g, u, d in _layers(1)]
    w1, w2 = convert.layer_weights(converted)
    x = torch.randn(8, 64).to(torch.bfloat16)
    q, scale = cam.ops.dynamic_quant(x)
    counts = torch.tensor([3, 0, 5, 0], dtype=torch.int64)
    idx = torch.zeros(1, dtype=torch.int64)
    y, ys = cam.ops.gmm_swiglu_quant_multi_layer(q, scale, w1, counts, idx)
    out = cam.ops.gmm_multi_layer(y, ys, w2, counts, idx)
    want = torch.cat([_cam_expert_out(w1, w2, x[:3].float(), 0, 0), _cam_expert_out(w1, w2, x[3:].float(), 0, 2)])
    assert _rel(out, want) < 0.01  # one y level of ~127 per row moved by an exp ulp: well under 1 %


def test_gpt_oss_experts_refused_by_name_even_without_their_config():
    """transformers' own GptOssExperts: refused by model_type; without its config, by its biases; without those and
    under a DeepSeek-V4 config, by the probe of its gating (interleaved halves, (up + 1) * gate * sigmoid(1.702 *
    gate): another function)."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    cfg = transformers.GptOssConfig(hidden_size=32, intermediate_size=16, num_local_experts=4, num_experts_per_tok=2)
    experts = GptOssExperts(cfg)
    with torch.no_grad():
        for p in experts.parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.dim())) * 0.2)
    experts.config = cfg
    with pytest.raises(convert.UnsupportedModelError, match="GPT-OSS"):
        convert.from_hf_module(experts)
    experts.config = None
    experts.has_bias = True
    with pytest.raises(convert.UnsupportedModelError, match="has_bias"):
        convert.from_hf_module(experts)
    experts.has_bias = False
    # Even under a config that claims DeepSeek-V4's clamp with the same limit, the probe sees another function.
    experts.config = _Cfg(model_type="deepseek_v4", swiglu_limit=experts.limit, hidden_act="silu")
    with pytest.raises(convert.UnsupportedModelError, match="GptOssExperts defines its own gating"):
        convert.from_hf_module(experts)


def test_a_string_size_is_refused_as_a_string():
    """hidden_size "8" against 8-wide weights: refused saying it is a string (it read "the weights give hidden size
    8, hidden_size says 8"); a float likewise by its type."""
    gu, down = torch.randn(2, 6, 8), torch.randn(2, 8, 3)
    with pytest.raises(TypeError, match="hidden_size is the string '8', not an int"):
        convert.from_hf_experts(gu, down, hidden_size="8")
    with pytest.raises(TypeError, match="intermediate_size must be an int, got 3.0"):
        convert.from_hf_experts(gu, down, intermediate_size=3.0)
    assert convert.from_hf_experts(gu, down, hidden_size=8, intermediate_size=3).hidden == 8
