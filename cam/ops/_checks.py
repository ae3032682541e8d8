"""The one argument checker of the Python ops: every refusal names the op and the argument, before anything runs.

Each op validates once per call, inside the op itself (the eager body, or the fake impl when traced), so a caller
of ``torch.ops.cam.*`` gets the same checks as a caller of ``cam.ops.*``. The public wrappers only guard what the
op schema would otherwise reject with a bare ``RuntimeError`` (a ``None`` or a list where a tensor goes, a float
where an int goes): :meth:`Args.gate`.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch

DTypes = Union[torch.dtype, Tuple[torch.dtype, ...]]


def _names(dtypes: Tuple[torch.dtype, ...]) -> str:
    return " or ".join(str(d) for d in dtypes)


class Args:
    """Checks for one call of op ``op``. Methods raise ``TypeError`` (wrong kind or dtype) or ``ValueError`` (wrong
    shape, layout, device or value) with ``"<op>: <argument> ..."``."""

    def __init__(self, op: str):
        self.op = op

    def fail(self, name: str, why: str) -> ValueError:
        return ValueError(f"{self.op}: {name} {why}")

    # ---------------------------------------------------------------- kinds (what the schema needs)

    def gate(self, **arguments) -> None:
        """Kinds only: tensors must be tensors, ints ints (not bools). Pass ``name=(value, kind)`` with kind
        ``torch.Tensor`` or ``int``; ``out=`` goes through :meth:`outputs`."""
        for name, (value, kind) in arguments.items():
            if kind is torch.Tensor:
                self.is_tensor(name, value)
            elif kind is int:
                self.integer(name, value)
            else:
                raise AssertionError(f"gate: unknown kind {kind!r} for {name}")

    def is_tensor(self, name: str, value) -> torch.Tensor:
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{self.op}: {name} must be a torch.Tensor, got {type(value).__name__}")
        return value

    def tensor_list(self, name: str, value) -> Sequence[torch.Tensor]:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{self.op}: {name} must be a list of torch.Tensors, got {type(value).__name__}")
        for i, t in enumerate(value):
            self.is_tensor(f"{name}[{i}]", t)
        return value

    def integer(self, name: str, value, lo: Optional[int] = None, hi: Optional[int] = None,
                hi_name: str = "") -> int:
        """An int (bool refused: ``True`` as a layer or a type code is always a mistake) in ``[lo, hi)``;
        ``hi_name`` names the bound in the message (``"L"`` gives ``layer=3 outside [0, L=3)``)."""
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{self.op}: {name} must be an int, got {type(value).__name__}")
        if (lo is not None and value < lo) or (hi is not None and value >= hi):
            bound = f"{hi_name}={hi}" if hi_name else f"{hi}"
            raise ValueError(f"{self.op}: {name}={value} outside [{lo}, {bound})")
        return value

    # ---------------------------------------------------------------- tensors

    def tensor(self, name: str, value, dtype: DTypes, *, shape: Optional[Sequence[int]] = None,
               ndim: Optional[int] = None, layout: str = "") -> torch.Tensor:
        """A contiguous CPU tensor of ``dtype`` (or one of a tuple), with ``ndim`` dimensions and/or exactly
        ``shape``. ``layout`` names the dimensions in messages, e.g. ``"[M, K]"``."""
        t = value if isinstance(value, torch.Tensor) else self.is_tensor(name, value)
        got = t.dtype
        if got is not dtype and (type(dtype) is not tuple or got not in dtype):  # per call: no tuple built
            raise TypeError(f"{self.op}: {name} must be {_names(dtype if type(dtype) is tuple else (dtype,))}, "
                            f"got {got}")
        if ndim is not None and t.dim() != ndim:
            raise self.fail(name, f"must be {ndim}-D{' ' + layout if layout else ''}, got shape {tuple(t.shape)}")
        if shape is not None and t.shape != (shape if isinstance(shape, tuple) else tuple(shape)):
            raise self.fail(name, f"must have shape {list(shape)}{' ' + layout if layout else ''}, "
                                  f"got {list(t.shape)}")
        if not t.is_cpu:  # is_cpu, not device.type: this runs for every tensor of every call
            raise self.fail(name, f"is on {t.device}: the twin backend runs on CPU tensors")
        if not t.is_contiguous():
            raise self.fail(name, "must be contiguous (row-major); call .contiguous() first")
        return t

    def outputs(self, name: str, out, count: int) -> Optional[Tuple[torch.Tensor, ...]]:
        """``out=``: None, or ``count`` tensors (a tuple when ``count > 1``); their dtypes and shapes are checked by
        the op itself like every other argument."""
        if out is None:
            return None
        if count == 1:
            return (self.is_tensor(name, out),)
        if not isinstance(out, (tuple, list)) or len(out) != count:
            raise TypeError(f"{self.op}: {name} must be a tuple of {count} torch.Tensors, got "
                            f"{type(out).__name__}{'' if not isinstance(out, (tuple, list)) else f' of {len(out)}'}")
        for i, t in enumerate(out):
            if not isinstance(t, torch.Tensor):  # the name is formatted only for the message: this runs per call
                self.is_tensor(f"{name}[{i}]", t)
        return tuple(out)
