"""A small DeepSeek-like MoE decoder for prefill, with deterministic random weights.

It is split so that the Attention side of a disaggregated run and the single-process reference forward execute
the *same* code for everything except the routed experts: ``pre_moe`` (attention, router, norm), ``shared`` (the
shared experts, which live on the Attention side), ``moe_output`` (the layer's residual sum) and ``finish``.
Routed experts use W8A8 int8 weights with the numerics of cam's ops (docs/numerics.md, docs/gmm.md);
``routed_reference`` computes them in-process with the goldens of ``cam.reference`` and is the e2e golden for the
distributed path.
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Sequence

import torch
import torch.nn.functional as F

from ..convert import quantize_weight
from ..reference import dynamic_quant as ref_dynamic_quant
from ..reference import gmm as ref_gmm
from .config import PRESETS, ModelConfig  # noqa: F401 - re-exported: cam.models.moe_model.PRESETS


class PrefillReference:
    """The single-process prefill golden of a model split into cam-run's pieces, written once for every model that
    has them (:class:`MoEModel`, ``cam.run.checkpoint.CheckpointModel``): ``config`` (``hidden``, ``top_k``,
    ``num_experts``, ``num_layers``, ``moe_layers``), the routed experts' int8 ``w1``/``w1_scale``/``w2``/
    ``w2_scale`` per MoE layer, and ``embed_tokens``, ``pre_moe``, ``shared``, ``dense_mlp``, ``finish``.

    What a model's pieces pass between them as ``x`` (the residual) is the model's own business: a tensor whose rows
    are the tokens (``[T, H]`` here; DeepSeek-V4's hyper-connection streams are more) and whatever ``moe_output``
    needs to finish an MoE layer; the routed experts always see ``h`` of ``[T, H]``."""

    # The clamp every FFN rank's W1 applies to the SwiGLU halves (DeepSeek-V4's ``swiglu_limit``, docs/gmm.md);
    # None: the plain SwiGLU.
    swiglu_limit = None
    # The cam.LayerWeights format its FFN ranks hold the routed experts in: "int8" (W8A8), or "int4" (W4A8 values,
    # packed: half the bytes, the int4 kernels).
    weight_format = "int8"

    def routed_weights(self, first_expert: int, num_local: int):
        """Per-MoE-layer lists (w1, w1_scale, w2, w2_scale) of experts [first_expert, first_expert + num_local)."""
        sl = slice(first_expert, first_expert + num_local)
        return ([w[sl].contiguous() for w in self.w1], [s[sl].contiguous() for s in self.w1_scale],
                [w[sl].contiguous() for w in self.w2], [s[sl].contiguous() for s in self.w2_scale])

    def routed_reference(self, moe_index: int, h_bf16: torch.Tensor, topk_ids: torch.Tensor,
                         topk_weights: torch.Tensor) -> torch.Tensor:
        """Routed experts of MoE layer ``moe_index`` in one process, with the ops' numerics: per-token int8 quant,
        W1 (int8 GMM + SwiGLU + quant), W2 (int8 GMM + dequant to bf16), weighted top-K sum in fp32 in slot order,
        one rounding to bf16."""
        c = self.config
        tokens = h_bf16.shape[0]
        out = torch.zeros(tokens, c.hidden, dtype=torch.bfloat16)
        if tokens == 0:
            return out
        q, scale = ref_dynamic_quant(h_bf16)
        pairs = [(int(topk_ids[t, k]), t, k) for t in range(tokens) for k in range(c.top_k) if topk_ids[t, k] >= 0]
        pairs.sort()
        rows = torch.tensor([t for _, t, _ in pairs], dtype=torch.long)
        counts = torch.bincount(torch.tensor([e for e, _, _ in pairs]), minlength=c.num_experts).to(torch.int64)
        layer = torch.tensor([moe_index], dtype=torch.int64)
        y, y_scale, _ = ref_gmm.gmm_swiglu_quant_multi_layer(
            q[rows], scale[rows], self.w1, self.w1_scale, counts, layer, ref_gmm.GROUP_LIST_COUNTS,
            swiglu_limit=self.swiglu_limit)
        expert_out = ref_gmm.gmm_multi_layer(y, y_scale, self.w2, self.w2_scale, counts, layer,
                                             ref_gmm.GROUP_LIST_COUNTS)
        by_slot = {(t, k): expert_out[i] for i, (_, t, k) in enumerate(pairs)}
        for t in range(tokens):
            acc = torch.zeros(c.hidden, dtype=torch.float32)
            for k in range(c.top_k):
                if (t, k) in by_slot:
                    acc = acc + topk_weights[t, k] * by_slot[(t, k)].to(torch.float32)
            out[t] = acc.to(torch.bfloat16)
        return out

    def moe_output(self, layer: int, x, routed: torch.Tensor, shared: torch.Tensor, rows: slice = slice(None)):
        """Rows ``rows`` of MoE layer ``layer``'s output, from ``pre_moe``'s ``x`` and those rows' routed (bf16, as
        combined) and shared expert outputs: the plain residual ``x + routed + shared``. A model whose residual is
        not a sum (DeepSeek-V4's hyper-connections) overrides it."""
        return x[rows] + routed.to(torch.float32) + shared

    def forward_reference(self, prompts: Sequence[torch.Tensor], on_route=None) -> List[torch.Tensor]:
        """Single-process prefill of a batch of prompts; returns each prompt's final hidden states [T_i, H].
        ``on_route(moe_index, topk_ids)``, if given, sees every MoE layer's routing."""
        seq_lens = [int(p.numel()) for p in prompts]
        tokens = torch.cat([p.reshape(-1) for p in prompts]) if prompts else torch.zeros(0, dtype=torch.long)
        x = self.embed_tokens(tokens)
        for layer in range(self.config.num_layers):
            if layer in self.config.moe_layers:
                x, h, ids, w = self.pre_moe(layer, x, seq_lens, tokens)
                if on_route is not None:
                    on_route(self.config.moe_layers.index(layer), ids)
                routed = self.routed_reference(self.config.moe_layers.index(layer), h, ids, w)
                x = self.moe_output(layer, x, routed, self.shared(layer, h))
            else:
                x, h = self.pre_moe(layer, x, seq_lens, tokens)
                x = x + self.dense_mlp(layer, h)
        return list(self.finish(x).split(seq_lens))


class MoEModel(PrefillReference):
    """Deterministic weights plus the pieces of a prefill forward. All Attention-side math runs in fp32 on CPU;
    the routed experts' input is the bf16 normed hidden state (what dispatch_send carries)."""

    def __init__(self, config: ModelConfig):
        self.config = c = config
        g = torch.Generator().manual_seed(c.seed)

        def randn(*shape, std):
            return torch.randn(*shape, generator=g) * std

        h = c.hidden
        self.embed = randn(c.vocab_size, h, std=1.0)
        self.attn = []
        self.norms = []
        for _ in range(c.num_layers):
            self.attn.append({name: randn(h, h, std=1 / math.sqrt(h)) for name in ("q", "k", "v", "o")})
            self.norms.append((1.0 + randn(h, std=0.05), 1.0 + randn(h, std=0.05)))
        self.final_norm = 1.0 + randn(h, std=0.05)
        self.dense = {
            layer: (randn(h, 2 * c.dense_intermediate, std=1 / math.sqrt(h)),
                    randn(c.dense_intermediate, h, std=1 / math.sqrt(c.dense_intermediate)))
            for layer in range(c.first_dense_layers)
        }
        self.router = {layer: randn(h, c.num_experts, std=1 / math.sqrt(h)) for layer in c.moe_layers}
        self.shared_w = {
            layer: [(randn(h, 2 * c.shared_intermediate, std=1 / math.sqrt(h)),
                     randn(c.shared_intermediate, h, std=1 / math.sqrt(c.shared_intermediate)))
                    for _ in range(c.num_shared_experts)]
            for layer in c.moe_layers
        }
        # Routed experts, int8 per MoE layer: W1 [E, H, 2I] (act | gate), W2 [E, I, H], per-channel fp32 scales.
        self.w1, self.w1_scale, self.w2, self.w2_scale = [], [], [], []
        for _ in c.moe_layers:
            q1, s1 = quantize_weight(randn(c.num_experts, h, 2 * c.moe_intermediate, std=1 / math.sqrt(h)))
            q2, s2 = quantize_weight(
                randn(c.num_experts, c.moe_intermediate, h, std=1 / math.sqrt(c.moe_intermediate)))
            self.w1.append(q1)
            self.w1_scale.append(s1)
            self.w2.append(q2)
            self.w2_scale.append(s2)

    # ----------------------------------------------------------------- forward pieces

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.config.rms_eps) * weight

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed[tokens.long()]

    def attention(self, layer: int, x: torch.Tensor, seq_lens: Sequence[int]) -> torch.Tensor:
        """Causal self-attention over each request of the batch separately (requests never see each other)."""
        c, w = self.config, self.attn[layer]
        hd = c.hidden // c.num_heads
        out = torch.empty_like(x)
        start = 0
        for n in seq_lens:
            seg = x[start:start + n]
            q, k, v = (
                (seg @ w[name]).view(n, c.num_heads, hd).transpose(0, 1) for name in ("q", "k", "v")
            )
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out[start:start + n] = o.transpose(0, 1).reshape(n, c.hidden) @ w["o"]
            start += n
        return out

    def pre_moe(self, layer: int, x: torch.Tensor, seq_lens: Sequence[int], tokens: torch.Tensor = None):
        """Attention and, for an MoE layer, routing. Returns (x, h) for a dense layer, or
        (x, h_bf16, topk_ids int32 [T, K], topk_weights fp32 [T, K]) for an MoE layer. ``tokens`` (the batch's
        token ids, [T]) is for a router that reads them (DeepSeek-V4's hash layers); this model's does not."""
        n1, n2 = self.norms[layer]
        x = x + self.attention(layer, self._rms(x, n1), seq_lens)
        h = self._rms(x, n2)
        if layer not in self.router:
            return x, h
        probs = torch.softmax(h @ self.router[layer], dim=-1)
        weights, ids = torch.topk(probs, self.config.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        return x, h.to(torch.bfloat16), ids.to(torch.int32), weights.to(torch.float32)

    @staticmethod
    def _swiglu_mlp(h: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor) -> torch.Tensor:
        a, gate = (h @ w_in).chunk(2, dim=-1)
        return (F.silu(a) * gate) @ w_out

    def dense_mlp(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        return self._swiglu_mlp(h, *self.dense[layer])

    def shared(self, layer: int, h_bf16: torch.Tensor) -> torch.Tensor:
        """Shared experts of an MoE layer (Attention side), from the same bf16 input the routed experts get."""
        h = h_bf16.to(torch.float32)
        out = torch.zeros_like(h)
        for w_in, w_out in self.shared_w[layer]:
            out = out + self._swiglu_mlp(h, w_in, w_out)
        return out

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return self._rms(x, self.final_norm)
