"""Where an op runs and how it waits: the stream and workspace allocator picked from the tensors' device (a CPU
tensor runs on this thread's twin stream, an NPU tensor on torch_npu's current stream, cam._npu), the rule that a
torch-facing op has finished when it returns, the timeout chain every wait of an op lives inside (docs/protocol.md
§9), and the data-less argument check the fake implementations run (:func:`check`)."""

import ctypes
import math
import os
import threading

import torch

from . import _C, _capture, _npu
from ._tensor import shape_desc
from .errors import InvalidArgumentError, SyncTimeoutError

_thread_streams = {}  # thread ident -> that thread's default stream
_locks_guard = threading.Lock()
_stream_locks = {}
# stream id -> callable that ends every device wait on that stream at once (Comm.abort for a Comm's stream)
_aborters = {}

# ---- the timeout chain: device wait < host sync bound < Ascend AI Core op timeout ----
# Written once, in C (cam/cam_timeouts.h, which explains each link); read here through cam._C.
# SYNC_MARGIN_S: how much longer than a data-plane kernel's longest wait (timeout_s or idle_poll_s) the host's
# synchronize waits, or a healthy-but-slow op would be declared lost. DRAIN_S: after a sync timeout, how long the
# host waits for the stream to drain once every device wait was told to end. AICORE_OP_TIMEOUT_S: Ascend's default
# AI Core op execution timeout; every bound of ours ends first, so the error is ours, not a device reset.
_CHAIN = _C.timeout_chain()
SYNC_MARGIN_S = _CHAIN["sync_margin_s"]
DRAIN_S = _CHAIN["drain_s"]
AICORE_OP_TIMEOUT_S = _CHAIN["aicore_op_timeout_s"]

# Work whose stream did not drain: the buffers it may still write (workspace, outputs, inputs held by the launch
# closure) and the stream itself are kept for the life of the process rather than freed under a running kernel.
_parked = []


# Every op reads the bound and few processes ever change it: os.environ.get costs ~1 µs per call (it encodes the
# key and goes through the Mapping protocol), a read of the dict behind it (kept current by os.environ's setters,
# as monkeypatch.setenv uses) ~30 ns. The value is parsed again only when the raw string changed.
_ENV = getattr(os.environ, "_data", None)
_ENV_KEY = os.environ.encodekey("CAM_SYNC_TIMEOUT_S") if _ENV is not None else None
_bound_read = (object(), 0.0)  # (raw CAM_SYNC_TIMEOUT_S as last read, None when unset; its value)


def sync_timeout_s() -> float:
    """How long an op call waits for its stream (CAM_SYNC_TIMEOUT_S, default 600 s). A hang is a bug: never 0."""
    global _bound_read
    raw = _ENV.get(_ENV_KEY) if _ENV is not None else os.environ.get("CAM_SYNC_TIMEOUT_S")
    last_raw, last_value = _bound_read
    if raw == last_raw:
        return last_value
    text = "600" if raw is None else (os.environ.decodevalue(raw) if isinstance(raw, bytes) else raw)
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"CAM_SYNC_TIMEOUT_S must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"CAM_SYNC_TIMEOUT_S must be a positive finite number of seconds, got {text!r}")
    if value + DRAIN_S >= AICORE_OP_TIMEOUT_S:
        raise ValueError(f"CAM_SYNC_TIMEOUT_S={text}: the sync bound plus the {DRAIN_S:g} s drain must stay below "
                         f"the Ascend AI Core op timeout ({AICORE_OP_TIMEOUT_S:g} s)")
    _bound_read = (raw, value)
    return value


def check_timeout_chain(who: str, timeout_s: float, idle_poll_s: float) -> None:
    """Refuses device-wait bounds the host would not outlast: timeout_s and idle_poll_s plus the margin must stay
    below the sync bound (CAM_SYNC_TIMEOUT_S), which itself stays below the AI Core op timeout."""
    for name, v in (("timeout_s", timeout_s), ("idle_poll_s", idle_poll_s)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{who}: {name} must be a positive finite number of seconds, got {v!r}")
    bound = sync_timeout_s()
    if timeout_s + idle_poll_s + SYNC_MARGIN_S >= bound:
        raise ValueError(
            f"{who}: timeout_s ({timeout_s:g} s) + idle_poll_s ({idle_poll_s:g} s) + {SYNC_MARGIN_S:g} s margin must "
            f"stay below the host sync bound CAM_SYNC_TIMEOUT_S ({bound:g} s): lower timeout_s/idle_poll_s or raise "
            f"CAM_SYNC_TIMEOUT_S (it must stay below {AICORE_OP_TIMEOUT_S - DRAIN_S:g} s)")


def default_stream() -> "_C.Stream":
    """This thread's stream. Per thread, so ranks that are threads of one process never queue behind each other.
    Held in a dict by thread id rather than a threading.local, so a forked child can find every inherited stream
    (see _after_fork_in_child); a dead thread's stream is released when the next thread creates one."""
    me = threading.get_ident()
    stream = _thread_streams.get(me)  # the per-call fast path: a dict read is atomic under the GIL
    if stream is not None:
        return stream
    with _locks_guard:
        stream = _thread_streams.get(me)
        if stream is None:
            alive = {t.ident for t in threading.enumerate()}
            for ident in [i for i in _thread_streams if i not in alive]:
                dead = _thread_streams.pop(ident)
                _stream_locks.pop(id(dead), None)
            stream = _thread_streams[me] = _C.Stream()
        return stream


def stream_lock(stream) -> threading.Lock:
    """The lock that makes launch + synchronize on ``stream`` one step. A stream reports an error to whichever
    synchronize comes first, so two threads interleaving on one stream could take each other's errors (and one
    would return an unwritten output as if it had succeeded)."""
    lock = _stream_locks.get(id(stream))  # per-call fast path; creation below stays under the guard
    if lock is not None:
        return lock
    with _locks_guard:
        lock = _stream_locks.get(id(stream))
        if lock is None:
            lock = _stream_locks[id(stream)] = threading.Lock()
        return lock


def set_aborter(stream, abort) -> None:
    """Registers how to end every device wait on ``stream`` (a Comm's abort) for the sync-timeout path."""
    with _locks_guard:
        _aborters[id(stream)] = abort


def forget_stream(stream) -> None:
    with _locks_guard:
        _stream_locks.pop(id(stream), None)
        _aborters.pop(id(stream), None)


def _park(*objs) -> None:
    """Keeps objects for the life of the process, past interpreter shutdown too: destroying a stream whose kernel
    still runs (or whose worker thread does not exist, in a forked child) would free memory in use or wait forever."""
    for o in objs:
        if o is not None:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(o))
            _parked.append(o)


def is_parked(stream) -> bool:
    return any(p is stream for p in _parked)


def _on_sync_timeout(stream, args, keep, error: SyncTimeoutError) -> None:
    """The host stopped waiting, but the kernel may still run and write: never free what it may touch. End its
    waits (abort its Comm, if the stream is a Comm's), then wait for the stream to drain, bounded. Only a drained
    stream releases its buffers; otherwise they are parked for the life of the process."""
    with _locks_guard:
        abort = _aborters.get(id(stream))
    how = "no communicator to abort"
    if abort is not None:
        try:
            abort()
            how = "aborted its communicator"
        except Exception as e:  # noqa: BLE001 - the original timeout is what the caller must see
            how = f"could not abort its communicator ({e})"
    try:
        stream.synchronize(DRAIN_S)
        drained = True
    except SyncTimeoutError:
        drained = False
    except Exception:  # noqa: BLE001 - the aborted kernel reports its abort: it has ended, which is what we need
        drained = True
    if drained:
        raise SyncTimeoutError(f"{error} — {how}; the kernel then ended and its buffers were released", error.status) \
            from error
    _park(stream, args, keep)  # args: the tensors the kernel reads and writes
    with _locks_guard:
        for ident, s in list(_thread_streams.items()):
            if s is stream:  # this thread's later ops get a fresh stream instead of queueing behind the lost one
                del _thread_streams[ident]
    raise SyncTimeoutError(
        f"{error} — {how}, and the kernel still had not ended after {DRAIN_S:g} s more: its workspace, inputs and "
        f"outputs are kept alive (never reused) for the rest of the process", error.status) from error


class _Workspace(list):
    """One op call's workspace allocator (``allocate(nbytes) -> descriptor``) and the buffers it handed out, kept
    until the stream is done with them: one object per call instead of a list and a closure."""

    __slots__ = ()

    def __call__(self, nbytes: int):
        ws = torch.empty(nbytes, dtype=torch.uint8)
        self.append(ws)
        return (ws.data_ptr(), [nbytes], [1], 4)


_capture_in_thread = _capture.capture_in_thread


def run(launch, *args, stream=None, tensor=None) -> None:
    """Runs ``launch(*args, stream, allocate, bound)`` (a ``cam._C`` op) so the op has completed when it returns
    (torch semantics for a CPU op; on NPU tensors the same rule, so a device-detected error is the op's exception):
    ``launch`` queues the op and, given a ``bound`` in seconds, synchronizes the stream within it in the same C call
    (work that ends on its own may then run on this thread: cam/cam_status.h, camBeginSynchronousLaunches). Workspace
    handed out by ``allocate`` lives until the stream is done with it; so do ``args``.

    The stream comes from the device of ``tensor`` (one of the op's tensors): an NPU tensor runs on torch_npu's
    current stream with workspace from torch's NPU allocator (cam._npu), so it is ordered after the kernels that
    produced its inputs; a CPU tensor on ``stream`` (data-plane ops pass their communicator's own stream, because
    ranks that are threads of one process must not queue behind each other), by default this thread's stream.

    This is every op's per-call path: it only looks things up (each lookup's slow path creates what is missing:
    default_stream, stream_lock)."""
    if tensor is not None and not tensor.is_cpu:  # is_cpu, not device.type: this runs for every call
        stream, keep = _npu.stream_and_workspace(tensor.device)
        allocate = _npu.capture_allocator(stream)
        if allocate is not None:
            # The framework captures torch_npu's stream (its NPUGraph, adopted by cam from the runtime): recorded
            # into its graph, workspace from cam's pool for that capture, no synchronize (docs/graph.md, "Inside a
            # framework's graph").
            launch(*args, stream, allocate, None)
            return
    else:
        capture = _capture_in_thread()
        if stream is None:
            # An op that names no stream (the compute ops) joins this thread's capture, so one graph holds a whole
            # FFN iteration whose data-plane ops run on the Comm's stream (docs/graph.md).
            stream = capture.stream if capture is not None else (_thread_streams.get(threading.get_ident())
                                                                 or default_stream())
        if capture is not None:
            if capture.stream is not stream:
                # An op bound to another stream (a data-plane op runs on its Comm's) would run now, eagerly, and
                # publish its round while the graph holds none of it: refused before anything runs.
                op = getattr(launch, "__name__", "op")
                raise InvalidArgumentError(
                    f"{op}: called inside a capture on another stream: this Comm's ops run on the Comm's own stream; "
                    f"capture on it (cam.Graph().capture(stream=comm.stream)) to record them, or call {op} outside "
                    f"the capture", _C.status_codes()["ACLNN_ERR_PARAM_INVALID"])
            # Recorded, not run: workspace comes from the graph's pool and there is nothing to wait for (a
            # synchronize would break the capture). The graph's replay synchronizes.
            launch(*args, stream, capture.allocate, None)
            capture.hold(args)  # replays run on these tensors: the graph keeps them (cam/graph.py)
            return
        keep = _Workspace()
    bound = sync_timeout_s()
    with _stream_locks.get(id(stream)) or stream_lock(stream):
        if _parked and is_parked(stream):
            raise RuntimeError("this stream lost a kernel that never ended after a sync timeout; its communicator is "
                               "unusable: create a new cam.Comm")
        try:
            launch(*args, stream, keep, bound)
        except SyncTimeoutError as e:
            _on_sync_timeout(stream, args, keep, e)


def check(launch, *args) -> None:
    """The op's argument checks alone, as its C API runs them (GetWorkspaceSize as an argument check, cam_status.h
    camBeginArgumentCheck), on descriptors without data: what the fake implementations run, so a traced call is
    refused with the eager call's error and words. Tensors (and lists of them) go as shape-only descriptors."""
    launch(*[shape_desc(a) if isinstance(a, torch.Tensor) else
             [shape_desc(t) for t in a] if isinstance(a, list) else a for a in args], None, None)


def _after_fork_in_child() -> None:
    """A forked child inherits the parent's stream objects but not the worker threads behind them: an op queued
    there would wait forever. Start over with fresh state; the inherited streams are parked (never destroyed:
    destroying one would join a worker that does not exist in this process). cam.Comm handles its own streams."""
    global _locks_guard
    # An aborter is a Comm's bound abort: dropping it here may free the last reference to a Comm that was never
    # closed, and destroying its stream would wait on its worker's condition variable, whose waiter is the
    # parent's thread (the child hangs in pthread_cond_destroy). Parked with the streams, never freed.
    _park(*_thread_streams.values(), *_aborters.values())
    _thread_streams.clear()
    _locks_guard = threading.Lock()  # another thread of the parent may have held it at fork time
    _stream_locks.clear()
    _aborters.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
