"""cam: operators for asynchronous Attention-FFN disaggregated MoE prefill on Ascend NPU.

``cam.ops`` holds the torch-facing operators, ``cam.reference`` their independent goldens. Without an Ascend
toolkit the kernels run on the twin, a CPU implementation of the Ascend C subset they use.
"""

import os as _os
import sys as _sys
import time as _time

# When this package began importing (before torch): the `cam-run` command's own start for its wall-time profile.
_import_started = _time.time()

import torch as _torch  # noqa: F401  (registers torch.library before the ops module uses it)


def _has_extension(directory: str) -> bool:
    return any(name.startswith("_C.") for name in _os.listdir(directory))


def _installed_package_this_checkout_shadows():
    """The installed cam's directory when this ``cam/`` is an uncompiled source checkout found first on sys.path.

    ``python -c``, ``python -m`` and ``python -m pytest`` put the working directory first on ``sys.path``, so
    typing them at the root of a clone finds the clone's ``cam/`` (sources, no compiled ``_C``) before the
    installed package the README's ``pip install .`` put in site-packages."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    if _has_extension(here):
        return None
    for entry in _sys.path:
        candidate = _os.path.join(_os.path.abspath(entry or _os.curdir), "cam")
        if candidate != here and _os.path.isdir(candidate) and _has_extension(candidate):
            return candidate
    return None


_installed = _installed_package_this_checkout_shadows()
if _installed is not None:
    # Everything below (the extension, every submodule, the SDK paths derived from __file__) then comes from the
    # installed package; only this file is read from the checkout. cam's own processes (cam-run workers, the test
    # suite) keep the checkout off sys.path altogether.
    __path__[:] = [_installed]
    __file__ = _os.path.join(_installed, "__init__.py")

try:
    from . import _C
except ImportError as _e:
    if _has_extension(_os.path.dirname(_os.path.abspath(__file__))):
        raise  # a compiled package whose _C failed for another reason: keep the real error
    raise ImportError(
        f"cam is not installed: the source checkout at {_os.path.dirname(_os.path.abspath(__file__))} holds no "
        f"compiled extension; run `pip install .` first (README)") from None

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

from .comm import Comm, LostReplica  # noqa: E402
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
    "LostReplica",
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
