"""Everything an FFN rank computes a work item with, as one object (docs/protocol.md §15, "Rebalance").

A routed expert's FFN is W1 (``gmm_swiglu_quant_multi_layer``: weights, per-channel scales, and the SwiGLU's
``swiglu_limit``) then W2 (``gmm_multi_layer``: weights and scales). cam's kernels take no expert bias (the
converters refuse checkpoints with one), so these are all of an expert's parameters. Two types hold them:

* :class:`ExpertWeights`: every routed expert of every MoE layer (``E`` experts), the host copy a rebalance moves
  experts from;
* :class:`FfnWeights`: the ``R`` local slots one FFN rank serves with, the tensors its ops (and a captured loop)
  hold. :meth:`ExpertWeights.slots` makes one for a placement.

They are different types on purpose: ``Comm.set_placement`` takes one of each, so it can neither move W1 without W2
(or the scales without the weights) nor take the source for the destination.
"""

from __future__ import annotations

import math
import os
from typing import Optional, Sequence, Tuple

import torch

from .layer_weights import LayerWeights

__all__ = ["ExpertWeights", "FfnWeights"]


class _TwoSets:
    """W1 and W2 of one set of experts, checked to chain: W1 ``[X, H, 2I]`` then W2 ``[X, I, H]`` per layer."""

    _who = "FfnWeights"

    def __init__(self, w1: LayerWeights, w2: LayerWeights, *, swiglu_limit: Optional[float] = None) -> None:
        who = self._who
        for name, lw in (("w1", w1), ("w2", w2)):
            if not isinstance(lw, LayerWeights):
                raise TypeError(f"{who}: {name} must be a cam.LayerWeights, got {type(lw).__name__}")
        if w1 is w2:
            raise ValueError(f"{who}: w1 and w2 are the same cam.LayerWeights; W1 and W2 are two weight sets")
        if w1.num_layers != w2.num_layers:
            raise ValueError(f"{who}: w1 has {w1.num_layers} layers, w2 {w2.num_layers}")
        if w1.num_experts != w2.num_experts:
            raise ValueError(f"{who}: w1 has {w1.num_experts} experts per layer, w2 {w2.num_experts}")
        if w1.n % 2:
            raise ValueError(f"{who}: w1 has N = {w1.n} output columns; W1's are act | gate halves (N even)")
        if w2.k is not None and w2.k != w1.n // 2:
            raise ValueError(f"{who}: w2 has K = {w2.k}, W1's SwiGLU output is N/2 = {w1.n // 2} columns")
        if w1.k is not None and w1.k != w2.n:
            raise ValueError(f"{who}: w1 has K = {w1.k} (the hidden size), w2 N = {w2.n}: they must be equal")
        if swiglu_limit is not None and (isinstance(swiglu_limit, bool) or not isinstance(swiglu_limit, (int, float))
                                         or math.isnan(swiglu_limit) or swiglu_limit < 0):
            raise ValueError(f"{who}: swiglu_limit must be None or a float >= 0 (inf allowed), got {swiglu_limit!r}")
        self.w1, self.w2 = w1, w2
        self.swiglu_limit = None if swiglu_limit is None else float(swiglu_limit)

    @property
    def num_layers(self) -> int:
        return self.w1.num_layers

    @property
    def num_experts(self) -> int:
        return self.w1.num_experts

    def named_tensors(self) -> Tuple[Tuple[str, torch.Tensor], ...]:
        """Every tensor of both sets, named, in one fixed order: W1's (``LayerWeights.named_tensors``: weights,
        scales and, packed int4, column sums), then W2's."""
        return tuple((f"{w}.{name}", t) for w, lw in (("w1", self.w1), ("w2", self.w2))
                     for name, t in lw.named_tensors())

    def tensors(self) -> Tuple[torch.Tensor, ...]:
        """The tensors of :meth:`named_tensors`, in its order."""
        return tuple(t for _, t in self.named_tensors())

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(layers={self.num_layers}, experts={self.num_experts}, H={self.w2.n}, "
                f"I={self.w1.n // 2}, swiglu_limit={self.swiglu_limit})")


class FfnWeights(_TwoSets):
    """What one FFN rank serves with: its ``R`` local slots' W1 and W2 of every MoE layer, and W1's
    ``swiglu_limit``. Pass ``w1`` / ``w2`` to the GMM ops and ``swiglu_limit`` to W1; ``Comm.set_placement``
    rewrites these tensors in place (their addresses stay, so a captured loop serves the new experts).

    Args:
        w1: :class:`cam.LayerWeights` ``[R, H, 2I]`` per layer.
        w2: :class:`cam.LayerWeights` ``[R, I, H]`` per layer.
        swiglu_limit: DeepSeek-V4's clamped SwiGLU limit, or None (see ``cam.ops.gmm_swiglu_quant_multi_layer``).
    """

    _who = "FfnWeights"


class ExpertWeights(_TwoSets):
    """Every routed expert's W1 and W2 of every MoE layer (``E`` experts), held on the host by each FFN rank so a
    rebalance can move any expert into its slots.

    Args:
        w1: :class:`cam.LayerWeights` ``[E, H, 2I]`` per layer.
        w2: :class:`cam.LayerWeights` ``[E, I, H]`` per layer.
        swiglu_limit: as for :class:`FfnWeights`; a rebalance keeps it, so the served weights must have the same.
    """

    _who = "ExpertWeights"

    @classmethod
    def from_layers(cls, layers: Sequence) -> "ExpertWeights":
        """Quantized (``cam.quantize_weight``) from every MoE layer's ``cam.convert.ExpertFFN``, with their common
        ``swiglu_limit``."""
        from .convert import common_swiglu_limit, layer_weights

        w1, w2 = layer_weights(layers)
        return cls(w1, w2, swiglu_limit=common_swiglu_limit(list(layers)))

    def slots(self, placement, ffn_index: int) -> FfnWeights:
        """The weights FFN index ``ffn_index`` serves under ``placement``: per layer ``l``, slot ``j`` holds expert
        ``placement.slot_experts(l, ffn_index)[j]`` of both sets (an empty slot: zero weights and scales). New
        tensors; ``Comm.set_placement`` copies them into the served ones."""
        from .placement import Placement

        if not isinstance(placement, Placement):
            raise TypeError(f"ExpertWeights.slots: placement must be a cam.placement.Placement, got "
                            f"{type(placement).__name__}")
        if isinstance(ffn_index, bool) or not isinstance(ffn_index, int) or not 0 <= ffn_index < placement.ffn_ranks:
            raise ValueError(f"ExpertWeights.slots: ffn_index must be an int in [0, {placement.ffn_ranks}), got "
                             f"{ffn_index!r}")
        if (placement.experts, placement.layers) != (self.num_experts, self.num_layers):
            raise ValueError(f"ExpertWeights.slots: the placement has (E, L) = {(placement.experts, placement.layers)}"
                             f", these weights {(self.num_experts, self.num_layers)}")
        held = [placement.slot_experts(l, ffn_index) for l in range(self.num_layers)]
        return FfnWeights(_select(self.w1, held), _select(self.w2, held), swiglu_limit=self.swiglu_limit)


def _select(lw: LayerWeights, held) -> LayerWeights:
    """``lw``'s experts ``held[l]`` of each layer ``l`` as a new LayerWeights of its format (-1: zeros)."""
    return lw.take(held)


def load_rank_experts(directory: str, experts: Sequence[int], progress=None, loaded=None):
    """The routed experts ``experts`` (ids, ascending and contiguous or not) of every MoE layer of a transformers
    checkpoint directory, read from the safetensors files tensor by tensor: an FFN rank reads only its experts'
    bytes, never the whole model. Returns ``(layers, info)`` as :func:`cam.convert.load_checkpoint_experts` does,
    each layer an ``ExpertFFN`` of ``len(experts)`` experts in the order given. A pre-quantized W8A8 checkpoint
    (``QuantizedExpertFFN`` layers) and one in the consumer's W4A8 layout (whole-layer tensors) are read whole by
    that function and sliced. ``progress(n, total)`` is called after
    each MoE layer. ``loaded`` (a dict), when given, receives every whole tensor read, by its name in the files, so
    the caller can compare what it loaded with the checkpoint's identity (``cam.checkpoint_identity.check_loaded``)."""
    from safetensors import safe_open

    from . import checkpoint_config as ckpt
    from . import convert

    ids = [int(e) for e in experts]
    config, limit = convert.checkpoint_config(directory, who="cam-ffn")
    if convert.checkpoint_quant_layout(directory) is not None:  # pre-quantized W8A8: integers and scales as shipped
        layers, info = convert.load_checkpoint_experts(directory)
        return [convert.QuantizedExpertFFN(x.w1[ids], x.w1_scale[ids], x.w2[ids], x.w2_scale[ids],
                                           swiglu_limit=x.swiglu_limit) for x in layers], info
    if os.path.exists(os.path.join(directory, convert.CONSUMER_W4A8_FILE)):
        layers, info = convert.load_checkpoint_experts(directory)
        return [convert.ExpertFFN(x.w1[ids], x.w2[ids], swiglu_limit=x.swiglu_limit) for x in layers], info
    who = f"cam-ffn: {directory}/config.json"
    hidden = ckpt.config_int(config, "hidden", who=who, required=False)
    inter = ckpt.config_int(config, "moe_intermediate", who=who, required=False)
    count = ckpt.config_int(config, "experts", who=who, required=False)
    where, origin = {}, {}
    for name in ckpt.safetensors_files(directory):
        try:
            h = safe_open(name, framework="pt")
            keys = list(h.keys())
        except Exception as e:  # noqa: BLE001 - safetensors raises its own SafetensorError on bad bytes
            raise ckpt.CheckpointConfigError(f"{name}: not a readable safetensors file ({type(e).__name__}: "
                                             f"{e})") from None
        where.update(dict.fromkeys(keys, h))
        origin.update(dict.fromkeys(keys, name))
    prefixes = ckpt.expert_prefixes(where, directory)
    renumber = {e: j for j, e in enumerate(ids)}
    layers = []
    for layer in sorted(prefixes):
        prefix = prefixes[layer]
        sub = {}
        for key, h in where.items():
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix):]
            if rest in ("gate_up_proj", "down_proj"):  # fused [E, ...]: only this rank's rows are read
                part = h.get_slice(key)
                sub[key] = torch.stack([part[e:e + 1][0] for e in ids]) if ids != list(range(ids[0], ids[-1] + 1)) \
                    else part[ids[0]:ids[-1] + 1]
            elif rest.endswith("_bias"):
                sub[key] = h.get_tensor(key)  # refused by name below
            else:
                num, _, tail = rest.partition(".")
                if num.isdigit() and int(num) in renumber:
                    sub[f"{prefix}{renumber[int(num)]}.{tail}"] = t = h.get_tensor(key)
                    if loaded is not None:
                        loaded[key] = t
        # A refused tensor is named by its key (from_hf_state_dict) and here by the file(s) holding the layer.
        files = ", ".join(sorted({origin[k] for k in where if k.startswith(prefix)}))
        in_files = {int(k[len(prefix):].partition(".")[0]) for k in where
                    if k.startswith(prefix) and k[len(prefix):].partition(".")[0].isdigit()}
        if count is not None and in_files and len(in_files) != count:
            raise ckpt.CheckpointConfigError(f"{files}: {prefix}* holds {len(in_files)} experts, "
                                             f"{directory}/config.json says {count}")
        try:
            layers.append(convert.from_hf_state_dict(sub, prefix, hidden_size=hidden, intermediate_size=inter,
                                                     swiglu_limit=limit))
        except convert.UnsupportedModelError:
            raise
        except (ValueError, KeyError, TypeError) as e:
            raise ckpt.CheckpointConfigError(f"{files}: {e.args[0] if e.args else e}") from None
        if progress is not None:
            progress(len(layers), len(prefixes))
    top_k = ckpt.config_int(config, "top_k", who=who)
    return layers, {"model_type": config.get("model_type"), "layers": sorted(prefixes), "top_k": top_k,
                    "swiglu_limit": limit}
