import torch

from .. import _C, _runtime
from . import _library
from ._kinds import Args

_ARGS = Args("dynamic_quant")  # holds only the op's name: one for every call


@_library.op("dynamic_quant", mutates_args=("q", "scale"))
def _dynamic_quant(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> None:
    _runtime.run(_C.dynamic_quant, x, q, scale, tensor=x)


@_dynamic_quant.register_fake
def _(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> None:
    _runtime.check(_C.dynamic_quant, x, q, scale)


def dynamic_quant(x: torch.Tensor, *, out=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token symmetric int8 quantization (docs/numerics.md).

    Args:
        x: ``[M, H]`` bfloat16 or float16, contiguous, M >= 0, H >= 1.
        out: optional ``(q, scale)`` to write into (int8 ``[M, H]``, fp32 ``[M]``), e.g. static buffers of a
            captured loop; allocated when not given.

    Returns:
        ``(q, scale)``: ``q`` int8 ``[M, H]`` = clamp(rint(x * (127 / amax)), -127, 127) with amax = max|x[m]|
        in fp32; ``scale`` fp32 ``[M]`` = amax / 127. A zero row gives q = 0, scale = 0; a row holding inf or NaN
        gives q = 0 and a non-finite scale, so the fault stays visible after dequantization.

    Raises:
        cam.InvalidDtypeError (a TypeError) / cam.InvalidArgumentError (a ValueError): bad dtype / rank, shape or
            layout of ``x`` or ``out``, naming the argument, before anything runs; TypeError: not a tensor.
    """
    args = _ARGS
    if not isinstance(x, torch.Tensor):
        args.is_tensor("x", x)
    given = args.outputs("out", out, 2)
    if given is None:
        q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
        scale = torch.empty(x.shape[:1], dtype=torch.float32, device=x.device)
    else:
        q, scale = given
    _dynamic_quant(x, q, scale)
    return q, scale
