"""Where an op on NPU tensors runs: torch_npu's current stream on the tensors' device (wrapped by its aclrtStream
handle; cam never destroys it) and workspace from torch's allocator on that device (docs/ascend.md §7). The ops
themselves are the same single bodies for every device (cam.ops._library registers them for the NPU dispatch key
too); cam._runtime.run asks this module for the stream and allocator when an op's tensors are not on the CPU, then
follows the CPU path's rule: the op has completed when it returns (bounded by CAM_SYNC_TIMEOUT_S), so
device-detected errors surface as the op's exception and the workspace outlives its use.

Tested against a stub torch_npu that registers a real "npu" device backed by host memory (tests/test_ascend_npu.py):
the twin then runs the kernels on those tensors through torch.ops.cam, and they must match the CPU path bit for bit.
Nothing in this module has run on an NPU."""

import importlib

import torch

from . import _C

_registered = False
_streams = {}  # aclrtStream handle -> its cam._C.Stream wrapper: one per stream, so one stream lock per stream


def _torch_npu():
    try:
        return importlib.import_module("torch_npu")
    except (ImportError, OSError):  # absent, or present without its CANN libraries: cam's CPU path still works
        return None


class _Workspace(list):
    """One op call's workspace on an NPU device, as cam._runtime's CPU one: the buffers stay referenced until the
    stream is done with them (parked with the call after a sync timeout)."""

    __slots__ = ("device",)

    def __init__(self, device: torch.device):
        super().__init__()
        self.device = device

    def __call__(self, nbytes: int):
        ws = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        self.append(ws)
        return (ws.data_ptr(), [nbytes], [1], 4)


def stream_and_workspace(device: torch.device):
    """(stream, allocator) for an op on ``device``'s tensors: torch_npu's current stream there, by handle."""
    npu = _torch_npu()
    if npu is None:
        raise ValueError(f"a cam op got tensors on {device}, but torch_npu is not importable: cam runs CPU tensors on "
                         f"the twin and NPU tensors through torch_npu")
    handle = int(npu.npu.current_stream(device).npu_stream)
    stream = _streams.get(handle)
    if stream is None:
        stream = _streams.setdefault(handle, _C.Stream.wrap(handle))
    return stream, _Workspace(device)


def capture_allocator(stream):
    """When ``stream`` (torch_npu's current stream) is inside a capture the framework began (its NPUGraph, which
    cam adopts from the runtime: docs/graph.md "Inside a framework's graph"), the allocator of cam's workspace pool
    for that capture (never freed while the process lives); else None. An invalidated capture counts as one: the
    op is then refused by the capture rules instead of running eagerly."""
    status, _ = _C.capture_info(stream)
    if status == _NOT_CAPTURING:
        return None
    return lambda nbytes: (_C.capture_alloc(stream, nbytes), [nbytes], [1], 4)


def release_framework_graphs(stream) -> None:
    """Tells cam that the framework destroyed every graph it captured on ``stream`` (cam never hears of it): the
    synchronizes of ``stream`` stop reading those graphs' status records, and the communicators their data-plane ops
    kept in flight are released (a Comm closes only then). Their workspace stays allocated for the life of the
    process (docs/graph.md, "Inside a framework's graph"). Refused while the stream still captures."""
    _C.capture_release_adopted(stream)


_NOT_CAPTURING = {name: value for value, name in _C.capture_statuses().items()}["none"]


def register() -> bool:
    """Whether NPU tensors can run (torch_npu importable); checked once. The ops' NPU kernels are registered with
    the ops themselves (cam.ops._library), whatever this returns: without torch_npu there are no NPU tensors."""
    global _registered
    if not _registered:
        _registered = _torch_npu() is not None
    return _registered


def registered() -> bool:
    return _registered
