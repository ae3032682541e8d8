"""How every cam op is registered with torch: the one place that turns a typed Python function into
``torch.ops.cam.<name>``.

Not ``torch.library.custom_op``: that wraps the backend function in ``torch._disable_dynamo``, which imports
``torch._dynamo`` (about 0.7 s, more on a loaded machine) at the first eager call, and routes every call through
three Python kernels (Autograd, ADInplaceOrView, backend), about 50 µs for an op that does nothing. Here the schema
is inferred from the function's annotations exactly as ``custom_op`` infers it, the function is the op's
CompositeExplicitAutograd kernel (one Python kernel per call), autograd gets torch's C++ fallback, and the fake
implementation goes through ``torch.library.register_fake``. ``torch.compile`` still sees one opaque, pt2-compliant
op with declared mutations and a fake impl, so tracing, ``opcheck`` and the out= contract are unchanged.

Each op has one body, registered for every backend (CompositeExplicitAutograd) and named for the NPU dispatch key
(PrivateUse1, torch_npu's "npu") too: the body passes its tensors to the C API, and cam._runtime picks the stream
and workspace allocator from their device. Its fake implementation runs the same C argument checks on data-less
descriptors (cam._runtime.check): the C API is the only rule set (dtype, shape, layout, the Comm's bounds and role).

The public ``cam.ops.*`` functions call the :class:`Op`, which skips even that one dispatcher round trip when nothing
between the caller and the kernel could want to see the call (:func:`direct_ok`): then the same body runs directly
and bumps the same version counters. Anything else (tensor subclasses, fake tensors, torch function or dispatch
modes, functorch transforms, tracing, ``torch.compile``, autograd that must record the call, non-CPU tensors) goes
through ``torch.ops.cam.<name>``, so what those see is unchanged.
"""

from __future__ import annotations

import inspect
from typing import Callable, Sequence

import torch

_LIB = torch.library.Library("cam", "DEF")


_Tensor = torch.Tensor
_torch_C = torch._C
_is_compiling = torch.compiler.is_compiling
_increment_version = torch._C._increment_version


def direct_ok(args) -> bool:
    """True when calling the kernel function directly is indistinguishable from going through the dispatcher: not
    compiling or tracing, no torch function / dispatch mode and no functorch transform active, and every tensor
    argument (or list entry) a plain CPU ``torch.Tensor`` that autograd need not record (no grad required, or grad
    mode off). Each test is a TLS or attribute read: this runs on every call."""
    if (_is_compiling() or _torch_C._len_torch_function_stack() or _torch_C._len_torch_dispatch_stack()
            or _torch_C._are_functorch_transforms_active() or _torch_C._get_tracing_state() is not None):
        return False
    grad = _torch_C.is_grad_enabled()
    for a in args:
        if type(a) is list:
            for t in a:
                if type(t) is not _Tensor or not t.is_cpu or (grad and t.requires_grad):
                    return False
        elif isinstance(a, _Tensor):
            if type(a) is not _Tensor or not a.is_cpu or (grad and a.requires_grad):
                return False
    return True


class Op:
    """A registered op. Calling it runs the op's one body (directly when :func:`direct_ok`, else through
    ``torch.ops.cam.<name>``); ``register_fake`` adds its fake (meta) implementation, as on a ``custom_op``."""

    def __init__(self, name: str, fn: Callable, mutated: Sequence[int]):
        self.name = name
        self.qualname = f"cam::{name}"
        self._fn = fn
        self._mutated = tuple(mutated)
        self._overload = getattr(getattr(torch.ops.cam, name), "default")

    def __call__(self, *args) -> None:
        if direct_ok(args):
            self._fn(*args)
            _increment_version([args[i] for i in self._mutated])
        else:
            self._overload(*args)

    def register_fake(self, fn: Callable) -> Callable:
        torch.library.register_fake(self.qualname, fn, lib=_LIB)
        return fn


def op(name: str, mutates_args: Sequence[str]) -> Callable[[Callable], Op]:
    """Decorator: defines ``cam::<name>`` with the schema of the decorated function (``mutates_args`` are its
    ``Tensor(a!)`` arguments) and registers the function as its one kernel: for every backend, NPU included."""

    def register(fn: Callable) -> Op:
        schema = torch.library.infer_schema(fn, mutates_args=tuple(mutates_args))
        _LIB.define(name + schema, tags=(torch.Tag.pt2_compliant_tag,))
        params = list(inspect.signature(fn).parameters)
        mutated = tuple(params.index(a) for a in mutates_args)

        def kernel(*args):
            fn(*args)
            # The kernel writes through raw pointers below autograd: bump the version counters of what it mutated,
            # as an in-place torch op does, so autograd notices a saved tensor that changed.
            _increment_version([args[i] for i in mutated])

        _LIB.impl(name, kernel, "CompositeExplicitAutograd")
        # The NPU key by name (CompositeExplicitAutograd covers it already): the same body, whose tensors' device
        # picks torch_npu's stream (cam._runtime.run).
        _LIB.impl(name, kernel, "PrivateUse1")
        return Op(name, fn, mutated)

    return register
