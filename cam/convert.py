"""``cam.convert``: routed-expert weights of real engines to :class:`cam.LayerWeights`, and the weight quantizer.

Every converter is told its source layout; none infers it from shapes. At H = 2I a transposed ``[E, H, 2I]`` and
an untransposed ``[E, 2I, H]`` weight have the same shape, so a guess would be silent and wrong (docs/integrations.md
§1 names each layout and both vocabularies of the SwiGLU halves).

The result of every converter is an :class:`ExpertFFN` in cam's orientation (``x @ W``): ``w1 [E, H, 2I]`` whose
first half is the SiLU'd input (cam's ``act``; HF's and vLLM's ``gate``) and whose second half multiplies it (cam's
``gate``; HF's and vLLM's ``up``), and ``w2 [E, I, H]``. :func:`layer_weights` quantizes a list of them (one per MoE
layer) with :func:`quantize_weight` and builds the W1/W2 :class:`cam.LayerWeights` of one FFN rank's experts.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from . import checkpoint_config as ckpt
from .layer_weights import INT4_K_STEP, LayerWeights, weight_format
from .w4a8 import dequantize_weight_int4, quantize_weight_int4

__all__ = [
    "ExpertFFN",
    "QUANT_DESCRIPTION_FILE",
    "QuantizedExpertFFN",
    "UnsupportedModelError",
    "W8A8_LAYOUTS",
    "check_supported_config",
    "check_swiglu_limit",
    "checkpoint_moe_layers",
    "checkpoint_quant_layout",
    "checkpoint_config",
    "common_swiglu_limit",
    "dequantize_weight",
    "dequantized",
    "from_hf_experts",
    "from_hf_module",
    "from_hf_per_expert",
    "from_hf_state_dict",
    "from_vllm",
    "from_w8a8_state_dict",
    "layer_weights",
    "load_checkpoint_experts",
    "quantize_weight",
    "swiglu",
]


class UnsupportedModelError(ValueError):
    """A model feature cam's expert kernels do not compute (an activation variant, expert biases, ungated experts).
    Raised naming the feature, so it is never silently ignored."""


class _ExpertShapes:
    """The shape of one MoE layer's experts in cam's orientation, float or pre-quantized alike: ``w1 [E, H, 2I]``,
    ``w2 [E, I, H]``."""

    @property
    def num_experts(self) -> int:
        return self.w1.shape[0]

    @property
    def hidden(self) -> int:
        return self.w1.shape[1]

    @property
    def intermediate(self) -> int:
        return self.w2.shape[1]


@dataclasses.dataclass(frozen=True)
class ExpertFFN(_ExpertShapes):
    """One MoE layer's routed experts in cam's orientation, unquantized.

    Attributes:
        w1: float ``[E, H, 2I]``, ``x @ w1``; columns ``[0, I)`` are cam's ``act`` (SiLU'd; HF ``gate_proj``),
            ``[I, 2I)`` cam's ``gate`` (the multiplier; HF ``up_proj``).
        w2: float ``[E, I, H]``, ``s @ w2`` (HF ``down_proj`` transposed).
        swiglu_limit: ``None`` for the plain SwiGLU; a float ``L >= 0`` for DeepSeek-V4's clamped SwiGLU (HF's
            gate clamped to ``max=L``, HF's up to ``[-L, L]`` before ``silu(gate) * up``), which the FFN ranks must
            pass to W1 (``cam.serve_ffn(..., swiglu_limit=)``, docs/integrations.md §1).
    """

    w1: torch.Tensor
    w2: torch.Tensor
    swiglu_limit: Optional[float] = None

    def __post_init__(self):
        check_swiglu_limit("ExpertFFN", self.swiglu_limit)
        for name in ("w1", "w2"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dtype not in _FLOAT_DTYPES or t.dim() != 3:
                raise TypeError(f"ExpertFFN: {name} must be an unquantized float 3-D tensor, got "
                                f"{type(t).__name__ if not isinstance(t, torch.Tensor) else (t.dtype, tuple(t.shape))}")
        e, h, two_i = self.w1.shape
        if two_i % 2:
            raise ValueError(f"ExpertFFN: w1 must be [E, H, 2I] with an even last dim, got {tuple(self.w1.shape)}")
        if tuple(self.w2.shape) != (e, two_i // 2, h):
            raise ValueError(f"ExpertFFN: w2 must be [E, I, H] = [{e}, {two_i // 2}, {h}] to match w1 "
                             f"{tuple(self.w1.shape)}, got {tuple(self.w2.shape)}")

    def reference(self, x: torch.Tensor, expert: int) -> torch.Tensor:
        """``silu(x @ act) * (x @ gate) @ w2`` of one expert in fp32: the unquantized expert, for checks."""
        c = x.float() @ self.w1[expert].float()
        return swiglu(c, self.swiglu_limit) @ self.w2[expert].float()


def swiglu(c: torch.Tensor, swiglu_limit: Optional[float] = None) -> torch.Tensor:
    """``silu(a) * b`` of ``c = [a | b]`` (HF's ``gate | up``) in fp32, with DeepSeek-V4's clamp when
    ``swiglu_limit`` is set (``DeepseekV4Experts._apply_gate``: ``a.clamp(max=L)``, ``b.clamp(-L, L)``): the float
    expert every converter's result stands for, and the probe :func:`from_hf_module` checks a module's own gating
    against."""
    a, b = c.float().chunk(2, dim=-1)
    if swiglu_limit is not None:
        a = a.clamp(max=swiglu_limit)
        b = b.clamp(min=-swiglu_limit, max=swiglu_limit)
    return torch.nn.functional.silu(a) * b


def check_swiglu_limit(who: str, limit) -> None:
    """W1's clamp (DeepSeek-V4's ``swiglu_limit``): None, or a number >= 0 (inf clamps nothing)."""
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or math.isnan(limit) or limit < 0:
        raise ValueError(f"{who}: swiglu_limit must be None or a number >= 0 (inf clamps nothing), got {limit!r}")


def _shape_error(who: str, name: str, t: torch.Tensor, want: str) -> ValueError:
    return ValueError(f"{who}: {name} must be {want}, got shape {tuple(t.shape)}")


# Unquantized float weights. float8 is floating point too, but a float8 checkpoint's weights stand for themselves
# times block scales kept beside them (DeepSeek-V3's ``weight_scale_inv``): converted alone they would be silently
# wrong, so they are refused with every other dtype.
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_3d(who: str, name: str, t, want: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{who}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{who}: {name} must be an unquantized float (float16, bfloat16, float32 or float64), got "
                        f"{t.dtype}: quantized weights are not converted")
    if t.dim() != 3:
        raise _shape_error(who, name, t, want)


def _check_dims(who: str, hidden: Optional[int], intermediate: Optional[int], h: int, i: int) -> None:
    for name, v in (("hidden_size", hidden), ("intermediate_size", intermediate)):
        if isinstance(v, str):
            raise TypeError(f"{who}: {name} is the string {v!r}, not an int")
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"{who}: {name} must be an int, got {v!r} ({type(v).__name__})")
    if hidden is not None and hidden != h:
        raise ValueError(f"{who}: the weights give hidden size {h}, hidden_size says {hidden}")
    if intermediate is not None and intermediate != i:
        raise ValueError(f"{who}: the weights give intermediate size {i}, intermediate_size says {intermediate}")


def from_hf_experts(gate_up_proj: torch.Tensor, down_proj: torch.Tensor, *, is_transposed: bool = False,
                    is_concatenated: bool = True, hidden_size: Optional[int] = None,
                    intermediate_size: Optional[int] = None, swiglu_limit: Optional[float] = None) -> ExpertFFN:
    """transformers' fused experts (``<model>Experts`` with ``use_experts_implementation``) of one layer.

    Args:
        gate_up_proj: ``[E, 2I, H]`` (nn.Linear orientation), or ``[E, H, 2I]`` when ``is_transposed``.
        down_proj: ``[E, H, I]``, or ``[E, I, H]`` when ``is_transposed``.
        is_transposed / is_concatenated: the module's flags of the same names (transformers'
            ``use_experts_implementation``): concatenated is ``[gate; up]`` along 2I, interleaved is
            ``gate0, up0, gate1, up1, ...``.
        hidden_size / intermediate_size: checked against the weights when given (the model config's
            ``hidden_size`` and ``moe_intermediate_size``).
        swiglu_limit: DeepSeek-V4's clamp (:class:`ExpertFFN`), None for the plain SwiGLU.
    """
    who = "from_hf_experts"
    check_swiglu_limit(who, swiglu_limit)
    for name, v in (("is_transposed", is_transposed), ("is_concatenated", is_concatenated)):
        if not isinstance(v, bool):
            raise TypeError(f"{who}: {name} must be a bool, got {v!r}")
    want_gu = "[E, H, 2I]" if is_transposed else "[E, 2I, H]"
    want_d = "[E, I, H]" if is_transposed else "[E, H, I]"
    _check_3d(who, "gate_up_proj", gate_up_proj, want_gu)
    _check_3d(who, "down_proj", down_proj, want_d)
    gu = gate_up_proj if is_transposed else gate_up_proj.transpose(1, 2)  # -> [E, H, 2I]
    down = down_proj if is_transposed else down_proj.transpose(1, 2)      # -> [E, I, H]
    e, h, two_i = gu.shape
    if two_i % 2:
        raise _shape_error(who, "gate_up_proj", gate_up_proj, f"{want_gu} (an even 2I)")
    i = two_i // 2
    if tuple(down.shape) != (e, i, h):
        raise _shape_error(who, "down_proj", down_proj, f"{want_d} = " + (
            f"[{e}, {i}, {h}]" if is_transposed else f"[{e}, {h}, {i}]") + " to match gate_up_proj")
    _check_dims(who, hidden_size, intermediate_size, h, i)
    if is_concatenated:
        w1 = gu
    else:
        w1 = torch.cat([gu[..., 0::2], gu[..., 1::2]], dim=-1)
    return ExpertFFN(w1.contiguous(), down.contiguous(), swiglu_limit)


def from_hf_per_expert(gate_proj: Sequence[torch.Tensor], up_proj: Sequence[torch.Tensor],
                       down_proj: Sequence[torch.Tensor], *, hidden_size: Optional[int] = None,
                       intermediate_size: Optional[int] = None, swiglu_limit: Optional[float] = None) -> ExpertFFN:
    """The per-expert layout (an ``nn.ModuleList`` of MLPs, older transformers and many checkpoints): one
    ``gate_proj.weight [I, H]``, ``up_proj.weight [I, H]`` and ``down_proj.weight [H, I]`` per expert (DeepSeek's
    own names: ``w1`` = gate, ``w3`` = up, ``w2`` = down)."""
    who = "from_hf_per_expert"
    gate_proj, up_proj, down_proj = list(gate_proj), list(up_proj), list(down_proj)
    if not gate_proj or not (len(gate_proj) == len(up_proj) == len(down_proj)):
        raise ValueError(f"{who}: gate_proj, up_proj and down_proj must hold one weight per expert each, got "
                         f"{len(gate_proj)}, {len(up_proj)}, {len(down_proj)}")
    g, u, d = torch.stack(gate_proj), torch.stack(up_proj), torch.stack(down_proj)
    for name, t, want in (("gate_proj", g, "[I, H]"), ("up_proj", u, "[I, H]"), ("down_proj", d, "[H, I]")):
        _check_3d(who, name, t, f"one {want} per expert")
    if g.shape != u.shape:
        raise ValueError(f"{who}: gate_proj {tuple(g.shape[1:])} and up_proj {tuple(u.shape[1:])} differ")
    return from_hf_experts(torch.cat([g, u], dim=1), d, hidden_size=hidden_size,
                           intermediate_size=intermediate_size, swiglu_limit=swiglu_limit)


def from_vllm(w13: torch.Tensor, w2: torch.Tensor, *, hidden_size: Optional[int] = None,
              intermediate_size: Optional[int] = None) -> ExpertFFN:
    """vLLM's fused-MoE parameters ``w13_weight [E, 2I, H]`` (``[w1 = gate_proj; w3 = up_proj]``, the first half
    SiLU'd by ``silu_and_mul``) and ``w2_weight [E, H, I]``: HF's concatenated layout under other names."""
    return from_hf_experts(w13, w2, hidden_size=hidden_size, intermediate_size=intermediate_size)


# ----------------------------------------------------------------------------- what the kernels compute

_ACTIVATIONS = ("silu", "swish")


# The model types whose swiglu_limit is DeepSeek-V4's clamp (transformers 5.19.0
# models/deepseek_v4/modeling_deepseek_v4.py, DeepseekV4Experts._apply_gate: gate.clamp(max=L), up.clamp(-L, L),
# silu(gate) * up), which cam's W1 computes. Other models with a limit clamp differently (MiniMax-M3 and Step-3.7
# clamp silu(gate) after the activation; GPT-OSS is another function), so a limit is accepted only by model type.
_CLAMPED_SWIGLU_MODELS = ("deepseek_v4",)


def check_supported_config(config, *, who: str = "cam") -> Optional[float]:
    """Refuses, by name, a model config whose routed experts cam's W1/W2 do not compute: an activation other than
    SiLU, GPT-OSS's activation, a clamped SwiGLU other than DeepSeek-V4's. Returns the ``swiglu_limit`` the FFN
    ranks must apply: the config's for DeepSeek-V4 (``model_type = "deepseek_v4"``), else None."""
    model_type = getattr(config, "model_type", None)
    if model_type == "gpt_oss":
        raise UnsupportedModelError(
            f"{who}: GPT-OSS experts are not supported: their activation (interleaved halves, clamped, "
            f"(up + 1) * gate * sigmoid(1.702 * gate)) and their expert biases are not what cam's W1 computes")
    act = getattr(config, "hidden_act", "silu")
    if act not in _ACTIVATIONS:
        raise UnsupportedModelError(f"{who}: hidden_act = {act!r} is not supported: cam's W1 computes SwiGLU "
                                    f"(silu)")
    limits = getattr(config, "swiglu_limits", None)
    if limits and any(limits):
        raise UnsupportedModelError(f"{who}: swiglu_limits = {limits!r} (per-layer clamps of model_type "
                                    f"{model_type!r}, applied after the SiLU) is not supported: cam's W1 clamps only "
                                    "as DeepSeek-V4 does, before it")
    limit = getattr(config, "swiglu_limit", None)
    if model_type in _CLAMPED_SWIGLU_MODELS:
        if limit is not None:
            check_swiglu_limit(who, limit)
            return float(limit)
        return None
    if limit not in (None, 0, 0.0):
        raise UnsupportedModelError(f"{who}: swiglu_limit = {limit!r} of model_type {model_type!r} is not supported: "
                                    "cam's W1 computes DeepSeek-V4's clamp (model_type 'deepseek_v4') and no other")
    return None


def _gating_matches(experts: torch.nn.Module, limit: Optional[float]) -> bool:
    """Whether a module's own ``_apply_gate`` computes :func:`swiglu` with ``limit``, on a probe that reaches well
    beyond the limit on both sides (so a clamp after the SiLU, interleaved halves or another function differ).
    Tolerance: the same fp32 function, evaluated by another expression, may differ in the last bits."""
    i = int(experts.down_proj.shape[-1] if not getattr(experts, "is_transposed", False) else
            experts.down_proj.shape[-2])
    scale = 3.0 * (limit if limit is not None and math.isfinite(limit) and limit > 0 else 1.0)
    g = torch.Generator().manual_seed(0)
    probe = (torch.rand(64, 2 * i, generator=g) * 2 - 1) * scale
    with torch.no_grad():
        got = experts._apply_gate(probe.to(experts.gate_up_proj.dtype)).float()
    want = swiglu(probe.to(experts.gate_up_proj.dtype), limit)
    return got.shape == want.shape and torch.allclose(got, want, rtol=1e-5, atol=1e-6)


def from_hf_module(experts: torch.nn.Module) -> ExpertFFN:
    """One transformers experts module (``gate_up_proj`` / ``down_proj`` parameters and the flags
    ``use_experts_implementation`` sets on it); refuses what the kernels do not compute, by name."""
    who = "from_hf_module"
    config = getattr(experts, "config", None)
    limit = check_supported_config(config, who=who) if config is not None else None
    if getattr(experts, "has_bias", False):
        raise UnsupportedModelError(f"{who}: {type(experts).__name__} has expert biases (has_bias): not supported")
    if not getattr(experts, "has_gate", True):
        raise UnsupportedModelError(f"{who}: {type(experts).__name__} has ungated experts (has_gate = False): not "
                                    "supported, cam's W1 is a gated SwiGLU")
    if not hasattr(experts, "gate_up_proj") or not hasattr(experts, "down_proj"):
        raise TypeError(f"{who}: {type(experts).__name__} has no gate_up_proj / down_proj parameters")
    gate_fn = getattr(type(experts), "_apply_gate", None)
    if gate_fn is not None and getattr(gate_fn, "__qualname__", None) != "_default_apply_gate":
        # transformers' use_experts_implementation installs _default_apply_gate (act(gate) * up of the halves)
        # unless the class has its own: DeepSeek-V4's clamp (what W1 computes with the limit), GPT-OSS's clamped,
        # biased gating (not). What the class computes is probed, not assumed from its name.
        if getattr(experts, "limit", limit) != limit:
            raise UnsupportedModelError(f"{who}: {type(experts).__name__}.limit = {experts.limit!r} differs from "
                                        f"the config's swiglu_limit = {limit!r}")
        if not _gating_matches(experts, limit):
            raise UnsupportedModelError(f"{who}: {type(experts).__name__} defines its own gating (_apply_gate) that "
                                        f"is not silu(gate) * up with DeepSeek-V4's swiglu_limit clamp "
                                        f"(limit {limit!r}): not supported")
    elif limit is not None:
        raise UnsupportedModelError(f"{who}: the config sets swiglu_limit = {limit!r} but "
                                    f"{type(experts).__name__} has no gating of its own that clamps")
    return from_hf_experts(experts.gate_up_proj.detach(), experts.down_proj.detach(),
                           is_transposed=bool(getattr(experts, "is_transposed", False)),
                           is_concatenated=bool(getattr(experts, "is_concatenated", True)), swiglu_limit=limit)


_PER_EXPERT_KEY = re.compile(r"(\d+)\.(gate_proj|up_proj|down_proj|w1|w3|w2)\.weight")
# DeepSeek's own checkpoint names (V4 as transformers saves it): w1 = gate, w3 = up, w2 = down
# (transformers' conversion_mapping.py, "deepseek_v4": gate_up_proj = cat(w1, w3), down_proj = w2).
_DEEPSEEK_NAMES = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}


def from_hf_state_dict(state_dict: Mapping[str, torch.Tensor], prefix: str, *, is_transposed: bool = False,
                       is_concatenated: bool = True, hidden_size: Optional[int] = None,
                       intermediate_size: Optional[int] = None, swiglu_limit: Optional[float] = None,
                       consumer_w4a8: Optional[Mapping] = None) -> ExpertFFN:
    """One layer's experts from a checkpoint's tensors under ``prefix`` (e.g. ``"model.layers.3.mlp.experts."``):
    the fused ``gate_up_proj`` / ``down_proj`` keys, or the per-expert ``<n>.gate_proj.weight`` ... keys (or
    DeepSeek's ``<n>.w1.weight`` / ``w3`` / ``w2``, never mixed with the former), or the consumer's W4A8 layout
    (:data:`CONSUMER_W4A8_KEYS`, decoded with ``consumer_w4a8`` = ``{"layout", "group_size"}``, which the
    checkpoint's ``cam_w4a8.json`` states: :func:`load_checkpoint_experts`)."""
    who = "from_hf_state_dict"
    if not prefix.endswith("."):
        prefix += "."
    if prefix + CONSUMER_W4A8_KEYS[0] in state_dict:
        return _from_consumer_w4a8(state_dict, prefix, consumer_w4a8, swiglu_limit)
    fused = (prefix + "gate_up_proj", prefix + "down_proj")
    if fused[0] in state_dict or fused[1] in state_dict:
        missing = [k for k in fused if k not in state_dict]
        if missing:
            raise KeyError(f"{who}: {missing[0]!r} missing from the checkpoint")
        bias = [k for k in (prefix + "gate_up_proj_bias", prefix + "down_proj_bias") if k in state_dict]
        if bias:
            raise UnsupportedModelError(f"{who}: {bias[0]!r}: expert biases are not supported")
        for key in fused:
            if isinstance(state_dict[key], torch.Tensor) and state_dict[key].dim() != 3:
                raise ValueError(f"{who}: {key} must be a 3-D [E, out, in] weight, got "
                                 f"{tuple(state_dict[key].shape)}")
        return from_hf_experts(state_dict[fused[0]], state_dict[fused[1]], is_transposed=is_transposed,
                               is_concatenated=is_concatenated, hidden_size=hidden_size,
                               intermediate_size=intermediate_size, swiglu_limit=swiglu_limit)
    per: Dict[str, Dict[int, torch.Tensor]] = {"gate_proj": {}, "up_proj": {}, "down_proj": {}}
    first_key: Dict[str, str] = {}
    vocabularies = set()
    for key, value in state_dict.items():
        if key.startswith(prefix):
            m = _PER_EXPERT_KEY.fullmatch(key[len(prefix):])
            if m:
                name = m.group(2)
                vocabularies.add(name in _DEEPSEEK_NAMES)
                name = _DEEPSEEK_NAMES.get(name, name)
                # Each tensor checked under its own key: stacking them would fail without naming one.
                if not isinstance(value, torch.Tensor) or value.dim() != 2:
                    got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                    raise ValueError(f"{who}: {key} must be a 2-D [out, in] weight, got {got}")
                same = first_key.setdefault(name, key)
                if value.shape != state_dict[same].shape:
                    raise ValueError(f"{who}: {key} has shape {tuple(value.shape)}, {same} "
                                     f"{tuple(state_dict[same].shape)}: every expert's {name} must have one shape")
                per[name][int(m.group(1))] = value
    if len(vocabularies) > 1:
        raise KeyError(f"{who}: {prefix}<n>.* mixes gate_proj/up_proj/down_proj with w1/w3/w2 keys")
    if not per["gate_proj"]:
        raise KeyError(f"{who}: no experts under {prefix!r} (neither {fused[0]!r} nor {prefix}0.gate_proj.weight)")
    n = len(per["gate_proj"])
    for name, found in per.items():
        if sorted(found) != list(range(n)):
            raise KeyError(f"{who}: {prefix}<n>.{name}.weight must exist for experts 0..{n - 1}, found "
                           f"{sorted(found)}")
    return from_hf_per_expert([per["gate_proj"][e] for e in range(n)], [per["up_proj"][e] for e in range(n)],
                              [per["down_proj"][e] for e in range(n)], hidden_size=hidden_size,
                              intermediate_size=intermediate_size, swiglu_limit=swiglu_limit)


# The consumer's W4A8 experts (docs/gmm.md §9.4): per layer, int4 packed eight to an int32 [E, K, N / 8], int64
# scales, the fp32 assist matrix; w13 is the gate|up projection [E, H, 2I], w2 the down projection [E, I, H].
CONSUMER_W4A8_KEYS = ("w13_weight", "w13_weight_scale", "w13_weight_assist", "w2_weight", "w2_weight_scale",
                      "w2_weight_assist")
# The file of a checkpoint directory that names the layout of such experts (never guessed from the tensors).
CONSUMER_W4A8_FILE = "cam_w4a8.json"


def _from_consumer_w4a8(state_dict: Mapping[str, torch.Tensor], prefix: str, consumer: Optional[Mapping],
                        swiglu_limit: Optional[float]) -> ExpertFFN:
    """One layer's consumer-layout W4A8 experts as float ``q · scale`` (the weights they compute with): decoded and
    checked by :func:`cam.w4a8.from_consumer` (its assist matrix included), so quantizing them again per channel
    (``quantize_weight(bits=4)``) gives back the same int4 values and scales."""
    from . import w4a8

    who = "from_hf_state_dict"
    if consumer is None:
        raise ValueError(f"{who}: {prefix}{CONSUMER_W4A8_KEYS[0]} holds packed int4 experts but no layout was given "
                         f"(a checkpoint states it in {CONSUMER_W4A8_FILE}: {{\"layout\": ..., \"group_size\": ...}})")
    missing = [prefix + k for k in CONSUMER_W4A8_KEYS if prefix + k not in state_dict]
    if missing:
        raise KeyError(f"{who}: {missing[0]!r} missing from the checkpoint")
    group_size = consumer.get("group_size")
    w = []
    for name in ("w13", "w2"):
        q, scale = w4a8.from_consumer(state_dict[f"{prefix}{name}_weight"], state_dict[f"{prefix}{name}_weight_scale"],
                                      state_dict[f"{prefix}{name}_weight_assist"], layout=consumer.get("layout"),
                                      group_size=group_size)
        w.append(w4a8.dequantize_weight_int4(q, scale, group_size))
    return ExpertFFN(w1=w[0], w2=w[1], swiglu_limit=swiglu_limit)


def _consumer_w4a8(directory: str) -> Optional[dict]:
    """The checkpoint's ``cam_w4a8.json`` (``{"layout": ..., "group_size": null | int}``), or None."""
    import json
    import os

    path = os.path.join(directory, CONSUMER_W4A8_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        spec = json.load(f)
    if not isinstance(spec, dict) or set(spec) - {"layout", "group_size"} or "layout" not in spec:
        raise ValueError(f"load_checkpoint_experts: {path} must be {{\"layout\": ..., \"group_size\": ...}}, got "
                         f"{spec!r}")
    return spec


# ----------------------------------------------------------------------------- pre-quantized W8A8 checkpoints

# The file of a pre-quantized checkpoint directory that names its quantization (Ascend's msModelSlim export, which
# vLLM-Ascend's ``--quantization ascend`` loads and the AFD plugin's W8A8 recipes run): ``model_quant_type`` and, per
# tensor name, its quantization type.
QUANT_DESCRIPTION_FILE = "quant_model_description.json"


@dataclasses.dataclass(frozen=True)
class W8A8Layout:
    """How one named W8A8 layout stores a linear layer ``[out, in]``: ``<proj>.weight`` int8 ``[out, in]``,
    ``<proj>.<scale>`` ``[out, 1]`` per output channel in one of ``scale_dtypes`` (each converts to fp32 exactly),
    and optionally ``<proj>.<offset>`` ``[out, 1]``, which must be zero (cam's int8 is symmetric)."""

    name: str
    scale: str = "weight_scale"
    offset: str = "weight_offset"
    scale_dtypes: Tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16)


# The layouts a checkpoint's description may name (its ``model_quant_type``): W8A8_DYNAMIC is per-channel int8
# weights with per-token dynamic int8 activations, the vLLM-Ascend W8A8 method (weight int8 [out, in],
# weight_scale / weight_offset [out, 1]).
W8A8_LAYOUTS = {"W8A8_DYNAMIC": W8A8Layout("W8A8_DYNAMIC")}


@dataclasses.dataclass(frozen=True)
class QuantizedExpertFFN(_ExpertShapes):
    """One MoE layer's routed experts as a pre-quantized checkpoint ships them, in cam's orientation: ``w1`` int8
    ``[E, H, 2I]`` (first half cam's ``act``, second its ``gate``) with ``w1_scale`` fp32 ``[E, 2I]``, ``w2`` int8
    ``[E, I, H]`` with ``w2_scale`` fp32 ``[E, H]``: what :class:`cam.LayerWeights` holds, never dequantized."""

    w1: torch.Tensor
    w1_scale: torch.Tensor
    w2: torch.Tensor
    w2_scale: torch.Tensor
    swiglu_limit: Optional[float] = None


def _w8a8_projection(state_dict: Mapping[str, torch.Tensor], key: str, layout: W8A8Layout,
                     shape: Optional[Tuple[int, int]]) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(q [out, in] int8, scale [out] fp32)`` of one projection under ``key`` (``<...>.gate_proj``), checked
    against ``layout`` (and ``shape`` when given) before anything is converted."""
    who = "from_w8a8_state_dict"
    names = {"weight": f"{key}.weight", "scale": f"{key}.{layout.scale}", "offset": f"{key}.{layout.offset}"}
    for part in ("weight", "scale"):
        if names[part] not in state_dict:
            raise KeyError(f"{who}: {names[part]!r} missing from the checkpoint (layout {layout.name})")
    q, scale = state_dict[names["weight"]], state_dict[names["scale"]]
    if not isinstance(q, torch.Tensor) or q.dtype != torch.int8 or q.dim() != 2:
        raise ValueError(f"{who}: {names['weight']} must be int8 [out, in] (layout {layout.name}), got "
                         f"{getattr(q, 'dtype', type(q).__name__)} {tuple(getattr(q, 'shape', ()))}")
    if shape is not None and tuple(q.shape) != shape:
        raise ValueError(f"{who}: {names['weight']} has shape {tuple(q.shape)}, expected {list(shape)}")
    out = q.shape[0]
    if not isinstance(scale, torch.Tensor) or tuple(scale.shape) != (out, 1):
        raise ValueError(f"{who}: {names['scale']} must be [{out}, 1] (one scale per output channel, layout "
                         f"{layout.name}), got {tuple(getattr(scale, 'shape', ()))}")
    if scale.dtype not in layout.scale_dtypes:
        raise ValueError(f"{who}: {names['scale']} is {scale.dtype}; layout {layout.name} stores scales as "
                         f"{' or '.join(str(d) for d in layout.scale_dtypes)}")
    scale = scale.to(torch.float32)[:, 0]
    if not bool(torch.isfinite(scale).all()) or bool((scale < 0).any()):
        raise ValueError(f"{who}: {names['scale']} holds a negative, inf or nan scale")
    offset = state_dict.get(names["offset"])
    if offset is not None:
        if not isinstance(offset, torch.Tensor) or tuple(offset.shape) != (out, 1):
            raise ValueError(f"{who}: {names['offset']} must be [{out}, 1] (layout {layout.name}), got "
                             f"{tuple(getattr(offset, 'shape', ()))}")
        if bool(offset.ne(0).any()):
            raise ValueError(f"{who}: {names['offset']} is not zero: cam's int8 weights are symmetric (an offset "
                             "would shift every product)")
    return q, scale


def from_w8a8_state_dict(state_dict: Mapping[str, torch.Tensor], prefix: str, *, layout: str,
                         hidden_size: Optional[int] = None, intermediate_size: Optional[int] = None,
                         swiglu_limit: Optional[float] = None) -> QuantizedExpertFFN:
    """One layer's pre-quantized experts under ``prefix`` (``<...>.layers.<n>.mlp.experts.``: per expert
    ``<e>.gate_proj`` / ``up_proj`` / ``down_proj``, or DeepSeek's ``w1`` / ``w3`` / ``w2``) in the named ``layout``
    (a key of :data:`W8A8_LAYOUTS`, which the checkpoint's :data:`QUANT_DESCRIPTION_FILE` states), as int8 values
    and fp32 scales: the stored integers are cam's, transposed and concatenated, never through a float weight."""
    who = "from_w8a8_state_dict"
    if layout not in W8A8_LAYOUTS:
        raise UnsupportedModelError(f"{who}: layout {layout!r} is not one cam loads; known: {sorted(W8A8_LAYOUTS)}")
    check_swiglu_limit(who, swiglu_limit)
    spec = W8A8_LAYOUTS[layout]
    if not prefix.endswith("."):
        prefix += "."
    experts = set()
    names = set()
    for key in state_dict:
        if key.startswith(prefix):
            m = _PER_EXPERT_KEY.fullmatch(key[len(prefix):])
            if m:
                experts.add(int(m.group(1)))
                names.add(m.group(2) in _DEEPSEEK_NAMES)
    if not experts:
        raise KeyError(f"{who}: no experts under {prefix!r} ({prefix}0.gate_proj.weight ...)")
    if len(names) > 1:
        raise KeyError(f"{who}: {prefix}<n>.* mixes gate_proj/up_proj/down_proj with w1/w3/w2 keys")
    n = len(experts)
    if sorted(experts) != list(range(n)):
        raise KeyError(f"{who}: {prefix}<n>.* must hold experts 0..{n - 1}, found {sorted(experts)}")
    gate, up, down = ("w1", "w3", "w2") if names.pop() else ("gate_proj", "up_proj", "down_proj")
    w1q, w1s, w2q, w2s = [], [], [], []
    first = None
    for e in range(n):
        gq, gs = _w8a8_projection(state_dict, f"{prefix}{e}.{gate}", spec, first)
        first = tuple(gq.shape)  # every expert's gate and up are one [I, H]
        uq, us = _w8a8_projection(state_dict, f"{prefix}{e}.{up}", spec, first)
        dq, ds = _w8a8_projection(state_dict, f"{prefix}{e}.{down}", spec, (first[1], first[0]))
        w1q.append(torch.cat([gq, uq]).t())
        w1s.append(torch.cat([gs, us]))
        w2q.append(dq.t())
        w2s.append(ds)
    i, h = first
    _check_dims(who, hidden_size, intermediate_size, h, i)
    return QuantizedExpertFFN(torch.stack(w1q).contiguous(), torch.stack(w1s).contiguous(),
                              torch.stack(w2q).contiguous(), torch.stack(w2s).contiguous(), swiglu_limit)


def _quant_description(directory: str) -> Optional[str]:
    """The W8A8 layout a checkpoint's :data:`QUANT_DESCRIPTION_FILE` names (its ``model_quant_type``), or None
    without the file. A type cam does not load is refused by name."""
    import json
    import os

    path = os.path.join(directory, QUANT_DESCRIPTION_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        description = json.load(f)
    kind = description.get("model_quant_type") if isinstance(description, dict) else None
    if kind not in W8A8_LAYOUTS:
        raise UnsupportedModelError(f"load_checkpoint_experts: {path} names model_quant_type {kind!r}; cam loads "
                                    f"pre-quantized experts in {sorted(W8A8_LAYOUTS)} only")
    return kind, description


def checkpoint_quant_layout(directory: str) -> Optional[str]:
    """The pre-quantized layout a checkpoint directory's :data:`QUANT_DESCRIPTION_FILE` names (a key of
    :data:`W8A8_LAYOUTS`), or None for a float checkpoint; another type is refused by name."""
    described = _quant_description(directory)
    return None if described is None else described[0]


def _check_described(description: Mapping, kind: str, keys, directory: str) -> None:
    """Every routed expert weight must be listed in the description as ``kind``: the layout is read per tensor,
    never assumed from the model-wide type."""
    for key in keys:
        if _PER_EXPERT_KEY.search(key) and key.endswith(".weight") and description.get(key) != kind:
            raise ckpt.CheckpointConfigError(f"load_checkpoint_experts: {directory}/{QUANT_DESCRIPTION_FILE} lists "
                                             f"{key} as {description.get(key)!r}, not {kind!r}")


# ----------------------------------------------------------------------------- quantization


# What quantize_weight reads exactly: float8 formats carry their own scaling, which a plain cast would drop.
_QUANTIZABLE = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_quantizable(weight) -> None:
    """quantize_weight's input checks, before anything is computed: a [E, K, N] float16/bfloat16/float32/float64
    tensor with E, K, N >= 1, finite, and no column whose largest magnitude is non-zero but too small for a normal
    fp32 scale (amax / 127 below the smallest normal fp32: the scale would underflow, to zero or to a subnormal,
    and ``q * scale`` would no longer be within ``scale / 2`` of ``w``)."""
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"quantize_weight: weight must be a torch.Tensor, got {type(weight).__name__}")
    if weight.dtype not in _QUANTIZABLE:
        raise TypeError(f"quantize_weight: weight must be float16, bfloat16, float32 or float64, got {weight.dtype}")
    if weight.dim() != 3 or min(weight.shape) < 1:
        raise ValueError(f"quantize_weight: weight must be [E, K, N] with E, K, N >= 1, got shape "
                         f"{tuple(weight.shape)}")
    w = weight.detach()
    if not torch.isfinite(w).all():
        raise ValueError("quantize_weight: weight holds inf or nan")
    amax = w.abs().amax(dim=1).to(torch.float64)
    tiny = torch.finfo(torch.float32).tiny
    bad = (amax > 0) & ((amax.to(torch.float32) / 127.0).to(torch.float64) < tiny)
    if bad.any():
        e, n = (int(i) for i in bad.nonzero()[0])
        raise ValueError(f"quantize_weight: weight column [{e}, :, {n}] has largest magnitude {float(amax[e, n]):.3g}, "
                         f"non-zero but below 127 x the smallest normal fp32 ({127 * tiny:.3g}): its int8 scale would "
                         f"underflow; flush such values to zero first")


def quantize_weight(weight: torch.Tensor, bits: int = 8,
                    group_size: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8 of a ``[E, K, N]`` weight in ``x @ W`` orientation.

    ``bits=4`` is the W4A8 quantizer instead (:func:`cam.w4a8.quantize_weight_int4`: values in [-7, 7], scale
    ``amax / 7``, per channel or per ``group_size`` K rows); ``group_size`` is only for ``bits=4``.

    For each expert ``e`` and output column ``n``, in fp32: ``amax = max_k |w[e, k, n]|``, ``scale = amax / 127``,
    ``q = clamp(round_half_even(w / scale), -127, 127)``; a column of zeros gets ``scale = 0`` and ``q = 0``.
    ``q * scale`` (:func:`dequantize_weight`) is within ``scale / 2`` of ``w`` element-wise.

    Raises:
        TypeError: ``weight`` is not a float16/bfloat16/float32/float64 tensor (float8 carries its own scaling).
        ValueError: ``weight`` is not ``[E, K, N]`` with every dimension >= 1, holds inf/NaN, or has a non-zero
            column too small for a normal fp32 scale (below ``127 * finfo(float32).tiny``, e.g. denormals).

    Returns:
        ``(q int8 [E, K, N], scale fp32 [E, N])``, the ``weights`` / ``scales`` of :class:`cam.LayerWeights`.
    """
    if bits == 4 and not isinstance(bits, bool):
        return quantize_weight_int4(weight, group_size)
    _check_int8_bits(bits, group_size)
    _check_quantizable(weight)
    w = weight.detach().to(torch.float32)
    amax = w.abs().amax(dim=1)
    scale = amax / 127.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / safe[:, None, :]).clamp_(-127, 127)  # torch.round: half to even
    q = torch.where(scale[:, None, :] > 0, q, torch.zeros_like(q)).to(torch.int8)
    return q, scale.contiguous()


def _check_int8_bits(bits, group_size) -> None:
    if isinstance(bits, bool) or bits != 8:
        raise ValueError(f"quantize_weight: bits must be 8 (W8A8) or 4 (W4A8), got {bits!r}")
    if group_size is not None:
        raise ValueError(f"quantize_weight: group_size {group_size!r} is only for bits=4 (int8 weights are per "
                         "output channel)")


def dequantize_weight(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``q * scale`` in fp32: what the kernels' int8 weights stand for."""
    if q.dtype != torch.int8 or q.dim() != 3:
        raise TypeError(f"dequantize_weight: q must be int8 [E, K, N], got {q.dtype} {tuple(q.shape)}")
    if scale.dtype != torch.float32 or tuple(scale.shape) != (q.shape[0], q.shape[2]):
        raise ValueError(f"dequantize_weight: scale must be fp32 [{q.shape[0]}, {q.shape[2]}], got {scale.dtype} "
                         f"{tuple(scale.shape)}")
    return q.to(torch.float32) * scale[:, None, :]


def dequantized(layer: "ExpertFFN | QuantizedExpertFFN", *, bits: int = 8,
                group_size: Optional[int] = None) -> ExpertFFN:
    """``layer`` with both weights replaced by their dequantized int8 (``bits=4``: int4, per channel or per
    ``group_size`` K rows) values (what cam computes with), for a native run that differs from cam's only in the
    activations' quantization. A :class:`QuantizedExpertFFN` is its stored ``q * scale`` (int8 only)."""
    if isinstance(layer, QuantizedExpertFFN):
        if bits != 8 or group_size is not None:
            raise ValueError(f"dequantized: pre-quantized W8A8 experts are int8 per channel; bits={bits!r}, "
                             f"group_size={group_size!r} do not apply")
        return ExpertFFN(dequantize_weight(layer.w1, layer.w1_scale), dequantize_weight(layer.w2, layer.w2_scale),
                         layer.swiglu_limit)
    def deq(w: torch.Tensor) -> torch.Tensor:
        q, s = quantize_weight(w, bits=bits, group_size=group_size)
        return dequantize_weight(q, s) if group_size is None else dequantize_weight_int4(q, s, group_size)
    return ExpertFFN(deq(layer.w1), deq(layer.w2), layer.swiglu_limit)


def common_swiglu_limit(layers: Sequence["ExpertFFN | QuantizedExpertFFN"]) -> Optional[float]:
    """The ``swiglu_limit`` of every layer in ``layers``: what an FFN rank passes to W1 (one limit per launch, and a
    batched launch spans layers). ValueError when the layers differ."""
    limits = {x.swiglu_limit for x in layers}
    if len(limits) > 1:
        raise ValueError(f"common_swiglu_limit: the MoE layers have different swiglu_limit values "
                         f"{sorted(limits, key=str)}: "
                         "cam's FFN ranks apply one limit to every layer")
    return limits.pop() if limits else None


def layer_weights(layers: Sequence[ExpertFFN], experts: Optional[range] = None, *, bits: int = 8,
                  group_size: Optional[int] = None, slots: Optional[int] = None) -> Tuple[LayerWeights, LayerWeights]:
    """The W1 and W2 :class:`cam.LayerWeights` of experts ``experts`` (default: all) of every layer in ``layers``
    (MoE layer ``j`` is ``layers[j]``, the work item's layer index), quantized with :func:`quantize_weight`.

    ``bits=4``: per-channel int4 values (``quantize_weight(w, bits=4)``) held packed, ``LayerWeights(format="int4")``
    (half the bytes of ``bits=8``, with their column sums), which the W4A8 kernels read (docs/gmm.md §9.5).
    ``group_size`` (``bits=4`` only): scales per group of that many K rows, ``[E, K / group_size, N]``, which the
    kernels apply per group (§9.2); it must divide both H and I and be a multiple of 64 (the int4 cube's K step).

    An FFN rank ``A + f`` of a topology with ``R`` experts per rank passes ``range(f * R, (f + 1) * R)``; under the
    contiguous placement of an E that F does not divide (:meth:`cam.placement.Placement.contiguous`) its experts'
    range and ``slots = R``: the slots past the range are empty (zero weights and scales)."""
    layers = list(layers)
    quantized = bool(layers) and all(isinstance(x, QuantizedExpertFFN) for x in layers)
    if not layers or not (quantized or all(isinstance(x, ExpertFFN) for x in layers)):
        raise TypeError("layer_weights: layers must be a non-empty sequence of cam.convert.ExpertFFN (or, all of "
                        "them, cam.convert.QuantizedExpertFFN)")
    if quantized and (bits != 8 or group_size is not None):
        raise ValueError(f"layer_weights: pre-quantized W8A8 experts are int8 per channel as shipped; bits={bits!r}"
                         f", group_size={group_size!r} would need them re-quantized (only bits=8 loads them)")
    first = layers[0]
    for j, x in enumerate(layers):
        if x.w1.shape != first.w1.shape:
            raise ValueError(f"layer_weights: layers[{j}] has w1 {tuple(x.w1.shape)}, layers[0] "
                             f"{tuple(first.w1.shape)}")
    if experts is None:
        experts = range(first.num_experts)
    if not isinstance(experts, range) or experts.step != 1 or len(experts) < 1 or experts.start < 0 \
            or experts.stop > first.num_experts:
        raise ValueError(f"layer_weights: experts must be a non-empty range(start, stop) inside [0, "
                         f"{first.num_experts}), got {experts!r}")
    if slots is not None and (isinstance(slots, bool) or not isinstance(slots, int) or slots < len(experts)):
        raise ValueError(f"layer_weights: slots must be an int >= the {len(experts)} experts of {experts!r}, got "
                         f"{slots!r}")
    if bits == 4 and group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int)
                                                 or group_size < 1 or group_size % INT4_K_STEP):
        raise ValueError(f"layer_weights: group_size must be a positive multiple of {INT4_K_STEP} with bits=4 (the "
                         f"int4 kernels' K step), got {group_size!r}")
    sl = slice(experts.start, experts.stop)
    w1q: List[torch.Tensor] = []
    w1s: List[torch.Tensor] = []
    w2q: List[torch.Tensor] = []
    w2s: List[torch.Tensor] = []
    for x in layers:
        if quantized:  # as shipped: the checkpoint's integers and scales
            w1q.append(x.w1[sl].contiguous())
            w1s.append(x.w1_scale[sl].contiguous())
            w2q.append(x.w2[sl].contiguous())
            w2s.append(x.w2_scale[sl].contiguous())
            continue
        q, s = quantize_weight(x.w1[sl], bits=bits, group_size=group_size)
        w1q.append(q)
        w1s.append(s)
        q, s = quantize_weight(x.w2[sl], bits=bits, group_size=group_size)
        w2q.append(q)
        w2s.append(s)
    if slots is not None and slots > len(experts):
        def pad(t: torch.Tensor) -> torch.Tensor:
            return torch.cat([t, t.new_zeros((slots - len(experts),) + tuple(t.shape[1:]))])

        w1q, w1s, w2q, w2s = ([pad(t) for t in ts] for ts in (w1q, w1s, w2q, w2s))
    fmt = weight_format(bits)
    return LayerWeights(w1q, w1s, format=fmt), LayerWeights(w2q, w2s, format=fmt)


# ----------------------------------------------------------------------------- checkpoint directories

def checkpoint_config(directory: str, *, who: str = "cam.convert") -> Tuple[dict, Optional[float]]:
    """``config.json`` of a checkpoint directory (its ``text_config`` when the experts' settings are there, as in a
    multimodal wrapper) and the ``swiglu_limit`` its FFN ranks apply (:func:`check_supported_config`, which refuses
    an unsupported model by name, naming ``who``)."""
    import os
    import types

    path = os.path.join(directory, "config.json")
    config = ckpt.read_config(directory, who=who)
    quant = config.get("quantization_config")
    config = ckpt.model_section(config)
    quant = config.get("quantization_config", quant)
    if quant:
        method = quant.get("quant_method", "?") if isinstance(quant, dict) else quant
        raise UnsupportedModelError(f"{who}: {path} is a quantized checkpoint (quantization_config, quant_method "
                                    f"{method!r}): cam converts unquantized float expert weights only (its stored "
                                    "weights would need their scales)")
    return config, check_supported_config(types.SimpleNamespace(**config), who=who)


def load_checkpoint_experts(directory: str) -> Tuple[List[ExpertFFN], dict]:
    """The routed experts of every MoE layer of a transformers checkpoint directory (``config.json`` and
    ``*.safetensors``; experts in the consumer's W4A8 layout when its ``cam_w4a8.json`` names their layout, or
    pre-quantized int8 as shipped, :class:`QuantizedExpertFFN`, when its :data:`QUANT_DESCRIPTION_FILE` names a
    :data:`W8A8_LAYOUTS` layout), in
    layer order: MoE layer ``j`` is the ``j``-th decoder layer that has experts (the
    work item's layer index). Refuses, by name, what the kernels do not compute (:func:`check_supported_config`).

    Returns:
        ``(layers, info)`` with ``info = {"model_type", "layers": decoder layer ids, "top_k", "swiglu_limit"}``
        (the limit every FFN rank passes to W1: DeepSeek-V4's, else None).
    """
    from safetensors.torch import load_file

    config, limit = checkpoint_config(directory, who="load_checkpoint_experts")
    who = f"load_checkpoint_experts: {directory}/config.json"
    top_k = ckpt.config_int(config, "top_k", who=who)
    count = ckpt.config_int(config, "experts", who=who, required=False)
    hidden = ckpt.config_int(config, "hidden", who=who, required=False)
    intermediate = ckpt.config_int(config, "moe_intermediate", who=who, required=False)
    tensors: Dict[str, torch.Tensor] = {}
    origin: Dict[str, str] = {}
    for name in ckpt.safetensors_files(directory):
        try:
            loaded = load_file(name)
        except Exception as e:  # noqa: BLE001 - safetensors raises its own SafetensorError on bad bytes
            raise ckpt.CheckpointConfigError(f"{name}: not a readable safetensors file ({type(e).__name__}: "
                                             f"{e})") from None
        tensors.update(loaded)
        origin.update(dict.fromkeys(loaded, name))
    prefixes = ckpt.expert_prefixes(tensors, directory)
    layer_ids = sorted(prefixes)
    consumer = _consumer_w4a8(directory)
    described = _quant_description(directory)
    if described is not None:
        _check_described(described[1], described[0], [k for k in tensors if any(k.startswith(p) for p in
                                                                                  prefixes.values())], directory)
    layers = []
    for i in layer_ids:
        # A refused tensor is named by its key (from_hf_state_dict) and here by the file(s) holding the layer.
        files = ", ".join(sorted({origin[k] for k in tensors if k.startswith(prefixes[i])}))
        try:
            if described is not None:
                layers.append(from_w8a8_state_dict(tensors, prefixes[i], layout=described[0], hidden_size=hidden,
                                                   intermediate_size=intermediate, swiglu_limit=limit))
            else:
                layers.append(from_hf_state_dict(tensors, prefixes[i], hidden_size=hidden,
                                                 intermediate_size=intermediate, swiglu_limit=limit,
                                                 consumer_w4a8=consumer))
        except UnsupportedModelError:
            raise
        except (ValueError, KeyError, TypeError) as e:
            raise ckpt.CheckpointConfigError(f"{files}: {e.args[0] if e.args else e}") from None
        if count is not None and layers[-1].num_experts != count:
            raise ckpt.CheckpointConfigError(f"{files}: {prefixes[i]}* holds {layers[-1].num_experts} experts, "
                                             f"{directory}/config.json says {count}")
    return layers, {"model_type": config.get("model_type"), "layers": layer_ids, "top_k": top_k,
                    "swiglu_limit": limit}


def checkpoint_moe_layers(directory: str) -> List[int]:
    """The decoder layer ids with routed experts in a checkpoint directory, in order (MoE layer ``j`` is the
    ``j``-th), read from the safetensors headers without loading a weight (:func:`cam.checkpoint_config.moe_layers`)."""
    return ckpt.moe_layers(directory)
