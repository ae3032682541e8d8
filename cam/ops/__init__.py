"""torch-facing cam operators (``cam.ops.*`` and ``torch.ops.cam.*``), each with a fake implementation so it
traces under ``torch.compile``."""

from ..layer_weights import prepack_weights
from .combine_recv import combine_recv
from .combine_send import combine_send
from .dispatch_recv import dispatch_recv
# The stop word of dispatch_recv (host calls, not torch ops: no entry in __all__, which lists the torch ops).
from .dispatch_recv import dispatch_recv_resume, dispatch_recv_stop, dispatch_recv_stop_word  # noqa: F401
from .dispatch_send import dispatch_send
from .dynamic_quant import dynamic_quant
from .gmm import gmm_multi_layer, gmm_swiglu_quant_multi_layer

__all__ = [
    "dynamic_quant",
    "dispatch_send",
    "dispatch_recv",
    "combine_send",
    "combine_recv",
    "gmm_swiglu_quant_multi_layer",
    "gmm_multi_layer",
    "prepack_weights",
]
