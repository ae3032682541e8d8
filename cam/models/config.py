"""The reference models' shapes (``ModelConfig``) and presets: plain data, no torch, so that the simulator and
cam-run's flag checks use them without loading the model code."""

from __future__ import annotations

import dataclasses
from typing import Dict, List


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape of the model.

    Args:
        vocab_size: token vocabulary.
        hidden: model width H (the dispatch row width).
        num_heads: attention heads; ``hidden % num_heads == 0``.
        num_layers: decoder layers.
        first_dense_layers: leading layers with a dense MLP instead of MoE (DeepSeek's ``first_k_dense_replace``).
        num_experts: routed experts E.
        top_k: routed experts per token K.
        moe_intermediate: routed expert intermediate size I (W1 is [H, 2I]: act | gate).
        num_shared_experts: shared experts, computed on the Attention side.
        shared_intermediate: intermediate size of each shared expert.
        dense_intermediate: intermediate size of the dense MLP layers.
        seed: weights are a pure function of the config, seed included.
    """

    vocab_size: int = 512
    hidden: int = 128
    num_heads: int = 4
    num_layers: int = 3
    first_dense_layers: int = 1
    num_experts: int = 8
    top_k: int = 2
    moe_intermediate: int = 64
    num_shared_experts: int = 1
    shared_intermediate: int = 64
    dense_intermediate: int = 256
    seed: int = 0
    rms_eps: float = 1e-6

    def __post_init__(self):
        for name in ("vocab_size", "hidden", "num_heads", "num_layers", "num_experts", "top_k", "moe_intermediate"):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden % self.num_heads:
            raise ValueError(f"ModelConfig.hidden ({self.hidden}) must be a multiple of num_heads ({self.num_heads})")
        if not 0 <= self.first_dense_layers <= self.num_layers:
            raise ValueError("ModelConfig.first_dense_layers must be in [0, num_layers]")
        if self.top_k > self.num_experts:
            raise ValueError(f"ModelConfig.top_k ({self.top_k}) must be <= num_experts ({self.num_experts})")
        if self.num_shared_experts < 0:
            raise ValueError("ModelConfig.num_shared_experts must be >= 0")

    @property
    def moe_layers(self) -> List[int]:
        """Decoder layer ids that have an MoE block, in order; MoE layer j is ``moe_layers[j]``."""
        return list(range(self.first_dense_layers, self.num_layers))


PRESETS: Dict[str, ModelConfig] = {
    "tiny": ModelConfig(),
    "small": ModelConfig(hidden=256, num_heads=8, num_layers=4, num_experts=16, top_k=4, moe_intermediate=128,
                         shared_intermediate=128, dense_intermediate=512, vocab_size=1024),
}
