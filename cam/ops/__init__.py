"""torch-facing cam operators (``cam.ops.*`` and ``torch.ops.cam.*``), each with a fake implementation so it
traces under ``torch.compile``."""

from ..layer_weights import prepack_weights
from .dynamic_quant import dynamic_quant
from .gmm import gmm_multi_layer, gmm_swiglu_quant_multi_layer

__all__ = ["dynamic_quant", "gmm_multi_layer", "gmm_swiglu_quant_multi_layer", "prepack_weights"]
