"""cam under transformers models (docs/integrations.md §2).

Two ways in:

* :func:`register` adds ``"cam"`` to transformers' experts extension point (``ExpertsInterface``); a model then
  runs its routed experts through cam's ops with ``model.set_experts_implementation("cam")`` (or
  ``from_pretrained(..., experts_implementation="cam")``). Without a plane the experts run in this process (cam's
  W8A8 ops on the module's own weights, converted once); with :func:`attach_plane` each experts call is one blocking
  round trip over the data plane. ``"cam_w4a8"`` is the in-process form with the weights quantized to per-channel
  int4 values instead (docs/gmm.md §9; held packed, run by the int4 kernels).
* :func:`wrap_moe_blocks` replaces each MoE block of a DeepSeek-V3, DeepSeek-V4, Qwen2-MoE or Qwen3-MoE model with a
  :class:`CamMoEBlock` that keeps AFD's asynchrony: the router (in float32), then ``dispatch_send`` at the block's
  start, the shared expert computed here while the routed work is remote, ``combine_recv`` at the end.

The routed output of both is cam's (docs/numerics.md): per-token int8 activations, int8 per-channel weights
(:func:`cam.convert.quantize_weight`), the combine in fp32 in slot order, one rounding to bf16.
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS, ExpertsInterface

from .. import convert
from .plane import AttentionPlane, routed_local

__all__ = [
    "EXPERTS_IMPLEMENTATION",
    "EXPERTS_IMPLEMENTATION_W4A8",
    "AttentionPlane",
    "CamMoEBlock",
    "attach_plane",
    "experts_forward",
    "model_experts",
    "moe_blocks",
    "register",
    "route_float32",
    "routed_local",
    "wrap_moe_blocks",
]

EXPERTS_IMPLEMENTATION = "cam"
EXPERTS_IMPLEMENTATION_W4A8 = "cam_w4a8"


# ----------------------------------------------------------------------------- the experts implementation


def _local_weights(module, bits: int = 8):
    attr = "_cam_local_weights" if bits == 8 else f"_cam_local_weights_w{bits}"
    cached = getattr(module, attr, None)
    if cached is None:
        ffn = convert.from_hf_module(module)
        cached = convert.layer_weights([ffn], bits=bits) + (ffn.swiglu_limit,)
        setattr(module, attr, cached)
    return cached


def experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """The ``"cam"`` experts implementation (transformers' signature): through the plane :func:`attach_plane` gave
    the module, else in this process on the module's weights (converted and quantized at the first call; call
    ``del module._cam_local_weights`` after changing them)."""
    plane: Optional[AttentionPlane] = getattr(self, "_cam_plane", None)
    ids = top_k_index.to(torch.int32)
    weights = top_k_weights.to(torch.float32)
    if plane is not None:
        plane.dispatch(hidden_states, ids, weights, self._cam_layer)
        routed = plane.combine(self._cam_layer)
    else:
        w1, w2, limit = _local_weights(self)
        routed = routed_local(hidden_states, ids, weights, w1, w2, swiglu_limit=limit)
    return routed.to(hidden_states.dtype)


def experts_forward_w4a8(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                         top_k_weights: torch.Tensor) -> torch.Tensor:
    """The ``"cam_w4a8"`` experts implementation: as ``"cam"`` in this process, with the module's weights quantized to
    per-channel int4 values (``cam.quantize_weight(bits=4)``; ``del module._cam_local_weights_w4`` after changing
    them)."""
    w1, w2, limit = _local_weights(self, bits=4)
    routed = routed_local(hidden_states, top_k_index.to(torch.int32), top_k_weights.to(torch.float32), w1, w2,
                          swiglu_limit=limit)
    return routed.to(hidden_states.dtype)


def register() -> None:
    """Registers ``"cam"`` and ``"cam_w4a8"`` in transformers' ``ExpertsInterface`` (idempotent)."""
    ExpertsInterface.register(EXPERTS_IMPLEMENTATION, experts_forward)
    ExpertsInterface.register(EXPERTS_IMPLEMENTATION_W4A8, experts_forward_w4a8)
    assert EXPERTS_IMPLEMENTATION in ALL_EXPERTS_FUNCTIONS


# ----------------------------------------------------------------------------- MoE blocks

def route_float32(block, h: torch.Tensor, input_ids: Optional[torch.Tensor] = None):
    """The block's router in float32 whatever the model's dtype (a bf16 gate flips expert choices on real
    checkpoints, reference anchors §4): returns ``(ids int32 [T, K], weights fp32 [T, K])``. ``input_ids`` (the
    block's tokens, ``[..]`` with T elements) is needed by DeepSeek-V4's hash-routed layers only."""
    name = type(block).__name__
    if name == "DeepseekV4SparseMoeBlock":
        # DeepSeek-V4's routers (DeepseekV4TopKRouter, DeepseekV4HashRouter) recomputed in float32: the score
        # function of the logits; the top-k of the bias-corrected scores, or the hash layer's fixed token -> experts
        # table; the chosen scores normalized and scaled.
        gate = block.gate
        scores = gate.score_fn(F.linear(h.to(torch.float32), gate.weight.to(torch.float32)))
        if block.is_hash:
            if input_ids is None or input_ids.numel() != h.shape[0]:
                raise ValueError(f"route_float32: DeepSeek-V4's hash-routed layer needs input_ids of the block's "
                                 f"{h.shape[0]} tokens, got {None if input_ids is None else tuple(input_ids.shape)}")
            ids = gate.tid2eid[input_ids.reshape(-1)].long()
        else:
            ids = torch.topk(scores + gate.e_score_correction_bias.to(torch.float32), gate.top_k, dim=-1,
                             sorted=False).indices
        weights = scores.gather(1, ids)
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20) * gate.routed_scaling_factor
    elif name == "DeepseekV3MoE":
        # DeepSeek-V3's own router already computes its logits and scores in float32.
        _, weights, ids = block.gate(h)
    elif name in ("Qwen2MoeSparseMoeBlock", "Qwen3MoeSparseMoeBlock"):
        gate = block.gate
        probs = torch.softmax(F.linear(h.to(torch.float32), gate.weight.to(torch.float32)), dim=-1)
        weights, ids = torch.topk(probs, gate.top_k, dim=-1)
        if gate.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
    else:
        raise convert.UnsupportedModelError(f"cam.integrations.transformers: no block adapter for {name}")
    return ids.to(torch.int32), weights.to(torch.float32)


def _shared(block, h: torch.Tensor) -> Optional[torch.Tensor]:
    if hasattr(block, "shared_experts"):  # DeepSeek-V3
        return block.shared_experts(h)
    if hasattr(block, "shared_expert"):  # Qwen2-MoE: a sigmoid-gated shared expert
        return torch.sigmoid(block.shared_expert_gate(h)) * block.shared_expert(h)
    return None


_BLOCKS = ("DeepseekV3MoE", "DeepseekV4SparseMoeBlock", "Qwen2MoeSparseMoeBlock", "Qwen3MoeSparseMoeBlock")


class CamMoEBlock(torch.nn.Module):
    """A model's MoE block with its routed experts on cam's data plane, asynchronously: dispatch at the start, the
    shared expert here while the routed work is remote, combine at the end.

    :attr:`swiglu_limit` is the clamp the model's experts apply (DeepSeek-V4's, else None): the FFN ranks serving
    the plane must apply the same one (``cam.serve_ffn(..., swiglu_limit=)``; ``cam-ffn`` reads it from the
    checkpoint). The Attention side cannot see what the FFN ranks compute, so a mismatch is the server's to avoid.
    """

    def __init__(self, block: torch.nn.Module, layer: int, plane: AttentionPlane):
        super().__init__()
        if type(block).__name__ not in _BLOCKS:
            raise convert.UnsupportedModelError(f"CamMoEBlock: no block adapter for {type(block).__name__} (have "
                                                f"{', '.join(_BLOCKS)})")
        self.swiglu_limit = convert.from_hf_module(block.experts).swiglu_limit  # refuses what W1 does not compute
        self.block = block
        self.layer = layer
        self.plane = plane

    def forward(self, hidden_states: torch.Tensor, input_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        shape = hidden_states.shape
        h = hidden_states.reshape(-1, shape[-1])
        ids, weights = route_float32(self.block, h, input_ids)
        self.plane.dispatch(h, ids, weights, self.layer)
        start = time.monotonic()
        shared = _shared(self.block, h)
        if shared is not None:
            self.plane.span("shared", self.layer, start)
        out = self.plane.combine(self.layer).to(hidden_states.dtype)
        if shared is not None:
            out = out + shared
        return out.reshape(shape)


def moe_blocks(model: torch.nn.Module) -> Dict[int, torch.nn.Module]:
    """``{decoder layer id: MoE block}`` of a model, in order (MoE layer ``j`` is the ``j``-th entry)."""
    base = getattr(model, "model", model)
    blocks = {}
    for i, layer in enumerate(base.layers):
        mlp = getattr(layer, "mlp", None)
        inner = mlp.block if isinstance(mlp, CamMoEBlock) else mlp
        if inner is not None and hasattr(inner, "experts") and hasattr(inner.experts, "gate_up_proj"):
            blocks[i] = inner
    if not blocks:
        raise ValueError(f"moe_blocks: {type(model).__name__} has no MoE blocks (layers[i].mlp.experts)")
    return blocks


def model_experts(model: torch.nn.Module) -> List[convert.ExpertFFN]:
    """The routed experts of every MoE layer of a model (cam's orientation, unquantized), in MoE-layer order."""
    return [convert.from_hf_module(b.experts) for b in moe_blocks(model).values()]


def wrap_moe_blocks(model: torch.nn.Module, plane: AttentionPlane) -> List[int]:
    """Replaces each MoE block of ``model`` (in place) with a :class:`CamMoEBlock` on ``plane``; returns the
    decoder layer ids, MoE layer ``j`` being the ``j``-th. The plane's L must equal the number of MoE blocks."""
    blocks = moe_blocks(model)
    if len(blocks) != plane.topology.L:
        raise ValueError(f"wrap_moe_blocks: the model has {len(blocks)} MoE blocks, the plane L = {plane.topology.L}")
    base = getattr(model, "model", model)
    for j, (i, block) in enumerate(blocks.items()):
        base.layers[i].mlp = CamMoEBlock(block, j, plane)
    return list(blocks)


def attach_plane(model: torch.nn.Module, plane: Optional[AttentionPlane]) -> None:
    """Sends the ``"cam"`` experts implementation's calls of ``model`` over ``plane`` (one blocking round trip per
    MoE layer), or back to local computation with ``None``."""
    for j, block in enumerate(moe_blocks(model).values()):
        block.experts._cam_plane = plane
        block.experts._cam_layer = j
