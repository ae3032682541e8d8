"""Golden implementations in plain numpy/torch, written from the docs and independent of the kernels."""

from .dynamic_quant import dynamic_quant

__all__ = ["dynamic_quant"]
