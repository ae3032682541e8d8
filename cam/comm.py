"""``cam.Comm``: one rank's handle on an asynchronous AFD data plane (docs/protocol.md).

A Comm owns this rank's window and the mapping of every peer's window, a device stream its data-plane ops run on,
and the constants those ops need (topology, rank, timeouts). Two transports on the twin:

* ``"in_process"``: ranks are threads of one process; windows are registered under a group name.
* ``"shm"``: ranks are processes; each creates a POSIX shared-memory segment, the names are exchanged through a
  ``torch.distributed`` Store, every rank maps every peer's segment, and each segment is unlinked as soon as all
  ranks mapped it, so a rank that dies afterwards leaks nothing in ``/dev/shm``.

On Ascend the same C communicator takes its windows from HCCL (docs/protocol.md §3).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import time
import uuid
import weakref
from datetime import timedelta
from typing import Optional

import torch

from . import _C, _runtime
from .topology import Topology

__all__ = ["Comm"]

_ids = itertools.count(1)
# Weak: a Comm the caller dropped without close() is collected, and its C handle and stream release the windows.
_registry: "weakref.WeakValueDictionary[int, Comm]" = weakref.WeakValueDictionary()
_registry_lock = threading.Lock()

_ACT_DTYPES = (torch.bfloat16, torch.float16)


def lookup(comm_id: int) -> "Comm":
    """The open Comm with this id (the torch ops carry the id, a plain int, so captured graphs replay it)."""
    with _registry_lock:
        comm = _registry.get(comm_id)
    if comm is None:
        raise ValueError(f"comm_id {comm_id} does not name an open cam.Comm (closed, or from another process)")
    return comm


class Comm:
    """One rank of a data plane.

    Arguments:
        topology: the :class:`cam.Topology`, identical on every rank (checked at creation through a fingerprint
            in each window; a mismatch fails naming the rank).
        rank: this rank's global id; Attention ranks are ``[0, A)``, FFN ranks ``[A, A + F)``.
        transport: ``"in_process"`` (threads as ranks) or ``"shm"`` (processes as ranks).
        group: name of the plane. In-process: ranks with the same name form one plane (free again once all joined).
            shm: prefix of the Store keys.
        store: ``torch.distributed`` Store (TCPStore/FileStore) for ``"shm"``: carries the segment names.
        dtype: activation dtype of the plane (bfloat16 or float16): x, expert outputs and combine outputs.
        timeout_s: bound of every device wait inside a begun round (slot reuse, a replica whose participants only
            partly published, combine completions). Generous by default: contention must never trip it.
        idle_poll_s: how long ``dispatch_recv`` waits with nothing ready before it returns an empty work item.
        join_timeout_s: bound of the creation handshake (all ranks joining / mapping).
        shm_prefix: segment-name prefix for ``"shm"`` (default: unique per process); names are ``/<prefix>-r<rank>``.

    Attributes:
        stream: this rank's device stream; its data-plane ops run there in order (ranks that are threads of one
            process must not share a stream: an FFN wait would block the Attention work it waits for).
        window: this rank's window as a uint8 tensor (inspection only; valid until :meth:`close`).
        window_bytes: bytes really allocated for the window (what the ops validate against).
        token: the ordering token the torch ops mutate (see ``docs/protocol.md`` §11).
        id: the int the torch ops carry to find this Comm.

    Use as a context manager or call :meth:`close`. After a fatal error (timeout, abort, protocol violation) the
    plane is aborted on every rank and every op refuses to run; create a new Comm (fresh, zeroed windows). A
    refusal (bad ids, capacity, a wrong work item; raised as :class:`cam.DeviceArgumentError` before anything was
    written) leaves the Comm usable.
    """

    def __init__(
        self,
        topology: Topology,
        rank: int,
        *,
        transport: str = "in_process",
        group: str = "cam",
        store=None,
        dtype: torch.dtype = torch.bfloat16,
        timeout_s: float = 300.0,
        idle_poll_s: float = 0.05,
        join_timeout_s: float = 60.0,
        shm_prefix: Optional[str] = None,
    ) -> None:
        if not isinstance(topology, Topology):
            raise TypeError(f"Comm: topology must be a cam.Topology, got {type(topology).__name__}")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < topology.world_size:
            raise ValueError(f"Comm: rank must be an int in [0, {topology.world_size}), got {rank!r}")
        if dtype not in _ACT_DTYPES:
            raise TypeError(f"Comm: dtype must be torch.bfloat16 or torch.float16, got {dtype}")
        for name, v in (("timeout_s", timeout_s), ("idle_poll_s", idle_poll_s), ("join_timeout_s", join_timeout_s)):
            if not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"Comm: {name} must be a positive number of seconds, got {v!r}")
        self.topology = topology
        self.rank = rank
        self.dtype = dtype
        self.transport = transport
        self.timeout_s = float(timeout_s)
        self.idle_poll_s = float(idle_poll_s)
        fields = list(topology.as_c_fields())
        timeout_ns, idle_ns = int(timeout_s * 1e9), int(idle_poll_s * 1e9)
        if transport == "in_process":
            self._c = _C.Comm.in_process(group, fields, rank, timeout_ns, idle_ns, int(join_timeout_s * 1000))
        elif transport == "shm":
            if store is None:
                raise ValueError("Comm: transport 'shm' needs a torch.distributed Store (store=...)")
            self._c = self._create_shm(store, group, fields, timeout_ns, idle_ns, join_timeout_s, shm_prefix)
        else:
            raise ValueError(f"Comm: transport must be 'in_process' or 'shm', got {transport!r}")
        self.stream = _C.Stream()
        base, nbytes = self._c.window()
        self.window_bytes = nbytes
        # This rank's window as a tensor, for inspection (tests, diagnostics). Valid until close().
        self.window = torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(base), dtype=torch.uint8)
        # The ordering token of the data-plane torch ops: each op names it in mutates_args and increments it, so
        # torch.compile neither drops an op (they write peer memory, which no graph sees) nor reorders two ops of one
        # rank. It is not the window itself on purpose: functionalization may clone a mutated input and copy it
        # back, which must never touch protocol state.
        self.token = torch.zeros(1, dtype=torch.int64)
        self.id = next(_ids)
        with _registry_lock:
            _registry[self.id] = self

    def _create_shm(self, store, group, fields, timeout_ns, idle_ns, join_timeout_s, prefix):
        prefix = prefix or f"cam-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        name = f"/{prefix}-r{self.rank}"
        c = _C.Comm.shm(name, fields, self.rank, timeout_ns, idle_ns)
        world = self.topology.world_size
        try:
            store.set(f"{group}/shm/{self.rank}", name)
            keys = [f"{group}/shm/{r}" for r in range(world)]
            store.wait(keys, timedelta(seconds=join_timeout_s))
            names = [store.get(k).decode() for k in keys]
            c.attach_shm(names)
            store.add(f"{group}/mapped", 1)
            deadline = time.monotonic() + join_timeout_s
            while store.add(f"{group}/mapped", 0) < world:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"Comm: rank {self.rank}: not every rank mapped the windows within {join_timeout_s} s")
                time.sleep(0.002)
        except BaseException:
            c.close()  # unlinks the segment too: a failed handshake leaks nothing
            raise
        c.unlink_shm()
        return c

    # ------------------------------------------------------------------ lifecycle

    @property
    def closed(self) -> bool:
        return self._c is None

    def abort(self) -> None:
        """Raise the abort word on every rank: every device wait on every rank ends at once with
        :class:`cam.CommAbortedError`, and every later op refuses. Safe from any thread while ops run."""
        if self._c is not None:
            self._c.abort()

    def status(self) -> dict:
        """This rank's status record and abort word (docs/protocol.md §9), for diagnostics."""
        return self._require()._c.status()

    def close(self) -> None:
        """Waits for this rank's queued ops (bounded), then releases the stream and the windows. Idempotent."""
        if self._c is None:
            return
        with _registry_lock:
            _registry.pop(self.id, None)
        # Wait for an op another thread is running on this stream (it owns the stream's error; abort() first to
        # end its waits), bounded like any wait.
        lock = _runtime.stream_lock(self.stream)
        if lock.acquire(timeout=self.timeout_s + 60.0):
            lock.release()
        self.stream.close()
        _runtime.forget_stream(self.stream)
        self.window = None
        self._c.close()
        self._c = None

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _require(self) -> "Comm":
        if self._c is None:
            raise ValueError(f"cam.Comm of rank {self.rank} is closed")
        return self

    @property
    def is_attention(self) -> bool:
        return self.rank < self.topology.A

    def __repr__(self) -> str:
        state = "closed" if self._c is None else f"{self.window_bytes} B window"
        return f"cam.Comm(rank={self.rank}, transport={self.transport!r}, {state}, {self.topology})"
