"""Reference models driven end to end through cam's ops. ``PRESETS`` and ``ModelConfig`` are plain data
(``cam.models.config``); ``MoEModel`` (torch, cam's ops) is imported on first use."""

from .config import PRESETS, ModelConfig

__all__ = ["PRESETS", "ModelConfig", "MoEModel"]


def __getattr__(name: str):
    if name == "MoEModel":
        from .moe_model import MoEModel

        return MoEModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
