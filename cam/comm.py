"""``cam.Comm``: one rank's handle on an asynchronous AFD data plane (docs/protocol.md).

A Comm owns this rank's window and the mapping of every peer's window, a device stream its data-plane ops run on,
and the constants those ops need (topology, rank, timeouts). Transports:

* ``"in_process"``: ranks are threads of one process; windows are registered under a group name.
* ``"npu"``: ranks are processes; each allocates its window as device memory and shares it through ACL IPC
  (export key, pid allow-list, import by key; docs/ascend.md §5.0), the keys travelling through a
  ``torch.distributed`` Store. On the twin the same code runs over cam's stand-ins of those ACL calls (device
  memory = a POSIX shm segment, CPU tensors); it has never run on an NPU.
* ``"shm"`` (the twin only): the ``"npu"`` transport and handshake over the twin's stand-ins, each window's segment
  named ``/<shm_prefix>-r<rank>`` and the name removed as soon as every rank imported every window, so a rank that
  dies afterwards leaks nothing in ``/dev/shm`` (and a supervisor finds a crashed handshake's by prefix).

On Ascend the same C communicator takes its windows from HCCL (docs/protocol.md §3).
"""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
import json
import math
import os
import threading
import time
import uuid
import weakref
from typing import Optional

import torch

from . import _C, _runtime, checkpoint_identity, rank_status
from . import world as _world
from .errors import CamError, CommAbortedError, CommJoinError, InvalidArgumentError
from ._proc import start_ticks
from ._tensor import ACL_DTYPE as _ACL_DTYPE  # aclDataType codes from cam/acl_compat.h, through _C
from .topology import Topology

__all__ = ["Comm", "LostReplica", "StoreFailedError", "StoreFailure"]

_ids = itertools.count(1)
# Weak: a Comm the caller dropped without close() is collected, and its C handle and stream release the windows.
_registry: "weakref.WeakValueDictionary[int, Comm]" = weakref.WeakValueDictionary()
_registry_lock = threading.Lock()
# Threads as ranks at creation: (key) -> {rank: table digest}, and the ranks that read the complete entry
_rebalances: dict = {}
_rebalances_read: dict = {}
_rebalance_cv = threading.Condition()
# Threads as ranks: the rebalance agreements of each plane, (group, plane_id) -> _LocalStore, held by its Comms
_local_stores: "weakref.WeakValueDictionary[tuple, _LocalStore]" = weakref.WeakValueDictionary()

# How often a handshake wait looks at the missing ranks' failure keys and processes (each look is a few store reads).
_JOIN_WATCH_S = 0.05
# shm/npu: how long a rank whose handshake failed waits for its peers to say they closed their imports of its window
# before it gives up and keeps the window for the life of the process (at most join_timeout_s).
_FAILED_RELEASE_S = 10.0

# The dtype is part of the plane identity checked at creation (its aclDataType code goes into the window).
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
        transport: ``"in_process"`` (threads as ranks), ``"npu"`` (processes as ranks over ACL IPC device memory;
            on the twin over cam's POSIX-shm stand-ins of the ACL calls, with CPU tensors) or ``"shm"`` (the twin
            only: ``"npu"`` over the stand-ins with segment names after ``shm_prefix``, removed once every rank
            imported every window).
        group: name of the plane. In-process: ranks with the same name form one plane (free again once all joined).
            shm/npu: the Store keys' group: every key of the plane is under ``{group}/{world_id}/``
            (:attr:`world_id`). A group held by a live plane on the same store is refused
            (:class:`cam.world.GroupInUseError`, naming the group).
        store: ``torch.distributed`` Store (TCPStore/FileStore) for ``"shm"`` and ``"npu"``: carries the pids and
            the IPC window records.
        dtype: activation dtype of the plane (bfloat16 or float16): x, expert outputs and combine outputs.
        timeout_s: bound of every device wait inside a begun round (slot reuse, a replica whose participants only
            partly published, combine completions). Generous by default: contention must never trip it.
        idle_poll_s: how long ``dispatch_recv`` waits with nothing ready before it returns an empty work item.
        join_timeout_s: bound of the creation handshake (all ranks joining / importing).
        shm_prefix: segment-name prefix for ``"shm"`` (default: unique per process); names are ``/<prefix>-r<rank>``.
        liveness_poll_s: ``"shm"`` and ``"npu"`` (processes as ranks): how often a watchdog thread checks that
            every peer's process is still there. A peer found gone raises the plane's abort with that rank as the
            reason, so every wait on every surviving rank ends within about this bound (independent of
            ``timeout_s``) naming the dead rank.
        store_grace_s: ``"shm"`` and ``"npu"``: how long the liveness watchdog keeps asking the Store whether a
            peer whose process is gone left cleanly (its ``left`` key) while the Store cannot be read (an error, a
            timeout, a server slow under load). A Store that cannot be read is no evidence of a death: the read is
            retried every ``liveness_poll_s``; an answer within the bound decides as usual (left, or dead), and a
            Store still unreadable after it aborts the plane as a store failure (:attr:`store_failure`), never as
            that peer's death.
        isolate_replicas: ``"shm"`` and ``"npu"``, replica isolation (docs/protocol.md §9), on by default: when an
            Attention rank dies, its replica is fenced instead of aborting the plane. FFN ranks drop that replica's
            rounds (counted: :attr:`lost_replicas`) and keep serving the others; only the dead rank's replica mates
            are aborted; a fenced replica never rejoins. The death of an FFN rank still aborts the plane. ``False``
            restores the plane-wide abort on any death (for a caller that cannot go on without every replica).
            Set it the same on every rank of the plane.
        placement: the expert placement (:class:`cam.placement.Placement`, docs/protocol.md §15), the same on every
            rank (compared in the shm/npu handshake). Required when the topology has no contiguous placement
            (``expert_slots`` with ``E % F != 0`` or ``R != E / F``); None routes by the contiguous one. Attention
            ranks pass its device form (:attr:`placement_buffer`: the table's epoch line, then its rows, which
            :attr:`placement_table` views as ``[L, E, 1 + 2F]``) to every ``dispatch_send``; FFN ranks use it for
            their slot weights (``cam.ExpertWeights.slots``). :meth:`set_placement` replaces it.
        succeeds: shm/npu, elastic serving (docs/protocol.md §18): ``(world id, event)`` of the plane this Comm
            re-forms after a death (the dead rank) or a join (the request's nonce); it joins that world's
            :func:`cam.world.successor` (the same on every member) instead of agreeing a fresh world. None (the
            default) for a new plane.
        expect_alive: shm, a successor plane (``succeeds``): ``{rank: "pid:start"}`` of the members as the world
            left knew them; the handshake ends at once with :class:`PeerDiedJoiningError` when one of them is gone
            (docs/protocol.md §18, "Several deaths").
        checkpoint: which checkpoint this rank loaded (:func:`cam.checkpoint_identity.published`), or None; the
            shm/npu handshake refuses ranks that published different ones (``CheckpointMismatchError``).

    Attributes:
        stream: this rank's device stream; its data-plane ops run there in order (ranks that are threads of one
            process must not share a stream: an FFN wait would block the Attention work it waits for).
        window: this rank's window as a uint8 tensor (inspection only; valid until :meth:`close`). Only where the
            window is host memory: on the ``"npu"`` transport on an Ascend backend it is device memory, and reading
            it does not return a tensor but raises :class:`cam.CamError`.
        window_bytes: bytes really allocated for the window (what the ops validate against).
        token: the ordering token the torch ops mutate (see ``docs/protocol.md`` §11).
        id: the int the torch ops carry to find this Comm.
        plane_id: this plane instance's id, the same on every rank; work items carry it (docs/protocol.md §13).
        world_id: the world this plane is, a hex str agreed at rendezvous and the same on every rank
            (:mod:`cam.world`, docs/protocol.md §17). shm/npu: every Store key of the plane (handshake, rebalance,
            the serving tier's messages) is under ``{group}/{world_id}/``; in-process it is the plane id in hex.
        dead_rank: ``"shm"``/``"npu"``: the peer this rank's liveness watchdog found dead (the plane is then
            aborted with that rank as the reason, or only its replica fenced under ``isolate_replicas``), else None.
        store_failure: ``"shm"``/``"npu"``: the :class:`StoreFailure` that made this rank's watchdog abort the plane
            (a gone peer, and a Store that could not say whether it left for ``store_grace_s``), else None. The
            abort word is then ``1 + rank`` (this rank raised it), not a death: :attr:`died` stays None.
        fenced_replicas: ``{replica: dead Attention rank}`` of every replica fenced in the plane (read from the
            windows, so it includes fences another rank's watchdog set first).
        dropped_rounds: FFN ranks: ``{replica: rounds dropped}`` per fenced replica (see :class:`LostReplica`).
        lost_replicas: ``{replica: LostReplica}`` per fenced replica, with a sentence for logs and errors.

    Creation refuses ``timeout_s`` / ``idle_poll_s`` that the host's sync bound would not outlast (the timeout
    chain of docs/protocol.md §9). A forked child cannot use a Comm of its parent: create a new one there.

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
        liveness_poll_s: float = 0.25,
        store_grace_s: float = 5.0,
        isolate_replicas: bool = True,
        placement=None,
        succeeds: Optional[tuple] = None,
        checkpoint: Optional[dict] = None,
        expect_alive: Optional[dict] = None,
    ) -> None:
        if not isinstance(topology, Topology):
            raise TypeError(f"Comm: topology must be a cam.Topology, got {type(topology).__name__}")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < topology.world_size:
            raise ValueError(f"Comm: rank must be an int in [0, {topology.world_size}), got {rank!r}")
        if dtype not in _ACT_DTYPES:
            raise TypeError(f"Comm: dtype must be torch.bfloat16 or torch.float16, got {dtype}")
        for name, v in (("timeout_s", timeout_s), ("idle_poll_s", idle_poll_s), ("join_timeout_s", join_timeout_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not v > 0:
                raise ValueError(f"Comm: {name} must be a positive finite number of seconds, got {v!r}")
        if join_timeout_s > 86400:
            raise ValueError(f"Comm: join_timeout_s must be at most a day, got {join_timeout_s!r}")
        _runtime.check_timeout_chain("Comm", timeout_s, idle_poll_s)
        if isinstance(liveness_poll_s, bool) or not isinstance(liveness_poll_s, (int, float)) or \
                not math.isfinite(liveness_poll_s) or not 0 < liveness_poll_s <= 60:
            raise ValueError(f"Comm: liveness_poll_s must be a number of seconds in (0, 60], got {liveness_poll_s!r}")
        if isinstance(store_grace_s, bool) or not isinstance(store_grace_s, (int, float)) or \
                not math.isfinite(store_grace_s) or not 0 < store_grace_s <= 3600:
            raise ValueError(f"Comm: store_grace_s must be a number of seconds in (0, 3600], got {store_grace_s!r}")
        if not isinstance(isolate_replicas, bool):
            raise TypeError(f"Comm: isolate_replicas must be a bool, got {isolate_replicas!r}")
        _check_name("group", group, optional=False)
        _check_name("shm_prefix", shm_prefix, optional=True)
        if transport == "shm" and shm_prefix is not None:
            longest = f"/{shm_prefix}-r{topology.world_size - 1}"
            if len(longest.encode()) > _C.SHM_NAME_MAX:
                raise ValueError(f"Comm: shm_prefix {shm_prefix!r} is too long: a segment name such as {longest!r} "
                                 f"must fit {_C.SHM_NAME_MAX} bytes (the twin's window key holds it with a nonce)")
        self.isolate_replicas = isolate_replicas
        self._checkpoint = checkpoint  # cam.checkpoint_identity.published(), compared in the shm/npu handshake
        # A successor's members as processes of the world left ({rank: "pid:start"}): one gone ends the handshake.
        self._expect_alive = dict(expect_alive or {})
        self.group = group
        self._join_timeout_s = float(join_timeout_s)
        # Eager data-plane ops that completed on this rank (set_placement refuses to race a round in flight)
        self._op_counts = dict.fromkeys(("dispatch_send", "combine_recv", "dispatch_recv", "combine_send"), 0)
        self._rebalance_attempt = 0  # set_placement calls since the last adopted table (§15, the agreement)
        self._last_rebalance = None  # the agreement key of the last committed rebalance (its adopted records)
        self._store = self._group = self._local_store = None  # where rebalance agreements are written
        # Checked before the plane exists: a table the plane cannot serve is refused before anything is created.
        self.placement, self.placement_buffer, self.placement_table = _placement_for(topology, placement)
        self._table_epoch = 0  # rebalances adopted: the epoch of the table and of the FFN slot weights (§15)
        self._peers_proc = {}
        self._left_key = None  # shm: the Store key that tells the peers' watchdogs this rank left cleanly
        self._watch_stop = threading.Event()
        self._watch_lock = threading.Lock()
        self._watchdog = None
        self.dead_rank: Optional[int] = None  # a peer this rank's liveness watchdog found gone, and when (time.time)
        self.dead_rank_found_at: Optional[float] = None
        self.store_failure: Optional[StoreFailure] = None
        self.topology = topology
        self.rank = rank
        self.dtype = dtype
        self.transport = transport
        self.timeout_s = float(timeout_s)
        self.idle_poll_s = float(idle_poll_s)
        fields = list(topology.as_c_fields())
        timeout_ns, idle_ns = int(timeout_s * 1e9), int(idle_poll_s * 1e9)
        self.world_id: Optional[str] = None
        if transport == "in_process":
            self._c = _C.Comm.in_process(group, fields, rank, timeout_ns, idle_ns, int(join_timeout_s * 1000),
                                         _ACL_DTYPE[dtype])
        elif transport in ("shm", "npu"):
            if store is None:
                raise ValueError(f"Comm: transport {transport!r} needs a torch.distributed Store (store=...)")
            # One handshake and one C transport for both: shm is the npu transport over the twin's stand-ins, its
            # windows' segments named after shm_prefix so a supervisor finds a crashed plane's by prefix.
            shm_name = None
            if transport == "shm":
                shm_name = f"/{shm_prefix or f'cam-{os.getpid()}-{uuid.uuid4().hex[:12]}'}-r{rank}"
            # Every key of the handshake and after it is the world's (cam.world): a store shared with another
            # plane, or left over from an earlier one, is never read as this plane's.
            self.world_id = _world.join(store, group, rank, topology.world_size, join_timeout_s, after=succeeds)
            keys = _world.prefix(group, self.world_id)
            # Join status is the group's, not the world's: a rank refused before it could join a world (cam-ffn's
            # own checks) still publishes why there, and the waiting side names the difference.
            self._status_group = group
            self._c = self._create_ipc(store, keys, fields, timeout_ns, idle_ns, join_timeout_s, shm_name)
            self._store, self._left_key = store, f"{keys}/left/{rank}"
            self._group = keys
        else:
            raise ValueError(f"Comm: transport must be 'in_process', 'shm' or 'npu', got {transport!r}")
        self.stream = _C.Stream()
        self._pid = os.getpid()
        self._inherited = False  # set in a forked child (see _after_fork_in_child): a plain flag, so it traces
        if self._peers_proc:
            self._watchdog = threading.Thread(target=_watch_peers, args=(weakref.ref(self), float(liveness_poll_s),
                                                                         self._watch_stop, dict(self._peers_proc),
                                                                         store, self._group, isolate_replicas,
                                                                         float(store_grace_s)),
                                              daemon=True, name=f"cam-liveness-r{rank}")
            self._watchdog.start()
        # A sync timeout on this stream aborts the plane so the kernel ends before its buffers are released.
        _runtime.set_aborter(self.stream, self.abort)
        base, nbytes = self._c.window()
        self.window_bytes = nbytes
        # This rank's window as a tensor, for inspection (tests, diagnostics). Valid until close(). Never over
        # device memory: a tensor there would make every read of it a host load of a device address.
        self._window = None
        if _window_is_host_memory(transport):
            self._window = torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(base), dtype=torch.uint8)
        # The ordering token of the data-plane torch ops: each op names it in mutates_args and increments it, so
        # torch.compile neither drops an op (they write peer memory, which no graph sees) nor reorders two ops of one
        # rank. It is not the window itself on purpose: functionalization may clone a mutated input and copy it
        # back, which must never touch protocol state.
        self.token = torch.zeros(1, dtype=torch.int64)
        if self.world_id is None:  # threads as ranks: the plane instance is the world (one per joined group name)
            self.world_id = format(self._c.plane_id() & (2 ** 64 - 1), "016x")
        self.id = next(_ids)
        with _registry_lock:
            _registry[self.id] = self
        if transport == "in_process":
            try:
                self._agree_on_placement_in_process()
            except BaseException:
                self.close()
                raise

    def _collect_peer_processes(self, store, group) -> None:
        """The peers' published process identities, for the liveness watchdog (every peer must be watchable)."""
        watched = _proc_identity(os.getpid()) is not None  # Linux /proc: every peer must be watchable
        for r in range(self.topology.world_size):
            proc = store.get(f"{group}/proc/{r}").decode() if r != self.rank else ""
            if watched and r != self.rank and not _is_own_live_process(proc):
                # A rank the watchdog cannot watch could stand in for a rank without ever being found dead.
                raise InvalidArgumentError(
                    f"Comm: rank {self.rank}: rank {r} published the process identity {proc!r}, which is no "
                    f"live process of this user: it could not be watched for liveness")
            if proc:
                self._peers_proc[r] = proc

    def _create_ipc(self, store, group, fields, timeout_ns, idle_ns, join_timeout_s, shm_name=None):
        """ACL IPC handshake: pids first (each window's allow-list needs them), then the window records. A rank
        that fails publishes why (``{group}/failed/{rank}``) before it raises, and every wait watches the missing
        ranks' failures and processes, so a refusal or a death at one rank ends every rank's handshake at once,
        naming that rank, instead of at join_timeout_s. ``shm_name`` (the twin's shm plane): the window's segment
        is named so, and the name is removed once every rank imported every window, so a rank that dies afterwards
        leaks nothing in /dev/shm."""
        world = self.topology.world_size
        deadline = time.monotonic() + join_timeout_s
        c = watch = None
        try:
            watch = rank_status.JoinWatch(store, self._status_group, self.rank, self.topology.A, world, os.getpid(),
                                          self._plane_description(), join_timeout_s)
            store.set(f"{group}/proc/{self.rank}", _proc_identity(os.getpid()) or "")
            store.set(f"{group}/topo/{self.rank}", json.dumps(self._plane_description()))
            checkpoint_identity.write(store, group, self.rank, self._checkpoint)
            store.set(f"{group}/ipcpid/{self.rank}", str(_C.ipc_process_id()))
            self._await_keys(store, [f"{group}/ipcpid/{r}" for r in range(world)], deadline, join_timeout_s,
                             "published its pid", group=group, watch=watch)
            _check_same_plane(self.rank, [json.loads(store.get(f"{group}/topo/{r}").decode()) for r in range(world)])
            checkpoint_identity.check_same(self.rank, checkpoint_identity.read(store, group, world), self.topology.A)
            self._collect_peer_processes(store, group)
            pids = [int(store.get(f"{group}/ipcpid/{r}").decode()) for r in range(world)]
            c = _C.Comm.ipc(fields, self.rank, timeout_ns, idle_ns, _ACL_DTYPE[self.dtype], pids, shm_name)
            store.set(f"{group}/ipc/{self.rank}", json.dumps(c.ipc_record()))
            self._await_keys(store, [f"{group}/ipc/{r}" for r in range(world)], deadline, join_timeout_s,
                             "published its window", group=group)
            try:
                c.attach_ipc([json.loads(store.get(f"{group}/ipc/{r}").decode()) for r in range(world)])
            except CamError:
                # A peer that gave up first has withdrawn its export: its reason is the cause, not this import.
                for r in range(world):
                    if r != self.rank:
                        self._check_joining_peer(store, group, r, "imported the windows", gone=False)
                raise
            store.set(f"{group}/mapped/{self.rank}", "1")
            self._await_keys(store, [f"{group}/mapped/{r}" for r in range(world)], deadline, join_timeout_s,
                             "imported the windows", group=group)
            if shm_name is not None:
                c.unlink_shm()
            watch.close("joined")
        except BaseException as e:
            if watch is not None:
                watch.close("refused", f"{type(e).__name__}: {e}")
            try:  # before the close withdraws this rank's export, so a peer whose import then fails finds why
                store.set(f"{group}/failed/{self.rank}", f"{type(e).__name__}: {e}")
            except Exception:  # noqa: BLE001 - no store to tell: the peers find this rank by its process or timeout
                pass
            self._release_after_failed_handshake(c, store, group)
            raise
        return c

    def _release_after_failed_handshake(self, c, store, group) -> None:
        """A failed handshake frees this rank's window only as a close does: a peer may have imported it already
        (every peer that read this rank's record), and an owner must not free memory a peer still has imported
        (docs/ascend.md §5.0, teardown order). So this rank closes its own imports and says so (every failing rank
        does, also one that never created its window, so nobody waits for it), then waits, bounded, until every peer
        that joined and is still alive said the same; a peer that does not answer leaves the window allocated for
        the life of the process."""
        detached = True
        if c is not None:
            try:
                if self.transport == "shm":
                    c.unlink_shm()  # no import can start from now on, and a kept window leaves no name behind
                c.detach_ipc()
            except CamError:  # the handshake's own error is the one raised; nothing is freed below
                detached = False
        if detached:
            try:
                store.set(f"{group}/detached/{self.rank}", "1")
            except Exception:  # noqa: BLE001 - no store: the peers' waits end at their own bound
                pass
        if c is None:
            return
        wait_s = min(_FAILED_RELEASE_S, self._join_timeout_s)
        if detached and self._await_peers_detached(store, group, wait_s, joined_only=True):
            c.close()  # withdraws the export, frees the window
        else:
            _runtime._park(c)

    def _await_peers_detached(self, store, group, wait_s: float, joined_only: bool = False) -> bool:
        """Waits (bounded) until every peer said it closed its imports of this rank's window
        (``{group}/detached/{r}``), skipping the peer this rank's watchdog found dead and any peer whose process is
        gone (its imports went with it), and with ``joined_only`` a peer that never published its process (it never
        read this rank's record). False when some peer did not answer in time, or the store is gone."""
        pending = [r for r in range(self.topology.world_size) if r != self.rank and r != self.dead_rank]
        deadline = time.monotonic() + max(0.0, float(wait_s))
        try:
            while True:
                pending = [r for r in pending if not store.check([f"{group}/detached/{r}"])
                           and not self._peer_process_gone(store, group, r, joined_only)]
                if not pending:
                    return True
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.01)
        except Exception:  # noqa: BLE001 - the store is gone: no peer can say it detached
            return False

    @staticmethod
    def _peer_process_gone(store, group, r, absent_is_gone: bool) -> bool:
        """Whether rank r's published process has ended (or, with ``absent_is_gone``, was never published)."""
        if not store.check([f"{group}/proc/{r}"]):
            return absent_is_gone
        ident = store.get(f"{group}/proc/{r}").decode()
        return bool(ident) and process_gone(ident)

    def _detach_npu(self, wait_s: float) -> bool:
        """Closes this rank's imports, then waits (bounded) until every live peer closed its imports of this rank's
        window: an owner must not free memory a peer still has imported. False when some peer did not."""
        self._c.detach_ipc()
        try:
            self._store.set(f"{self._group}/detached/{self.rank}", "1")
        except Exception:  # noqa: BLE001 - the store is gone: no peer can say it detached
            return False
        return self._await_peers_detached(self._store, self._group, wait_s)

    def _plane_description(self) -> dict:
        """What every rank of one plane must agree on: the topology's fields and the activation dtype."""
        fields = {}
        for f in dataclasses.fields(self.topology):
            v = getattr(self.topology, f.name)
            fields[f.name] = v if v is None or isinstance(v, bool) else int(v)  # numpy ints too: JSON-able
        fields["dtype"] = str(self.dtype).replace("torch.", "")
        # Ranks that would route by different tables never join one plane (docs/protocol.md §15).
        placement = getattr(self, "placement", None)  # a Comm described before its table was set has none
        fields["placement"] = None if placement is None else placement.digest()
        return fields

    # ------------------------------------------------------------------ placement (docs/protocol.md §15)

    def _count_op(self, op: str) -> None:
        """Called by the data-plane ops after a call completed. A call recorded into a capture did not run, so it
        is not counted: set_placement's race check covers eager calls (a captured loop rebalances between
        replays)."""
        if _runtime._capture_in_thread() is None:
            self._op_counts[op] += 1

    def set_placement(self, placement, weights=None, *, experts=None) -> int:
        """Rebalance: replace the expert placement between rounds, without re-creating the plane or re-capturing
        an FFN graph (docs/protocol.md §15, "Rebalance").

        Every rank of the plane calls it with the same table, between the same two rounds: an Attention rank after
        ``combine_recv`` of its last round under the current table and before its next ``dispatch_send``; an FFN
        rank once it served (``combine_send``) every round dispatched under the current table.

        A rebalance is an **agreement** keyed by its id ``(epoch, attempt)`` (:attr:`rebalance_id`): the k-th call
        of every rank while the plane is at table epoch ``e - 1`` is attempt k of epoch ``e``. Every call joins
        it and votes: "ready" with the table's digest, or "refuse" with the reason when this rank cannot adopt it
        now (a round in flight, a queued replay, a bad argument). The attempt is decided once, for every rank: it
        commits when every rank voted ready with the same digest; it is refused as soon as any rank refuses, the
        digests differ, or a rank has not voted within ``join_timeout_s``. A refused attempt changes nothing on any
        rank, and every rank raises naming the cause (also a rank that joins after the decision: it reads it), so
        calling it again on every rank once the cause is gone is the next attempt and succeeds.

        On commit every rank rewrites :attr:`placement_buffer` in place (the tensor ``dispatch_send`` reads; its
        address stays) and moves it to the next epoch (:attr:`placement_epoch`), and an FFN rank copies each slot's
        W1 and W2 weights and scales (and packed int4 column sums) into ``weights``' existing tensors between
        setting its weights-epoch line to -1 and to the new epoch, so no round is served with partly moved weights.
        Rounds dispatched before the call were routed, and are served, under the old table; the kernels compare the
        epochs, so a round that meets weights of another epoch is held back (newer) or fails naming both epochs
        (older).

        Args:
            placement: the new :class:`cam.placement.Placement` (its own checks refuse a replica outside the FFN
                set, zero replicas, two experts in one slot).
            weights: FFN ranks only: the :class:`cam.FfnWeights` this rank serves with (W1, W2, swiglu_limit; made
                by ``ExpertWeights.slots`` for the current table). Its tensors are rewritten in place.
            experts: FFN ranks only: the :class:`cam.ExpertWeights` of every routed expert (the same W1/W2 shapes
                and swiglu_limit as ``weights``), on the host, that the new slots are copied from.
            Attention ranks pass neither.

        Returns:
            the sequence number of this rank's first round under the new table (Attention ranks); 0 on FFN ranks.

        Raises:
            TypeError / ValueError: this rank's own bad argument (it votes "refuse" first, so every rank learns).
            PlacementError: the attempt was refused: a table that does not fit the plane, a rebalance racing a round
                on some rank (a round dispatched and not yet combined, a work item received and not yet
                combine_sent, or a replay of a captured graph still queued), or tables that differ across ranks.
                Nothing was changed on any rank.
            TimeoutError: a rank did not join the attempt within ``join_timeout_s``; nothing was changed on any rank.
        """
        from .placement import PlacementError

        self._require()
        attention = self.rank < self.topology.A
        new, staged, local_error, refusal = None, None, None, None
        try:
            new, staged = self._prepare_placement(placement, weights, experts, attention)
            refusal = self._placement_race(attention)
        except (TypeError, ValueError) as e:
            local_error, refusal = e, f"{type(e).__name__}: {e}"
        vote = {"refuse": refusal} if refusal is not None else {"digest": new.digest()}
        decision = self._agree(vote)
        if not decision["commit"]:
            if local_error is not None:
                raise local_error
            if decision["kind"] == "aborted":
                raise CommAbortedError(f"Comm.set_placement: rank {self.rank}: rebalance {decision['id']} was not "
                                       f"adopted: {decision['reason']}; nothing was changed on any rank")
            err = TimeoutError if decision["kind"] == "timeout" else PlacementError
            raise err(f"Comm.set_placement: rank {self.rank}: rebalance {decision['id']} was refused: "
                      f"{decision['reason']}; nothing was changed on any rank (every rank is still at placement "
                      f"epoch {self._table_epoch}): call set_placement again on every rank once the cause is gone")
        self._adopt_placement(new, None if attention else (weights, staged))
        # Every rank's adoption is recorded, so a join is admitted only once no rank is still moving weights (§18).
        store, _ = self._agreement_store()
        store.set(f"{self._last_rebalance}/adopted/{self.rank}", "1")
        return self._op_counts["dispatch_send"] + 1 if attention else 0

    def rebalance_underway(self) -> Optional[str]:
        """Why this plane is inside a rebalance as this rank sees it between two rounds, else None: an attempt
        refused on this rank and not yet retried, a rank that voted in the attempt this rank's next set_placement
        joins, or a rank that has not finished adopting the last committed table. An elastic world admits no
        joining rank then (docs/protocol.md §18, "A join during a rebalance")."""
        self._require()
        if self._rebalance_attempt:
            return (f"rank {self.rank} is in rebalance {self.rebalance_id} (an attempt of it was refused; every rank "
                    f"calls set_placement again)")
        store, prefix = self._agreement_store()
        world = range(self.topology.world_size)
        key = f"{prefix}/rebalance/{self.plane_id}/{self.rebalance_id}"
        voted = [r for r in world if store.check([f"{key}/vote/{r}"])]
        if voted:
            return f"rank(s) {', '.join(map(str, voted))} voted in rebalance {self.rebalance_id}, rank {self.rank} " \
                   f"not yet"
        if self._last_rebalance is not None:
            moving = [r for r in world if not store.check([f"{self._last_rebalance}/adopted/{r}"])]
            if moving:
                return (f"rank(s) {', '.join(map(str, moving))} have not finished adopting rebalance to epoch "
                        f"{self._table_epoch}")
        return None

    def _prepare_placement(self, placement, weights, experts, attention):
        """set_placement's local checks, before this rank votes: (the table, an FFN rank's staged slot weights).
        Raises what a caller's bad argument is (TypeError / ValueError naming it); nothing is written."""
        from .ffn_weights import ExpertWeights, FfnWeights
        from .placement import Placement, PlacementError

        if not isinstance(placement, Placement):
            raise TypeError(f"Comm.set_placement: placement must be a cam.placement.Placement, got "
                            f"{type(placement).__name__}")
        try:
            new = _placement_for(self.topology, placement)[0]
        except ValueError as e:
            raise PlacementError(f"Comm.set_placement: {e}") from None
        if attention:
            if weights is not None or experts is not None:
                raise ValueError("Comm.set_placement: an Attention rank holds no expert weights (weights=None, "
                                 "experts=None)")
            return new, None
        if not isinstance(weights, FfnWeights):
            raise TypeError(f"Comm.set_placement: weights must be the cam.FfnWeights this FFN rank serves with (W1 "
                            f"and W2 together), got {type(weights).__name__}")
        if not isinstance(experts, ExpertWeights):
            raise TypeError(f"Comm.set_placement: experts must be the cam.ExpertWeights of every routed expert (W1 "
                            f"and W2 together), got {type(experts).__name__}")
        if weights.swiglu_limit != experts.swiglu_limit:
            raise ValueError(f"Comm.set_placement: weights apply swiglu_limit {weights.swiglu_limit}, experts "
                             f"{experts.swiglu_limit}: a rebalance moves experts, it does not change the activation")
        sources = {t.untyped_storage().data_ptr() for t in experts.tensors()}
        for name, dst in weights.named_tensors():
            if dst.untyped_storage().data_ptr() in sources:
                # Copying a slot into memory it shares with the experts would overwrite the source of later moves.
                raise ValueError(f"Comm.set_placement: weights.{name} shares memory with experts (a view of the same "
                                 f"tensor): the served slots must be tensors of their own")
        staged = experts.slots(new, self.rank - self.topology.A)
        if staged.num_layers != weights.num_layers:
            raise ValueError(f"Comm.set_placement: weights hold {weights.num_layers} layers, experts "
                             f"{staged.num_layers}")
        for which in ("w1", "w2"):
            served_format, experts_format = getattr(weights, which).format, getattr(experts, which).format
            if served_format != experts_format:
                raise ValueError(f"Comm.set_placement: weights.{which} is format {served_format!r}, experts.{which} "
                                 f"{experts_format!r}: a rebalance copies slots, it does not re-pack them")
        for (name, dst), src in zip(weights.named_tensors(), staged.tensors()):
            if dst.shape != src.shape or dst.dtype != src.dtype:
                raise ValueError(f"Comm.set_placement: weights.{name} is {dst.dtype} {tuple(dst.shape)}, the new "
                                 f"slots' {src.dtype} {tuple(src.shape)} (experts must have the served weights' "
                                 f"shapes, with E experts for R = {self.topology.R} slots)")
        return new, staged

    def _placement_race(self, attention) -> Optional[str]:
        """Why this rank cannot adopt a table now (a round of its own in flight), or None."""
        c = self._op_counts
        if attention and c["dispatch_send"] != c["combine_recv"]:
            return (f"a rebalance racing a round: rank {self.rank} has {c['dispatch_send'] - c['combine_recv']} "
                    f"round(s) in flight (dispatched, not combine_recv'd); call it after combine_recv of its last "
                    f"round")
        if not attention and c["dispatch_recv"] != c["combine_send"]:
            return (f"a rebalance racing a round: FFN rank {self.rank} received a work item it has not "
                    f"combine_sent yet")
        # A captured loop is not counted above: its replays run on this Comm's stream, so a replay still queued
        # would route by the table, or compute with the slot weights, this call is about to overwrite.
        from . import graph as _graph

        queued = _graph.queued_replays(self.stream)
        if queued:
            return (f"a rebalance racing a captured replay: rank {self.rank}'s stream has {queued} replay(s) "
                    f"queued; Graph.synchronize() them first")
        return None

    @property
    def rebalance_id(self) -> str:
        """The id of the rebalance attempt this rank's next set_placement joins: ``"<epoch>.<attempt>"``."""
        return f"{self._table_epoch + 1}.{self._rebalance_attempt}"

    def _agree(self, vote: dict) -> dict:
        """This rank's vote in the next rebalance attempt, and the attempt's decision (the same on every rank):
        ``{"commit", "kind", "reason", "id"}``. The decision is written once (``compare_set``): the first rank that
        can decide (every vote present, a refusal, or its own deadline) writes it, and every rank reads what was
        written, also a rank whose own view would have decided otherwise. Bounded by join_timeout_s."""
        rid = self.rebalance_id
        self._rebalance_attempt += 1
        store, prefix = self._agreement_store()
        key = f"{prefix}/rebalance/{self.plane_id}/{rid}"
        world = self.topology.world_size
        store.set(f"{key}/vote/{self.rank}", json.dumps(vote))
        deadline = time.monotonic() + self._join_timeout_s
        votes: dict = {}
        next_watch = 0.0
        while not store.check([f"{key}/decision"]):
            if self._c is not None and int(self._c.status()["abort"]) != 0:
                # The world changed at this boundary (a death, an admitted join): no rank can commit it now.
                store.compare_set(f"{key}/decision", "", json.dumps(
                    {"commit": False, "kind": "aborted", "id": rid,
                     "reason": f"the plane was aborted while rank {self.rank} waited for the votes"}))
                break
            for r in range(world):
                if r not in votes and store.check([f"{key}/vote/{r}"]):
                    votes[r] = json.loads(store.get(f"{key}/vote/{r}").decode())
            now = time.monotonic()
            gone = []
            if self._store is not None and now >= next_watch and len(votes) < world:
                next_watch = now + _JOIN_WATCH_S
                gone = [r for r in range(world) if r not in votes and
                        self._peer_process_gone(self._store, self._group, r, absent_is_gone=False)]
            verdict = _rebalance_verdict(votes, world, now > deadline, gone, self._join_timeout_s)
            if verdict is not None:
                store.compare_set(f"{key}/decision", "", json.dumps({**verdict, "id": rid}))
                break
            time.sleep(0.002)
        decision = json.loads(store.get(f"{key}/decision").decode())
        if decision["commit"]:
            self._rebalance_attempt = 0
            self._last_rebalance = key
        return decision

    def _agreement_store(self):
        """(store, key prefix) of rebalance agreements: the plane's Store (shm/npu), or a process-local one shared
        by the threads of an in-process plane."""
        if self._store is not None:
            return self._store, self._group
        key = (self.group, self.plane_id)
        with _registry_lock:
            store = _local_stores.get(key)
            if store is None:
                store = _local_stores[key] = _LocalStore()
        self._local_store = store  # held while this Comm lives; the entry goes with the plane's last Comm
        return store, self.group

    def _adopt_placement(self, new, ffn_slots) -> None:
        """set_placement's change, once every rank agreed: the next epoch's table (both roles) and, on an FFN rank,
        its slot weights (``ffn_slots`` = (the FfnWeights served with, the new table's staged FfnWeights)). Each is
        a seqlock write (docs/protocol.md §15): the epoch word -1, the contents, then the new epoch, so a kernel
        reading across the rewrite sees -1 or two different epochs and holds the round back or refuses it. Every
        tensor of W1 and of W2 is copied before the weights epoch leaves -1."""
        from . import graph as _graph

        epoch = self._table_epoch + 1
        if ffn_slots is not None:
            # Weights moving: from here every round is held back on the device, also one a replay launched on
            # another stream (or before the lock below) takes, until every copy completed.
            self._set_weights_epoch(-1)
        # Under the stream's lock no replay launches while the table or the slots are rewritten; one launched
        # before ends first (bounded), under the old ones.
        lock, bound = _runtime.stream_lock(self.stream), _runtime.sync_timeout_s()
        if not lock.acquire(timeout=bound):
            # Every other rank adopts this table: a rank that cannot must not serve or dispatch under the old one.
            self.abort()
            raise TimeoutError(f"Comm.set_placement: rank {self.rank}'s stream stayed busy for {bound:g} s after "
                               f"every rank agreed on rebalance to epoch {epoch}; the plane was aborted")
        try:
            if _graph.queued_replays(self.stream):
                self.stream.synchronize(bound)
            if self.placement_buffer is None:  # a contiguous plane's first table: nothing reads it yet
                _, self.placement_buffer, self.placement_table = _placement_for(self.topology, new, epoch)
            else:
                self.placement_buffer[_C.PLACEMENT_EPOCH_WORD] = -1
                self.placement_table.copy_(new.device_tables(self.topology.placement_width))
                self.placement_buffer[_C.PLACEMENT_EPOCH_WORD] = epoch
            if ffn_slots is not None:
                served, staged = ffn_slots
                for name in ("w1", "w2"):
                    self._copy_weight_set(name, getattr(served, name), getattr(staged, name))
                for device in {d.device for d in served.tensors() if not d.is_cpu}:  # device copies are queued
                    torch.accelerator.synchronize(device)
                self._set_weights_epoch(epoch)
        finally:
            lock.release()
        self._table_epoch = epoch
        self.placement = new

    def _copy_weight_set(self, name: str, dst, src) -> None:
        """One weight set's (``name``: "w1" or "w2") new slots into the LayerWeights served with, in place."""
        for (_, d), (_, s) in zip(dst.named_tensors(), src.named_tensors()):
            d.copy_(s)

    def _set_weights_epoch(self, epoch: int) -> None:
        """The FFN rank's weights-epoch line (camCommSetWeightsEpoch): -1 while the slots change, then the epoch."""
        self._c.set_weights_epoch(epoch)

    @property
    def placement_epoch(self) -> int:
        """Rebalances this rank adopted: the epoch of its table (Attention ranks write it into every record) and of
        its slot weights (FFN ranks; their weights-epoch line holds it between rebalances), docs/protocol.md §15."""
        return self._table_epoch

    def _exchange_in_process(self, key, digest, who: str, what: str) -> list:
        """Every rank's ``digest`` under ``key`` for threads as ranks (a process-local table), in rank order;
        bounded by join_timeout_s. The last rank to read frees the entry."""
        world = self.topology.world_size
        with _rebalance_cv:
            entry = _rebalances.setdefault(key, {})
            entry[self.rank] = digest
            _rebalance_cv.notify_all()
            if not _rebalance_cv.wait_for(lambda: len(entry) == world, self._join_timeout_s):
                missing = [r for r in range(world) if r not in entry]
                raise TimeoutError(f"{who}: rank {self.rank}: rank(s) {', '.join(map(str, missing))} never {what} "
                                   f"within join_timeout_s={self._join_timeout_s:g} s")
            out = [entry[r] for r in range(world)]
            done = _rebalances_read.setdefault(key, set())
            done.add(self.rank)
            if len(done) == world:  # the last reader frees the entry
                del _rebalances[key], _rebalances_read[key]
            return out

    def _agree_on_placement_in_process(self) -> None:
        """Threads as ranks join in C on the topology alone; the placement (which the shm/npu handshake compares
        as part of the plane description) is compared here, once the plane exists and before any op can run:
        ranks created with different tables would route one round by two tables. Every rank refuses, naming the
        ranks that differ from rank 0."""
        from .placement import PlacementError

        mine = None if self.placement is None else self.placement.digest()
        digests = self._exchange_in_process(("created", self.group, self.plane_id), mine, "Comm",
                                            "finished creating its Comm")
        differ = [r for r, d in enumerate(digests) if d != digests[0]]
        if differ:
            raise PlacementError(f"Comm: rank(s) {', '.join(map(str, differ))} were created with another placement "
                                 f"table than rank 0 ({'none' if digests[0] is None else digests[0][:12]}); every "
                                 f"rank of a plane must route by the same table (docs/protocol.md §15)")

    def _await_keys(self, store, keys, deadline, join_timeout_s, what, group=None, watch=None):
        """Waits (bounded) until every rank set its key; a timeout names the ranks that did not. With ``group``, a
        missing rank that published a failure, or whose published process is gone, ends the wait at once, naming
        it (CommJoinError)."""
        missing = list(range(len(keys)))
        next_watch = 0.0
        while True:
            missing = [r for r in missing if not store.check([keys[r]])]
            if not missing:
                return
            expected = getattr(self, "_expect_alive", None)  # set on a Comm; a bare waiter has none
            for r in missing if expected else ():  # first: a peer that gave up after this death is named after it
                ident = expected.get(r)
                if ident and process_gone(ident):
                    raise PeerDiedJoiningError(self.rank, r, ident, what)
            now = time.monotonic()
            if group is not None and now >= next_watch:
                next_watch = now + _JOIN_WATCH_S
                if watch is not None:  # peers describing another world, silent peers, who is still missing
                    watch.poll(missing)
                for r in missing:
                    # Only a rank still without its key: one that published it and then gave up (it found the
                    # plane descriptions differ, say) is for this rank's own next check to name, as it does there.
                    if not store.check([keys[r]]):
                        self._check_joining_peer(store, group, r, what)
            if now > deadline:
                raise TimeoutError(f"Comm: rank {self.rank}: rank(s) {', '.join(map(str, missing))} never {what} "
                                   f"within join_timeout_s={join_timeout_s:g} s (not started, crashed, or a different "
                                   f"group/store)")
            time.sleep(0.005)

    def _check_joining_peer(self, store, group, r, what, gone=True):
        """Raises CommJoinError if rank r gave up the handshake (its published reason) or (``gone``) its process is
        gone."""
        if store.check([f"{group}/failed/{r}"]):
            reason = store.get(f"{group}/failed/{r}").decode(errors="replace")
            raise CommJoinError(f"Comm: rank {self.rank}: rank {r} gave up the handshake before it {what}: {reason}")
        if gone and self._peer_process_gone(store, group, r, absent_is_gone=False):
            pid = store.get(f"{group}/proc/{r}").decode().split(":")[0]
            raise CommJoinError(f"Comm: rank {self.rank}: rank {r} died during the handshake (its process {pid} is "
                                f"gone) before it {what}")

    def _store_failed(self, failure: "StoreFailure", stop: threading.Event) -> None:
        """The watchdog could not read the Store for ``store_grace_s`` while a peer's process was gone: whether it
        left or died is unknown, so the plane is aborted (every wait ends now instead of at ``timeout_s``) in this
        rank's name, and the failure is recorded as what it is."""
        with self._watch_lock:
            if self._c is not None and not stop.is_set():
                self.store_failure = failure
                self._c.abort()

    def _stop_watchdog(self) -> None:
        self._watch_stop.set()
        if self._watchdog is not None and self._watchdog is not threading.current_thread():
            self._watchdog.join(10)
        self._watchdog = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def closed(self) -> bool:
        return self._c is None

    def abort(self) -> None:
        """Raise the abort word on every rank: every device wait on every rank ends at once with
        :class:`cam.CommAbortedError`, and every later op refuses. Safe from any thread while ops run."""
        if self._c is not None:
            self._require()._c.abort()

    def status(self) -> dict:
        """This rank's status record and abort word (docs/protocol.md §9), for diagnostics."""
        return self._require()._c.status()

    @property
    def died(self) -> Optional[int]:
        """The rank whose death aborted this rank's plane (the abort word ``-(1 + rank)`` a liveness watchdog
        raised, docs/protocol.md §9; also when another rank's watchdog saw it first), else None."""
        if self._c is None:
            return self.dead_rank
        word = int(self._c.status()["abort"])
        return -word - 1 if word < 0 else None

    def gone_peers(self) -> list:
        """The peers whose process ended without closing their Comm (died), as this rank sees them now, in rank
        order. The liveness watchdog names the first death it finds; an elastic failover drops every FFN rank dead
        by then at once (docs/protocol.md §18, "Several deaths")."""
        gone = []
        for r, ident in sorted(self._peers_proc.items()):
            if not process_gone(ident):
                continue
            if self._store is not None and self._store.check([f"{self._group}/left/{r}"]):
                continue
            gone.append(r)
        return gone

    def close(self, wait_s: float = 10.0) -> None:
        """Releases the stream and the windows. Idempotent. An op another thread is running on this Comm (an idle
        ``dispatch_recv`` poll, a round waiting for a peer) gets ``wait_s`` seconds to end; after that the plane is
        aborted, which ends its device waits at once, and close returns as soon as it did (a kernel's memory is
        never released while it may still run). In a forked child, an inherited Comm is only dropped."""
        if self._c is None:
            return
        with _registry_lock:
            _registry.pop(self.id, None)
        with self._watch_lock:
            self._watch_stop.set()
        if self._left_key is not None and not self._inherited:
            try:  # a rank that closes is not a dead rank: its process may end now without aborting the plane
                self._store.set(self._left_key, "1")
            except Exception:  # noqa: BLE001 - the store may be gone already; then peers see a death, as they should
                pass
        if self._inherited:
            _runtime._park(self.stream, self._c)  # the parent's: no worker here, and the parent still uses the windows
            self._c = None
            self._window = None
            return
        from .graph import close_graphs_of  # graphs captured on this stream use this Comm: they end with it

        close_graphs_of(self.stream, f"the graph uses Comm {self.id} (rank {self.rank}), which was closed", wait_s)
        lock = _runtime.stream_lock(self.stream)
        got = lock.acquire(timeout=max(0.0, float(wait_s)))
        if not got:
            self.abort()
            got = lock.acquire(timeout=_runtime.DRAIN_S)
        if got:
            lock.release()
        if not got or _runtime.is_parked(self.stream):
            # The op never ended: keep what it may touch for the life of the process rather than free it.
            _runtime._park(self.stream, self._c)
        elif self.transport == "npu" and not self._detach_npu(wait_s):
            # A peer may still have this rank's window imported: keep it for the life of the process.
            _runtime._park(self.stream, self._c)
        else:
            self.stream.close()
            self._c.close()
        _runtime.forget_stream(self.stream)
        self._window = None
        self._stop_watchdog()
        self._c = None

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _require(self) -> "Comm":
        if self._c is None:
            raise ValueError(f"cam.Comm of rank {self.rank} is closed")
        if self._inherited:
            raise RuntimeError(f"cam.Comm of rank {self.rank} was created in process {self._pid}; this is a forked "
                               f"child, which inherits neither its stream nor its place in the plane: "
                               f"create a new cam.Comm in the child")
        return self

    def fence_dead_rank(self, rank: int) -> None:
        """Replica isolation by hand (what the ``isolate_replicas`` watchdog does): Attention rank ``rank`` is
        gone, so its replica is fenced on every FFN rank and its replica mates are aborted (docs/protocol.md §9).
        A fenced replica never rejoins. Safe from any thread while ops run."""
        self._require()._c.fence_dead_rank(int(rank))

    @property
    def fenced_replicas(self) -> dict:
        """``{replica: dead Attention rank}`` of every fenced replica of the plane."""
        c = self._require()._c
        fences = {d: c.replica_fence(d) for d in range(self.topology.D)}
        return {d: r for d, r in fences.items() if r >= 0}

    @property
    def dropped_rounds(self) -> dict:
        """FFN ranks: ``{replica: n}`` for every fenced replica, ``n`` its rounds that reached this rank and were
        never returned (dropped unserved, or served and dropped by combine_send). Exact once this rank has no op
        of the replica in flight, e.g. between iterations of its FFN loop. Attention ranks: ``{}`` (their lost
        rounds are the ones they dispatched and did not receive)."""
        c = self._require()._c
        if self.is_attention:
            return {}
        return {d: c.dropped_rounds(d) for d in self.fenced_replicas}

    @property
    def lost_replicas(self) -> dict:
        """``{replica: LostReplica}`` of every fenced replica of the plane, as this rank sees it."""
        dropped = self.dropped_rounds
        return {d: LostReplica(d, r, self.rank, dropped.get(d)) for d, r in self.fenced_replicas.items()}

    @property
    def window(self) -> Optional[torch.Tensor]:
        """This rank's window as a uint8 tensor (None once closed). Refused where the window is device memory (the
        ``"npu"`` transport on an Ascend backend): the host must not load or store it directly (docs/ascend.md §5.1)."""
        if self._window is None and self._c is not None and not _window_is_host_memory(self.transport):
            raise CamError(f"Comm.window: rank {self.rank}'s window is device memory on the {self.transport!r} "
                           f"transport (backend {_C.backend()!r}); the host cannot read it as host memory. "
                           f"Comm.status() gives the status record and abort word, copied through the device runtime")
        return self._window

    @property
    def plane_id(self) -> int:
        """This plane instance's id (identity line word 7): a hash of the topology, the dtype and every rank's
        creation nonce, the same on every rank of the plane and stamped into its work items (word 7), so a work
        item of another plane is refused even when the topology is the same. Read from the window through the
        transport (``camCommGetPlaneId``: a device copy where the window is device memory), on every transport."""
        return self._require()._c.plane_id()

    @property
    def is_attention(self) -> bool:
        return self.rank < self.topology.A

    def __repr__(self) -> str:
        state = "closed" if self._c is None else f"{self.window_bytes} B window"
        return f"cam.Comm(rank={self.rank}, transport={self.transport!r}, {state}, {self.topology})"


@dataclasses.dataclass(frozen=True)
class StoreFailure:
    """Why a liveness watchdog aborted its plane without naming a death (:attr:`Comm.store_failure`): the process
    of peer ``peer`` was gone and the Store could not say, for ``store_grace_s``, whether it left cleanly.

    Attributes:
        peer: the rank whose ``left`` key could not be read.
        error: the last read's error, ``"TypeName: message"``.
        since: when the first read failed (``time.time``); ``found_at``: when the watchdog gave up.
    """

    peer: int
    error: str
    since: float
    found_at: float

    def __str__(self) -> str:
        return (f"the Store could not be read for {self.found_at - self.since:.2f} s ({self.error}) while rank "
                f"{self.peer}'s process was gone: whether it left or died is unknown (a store failure, not a death)")


class StoreFailedError(CommAbortedError):
    """A plane this rank's liveness watchdog aborted on a store failure (``failure``, a :class:`StoreFailure`), not
    on a death; raised where the abort reaches a caller that can name it (the AFD connector's Attention ranks)."""

    def __init__(self, rank: int, failure: StoreFailure, cause: Exception):
        self.failure = failure
        super().__init__(f"rank {rank}: the plane was aborted on a store failure: {failure} ({cause})")


@dataclasses.dataclass(frozen=True)
class LostReplica:
    """A replica fenced by replica isolation (docs/protocol.md §9), as rank ``seen_by`` reports it.

    Attributes:
        replica: the fenced replica ``d``.
        dead_rank: the Attention rank whose death fenced it.
        seen_by: the reporting rank.
        dropped_rounds: FFN ranks: rounds of ``d`` that reached ``seen_by`` and were dropped; None on Attention
            ranks.
    """

    replica: int
    dead_rank: int
    seen_by: int
    dropped_rounds: Optional[int] = None

    def __str__(self) -> str:
        dropped = "" if self.dropped_rounds is None else \
            f"; FFN rank {self.seen_by} dropped {self.dropped_rounds} of its in-flight round(s) of it"
        return (f"replica {self.replica} lost: Attention rank {self.dead_rank} died{dropped} (replica isolation: "
                f"the other replicas are served; a fenced replica does not rejoin the plane)")


def _placement_for(topology: Topology, placement, epoch: int = 0):
    """(placement, device buffer, its rows) for a Comm: the buffer dispatch_send reads, int64 ``[placement_words]``
    (docs/protocol.md §15: the epoch line, word ``PLACEMENT_EPOCH_WORD`` = ``epoch``, then the rows from word
    ``PLACEMENT_ROWS_WORD``), and the rows as a view ``[L, E, 1 + 2F]`` of it; Nones for the contiguous placement
    without a table. Refuses a table that does not fit the topology, naming what differs."""
    from .placement import Placement  # cam.placement imports torch only; kept local so this module stays light

    if placement is None:
        if not topology.contiguous_placement:
            raise ValueError(f"Comm: placement is required: E = {topology.E} experts on F = {topology.F} FFN ranks of "
                             f"expert_slots = {topology.R} have no contiguous placement (cam.placement.Placement)")
        return None, None, None
    if not isinstance(placement, Placement):
        raise TypeError(f"Comm: placement must be a cam.placement.Placement, got {type(placement).__name__}")
    got = (placement.experts, placement.ffn_ranks, placement.slots_per_rank, placement.layers)
    want = (topology.E, topology.F, topology.R, topology.L)
    if got != want:
        raise ValueError(f"Comm: placement has (E, F, slots_per_rank, L) = {got}, the topology {want}")
    rows = placement.device_tables(topology.placement_width)
    buffer = torch.zeros(topology.placement_words, dtype=torch.int64)
    table = buffer[_C.PLACEMENT_ROWS_WORD:].view(rows.shape)
    table.copy_(rows)
    buffer[_C.PLACEMENT_EPOCH_WORD] = epoch
    return placement, buffer, table


class _LocalStore:
    """The part of a ``torch.distributed`` Store a rebalance agreement uses, for the threads of an in-process plane."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kv: dict = {}

    def set(self, key: str, value: str) -> None:
        with self._lock:
            self._kv[key] = value.encode()

    def get(self, key: str) -> bytes:
        with self._lock:
            return self._kv[key]

    def check(self, keys) -> bool:
        with self._lock:
            return all(k in self._kv for k in keys)

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        """As the Store's: sets ``desired`` when ``key`` is absent and ``expected`` is empty (or when it holds
        ``expected``); returns what ``key`` holds after."""
        with self._lock:
            cur = self._kv.get(key)
            if (cur is None and expected == "") or cur == expected.encode():
                self._kv[key] = cur = desired.encode()
            return cur


class PeerDiedJoiningError(CommJoinError):
    """A successor plane's handshake (elastic serving, docs/protocol.md §18) found a member's process gone: it died
    after the survivors agreed on whom to drop. ``peer`` is its rank in the successor."""

    def __init__(self, rank: int, peer: int, ident: str, what: str):
        self.peer = peer
        super().__init__(f"Comm: rank {rank}: rank {peer} (process "
                         f"{ident.split(':')[0]}) died before it {what}")


def _rebalance_verdict(votes: dict, world: int, timed_out: bool, gone, join_timeout_s: float) -> Optional[dict]:
    """The decision one rank can take on a rebalance attempt from the votes it has read (``{rank: vote}``), or None
    while it must wait: refused as soon as a rank refused, a missing rank's process is gone (``gone``) or, at the
    deadline, some rank has not voted; else, once every rank voted, committed when their digests agree."""
    refused = {r: v["refuse"] for r, v in sorted(votes.items()) if "refuse" in v}
    if refused:
        return {"commit": False, "kind": "refused",
                "reason": "; ".join(f"rank {r} refused: {why}" for r, why in refused.items())}
    if gone:
        return {"commit": False, "kind": "timeout",
                "reason": f"rank(s) {', '.join(map(str, gone))} died before joining it"}
    if len(votes) == world:
        digests = [votes[r]["digest"] for r in range(world)]
        differ = [r for r in range(world) if digests[r] != digests[0]]
        if differ:
            return {"commit": False, "kind": "differ",
                    "reason": f"the tables differ across ranks: rank(s) {', '.join(map(str, differ))} passed another "
                              f"table than rank 0 (digest {digests[0][:12]})"}
        return {"commit": True, "kind": "commit", "reason": ""}
    if timed_out:
        missing = [r for r in range(world) if r not in votes]
        return {"commit": False, "kind": "timeout",
                "reason": f"rank(s) {', '.join(map(str, missing))} never called set_placement within "
                          f"join_timeout_s={join_timeout_s:g} s"}
    return None


def _check_same_plane(rank: int, described: list) -> None:
    """Every rank reads every rank's published description, so every rank reaches the same verdict at once: the
    ranks outside the largest group of equal descriptions (ties: the group with the lowest rank) disagree, and the
    error names each one's differing fields with both values. No rank waits for a join that cannot complete."""
    groups: dict = {}
    for r, d in enumerate(described):
        groups.setdefault(json.dumps(d, sort_keys=True), []).append(r)
    if len(groups) == 1:
        return
    plane = max(groups.values(), key=lambda ranks: (len(ranks), -ranks[0]))
    ref = described[plane[0]]
    names = ", ".join(map(str, plane))
    parts = []
    for r, d in enumerate(described):
        if r in plane:
            continue
        diffs = [f"{k}={d.get(k)!r} (rank(s) {names}: {k}={ref.get(k)!r})" for k in ref if d.get(k) != ref.get(k)]
        diffs += [f"{k}={d[k]!r} (unknown to rank(s) {names})" for k in d if k not in ref]
        parts.append(f"rank {r} was created with a different topology: " + ", ".join(diffs))
    raise InvalidArgumentError(f"Comm: rank {rank}: " + "; ".join(parts))


def _window_is_host_memory(transport: str) -> bool:
    """Whether a Comm's own window may be viewed as host memory: on the twin every transport's window is (its
    NPU-transport stand-ins allocate "device memory" as POSIX shm); on Ascend the npu transport's window is
    aclrtMalloc'ed device memory."""
    return transport != "npu" or _C.backend() == "twin"


def _check_name(what: str, value, *, optional: bool) -> None:
    """A group name or shm prefix: it reaches the C API as a C string (a NUL would cut it short, so two names could
    collide) and, for shm, a POSIX shm name (one leading '/' only, added by cam)."""
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise TypeError(f"Comm: {what} must be a str{' or None' if optional else ''}, got {type(value).__name__}")
    if not value:
        raise ValueError(f"Comm: {what} must not be empty")
    if "\0" in value:
        raise ValueError(f"Comm: {what} contains a NUL character ({value!r}): the name would be cut short there and "
                         f"could collide with another plane's")
    if what == "shm_prefix" and "/" in value:
        raise ValueError(f"Comm: shm_prefix must not contain '/' (a POSIX shm name has only its leading one), "
                         f"got {value!r}")


def _watch_peers(ref, poll_s: float, stop: threading.Event, peers: dict, store, group: str,
                 isolate: bool = False, grace_s: float = 5.0) -> None:
    """Liveness of an shm plane: every peer is a process on this host, so "gone" is exact (no heartbeat to miss
    under load). A peer whose process is gone without having closed its Comm (its "left" key, set in close()
    before the process can end) died: the first death found raises the abort word of every rank with the dead
    rank as the reason; each survivor's watchdog reports the same death and the first write wins. With ``isolate``
    an Attention rank's death fences its replica instead (camCommFenceDeadRank) and the watchdog keeps watching the
    others, unless this rank is one of the dead rank's replica mates (then its plane is over). A Store that cannot
    say whether a gone peer left (a read that fails, or is not answered within a poll: :class:`_LeftReads`) is
    asked again every poll for ``grace_s``; past it the plane is aborted as a store failure
    (:meth:`Comm._store_failed`), never as that peer's death. Holds the Comm only weakly."""
    unreadable: dict = {}  # rank -> (time.monotonic(), time.time()) of the first failed read of its left key
    reads = _LeftReads(store, group)
    while not stop.wait(poll_s):
        for r, ident in list(peers.items()):
            if not process_gone(ident):
                continue
            try:
                left = reads.ask(r, poll_s)
            except Exception as e:  # noqa: BLE001 - an unreadable Store is no evidence of a death: ask again
                first = unreadable.setdefault(r, (time.monotonic(), time.time()))
                if time.monotonic() - first[0] < grace_s:
                    continue
                comm = ref()
                if comm is not None:
                    comm._store_failed(StoreFailure(r, f"{type(e).__name__}: {e}", first[1], time.time()), stop)
                return
            unreadable.pop(r, None)
            if left:
                del peers[r]
                continue
            comm = ref()
            if comm is None:
                return
            A, P = comm.topology.A, comm.topology.P
            fence = isolate and r < A
            with comm._watch_lock:
                if comm._c is not None and not stop.is_set():
                    if fence:
                        comm._c.fence_dead_rank(r)
                    else:
                        comm._c.report_dead_rank(r)
                    comm.dead_rank, comm.dead_rank_found_at = r, time.time()
            if not fence or (comm.rank < A and comm.rank // P == r // P):
                return
            del peers[r]
            del comm
            continue
        if ref() is None:
            return


class _LeftReads:
    """The watchdog's reads of gone peers' ``left`` keys, each on a thread of its own, so a Store that does not
    answer (a client blocks up to the Store's own timeout, minutes) holds neither the watch of the other peers nor
    the store-failure bound. A read not answered within the wait raises TimeoutError and stays asked: the next
    ask of that rank waits for the same read."""

    def __init__(self, store, group: str):
        self._store, self._group = store, group
        self._asked: dict = {}  # rank -> (answered event, {"left": bool} or {"error": exception})

    def ask(self, r: int, wait_s: float) -> bool:
        if r not in self._asked:
            answered, box = threading.Event(), {}

            def read():
                try:
                    box["left"] = self._store.check([f"{self._group}/left/{r}"])
                except BaseException as e:  # noqa: BLE001 - handed to the watchdog
                    box["error"] = e
                answered.set()

            self._asked[r] = (answered, box)
            threading.Thread(target=read, daemon=True, name=f"cam-liveness-read-r{r}").start()
        answered, box = self._asked[r]
        if not answered.wait(wait_s):
            raise TimeoutError(f"the Store did not answer within {wait_s:g} s")
        del self._asked[r]
        if "error" in box:
            raise box["error"]
        return box["left"]


def _proc_identity(pid: int) -> Optional[str]:
    """"pid:start-time" of a live process (start time tells a reused pid apart), or None if it is gone or a
    zombie. Linux /proc; elsewhere liveness is not watched (None for ourselves means no watchdog)."""
    ticks = start_ticks(pid)
    return None if ticks is None else f"{pid}:{ticks}"


def process_gone(identity: str) -> bool:
    """Whether the process a "pid:start-time" identity names has exited (or its pid now names another process)."""
    pid, sep, _ = identity.partition(":")
    return not (sep and pid.isdigit()) or _proc_identity(int(pid)) != identity


def _is_own_live_process(identity: str) -> bool:
    """Whether "pid:start-time" names a live process of this process's effective user."""
    pid, sep, _ = identity.partition(":")
    if not sep or not pid.isdigit():
        return False
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.geteuid():
            return False
    except OSError:
        return False
    return _proc_identity(int(pid)) == identity


def _after_fork_in_child() -> None:
    """Comms inherited by a forked child belong to the parent: park their stream and handle so that collecting
    them never joins a worker thread that does not exist here (their ops refuse, see Comm._require)."""
    global _registry_lock, _rebalance_cv
    _registry_lock = threading.Lock()  # another thread of the parent may have held it at fork time
    _rebalance_cv = threading.Condition()
    _rebalances.clear()
    _rebalances_read.clear()
    _local_stores.clear()
    for comm in list(_registry.values()):
        comm._inherited = True
        _runtime._park(comm.stream, comm._c)


os.register_at_fork(after_in_child=_after_fork_in_child)
