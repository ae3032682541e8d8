"""The process-wide twin stream and the rule that a torch-facing op has finished when it returns."""

import os
import threading

import torch

from . import _C

_lock = threading.Lock()
_stream = None


def sync_timeout_s() -> float:
    """How long an op call waits for its stream (CAM_SYNC_TIMEOUT_S, default 600 s). A hang is a bug: never 0."""
    value = float(os.environ.get("CAM_SYNC_TIMEOUT_S", "600"))
    if value <= 0:
        raise ValueError("CAM_SYNC_TIMEOUT_S must be positive")
    return value


def default_stream() -> "_C.Stream":
    global _stream
    with _lock:
        if _stream is None:
            _stream = _C.Stream()
        return _stream


def run(launch, stream=None) -> None:
    """Runs ``launch(stream, allocate)`` and waits for the stream, so a CPU op has completed when it returns
    (torch CPU semantics). Workspace handed out by ``allocate`` lives until the stream is done with it. ``stream``
    defaults to the process-wide stream; data-plane ops pass their communicator's own stream, because ranks that
    are threads of one process must not queue behind each other."""
    keep = []

    def allocate(nbytes: int):
        ws = torch.empty(nbytes, dtype=torch.uint8)
        keep.append(ws)
        return (ws.data_ptr(), [nbytes], [1], 4)

    if stream is None:
        stream = default_stream()
    launch(stream, allocate)
    stream.synchronize(sync_timeout_s())
