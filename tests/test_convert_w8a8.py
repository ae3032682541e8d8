"""Pre-quantized W8A8 checkpoints (Ascend's W8A8_DYNAMIC layout: int8 ``weight [out, in]``, ``weight_scale`` and
``weight_offset [out, 1]``, named by ``quant_model_description.json``) load into cam.LayerWeights as shipped: the
integers and scales are the checkpoint's, never dequantized and quantized again; a scale in another shape or dtype,
a non-zero offset, or a description naming another type is refused by name."""

import json
import os

import pytest
import torch

import cam
from cam import convert
from cam.checkpoint_config import CheckpointConfigError
from cam.layer_weights import prepack_weights

E, H, I, L = 4, 64, 32, 2


def _layers(seed=0):
    """Per layer and expert: (gate q [I, H], gate scale [I], up q, up scale, down q [H, I], down scale [H]); some
    channels never reach 127, so a float round trip would change them."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(L):
        experts = []
        for _ in range(E):
            parts = []
            for rows, cols in ((I, H), (I, H), (H, I)):
                q = torch.randint(-90, 91, (rows, cols), generator=g, dtype=torch.int8)
                q[0, 0] = 127  # one channel at full range, the rest below it
                parts += [q, torch.rand(rows, generator=g) * 0.01 + 1e-3]
            experts.append(parts)
        out.append(experts)
    return out


def _write(path, layers, *, scale_dtype=torch.bfloat16, kind="W8A8_DYNAMIC", scale_shape=None, offset=0.0,
           described=None, names=("gate_proj", "up_proj", "down_proj")):
    from safetensors.torch import save_file

    tensors, description = {}, {"model_quant_type": kind, "version": "1.0.0"}
    for j, experts in enumerate(layers):
        for e, parts in enumerate(experts):
            for n, (q, s) in zip(names, zip(parts[0::2], parts[1::2])):
                key = f"model.layers.{j}.mlp.experts.{e}.{n}"
                tensors[key + ".weight"] = q
                shape = scale_shape(q) if scale_shape else (q.shape[0], 1)
                tensors[key + ".weight_scale"] = s.reshape(shape).to(scale_dtype)
                tensors[key + ".weight_offset"] = torch.full((q.shape[0], 1), offset, dtype=scale_dtype)
                description[key + ".weight"] = described or kind
    save_file(tensors, os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, convert.QUANT_DESCRIPTION_FILE), "w") as f:
        json.dump(description, f)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"model_type": "qwen3_moe", "hidden_size": H, "moe_intermediate_size": I, "num_experts": E,
                   "num_experts_per_tok": 2, "hidden_act": "silu"}, f)


@pytest.mark.parametrize("names", [("gate_proj", "up_proj", "down_proj"), ("w1", "w3", "w2")])
def test_w8a8_checkpoint_loads_as_shipped(tmp_path, names):
    src = _layers()
    _write(tmp_path, src, names=names)
    layers, info = convert.load_checkpoint_experts(str(tmp_path))
    assert info["layers"] == [0, 1] and all(isinstance(x, convert.QuantizedExpertFFN) for x in layers)
    w1, w2 = convert.layer_weights(layers, range(1, 3))
    assert w1.format == w2.format == "int8"
    for j in range(L):
        # The golden ND weights, column by column: cam's W1 is x @ [gate | up] (column c < I is gate row c, column
        # I + c is up row c), W2 is x @ down^T; LayerWeights holds them packed (prepack_weights).
        g1 = torch.empty(2, H, 2 * I, dtype=torch.int8)
        g2 = torch.empty(2, I, H, dtype=torch.int8)
        for slot, e in enumerate((1, 2)):
            gq, gs, uq, us, dq, ds = src[j][e]
            for c in range(I):
                g1[slot, :, c], g1[slot, :, I + c] = gq[c], uq[c]
                g2[slot, c, :] = dq[:, c]
            assert torch.equal(w1.scales[j][slot], torch.cat([gs, us]).to(torch.bfloat16).float())
            assert torch.equal(w2.scales[j][slot], ds.to(torch.bfloat16).float())
        assert torch.equal(w1.weights[j], prepack_weights(g1)) and torch.equal(w2.weights[j], prepack_weights(g2))


def test_a_float_round_trip_would_change_the_integers():
    """Control: the checkpoint's integers are not what quantizing their dequantized values gives (the loader must
    not take that path)."""
    gq, gs = _layers()[0][0][:2]
    w = (gq.float() * gs[:, None]).t()[None]     # [1, H, I] in cam's orientation
    q, _ = convert.quantize_weight(w)
    assert not torch.equal(q[0].t(), gq)


def test_w8a8_checkpoint_serves_through_cam_ffn_loading(tmp_path):
    from cam import ffn_server

    src = _layers(1)
    _write(tmp_path, src)
    args = ffn_server._parser().parse_args(["--checkpoint", str(tmp_path), "--rank", "2", "-D", "1", "-F", "2",
                                            "--max-tokens", "8"])
    cfg, w1, w2, info, policy = ffn_server._load(args)
    assert cfg.topology.E == E and w1.num_experts == 2 and w1.num_layers == L
    assert torch.equal(w2.weights[1][:1], prepack_weights(src[1][2][4].t().contiguous()[None]))  # experts 2, 3
    with pytest.raises(ValueError, match="pre-quantized W8A8 experts"):
        convert.layer_weights(convert.load_checkpoint_experts(str(tmp_path))[0], bits=4)


@pytest.mark.parametrize("kwargs, match", [
    (dict(scale_dtype=torch.float16), r"weight_scale is torch.float16; layout W8A8_DYNAMIC stores scales as"),
    (dict(scale_shape=lambda q: (q.shape[0],)), r"weight_scale must be \[32, 1\]"),
    (dict(scale_shape=lambda q: (1, q.shape[0])), r"weight_scale must be \[32, 1\]"),
    (dict(offset=1.0), "weight_offset is not zero"),
    (dict(kind="W4A8_DYNAMIC"), "model_quant_type 'W4A8_DYNAMIC'"),
    (dict(described="FLOAT"), "lists model.layers.0.mlp.experts.0.down_proj.weight as 'FLOAT'"),
])
def test_bad_w8a8_checkpoints_are_named(tmp_path, kwargs, match):
    _write(tmp_path, _layers(), **kwargs)
    with pytest.raises((ValueError, CheckpointConfigError, convert.UnsupportedModelError), match=match):
        convert.load_checkpoint_experts(str(tmp_path))


def test_int8_experts_without_a_description_are_refused(tmp_path):
    _write(tmp_path, _layers())
    os.remove(os.path.join(tmp_path, convert.QUANT_DESCRIPTION_FILE))
    with pytest.raises(CheckpointConfigError, match="quantized weights are not converted"):
        convert.load_checkpoint_experts(str(tmp_path))


def test_unknown_layout_is_named():
    with pytest.raises(convert.UnsupportedModelError, match="layout 'W8A8_STATIC' is not one cam loads"):
        convert.from_w8a8_state_dict({}, "x.", layout="W8A8_STATIC")
