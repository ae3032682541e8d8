"""cam: operators for asynchronous Attention-FFN disaggregated MoE prefill on Ascend NPU.

``cam.ops`` holds the torch-facing operators, ``cam.reference`` their independent goldens. Without an Ascend
toolkit the kernels run on the twin, a CPU implementation of the Ascend C subset they use.
"""

import os as _os
import sys as _sys

import torch as _torch  # noqa: F401  (registers torch.library before the ops module uses it)


def _shadowing_checkout_error(cause: ImportError) -> ImportError:
    """The ImportError to raise when ``cam`` was found in a source checkout that holds no compiled ``_C``.

    ``python -c``, ``python -m`` and ``python -m pytest`` put the working directory first on ``sys.path``, so
    typing them at the root of a clone imports the clone's ``cam/`` instead of the installed package. Without this
    the user sees Python's "partially initialized module (most likely due to a circular import)" riddle."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    if any(name.startswith("_C.") for name in _os.listdir(here)):
        return cause  # a compiled package whose _C failed for another reason: keep the real error
    installed = None
    for entry in _sys.path:
        candidate = _os.path.join(_os.path.abspath(entry or _os.curdir), "cam")
        if candidate != here and _os.path.isdir(candidate) and any(
                name.startswith("_C.") for name in _os.listdir(candidate)):
            installed = candidate
            break
    where = f"the installed package at {installed}" if installed else "an installed cam (pip install .)"
    return ImportError(
        f"cam was imported from the source checkout at {here}, which has no compiled extension, and it shadows "
        f"{where} because the current directory comes first on sys.path: run Python from another directory, or "
        f"use the installed commands (cam-run, cam-bench, pytest) which do not put the checkout on sys.path")


try:
    from . import _C
except ImportError as _e:
    raise _shadowing_checkout_error(_e) from None

from . import errors  # noqa: E402
from .layer_weights import LayerWeights
from .topology import Topology
from .errors import (
    CamError,
    CaptureInvalidatedError,
    GraphInvalidError,
    CommAbortedError,
    CommProtocolError,
    CommTimeoutError,
    DeviceArgumentError,
    InvalidArgumentError,
    KernelFaultError,
    SyncTimeoutError,
)

_C._set_error_factory(errors.from_status)

from .comm import Comm  # noqa: E402
from .graph import Graph  # noqa: E402
from . import ops, reference  # noqa: E402
from . import _npu  # noqa: E402

_npu.register()  # NPU implementations of the ops, only where torch_npu is importable

__version__ = "0.1.0"


def backend() -> str:
    """"twin" (the kernels run on the CPU twin) or "ascend" (libcam_aclnn is built for Ascend and the torch ops have
    their NPU implementations, i.e. torch_npu is importable). A build for Ascend without torch_npu reports
    "ascend (torch_npu not importable)": its C API works, the torch ops do not take NPU tensors."""
    name = _C.backend()
    if name == "ascend" and not _npu.registered():
        return "ascend (torch_npu not importable)"
    return name


def cmake_dir() -> str:
    """Directory holding camConfig.cmake: ``cmake -Dcam_DIR=$(python -m cam --cmake-dir)``."""
    return _os.path.join(_os.path.dirname(__file__), "lib", "cmake", "cam")


def include_dir() -> str:
    return _os.path.join(_os.path.dirname(__file__), "include")


__all__ = [
    "LayerWeights",
    "Topology",
    "Comm",
    "Graph",
    "ops",
    "reference",
    "backend",
    "cmake_dir",
    "include_dir",
    "CamError",
    "CaptureInvalidatedError",
    "CommAbortedError",
    "CommProtocolError",
    "CommTimeoutError",
    "DeviceArgumentError",
    "GraphInvalidError",
    "InvalidArgumentError",
    "KernelFaultError",
    "SyncTimeoutError",
]
