"""Which capture (if any) this thread is recording into: the state both the op runtime (``cam._runtime.run`` records
an op instead of running it) and ``cam.graph`` (which begins and ends captures) read, kept here so neither imports
the other for it."""

import threading

from . import _C


class _Local(threading.local):
    capture = None  # a class default: reading it on a thread that never captured raises (and costs) nothing


state = _Local()  # this thread's capture (cam.graph begins and ends it)


class Capture:
    def __init__(self, stream):
        self.stream = stream
        self.held = []

    def hold(self, args) -> None:
        """The arguments of a recorded op (its tensors): the graph keeps them while a replay may run on them."""
        self.held.append(args)

    def allocate(self, nbytes: int):
        """Workspace for a captured op: graph-owned, so the recorded launches keep valid addresses."""
        return (_C.capture_alloc(self.stream, nbytes), [nbytes], [1], 4)


def capture_in_thread():
    """This thread's capture, or None. ``cam._runtime.run`` consults it once per op: an op launched on the capture's
    stream (the compute ops join it by default) is recorded, neither synchronizing nor allocating its own
    workspace."""
    return state.capture
