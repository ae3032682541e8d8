"""``cam.connector.AsyncAFDConnector``: one rank of an async AFD world, the reference connector that drives
asynchronous AFD prefill with cam's ops.

Its one job is the connector contract of the vLLM AFD plugin (``control_plane = None``; a constructor that does no
device work; a collective ``init_afd_connector()``; ``send_attn_output`` / ``recv_ffn_output`` on Attention ranks;
``recv_ffn_work_item`` / ``send_ffn_work_item_output`` on FFN ranks), kept thin: ordering, fairness, readiness and
completion live in the ops, the FFN iteration in :mod:`cam.serve.iteration`, the store's messages in
:mod:`cam.serve.store`. On the twin the world is ``torch.distributed`` (gloo) plus a shm :class:`cam.Comm`; on
Ascend the Comm would take HCCL windows from the process group's communicator (untested here, see
docs/connector.md).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
from datetime import timedelta
from typing import Deque, Optional, Sequence, Tuple

import torch

from .. import ops
from ..comm import Comm
from ..errors import CommAbortedError, FFNNotServingError, ReplicaLostError
from ..layer_weights import LayerWeights
from ..topology import Topology
from .iteration import CapturedFFN, FFNWorkItem, ffn_batch_iteration, ffn_iteration, ffn_work_item
from .policy import check_items_per_check
from .store import (DONE_KEY, FAILED_PREFIX, RUN_SECRET_ENV, SERVING, SERVING_KEY, Shutdown, SignedStore,
                    loopback_store, post_shutdown, shutdown_message)

__all__ = ["AFDTransferContext", "AFDTransferMetadata", "AsyncAFDConnector", "ConnectorConfig", "split_tokens"]

# "shm": ranks are processes (the store is the world's TCPStore); "in_process": ranks are threads of one process
# sharing one store object (e.g. torch.distributed.HashStore), for tests and single-process use.
_TRANSPORTS = ("shm", "in_process")

@dataclasses.dataclass(frozen=True)
class ConnectorConfig:
    """Everything the ranks of one AFD world agree on.

    Args:
        topology: the data plane (:class:`cam.Topology`), identical on every rank.
        master_addr / master_port: rendezvous of the world (rank 0 hosts the store).
        dtype: activation dtype (bfloat16 or float16).
        timeout_s: bound of device waits inside a begun round and of the rendezvous.
        idle_poll_s: how long an FFN receive waits before it returns an empty work item.
        group: name of this world's keys in the store (several worlds may share one store).
        shm_prefix: name prefix of the shm windows (``/dev/shm/<prefix>-r<rank>``), so a supervisor can remove
            what a rank killed before the handshake left behind; default unique per process.
        isolate_replicas: replica isolation (``cam.Comm(isolate_replicas=...)``, docs/connector.md): when an
            Attention rank dies, only its replica is lost (its ranks raise :class:`ReplicaLostError`) and the FFN
            ranks keep serving the other replicas; ``False`` makes any death end every rank.
        secret: the run's shared secret (bytes, >= 16); default: ``$CAM_RUN_SECRET`` (hex) if set. With one,
            every rendezvous value a rank writes carries an HMAC over (group, key, value) and every value read
            must carry a valid one, so a process that can reach the store but does not hold the secret cannot
            stand in for a rank (docs/connector.md, "Trust model"). Never sent through the store.
        transport: ``"shm"`` (ranks are processes, the default) or ``"in_process"`` (ranks are threads of one
            process: :meth:`AsyncAFDConnector.init_afd_connector` then needs the ``store`` every rank shares, and
            the plane is a ``cam.Comm(transport="in_process")`` named by ``group``).
        placement: the expert placement (:class:`cam.placement.Placement`, docs/protocol.md §15) every rank's Comm
            is created with; None is the contiguous placement (the topology then needs ``E % F == 0``).
    """

    topology: Topology
    master_addr: str = "127.0.0.1"
    master_port: int = 29555
    dtype: torch.dtype = torch.bfloat16
    timeout_s: float = 300.0
    idle_poll_s: float = 0.05
    group: str = "afd"
    shm_prefix: Optional[str] = None
    isolate_replicas: bool = True
    secret: Optional[bytes] = dataclasses.field(default=None, repr=False)
    transport: str = "shm"
    placement: Optional[object] = None  # a cam.placement.Placement, the same on every rank (cam.Comm(placement=))
    checkpoint: Optional[dict] = None  # cam.checkpoint_identity.published(DIR): compared in the handshake
    join_timeout_s: Optional[float] = None  # bound of the handshake; None: timeout_s

    def __post_init__(self):
        if self.transport not in _TRANSPORTS:
            raise ValueError(f"ConnectorConfig: transport must be one of {_TRANSPORTS}, got {self.transport!r}")

    def run_secret(self) -> Optional[bytes]:
        """The secret the rendezvous signs with: ``secret``, else ``$CAM_RUN_SECRET``, else None (no signing)."""
        if self.secret is not None:
            secret = self.secret
            if not isinstance(secret, bytes):
                raise TypeError(f"ConnectorConfig: secret must be bytes, got {type(secret).__name__}")
        else:
            text = os.environ.get(RUN_SECRET_ENV)
            if not text:
                return None
            try:
                secret = bytes.fromhex(text)
            except ValueError:
                raise ValueError(f"ConnectorConfig: ${RUN_SECRET_ENV} must be hex, got {len(text)} other "
                                 f"characters") from None
        if len(secret) < 16:
            raise ValueError(f"ConnectorConfig: the run secret must be at least 16 bytes, got {len(secret)}")
        return secret


@dataclasses.dataclass(frozen=True)
class AFDTransferMetadata:
    """What the Attention model knows about one transfer: the layer and the micro-batch stage."""

    layer_idx: int
    stage_idx: int = 0
    seq_lens: Tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class AFDTransferContext:
    metadata: AFDTransferMetadata
    states: Optional[object] = None


class AsyncAFDConnector:
    """One rank of an async AFD world.

    Args:
        rank: global rank; Attention ranks are ``[0, A)``, FFN ranks ``[A, A + F)``.
        role: ``"attention"`` or ``"ffn"``; must agree with ``rank``.
        config: the :class:`ConnectorConfig` shared by every rank.

    Construction does no device work; :meth:`init_afd_connector` is collective over the whole world.
    """

    control_plane = None  # async: the FFN side is driven by its own receive loop, no DP metadata exchange

    def __init__(self, rank: int, role: str, config: ConnectorConfig):
        if role not in ("attention", "ffn"):
            raise ValueError(f"AsyncAFDConnector: role must be 'attention' or 'ffn', got {role!r}")
        topo = config.topology
        if not 0 <= rank < topo.world_size:
            raise ValueError(f"AsyncAFDConnector: rank {rank} outside the world [0, {topo.world_size})")
        if (rank < topo.A) != (role == "attention"):
            raise ValueError(f"AsyncAFDConnector: rank {rank} is an {'Attention' if rank < topo.A else 'FFN'} rank "
                             f"(Attention ranks are [0, {topo.A})), not role {role!r}")
        self.rank = rank
        self.role = role
        self.config = config
        self.attn_size = topo.A
        self.ffn_size = topo.F
        self.expert_per_rank = topo.R
        self.comm: Optional[Comm] = None
        self._store = None
        self._rendezvous = None  # the store as the ranks' messages go through it (signed when the run has a secret)
        self._lock = threading.Lock()
        self._receiving = 0
        # Attention side: (stage, topk_ids, topk_weights) per dispatched round, in dispatch order.
        self._pending: Deque[Tuple[int, torch.Tensor, torch.Tensor]] = collections.deque()

    # ------------------------------------------------------------------ lifecycle

    @property
    def is_initialized(self) -> bool:
        return self.comm is not None and not self.comm.closed

    @property
    def world_rank(self) -> int:
        return self.rank

    def init_afd_connector(self, store=None) -> None:
        """Collective: joins the world's store (rank 0 hosts it unless ``store`` is given; an ``in_process`` world
        needs the one store its threads share) and builds this rank's :class:`cam.Comm`. Idempotent."""
        if self.is_initialized:
            return
        cfg = self.config
        secret = cfg.run_secret()
        if cfg.transport == "in_process":
            if store is None:
                raise ValueError("init_afd_connector: an in_process world needs the store its ranks share (e.g. one "
                                 "torch.distributed.HashStore passed to every rank)")
        elif store is None:
            if self.rank == 0 and cfg.master_addr in ("127.0.0.1", "localhost"):
                store = loopback_store(cfg.master_port, cfg.timeout_s, cfg.topology.world_size)
            else:
                store = torch.distributed.TCPStore(
                    cfg.master_addr, cfg.master_port, cfg.topology.world_size, is_master=self.rank == 0,
                    timeout=timedelta(seconds=cfg.timeout_s), wait_for_workers=False)
        self._store = store
        self._rendezvous = SignedStore(store, secret, cfg.group) if secret is not None else store
        if cfg.transport == "in_process":
            self.comm = Comm(cfg.topology, self.rank, transport="in_process", group=cfg.group, dtype=cfg.dtype,
                             timeout_s=cfg.timeout_s, idle_poll_s=cfg.idle_poll_s, join_timeout_s=cfg.timeout_s,
                             placement=cfg.placement)
        else:
            self.comm = Comm(cfg.topology, self.rank, transport="shm", store=self._rendezvous, group=cfg.group,
                             dtype=cfg.dtype, timeout_s=cfg.timeout_s, idle_poll_s=cfg.idle_poll_s,
                             join_timeout_s=cfg.join_timeout_s or cfg.timeout_s, shm_prefix=cfg.shm_prefix,
                             isolate_replicas=cfg.isolate_replicas, placement=cfg.placement,
                             checkpoint=cfg.checkpoint)

    @property
    def store(self):
        return self._store

    @property
    def lost_replicas(self) -> dict:
        """``{replica: cam.LostReplica}`` of every replica fenced in this world (replica isolation). On an FFN rank
        each names the dead rank and the rounds of that replica this rank dropped (exact between two FFN
        iterations); ``str()`` of one is the report sentence."""
        comm = self.comm
        return {} if comm is None or comm.closed else comm.lost_replicas

    def _replica_lost(self, error: CommAbortedError, in_flight: int) -> CommAbortedError:
        """On an Attention rank, an abort caused by the fence of its own replica becomes a ReplicaLostError."""
        comm = self.comm
        try:
            lost = comm.lost_replicas.get(self.rank // self.config.topology.P) if comm is not None else None
        except Exception:  # noqa: BLE001 - the Comm may be closed by now: report the abort as it was
            lost = None
        return error if lost is None else ReplicaLostError(lost, self.rank, in_flight, error)

    def abort(self) -> None:
        """Ends every device wait on every rank of the world (cam.CommAbortedError there)."""
        if self.comm is not None:
            self.comm.abort()

    def close(self) -> None:
        """Releases the Comm. Safe after a partial init and from another thread: a receive still blocked in
        this rank is ended by aborting the plane (a normal close, with nothing in flight, aborts nothing)."""
        comm = self.comm
        if comm is None:
            return
        with self._lock:
            receiving = self._receiving
        if receiving:
            comm.abort()
        comm.close()
        self.comm = None

    def _require(self, role: str) -> Comm:
        if self.role != role:
            raise ValueError(f"AsyncAFDConnector: this is an {self.role} rank; the call needs a {role} rank")
        if not self.is_initialized:
            raise ValueError("AsyncAFDConnector: call init_afd_connector() first (or the connector is closed)")
        return self.comm

    class _Receiving:
        def __init__(self, owner):
            self.owner = owner

        def __enter__(self):
            with self.owner._lock:
                self.owner._receiving += 1

        def __exit__(self, *exc):
            with self.owner._lock:
                self.owner._receiving -= 1

    # ------------------------------------------------------------------ serving messages (host side, the store)

    def _messages(self):
        if self._rendezvous is None:
            raise ValueError("AsyncAFDConnector: call init_afd_connector() first")
        return self._rendezvous

    def finish(self) -> None:
        """Attention rank: tells the FFN ranks this rank sends no more rounds. Refused while a dispatched round is
        not received yet (its FFN work must not be cut short). Once every Attention rank finished, every FFN rank's
        :func:`cam.serve_ffn` loop ends at its next idle poll."""
        self._require("attention")
        if self._pending:
            raise ValueError(f"finish: {len(self._pending)} dispatched round(s) not received yet; call "
                             "recv_ffn_output for each first")
        self._messages().set(DONE_KEY.format(group=self.config.group, rank=self.rank), "1")

    def request_shutdown(self, reason: str = "requested", lost=()) -> None:
        """Any rank: asks every FFN rank to stop serving at its next idle poll (docs/protocol.md, "Shutdown");
        ``lost``: Attention ranks seen dead, which every FFN rank fences before it reports."""
        post_shutdown(self._messages(), self.config.group, reason, lost)

    def mark_serving(self, failure: Optional[str] = None) -> None:
        """FFN rank: tells the Attention ranks it serves (its loop is about to run its first iteration), or, with
        ``failure``, that it failed before and never will (their :meth:`wait_ffn_serving` then raises, quoting it)."""
        self._require("ffn")
        value = SERVING if failure is None else FAILED_PREFIX + (str(failure) or "unknown")
        self._messages().set(SERVING_KEY.format(group=self.config.group, rank=self.rank), value)

    def wait_ffn_serving(self, timeout_s: Optional[float] = None) -> None:
        """Attention rank: returns once every FFN rank serves (:meth:`mark_serving`, which :func:`cam.serve_ffn`
        calls), polling the store every ``idle_poll_s`` for at most ``timeout_s`` (default the config's). A round
        sent earlier would wait in the plane for a rank that may still be capturing or may have failed; this names
        the rank instead. Raises :class:`cam.FFNNotServingError` naming every FFN rank that failed (quoting its
        reason) or did not serve within the bound. Host side only; FFN loops other than serve_ffn must call
        :meth:`mark_serving` themselves for it to return."""
        self._require("attention")
        bound = self.config.timeout_s if timeout_s is None else timeout_s
        if not bound > 0:
            raise ValueError(f"wait_ffn_serving: timeout_s must be > 0 seconds, got {timeout_s!r}")
        topo, messages = self.config.topology, self._messages()
        keys = {r: SERVING_KEY.format(group=self.config.group, rank=r) for r in range(topo.A, topo.world_size)}
        deadline = time.monotonic() + bound
        while True:
            waiting, failed = [], []
            for rank, key in keys.items():
                if not messages.check([key]):
                    waiting.append(rank)
                    continue
                value = messages.get(key).decode(errors="replace")
                if value.startswith(FAILED_PREFIX):
                    failed.append(f"FFN rank {rank} failed before serving: {value[len(FAILED_PREFIX):]}")
                elif value != SERVING:
                    failed.append(f"FFN rank {rank} wrote an unknown serving state {value!r} to {key}")
            if failed:
                raise FFNNotServingError(f"wait_ffn_serving on rank {self.rank}: " + "; ".join(failed))
            if not waiting:
                return
            if time.monotonic() >= deadline:
                raise FFNNotServingError(f"wait_ffn_serving on rank {self.rank}: FFN rank(s) {waiting} not serving "
                                         f"after {bound:g} s (not started, still loading or capturing)")
            time.sleep(min(self.config.idle_poll_s, max(deadline - time.monotonic(), 0.0)))

    def shutdown_message(self) -> Optional[Shutdown]:
        """FFN rank: the :class:`cam.serve.store.Shutdown` to stop serving on (a shutdown request, its lost
        Attention ranks with it, or every Attention rank finished), else None. Host side only: it reads the store,
        never the device."""
        return shutdown_message(self._messages(), self.config.group, self.attn_size)

    def shutdown_requested(self) -> Optional[str]:
        """FFN rank: why to stop serving (the reason of :meth:`shutdown_message`), else None."""
        message = self.shutdown_message()
        return None if message is None else message.reason

    # ------------------------------------------------------------------ Attention side

    def send_attn_output(self, hidden_states: torch.Tensor, context: AFDTransferContext, *,
                         topk_ids: torch.Tensor, topk_weights: torch.Tensor, **_) -> None:
        """Dispatches this rank's tokens of one MoE layer to the FFN ranks (routed experts only).

        Args:
            hidden_states: ``[B, H]`` activations (the plane's dtype).
            context: carries ``metadata.layer_idx`` (MoE layer in ``[0, L)``) and ``metadata.stage_idx``.
            topk_ids: int32 ``[B, K]`` routed expert ids in ``[0, E)``, -1 for an empty slot.
            topk_weights: fp32 ``[B, K]`` combine weights, kept for :meth:`recv_ffn_output`.
        """
        comm = self._require("attention")
        if not isinstance(topk_weights, torch.Tensor) or topk_weights.dtype != torch.float32:
            raise TypeError("send_attn_output: topk_weights must be a float32 tensor [B, K]")
        if tuple(topk_weights.shape) != tuple(topk_ids.shape):
            raise ValueError(f"send_attn_output: topk_weights shape {tuple(topk_weights.shape)} differs from "
                             f"topk_ids {tuple(topk_ids.shape)}")
        try:
            ops.dispatch_send(comm, hidden_states, topk_ids, context.metadata.layer_idx)
        except CommAbortedError as e:
            raise self._replica_lost(e, len(self._pending)) from e
        self._pending.append((context.metadata.stage_idx, topk_ids, topk_weights))

    def recv_ffn_output(self, ref_tensor: Optional[torch.Tensor] = None, ubatch_idx: int = 0, **_) -> torch.Tensor:
        """The weighted routed sum ``[B, H]`` of the oldest dispatched round, which must belong to ``ubatch_idx``
        (results come back in dispatch order: FIFO per stage, stages interleaved as they were sent)."""
        comm = self._require("attention")
        if not self._pending:
            raise ValueError("recv_ffn_output: nothing was dispatched")
        stage, ids, weights = self._pending[0]
        if stage != ubatch_idx:
            raise ValueError(f"recv_ffn_output: the oldest dispatched round is stage {stage}, not {ubatch_idx}; "
                             "receive in dispatch order")
        self._pending.popleft()
        with self._Receiving(self):
            try:
                return ops.combine_recv(comm, ids, weights)
            except CommAbortedError as e:
                raise self._replica_lost(e, len(self._pending) + 1) from e

    # ------------------------------------------------------------------ FFN side

    def recv_ffn_work_item(self, stage_idx: int = 0, max_num_tokens: Optional[int] = None) -> FFNWorkItem:
        """Takes the next ready work item (empty after ``idle_poll_s`` with nothing ready; loop on).
        ``max_num_tokens`` is accepted for the plugin's signature; the capacity is the topology's."""
        comm = self._require("ffn")
        with self._Receiving(self):
            return ffn_work_item(*ops.dispatch_recv(comm), stage_idx)

    def send_ffn_work_item_output(self, item: FFNWorkItem, output: torch.Tensor) -> None:
        """Returns the expert outputs ``[N, H]`` of ``item`` to their Attention ranks; completes the round even when
        the item has no rows (every FFN rank signals every round)."""
        ops.combine_send(self._require("ffn"), output, item.work_item)

    def capture_ffn(self, w1: LayerWeights, w2: LayerWeights, row_budget: Optional[int] = None, *,
                    swiglu_limit: Optional[float] = None) -> CapturedFFN:
        """The FFN iteration captured once (:class:`CapturedFFN`, batched with ``row_budget``, W1 clamped with
        ``swiglu_limit``); :meth:`ffn_graph_step` replays it. Closing the connector (its Comm) ends the graph."""
        return CapturedFFN(self._require("ffn"), w1, w2, row_budget, swiglu_limit=swiglu_limit)

    def ffn_graph_step(self, captured: CapturedFFN, items: int = 1) -> None:
        """Replays ``items`` captured FFN iterations and synchronizes once; no host read per item."""
        self._require("ffn")
        check_items_per_check("ffn_graph_step", items)
        with self._Receiving(self):
            captured.step(items)

    def ffn_step(self, w1: LayerWeights, w2: LayerWeights, row_budget: Optional[int] = None, *,
                 swiglu_limit: Optional[float] = None) -> torch.Tensor:
        """One FFN iteration (see :func:`ffn_iteration`; with ``row_budget`` a batch, :func:`ffn_batch_iteration`;
        W1 clamped with ``swiglu_limit``); returns the device work-item record (the ``[I, words]`` table when
        batched)."""
        comm = self._require("ffn")
        with self._Receiving(self):
            if row_budget is None:
                return ffn_iteration(comm, w1, w2, swiglu_limit=swiglu_limit)
            return ffn_batch_iteration(comm, w1, w2, row_budget, swiglu_limit=swiglu_limit)


def split_tokens(num_tokens: int, participants: int) -> Sequence[Tuple[int, int]]:
    """Contiguous balanced split of a replica's tokens over its participants: [(start, end)] per participant."""
    base, extra = divmod(num_tokens, participants)
    bounds, start = [], 0
    for p in range(participants):
        end = start + base + (1 if p < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds
