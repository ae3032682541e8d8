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
import os
import threading
import weakref

from . import _C, _runtime
from ._capture import Capture, capture_in_thread, state  # noqa: F401 - capture_in_thread: cam.graph's API
from .errors import GraphInvalidError, SyncTimeoutError

# cam/cam_graph.h camCaptureMode (the values of ACL's aclmdlRICaptureMode) by name, and camCaptureStatus names by
# value: from the C header through cam._C.
MODES = _C.capture_modes()
STATUS_NAMES = _C.capture_statuses()


# id(stream) -> the Graphs captured on it. A Comm's data-plane ops run on the Comm's stream, so the graphs that use
# a Comm are the ones captured there; Comm.close ends them (close_graphs_of).
_by_stream = {}
_by_stream_lock = threading.Lock()


def close_graphs_of(stream, reason: str, wait_s=None) -> None:
    """Destroys every graph captured on ``stream`` (its Comm is closing): a later replay raises
    ``GraphInvalidError(reason)``. A live graph holds its Comm busy, so this comes before the Comm is freed.
    Replays still queued get ``wait_s`` seconds (default: the sync bound) to end; then the stream's Comm is aborted
    and they are drained (``Graph.reset``), so the stream closes idle and nothing they use is freed under them."""
    with _by_stream_lock:
        graphs = list(_by_stream.pop(id(stream), ()))
    for g in graphs:
        try:
            g._end(reason, wait_s)
        except Exception:  # noqa: BLE001 - closing goes on; what the replays raised dies with their graph
            pass


def queued_replays(stream) -> int:
    """Replays launched on ``stream`` and not yet ended, over every graph captured there. Comm.set_placement refuses
    to move slot weights under a queued replay of a captured FFN loop (docs/protocol.md §15)."""
    with _by_stream_lock:
        graphs = list(_by_stream.get(id(stream), ()))
    return sum(_C.graph_queued(g._handle) for g in graphs if g._handle is not None)


def capture_status(stream=None) -> tuple:
    """(status name, recorded ops) of ``stream``'s capture; "none" when it does not capture."""
    status, ops = _C.capture_info(stream if stream is not None else _runtime.default_stream())
    return STATUS_NAMES[status], ops


class Graph:
    """A recorded sequence of cam ops on one stream. ``replay()`` is one graph launch (no ``torch.ops.cam``
    dispatch, no per-op host work) followed by one synchronize of the stream, which also reads the status records
    of the captured ops: a bad device-resident argument met during a replay raises the same
    ``DeviceArgumentError`` as in eager mode."""

    #: Default back-pressure bound of ``replay(synchronize=False)``: this many replays may be queued and not yet run.
    max_queued = 64

    def __init__(self):
        self._handle = None
        self._stream = None
        self._was_captured = False
        self._held = ()  # the recorded ops' arguments (Capture.hold)
        self._pid = os.getpid()

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
        if state.capture is not None:
            raise RuntimeError("a capture is already active on this thread (captures do not nest)")
        if stream is None:
            stream = _runtime.default_stream()
        _C.capture_begin(stream, MODES[mode])
        state.capture = capture = Capture(stream)
        try:
            yield self
        except BaseException:
            state.capture = None
            try:
                handle = _C.capture_end(stream)
            except Exception:  # the capture was invalidated too; the original exception says more
                handle = 0
            if handle:
                _C.graph_destroy(handle)
            raise
        state.capture = None
        self._handle = _C.capture_end(stream)  # raises CaptureInvalidatedError naming the broken rule
        self._held = capture.held
        self._pid = os.getpid()
        self._stream = stream
        self._was_captured = True
        self._ended = None
        with _by_stream_lock:
            _by_stream.setdefault(id(stream), weakref.WeakSet()).add(self)

    def _end(self, reason: str, wait_s=None) -> None:
        self._ended = reason
        self.reset(wait_s)

    def _live(self, api: str = "Graph.replay"):
        if self._handle is None and getattr(self, "_ended", None):
            raise GraphInvalidError(f"{api}: {self._ended}")
        if self._handle is None:
            what = "was reset or destroyed" if self._was_captured else "holds no capture"
            raise GraphInvalidError(f"{api}: this graph {what}")
        if self._pid != os.getpid():
            # The stream's worker thread stayed in the parent: a replay queued here would never run.
            raise GraphInvalidError(f"{api}: this graph was captured in process {self._pid}; a forked child inherits "
                                    f"neither its stream's worker nor its plane: capture a new graph in the child")
        if _runtime.is_parked(self._stream):
            raise GraphInvalidError(f"{api}: the graph's stream lost replays that never ended after a sync timeout; "
                                    f"the stream (and its Comm) is unusable")
        return self._handle

    def _timed_out(self, error: SyncTimeoutError) -> None:
        """As an eager op's timeout (cam._runtime): abort the stream's Comm, wait for the queued replays to end, and
        only then let the error return; if they never end, everything they use is kept for the process's life."""
        _runtime._on_sync_timeout(self._stream, (self, self._held), None, error)

    def replay(self, *, synchronize: bool = True) -> None:
        """Launches the recording on the capture's stream. With ``synchronize`` (the default, torch CPU
        semantics) waits for it (CAM_SYNC_TIMEOUT_S) and raises what it raised; without, the caller synchronizes
        (``Graph.synchronize``) before reading outputs. At most ``max_queued`` replays are queued: a launch beyond
        waits (within CAM_SYNC_TIMEOUT_S) for the oldest to end, so a synchronize outlasts at most that many. A
        ``SyncTimeoutError`` returns only once the stream is idle (its Comm aborted) or its buffers are parked."""
        handle = self._live()
        bound = _runtime.sync_timeout_s()
        with _runtime.stream_lock(self._stream):
            try:
                _C.graph_launch_bounded(handle, self._stream, self.max_queued, bound)
                if synchronize:
                    self._stream.synchronize(bound)
            except SyncTimeoutError as e:
                self._timed_out(e)

    def synchronize(self) -> None:
        self._live("Graph.synchronize")
        with _runtime.stream_lock(self._stream):
            try:
                self._stream.synchronize(_runtime.sync_timeout_s())
            except SyncTimeoutError as e:
                self._timed_out(e)

    def invalidate(self, reason: str) -> None:
        """Refuses every later replay with ``GraphInvalidError(reason)`` (for resources closed under the graph)."""
        _C.graph_invalidate(self._live(), reason)

    def reset(self, wait_s=None) -> None:
        """Drops the recording and its pool. Replays still queued run on the captured tensors, so they get
        ``wait_s`` seconds (default CAM_SYNC_TIMEOUT_S) to end first, then the stream's Comm is aborted and they are
        drained, as after a sync timeout (errors they raised go with the graph). The Graph may capture again."""
        handle = self._handle
        if handle is None:
            return
        try:
            if self._pid == os.getpid() and not _runtime.is_parked(self._stream) and _C.graph_queued(handle):
                self._drain(wait_s)
        finally:
            self._handle = None
            self._held = ()
            _C.graph_destroy(handle)

    def _drain(self, wait_s) -> None:
        bound = _runtime.sync_timeout_s() if wait_s is None else max(0.0, float(wait_s))
        lock = _runtime.stream_lock(self._stream)
        got = lock.acquire(timeout=bound)
        try:
            if not got:  # another thread's op holds the stream: do not take its error, end the waits instead
                raise SyncTimeoutError(f"Graph.reset: the graph's stream stayed busy for {bound:g} s")
            self._stream.synchronize(bound)
        except SyncTimeoutError as e:
            try:
                self._timed_out(e)
            except SyncTimeoutError:
                pass  # drained after the abort, or parked: either way nothing is freed under a replay
        except Exception:  # noqa: BLE001 - a replay's error: it has ended, which is all reset needs
            pass
        finally:
            if got:
                lock.release()

    def __del__(self):
        try:
            self.reset()
        except Exception:
            pass
