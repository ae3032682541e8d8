import torch

from .. import _C, _runtime
from ..errors import InvalidArgumentError
from . import _library
from ._checks import Args

_ACTIVATION_DTYPES = (torch.bfloat16, torch.float16)
_ARGS = Args("dynamic_quant")  # holds only the op's name: one for every call


def _check(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> None:
    args = _ARGS
    args.tensor("x", x, _ACTIVATION_DTYPES, ndim=2, layout="[tokens, hidden]")
    if x.shape[1] < 1:
        raise args.fail("x", f"must have at least one column, got shape {tuple(x.shape)}")
    args.tensor("out[0] (q)", q, torch.int8, shape=x.shape)
    args.tensor("out[1] (scale)", scale, torch.float32, shape=(x.shape[0],))


@_library.op("dynamic_quant", mutates_args=("q", "scale"))
def _dynamic_quant(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> None:
    _check(x, q, scale)
    _runtime.run(_C.dynamic_quant, x, q, scale)


@_dynamic_quant.register_direct
def _(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> None:
    # Plain CPU tensors (direct_ok). The C API's checks of dynamic_quant (dtypes, rank, at least one column, shapes,
    # row-major strides) accept nothing _check refuses and refuse before anything is written, so they run alone:
    # validation once per call. After a refusal _check runs to raise what the dispatcher path raises, naming the
    # argument as documented; it passes only where the C API is stricter, and then the C API's error stands.
    try:
        _runtime.run(_C.dynamic_quant, x, q, scale)
    except InvalidArgumentError:
        _check(x, q, scale)
        raise


@_dynamic_quant.register_fake
def _(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> None:
    _check(x, q, scale)


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
        TypeError / ValueError: bad dtype, rank, layout or ``out``, naming the argument, before anything runs.
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
