"""What the public ``cam.ops.*`` wrappers check before an op's schema sees the arguments: their kinds only (a
tensor where a tensor goes, an int where an int goes, ``out=`` of the documented arity), which the schema would
otherwise refuse with a bare ``RuntimeError`` that names neither op nor argument. Every rule on a tensor's dtype,
shape, layout or value, and every bound of the Comm, is the C API's (host/src/<op>.cpp): the op's one body and its
fake implementation both reach it, so a refusal has one set of words for Python, C and C++ callers.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch


class Args:
    """Kind checks for one call of op ``op``; each raises ``TypeError("<op>: <argument> must be ...")``."""

    def __init__(self, op: str):
        self.op = op

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

    def integer(self, name: str, value) -> int:
        """An int, bool refused: ``True`` as a layer or a type code is always a mistake. Its range is the op's."""
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{self.op}: {name} must be an int, got {type(value).__name__}")
        return value

    def outputs(self, name: str, out, count: int) -> Optional[Tuple[torch.Tensor, ...]]:
        """``out=``: None, or ``count`` tensors (a tuple when ``count > 1``); their dtypes and shapes are the op's
        rules, like every other argument's."""
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
