"""How every cam op is registered with torch: the one place that turns a typed Python function into
``torch.ops.cam.<name>``.

Not ``torch.library.custom_op``: that wraps the backend function in ``torch._disable_dynamo``, which imports
``torch._dynamo`` (about 0.7 s, more on a loaded machine) at the first eager call, and routes every call through
three Python kernels (Autograd, ADInplaceOrView, backend), about 50 µs for an op that does nothing. Here the schema
is inferred from the function's annotations exactly as ``custom_op`` infers it, the function is the op's
CompositeExplicitAutograd kernel (one Python kernel per call), autograd gets torch's C++ fallback, and the fake
implementation goes through ``torch.library.register_fake``. ``torch.compile`` still sees one opaque, pt2-compliant
op with declared mutations and a fake impl, so tracing, ``opcheck`` and the out= contract are unchanged.
"""

from __future__ import annotations

import inspect
from typing import Callable, Sequence

import torch

_LIB = torch.library.Library("cam", "DEF")


class Op:
    """A registered op: ``register_fake`` adds its fake (meta) implementation, as on a ``custom_op``."""

    def __init__(self, name: str):
        self.name = name
        self.qualname = f"cam::{name}"

    def register_fake(self, fn: Callable) -> Callable:
        torch.library.register_fake(self.qualname, fn, lib=_LIB)
        return fn


def op(name: str, mutates_args: Sequence[str]) -> Callable[[Callable], Op]:
    """Decorator: defines ``cam::<name>`` with the schema of the decorated function (``mutates_args`` are its
    ``Tensor(a!)`` arguments) and registers the function as its kernel for every backend cam has not registered a
    kernel of its own for (``cam._npu`` adds NPU kernels)."""

    def register(fn: Callable) -> Op:
        schema = torch.library.infer_schema(fn, mutates_args=tuple(mutates_args))
        _LIB.define(name + schema, tags=(torch.Tag.pt2_compliant_tag,))
        params = list(inspect.signature(fn).parameters)
        mutated = tuple(params.index(a) for a in mutates_args)

        def kernel(*args):
            fn(*args)
            # The kernel writes through raw pointers below autograd: bump the version counters of what it mutated,
            # as an in-place torch op does, so autograd notices a saved tensor that changed.
            torch.autograd.graph.increment_version(tuple(args[i] for i in mutated))

        _LIB.impl(name, kernel, "CompositeExplicitAutograd")
        return Op(name)

    return register
