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


# Status codes from cam/cam_status.h and cam/acl_compat.h.
_BY_STATUS = {
    161001: InvalidArgumentError,  # ACLNN_ERR_PARAM_NULLPTR
    161002: InvalidArgumentError,  # ACLNN_ERR_PARAM_INVALID
    561201: DeviceArgumentError,
    561202: CommTimeoutError,
    561203: CommAbortedError,
    561204: KernelFaultError,
    561205: SyncTimeoutError,
    561210: CommProtocolError,
}


def from_status(status: int, message: str) -> CamError:
    """Builds the exception for a C status (used by the bindings)."""
    return _BY_STATUS.get(status, CamError)(f"{message} [status {status}]", status)
