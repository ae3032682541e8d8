"""torch-facing cam operators (``cam.ops.*`` and ``torch.ops.cam.*``), each with a fake implementation so it
traces under ``torch.compile``."""

from .dynamic_quant import dynamic_quant

__all__ = ["dynamic_quant"]
