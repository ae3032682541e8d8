"""Reference models driven end to end through cam's ops."""

from .moe_model import PRESETS, ModelConfig, MoEModel

__all__ = ["PRESETS", "ModelConfig", "MoEModel"]
