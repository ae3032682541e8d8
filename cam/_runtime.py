"""Each thread's default twin stream, and the rule that a torch-facing op has finished when it returns."""

import os
import threading

import torch

from . import _C

_local = threading.local()
_locks_guard = threading.Lock()
_stream_locks = {}


def sync_timeout_s() -> float:
    """How long an op call waits for its stream (CAM_SYNC_TIMEOUT_S, default 600 s). A hang is a bug: never 0."""
    value = float(os.environ.get("CAM_SYNC_TIMEOUT_S", "600"))
    if value <= 0:
        raise ValueError("CAM_SYNC_TIMEOUT_S must be positive")
    return value


def default_stream() -> "_C.Stream":
    """This thread's stream. Per thread, so ranks that are threads of one process never queue behind each other."""
    stream = getattr(_local, "stream", None)
    if stream is None:
        stream = _local.stream = _C.Stream()
    return stream


def stream_lock(stream) -> threading.Lock:
    """The lock that makes launch + synchronize on ``stream`` one step. A stream reports an error to whichever
    synchronize comes first, so two threads interleaving on one stream could take each other's errors (and one
    would return an unwritten output as if it had succeeded)."""
    with _locks_guard:
        lock = _stream_locks.get(id(stream))
        if lock is None:
            lock = _stream_locks[id(stream)] = threading.Lock()
        return lock


def forget_stream(stream) -> None:
    with _locks_guard:
        _stream_locks.pop(id(stream), None)


def run(launch, stream=None) -> None:
    """Runs ``launch(stream, allocate)`` and waits for the stream, so a CPU op has completed when it returns
    (torch CPU semantics). Workspace handed out by ``allocate`` lives until the stream is done with it. ``stream``
    defaults to this thread's stream; data-plane ops pass their communicator's own stream, because ranks that
    are threads of one process must not queue behind each other."""
    keep = []

    def allocate(nbytes: int):
        ws = torch.empty(nbytes, dtype=torch.uint8)
        keep.append(ws)
        return (ws.data_ptr(), [nbytes], [1], 4)

    if stream is None:
        stream = default_stream()
    from .graph import capture_for  # the capture hook; imported here because cam.graph builds on this module

    capture = capture_for(stream)
    if capture is not None:
        # Recorded, not run: workspace comes from the graph's pool and there is nothing to wait for (a synchronize
        # would break the capture). The graph's replay synchronizes.
        launch(stream, capture.allocate)
        return
    with stream_lock(stream):
        launch(stream, allocate)
        stream.synchronize(sync_timeout_s())
