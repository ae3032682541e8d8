"""Exceptions raised by cam. Every failure from the C library arrives as a :class:`CamError` subclass that
carries the C status code (``status``) and the library's message, which names the op and the argument."""


class CamError(RuntimeError):
    """Base class. ``status`` is the aclnnStatus the C API returned."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


class InvalidArgumentError(CamError, ValueError):
    """A host-checked argument (shape, dtype, attribute) was refused before any launch."""


class DeviceArgumentError(CamError, ValueError):
    """A device-resident argument (expert ids, group_list, layer_index) was refused by the kernel's pre-pass,
    before it wrote anything. Raised when the stream is synchronized."""


class KernelFaultError(CamError):
    """A kernel broke a hardware rule (reported by the twin with kernel, block and call site) or crashed."""


class CommTimeoutError(CamError, TimeoutError):
    """A device-side wait inside a started round expired; the message names the op, rank and awaited peer."""


class CommAbortedError(CamError):
    """The communicator's abort word was set while an op waited."""


class CommProtocolError(CamError):
    """Data-plane state broke an invariant of docs/protocol.md (a signal ahead of its round, records that disagree,
    a topology mismatch between ranks); the communicator is aborted."""


class SyncTimeoutError(CamError, TimeoutError):
    """The host stopped waiting for a stream; the queued work is still running."""


class CaptureInvalidatedError(CamError):
    """A capture rule was broken (a synchronize, a host-sourced copy, a host read of device data, a host task or a
    workspace that is not graph-owned, during a capture); the capture is invalidated and ending it fails."""


class GraphInvalidError(CamError):
    """The graph was destroyed or reset, or a resource it uses (a communicator) was closed."""


# Exception class per status name; the codes come from the C headers through cam._C (cam/cam_status.h,
# cam/acl_compat.h). A status without a class here raises CamError.
_CLASS_BY_NAME = {
    "ACLNN_ERR_PARAM_NULLPTR": InvalidArgumentError,
    "ACLNN_ERR_PARAM_INVALID": InvalidArgumentError,
    "CAM_ERR_DEVICE_ARGUMENT": DeviceArgumentError,
    "CAM_ERR_COMM_TIMEOUT": CommTimeoutError,
    "CAM_ERR_COMM_ABORTED": CommAbortedError,
    "CAM_ERR_KERNEL_FAULT": KernelFaultError,
    "CAM_ERR_SYNC_TIMEOUT": SyncTimeoutError,
    "CAM_ERR_COMM_PROTOCOL": CommProtocolError,
    "CAM_ERR_CAPTURE_INVALIDATED": CaptureInvalidatedError,
    "CAM_ERR_GRAPH_INVALID": GraphInvalidError,
}


def _by_status() -> dict:
    from . import _C  # the extension; errors.py itself stays importable without it

    codes = _C.status_codes()
    return {codes[name]: cls for name, cls in _CLASS_BY_NAME.items()}


_BY_STATUS = _by_status()


def from_status(status: int, message: str) -> CamError:
    """Builds the exception for a C status (used by the bindings)."""
    return _BY_STATUS.get(status, CamError)(f"{message} [status {status}]", status)
