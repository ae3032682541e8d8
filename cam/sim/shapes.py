"""What the simulator is told about the model and the deployment: a model shape and a topology.

Nothing here runs a kernel; shapes only feed the cost model (bytes, FLOPs, rows) and the schedule.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """Shape of an MoE decoder, as far as prefill cost and the AFD schedule need it.

    Args:
        layers: decoder layers.
        first_dense: leading layers with a dense MLP (no MoE round); the rest are MoE layers.
        hidden: H, the dispatch row width.
        experts: routed experts E (spread over the FFN ranks, ``E % F == 0``).
        top_k: K routed experts per token.
        moe_intermediate: I of a routed expert (W1 is [H, 2I], W2 is [I, H]).
        shared_experts / shared_intermediate: shared experts, computed on the Attention side.
        dense_intermediate: I of the dense MLP layers.
        attn_params: weights of one layer's attention projections (FLOPs per token = 2 * attn_params).
        attn_pair_flops: FLOPs per (query, key) pair of the score and value products (causal: len^2 / 2 pairs).
        context_flops_per_token: FLOPs per cached token of the context a prompt chunk attends to, spent once per
            chunk before its attention (chunked prefill, docs/sim.md §11): MLA keeps a latent KV and re-expands it
            (0 for attention that caches keys and values as they are).
        attn_window: 0 = every query attends to every earlier key (full causal attention). Otherwise compressed,
            sparse attention (DeepSeek-V4, docs/sim.md §11): every layer attends to the last ``attn_window`` keys;
            ``csa_layers`` layers also to the ``csa_topk`` compressed rows (one per ``csa_ratio`` keys) an indexer
            selects, scoring every compressed row at ``index_pair_flops`` FLOPs per (query, row);
            ``hca_layers`` layers also to every compressed row (one per ``hca_ratio`` keys).
    """

    layers: int
    first_dense: int
    hidden: int
    experts: int
    top_k: int
    moe_intermediate: int
    shared_experts: int
    shared_intermediate: int
    dense_intermediate: int
    attn_params: int
    attn_pair_flops: int
    context_flops_per_token: int = 0
    attn_window: int = 0
    csa_layers: int = 0
    csa_ratio: int = 1
    csa_topk: int = 0
    index_pair_flops: int = 0
    hca_layers: int = 0
    hca_ratio: int = 1

    def __post_init__(self):
        for name in ("layers", "hidden", "experts", "top_k", "moe_intermediate"):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelShape.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.first_dense <= self.layers:
            raise ValueError(f"ModelShape.first_dense must be in [0, layers], got {self.first_dense}")
        if self.top_k > self.experts:
            raise ValueError(f"ModelShape.top_k ({self.top_k}) must be <= experts ({self.experts})")
        self._check_sparse()
        for name in ("shared_experts", "shared_intermediate", "dense_intermediate", "attn_params", "attn_pair_flops",
                     "context_flops_per_token", "attn_window", "csa_layers", "csa_topk", "index_pair_flops",
                     "hca_layers"):
            if getattr(self, name) < 0:
                raise ValueError(f"ModelShape.{name} must be >= 0, got {getattr(self, name)}")

    def _check_sparse(self) -> None:
        if self.csa_ratio < 1 or self.hca_ratio < 1:
            raise ValueError("ModelShape.csa_ratio and hca_ratio must be >= 1")
        if self.csa_layers + self.hca_layers > self.layers:
            raise ValueError(f"ModelShape: csa_layers + hca_layers ({self.csa_layers + self.hca_layers}) exceed "
                             f"layers ({self.layers})")
        if (self.csa_layers or self.hca_layers) and not self.attn_window:
            raise ValueError("ModelShape: compressed-attention layers need attn_window >= 1")

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense

    @staticmethod
    def from_config(config) -> "ModelShape":
        """The shape of a ``cam.models.ModelConfig`` (the model ``cam-run`` drives): standard multi-head attention
        with q, k, v, o projections of [H, H], so 4 H^2 weights and 4 H FLOPs per (query, key) pair."""
        h = config.hidden
        return ModelShape(layers=config.num_layers, first_dense=config.first_dense_layers, hidden=h,
                          experts=config.num_experts, top_k=config.top_k, moe_intermediate=config.moe_intermediate,
                          shared_experts=config.num_shared_experts, shared_intermediate=config.shared_intermediate,
                          dense_intermediate=config.dense_intermediate, attn_params=4 * h * h,
                          attn_pair_flops=4 * h)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d, what: str = "model shape") -> "ModelShape":
        """A shape from a JSON object, every fault named: not an object, unknown or missing fields, a field that is
        not an integer."""
        if not isinstance(d, dict):
            raise ValueError(f"{what}: expected a JSON object of ModelShape fields, got {type(d).__name__}")
        fields = {f.name: f for f in dataclasses.fields(ModelShape)}
        unknown = sorted(set(d) - set(fields))
        if unknown:
            raise ValueError(f"{what}: unknown field(s) {unknown}; the fields are {sorted(fields)}")
        missing = sorted(n for n, f in fields.items() if n not in d and f.default is dataclasses.MISSING)
        if missing:
            raise ValueError(f"{what}: missing field(s) {missing}")
        for name, v in d.items():
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"{what}: field {name!r} must be an integer, got {v!r}")
        return ModelShape(**d)


# DeepSeek-V3 (config.json of deepseek-ai/DeepSeek-V3): 61 layers, first_k_dense_replace 3, hidden 7168,
# 256 routed experts, top-8, moe_intermediate 2048, 1 shared expert, dense intermediate 18432. MLA attention:
# q_lora 1536, kv_lora 512, 128 heads, qk_nope 128 + qk_rope 64, v 128. Projection weights per layer:
# 7168*1536 + 1536*128*192 + 7168*(512+64) + 512*128*(128+128) + 128*128*7168 = 187,105,280.
# Pair FLOPs (prefill, heads expanded): 2*128*192 (scores) + 2*128*128 (values) = 81,920.
# Context of a chunk (vLLM's MLACommonImpl._compute_prefill_context, vllm/v1/attention/backends/mla/common.py:
# the cached latent kv_c of the context is gathered and up-projected through kv_b_proj into per-head K_nope and V
# before a non-causal attention over it): 2*512*128*(128+128) = 33,554,432 FLOPs per cached token per chunk.
DEEPSEEK_V3 = ModelShape(layers=61, first_dense=3, hidden=7168, experts=256, top_k=8, moe_intermediate=2048,
                         shared_experts=1, shared_intermediate=2048, dense_intermediate=18432,
                         attn_params=187_105_280, attn_pair_flops=81_920, context_flops_per_token=33_554_432)


# DeepSeek-V4-Flash (deepseek-ai/DeepSeek-V4-Flash; its config as published in NVIDIA NeMo AutoModel's
# DeepseekV4Config defaults and the model's coverage page, the Hugging Face dequantized excerpts of its config.json,
# and the per-layer attention pattern of antirez/ds4's MODEL_CARD.md, a synopsis of the official model card): 43
# layers, all MoE (the first 3 hash-routed, still MoE rounds), hidden 4096, 256 routed experts, top-6,
# moe_intermediate 2048, 1 shared expert. Attention: 64 query heads over one 512-wide KV head (MQA), so a (query, key)
# pair costs 2*64*512 (scores) + 2*64*512 (values) = 131,072 FLOPs. Projections per layer: wq_a 4096*1024, wq_b
# 1024*64*512, wkv 4096*512, wo_a 8 groups of (8*512)*1024, wo_b (8*1024)*4096: 4,194,304 + 33,554,432 + 2,097,152 +
# 33,554,432 + 33,554,432 = 106,954,752 (the compressor and indexer projections left out: not in the sources).
# Every layer keeps a 128-key sliding window; compress_ratios: layers 0 and 1 none, the even layers from 2 (21 of
# them) ratio 4 with the indexer selecting index_topk 512 compressed rows (64 index heads of 128: 2*64*128 = 16,384
# FLOPs per (query, compressed row) scored), the odd layers from 3 (20) ratio 128, every compressed row attended.
DEEPSEEK_V4_FLASH = ModelShape(layers=43, first_dense=0, hidden=4096, experts=256, top_k=6, moe_intermediate=2048,
                               shared_experts=1, shared_intermediate=2048, dense_intermediate=0,
                               attn_params=106_954_752, attn_pair_flops=131_072, attn_window=128,
                               csa_layers=21, csa_ratio=4, csa_topk=512, index_pair_flops=16_384,
                               hca_layers=20, hca_ratio=128)


def model_presets() -> Dict[str, ModelShape]:
    """``deepseek-v3`` plus every ``cam.models`` preset (by the same name), so cam-run's models are simulated with
    exactly the shape cam-run runs."""
    from ..models import PRESETS

    out = {name: ModelShape.from_config(cfg) for name, cfg in PRESETS.items()}
    out["deepseek-v3"] = DEEPSEEK_V3
    out["deepseek-v4-flash"] = DEEPSEEK_V4_FLASH
    return out


@dataclasses.dataclass(frozen=True)
class SimTopology:
    """The deployment: D replicas of P Attention participants each, F FFN ranks.

    Args:
        slots: rounds in flight per Attention rank (docs/protocol.md §2).
        capacity: rows one work item may bring to one FFN rank; a round with more rows for an FFN rank is delivered
            as several work items (chunks). ``None`` = the worst case, never chunked.
        ubatches: micro-batches per layer (cam-run: 2 whenever a batch has two requests or more).
        ubatch_split: ``requests`` (cam-run: every other request) or ``tokens`` (equal token spans, a prompt split
            across micro-batches; docs/sim.md §11).
        overlap: colocated mode only: one micro-batch's all-to-all overlaps the other's compute (docs/sim.md §11).
    """

    D: int
    F: int
    P: int = 1
    slots: int = 2
    capacity: Optional[int] = None
    ubatches: int = 2
    ubatch_split: str = "requests"
    overlap: bool = False

    def __post_init__(self):
        if self.ubatch_split not in ("requests", "tokens"):
            raise ValueError(f"SimTopology.ubatch_split must be 'requests' or 'tokens', got {self.ubatch_split!r}")
        for name in ("D", "F", "P", "slots", "ubatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"SimTopology.{name} must be >= 1, got {getattr(self, name)}")
        if self.capacity is not None and self.capacity < 1:
            raise ValueError(f"SimTopology.capacity must be >= 1 or None, got {self.capacity}")
        if self.slots < self.ubatches:
            # dispatch_send of micro-batch `slots` waits for the slot of micro-batch 0, which is freed only by its
            # combine_recv, which the schedule issues after every dispatch of the layer: the real run would time out.
            raise ValueError(f"SimTopology.slots ({self.slots}) < ubatches ({self.ubatches}): the schedule "
                             "dispatches every micro-batch of a layer before its first combine_recv, so "
                             "dispatch_send would wait for a slot that is never freed (deadlock)")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
