"""cam: operators for asynchronous Attention-FFN disaggregated MoE prefill on Ascend NPU.

``cam.ops`` holds the torch-facing operators, ``cam.reference`` their independent goldens. Without an Ascend
toolkit the kernels run on the twin, a CPU implementation of the Ascend C subset they use.
"""

import os as _os

import torch as _torch  # noqa: F401  (registers torch.library before the ops module uses it)

from . import _C, errors
from .layer_weights import LayerWeights
from .topology import Topology
from .errors import (
    CamError,
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
    "ops",
    "reference",
    "backend",
    "cmake_dir",
    "include_dir",
    "CamError",
    "CommAbortedError",
    "CommProtocolError",
    "CommTimeoutError",
    "DeviceArgumentError",
    "InvalidArgumentError",
    "KernelFaultError",
    "SyncTimeoutError",
]
