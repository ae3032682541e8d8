import torch

from .. import _C, _runtime
from .._tensor import desc

_ACTIVATION_DTYPES = (torch.bfloat16, torch.float16)


def _check(x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"dynamic_quant: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _ACTIVATION_DTYPES:
        raise TypeError(f"dynamic_quant: x must be bfloat16 or float16, got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"dynamic_quant: x must be 2-D [tokens, hidden], got shape {tuple(x.shape)}")
    if x.shape[1] < 1:
        raise ValueError(f"dynamic_quant: x must have at least one column, got shape {tuple(x.shape)}")
    if not x.is_contiguous():
        raise ValueError("dynamic_quant: x must be contiguous (row-major); call .contiguous() first")


@torch.library.custom_op("cam::dynamic_quant", mutates_args=())
def _dynamic_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    _check(x)
    if x.device.type != "cpu":
        raise ValueError(f"dynamic_quant: the twin backend runs on CPU tensors, got device {x.device}")
    q = torch.empty(x.shape, dtype=torch.int8)
    scale = torch.empty(x.shape[0], dtype=torch.float32)
    _runtime.run(lambda stream, allocate: _C.dynamic_quant(desc(x), desc(q), desc(scale), stream, allocate))
    return q, scale


@_dynamic_quant.register_fake
def _(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    _check(x)
    return x.new_empty(x.shape, dtype=torch.int8), x.new_empty((x.shape[0],), dtype=torch.float32)


def dynamic_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token symmetric int8 quantization (docs/numerics.md).

    Args:
        x: ``[M, H]`` bfloat16 or float16, contiguous, M >= 0, H >= 1.

    Returns:
        ``(q, scale)``: ``q`` int8 ``[M, H]`` = clamp(rint(x * (127 / amax)), -127, 127) with amax = max|x[m]|
        in fp32; ``scale`` fp32 ``[M]`` = amax / 127. A zero row gives q = 0, scale = 0; a row holding inf or NaN
        gives q = 0 and a non-finite scale, so the fault stays visible after dequantization.

    Raises:
        TypeError / ValueError: bad dtype, rank or layout, before anything runs.
    """
    _check(x)
    return torch.ops.cam.dynamic_quant(x)
