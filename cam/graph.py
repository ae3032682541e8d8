"""Capture a sequence of cam ops once and replay it with one launch: ``cam.Graph``, shaped like
``torch.cuda.CUDAGraph`` / ``torch_npu.npu.NPUGraph`` over cam's C API (cam/cam_graph.h). docs/graph.md has the rules.

    g = cam.Graph()
    with g.capture():                      # ops inside record instead of running; nothing synchronizes
        cam.ops.gmm_swiglu_quant_multi_layer(..., out=(y, y_scale))
        cam.ops.gmm_multi_layer(..., out=out)
    g.replay()                             # one graph launch + one synchronize; inputs/outputs are the static
                                           # tensors the capture saw (refill the inputs in place between replays)
"""

import contextlib
import threading
import weakref

from . import _C, _runtime
from ._capture import _Capture, _local, capture_in_thread  # noqa: F401 - capture_in_thread: cam.graph's API
from .errors import GraphInvalidError

# cam/cam_graph.h camCaptureMode (the values of ACL's aclmdlRICaptureMode) by name, and camCaptureStatus names by
# value: from the C header through cam._C.
MODES = _C.capture_modes()
STATUS_NAMES = _C.capture_statuses()


# id(stream) -> the Graphs captured on it. A Comm's data-plane ops run on the Comm's stream, so the graphs that use
# a Comm are the ones captured there; Comm.close ends them (close_graphs_of).
_by_stream = {}
_by_stream_lock = threading.Lock()


def close_graphs_of(stream, reason: str) -> None:
    """Destroys every graph captured on ``stream`` (its Comm is closing): a later replay raises
    ``GraphInvalidError(reason)``. A live graph holds its Comm busy, so this comes before the Comm is freed;
    replays already queued finish first (the C library frees a graph's pool after the last of them)."""
    with _by_stream_lock:
        graphs = list(_by_stream.pop(id(stream), ()))
    for g in graphs:
        g._end(reason)


def capture_status(stream=None) -> tuple:
    """(status name, recorded ops) of ``stream``'s capture; "none" when it does not capture."""
    status, ops = _C.capture_info(stream if stream is not None else _runtime.default_stream())
    return STATUS_NAMES[status], ops


class Graph:
    """A recorded sequence of cam ops on one stream. ``replay()`` is one graph launch (no ``torch.ops.cam``
    dispatch, no per-op host work) followed by one synchronize of the stream, which also reads the status records
    of the captured ops: a bad device-resident argument met during a replay raises the same
    ``DeviceArgumentError`` as in eager mode."""

    def __init__(self):
        self._handle = None
        self._stream = None
        self._was_captured = False

    @contextlib.contextmanager
    def capture(self, stream=None, mode: str = "global"):
        """Records the cam ops this thread calls on ``stream`` (default: this thread's stream) inside the block.
        ``mode`` as ACL's capture modes: "global" (a synchronize on any thread breaks the capture),
        "thread_local" (on this thread), "relaxed" (only of the capturing stream). A broken rule raises
        ``CaptureInvalidatedError`` at once and again when the block ends; no graph is kept."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {sorted(MODES)}, got {mode!r}")
        if self._handle is not None:
            raise RuntimeError("this Graph already holds a capture; call reset() before capturing again")
        if _local.capture is not None:
            raise RuntimeError("a capture is already active on this thread (captures do not nest)")
        if stream is None:
            stream = _runtime.default_stream()
        _C.capture_begin(stream, MODES[mode])
        _local.capture = _Capture(stream)
        try:
            yield self
        except BaseException:
            _local.capture = None
            try:
                handle = _C.capture_end(stream)
            except Exception:  # the capture was invalidated too; the original exception says more
                handle = 0
            if handle:
                _C.graph_destroy(handle)
            raise
        _local.capture = None
        self._handle = _C.capture_end(stream)  # raises CaptureInvalidatedError naming the broken rule
        self._stream = stream
        self._was_captured = True
        self._ended = None
        with _by_stream_lock:
            _by_stream.setdefault(id(stream), weakref.WeakSet()).add(self)

    def _end(self, reason: str) -> None:
        self._ended = reason
        self.reset()

    def _live(self):
        if self._handle is None and getattr(self, "_ended", None):
            raise GraphInvalidError(f"Graph.replay: {self._ended}")
        if self._handle is None:
            what = "was reset or destroyed" if self._was_captured else "holds no capture"
            raise GraphInvalidError(f"Graph.replay: this graph {what}")
        return self._handle

    def replay(self, *, synchronize: bool = True) -> None:
        """Launches the recording on the capture's stream. With ``synchronize`` (the default, torch CPU
        semantics) waits for it (CAM_SYNC_TIMEOUT_S) and raises what it raised; without, the caller synchronizes
        (``Graph.synchronize``) before reading outputs."""
        handle = self._live()
        with _runtime.stream_lock(self._stream):
            _C.graph_launch(handle, self._stream)
            if synchronize:
                self._stream.synchronize(_runtime.sync_timeout_s())

    def synchronize(self) -> None:
        self._live()
        with _runtime.stream_lock(self._stream):
            self._stream.synchronize(_runtime.sync_timeout_s())

    def invalidate(self, reason: str) -> None:
        """Refuses every later replay with ``GraphInvalidError(reason)`` (for resources closed under the graph)."""
        _C.graph_invalidate(self._live(), reason)

    def reset(self) -> None:
        """Drops the recording and its pool (replays already queued finish first: the C library frees the pool
        after the last of them). The Graph may capture again."""
        handle, self._handle = self._handle, None
        if handle is not None:
            _C.graph_destroy(handle)

    def __del__(self):
        try:
            self.reset()
        except Exception:
            pass
