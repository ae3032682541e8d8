"""Exceptions raised by cam. Every failure from the C library arrives as a :class:`CamError` subclass that
carries the C status code (``status``) and the library's message, which names the op and the argument."""


class CamError(RuntimeError):
    """Base class. ``status`` is the aclnnStatus the C API returned."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


class InvalidArgumentError(CamError, ValueError):
    """A host-checked argument (shape, layout, attribute, value) was refused before any launch."""


class InvalidDtypeError(InvalidArgumentError, TypeError):
    """A tensor argument of a dtype the op does not take (C status CAM_ERR_PARAM_DTYPE), refused before any launch:
    a ``TypeError``, as Python reports a wrong type, and like every refused argument an
    :class:`InvalidArgumentError`."""


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


class ReplicaLostError(CommAbortedError):
    """An Attention rank's replica was fenced because one of its ranks died (replica isolation): this rank can no
    longer complete a round, and the rounds it had in flight are dropped. The other replicas go on.

    Attributes: ``replica``, ``dead_rank``, ``dropped_rounds`` (rounds this rank dispatched and never received).
    """

    def __init__(self, lost, rank: int, dropped_rounds: int, cause: CommAbortedError):
        """``lost``: the :class:`cam.comm.LostReplica` the plane reported (its ``replica`` and ``dead_rank``)."""
        super().__init__(f"Attention rank {rank}: replica {lost.replica} lost: Attention rank {lost.dead_rank} "
                         f"died; the {dropped_rounds} round(s) rank {rank} had in flight are dropped (replica "
                         f"isolation: the other replicas are served; a fenced replica does not rejoin the plane). "
                         f"Cause: {cause}", getattr(cause, "status", 0))
        self.replica = lost.replica
        self.dead_rank = lost.dead_rank
        self.dropped_rounds = dropped_rounds


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
    "CAM_ERR_PARAM_DTYPE": InvalidDtypeError,
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


class CommJoinError(CamError):
    """Another rank ended the creation handshake of a plane: it refused the plane (its reason is quoted) or its
    process died. The message names that rank; this rank's half-built plane is closed (no import left open)."""


class FFNNotServingError(CamError, TimeoutError):
    """An Attention rank's wait for the FFN ranks to serve (``AsyncAFDConnector.wait_ffn_serving``) ended without
    every FFN rank serving: one reported that it failed before its first iteration (its reason is quoted), or the
    bound expired. The message names each FFN rank not serving. Nothing was dispatched."""
