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
import json
import os
import threading
import time
import uuid
from datetime import timedelta
from typing import Deque, Optional, Sequence, Tuple

import torch

from .. import ops
from ..comm import Comm, StoreFailedError
from ..errors import CommAbortedError, CommJoinError, FFNNotServingError, ReplicaLostError
from ..layer_weights import LayerWeights
from ..topology import Topology
from .iteration import CapturedFFN, FFNWorkItem, ffn_batch_iteration, ffn_iteration, ffn_work_item
from .policy import check_items_per_check
from .store import (DONE_KEY, FAILED_PREFIX, RUN_SECRET_ENV, SERVING, SERVING_KEY, Shutdown, SignedStore,
                    loopback_store, post_shutdown, shutdown_message)

__all__ = ["AFDTransferContext", "AFDTransferMetadata", "AsyncAFDConnector", "ConnectorConfig", "Failover",
           "JoinRefusedError", "RoundsLostError", "WorldEndedError", "split_tokens"]

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
        group: name of this plane's keys in the store. Several planes may share one store, each with its own group;
            successive worlds of one group are told apart by their world id (``AsyncAFDConnector.world_id``), and
            a group held by a live plane is refused (:class:`cam.world.GroupInUseError`).
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
        elastic: elastic serving (``"shm"`` only, docs/connector.md "Elastic serving"): when an FFN rank dies, the
            survivors re-form the plane without it at the next round boundary, under ``placement.without`` it (its
            experts served by their other replicas), and every Attention rank dispatches again each round it had
            not received, so every round's result is the one a run without the failure gives. When the dead rank
            held an expert's last replica, the rounds not received are reported lost (:class:`RoundsLostError`,
            naming the experts). Set it the same on every rank.
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
    elastic: bool = False
    checkpoint: Optional[dict] = None  # cam.checkpoint_identity.published(DIR): compared in the handshake
    join_timeout_s: Optional[float] = None  # bound of the handshake; None: timeout_s

    def __post_init__(self):
        if self.transport not in _TRANSPORTS:
            raise ValueError(f"ConnectorConfig: transport must be one of {_TRANSPORTS}, got {self.transport!r}")
        if not isinstance(self.elastic, bool):
            raise TypeError(f"ConnectorConfig: elastic must be a bool, got {self.elastic!r}")
        if self.elastic and self.transport != "shm":
            raise ValueError(f"ConnectorConfig: elastic serving needs the 'shm' transport (ranks are processes the "
                             f"liveness watchdog can find dead), got transport {self.transport!r}")

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


class RoundsLostError(CommAbortedError):
    """Elastic serving: an FFN rank died holding the last replica of some experts, so the rounds this Attention rank
    had not received cannot be served by any table of the survivors. ``rounds`` is their count, ``lost`` the
    experts ``{layer: (experts...)}``, ``dead_rank`` the FFN rank. No partial result was returned."""

    def __init__(self, rank: int, dead_rank, rounds: int, lost: dict):
        dead = tuple(dead_rank) if isinstance(dead_rank, (tuple, list)) else (dead_rank,)
        self.rank, self.dead_rank, self.rounds, self.lost = rank, dead[0], rounds, lost
        self.dead_ranks = dead
        named = "; ".join(f"layer {l}: expert(s) {', '.join(map(str, es))}" for l, es in sorted(lost.items()))
        who = f"FFN rank {dead[0]} died" if len(dead) == 1 else f"FFN ranks {', '.join(map(str, dead))} died"
        super().__init__(f"rank {rank}: {rounds} round(s) lost: {who} holding the last replica of {named}; no "
                         f"surviving replica serves them, so the plane was not re-formed")


class WorldEndedError(CommAbortedError):
    """Elastic serving: a re-form (a failover or an admitted join) was due in a world that had already ended (every
    Attention rank finished and the world's end was claimed, docs/connector.md "The end of an elastic world"). No
    round is owed to anyone: an FFN rank stops serving ("attention finished"), nothing is re-formed."""


class JoinRefusedError(ValueError):
    """:meth:`AsyncAFDConnector.join_running` was refused by the running world; ``reason`` says why. ``rebalance``:
    the world was inside a rebalance (or adopted a table after the joiner read it): ask again with a table built on
    the one the world publishes once the rebalance is over (docs/connector.md, "Rejoin")."""

    def __init__(self, message: str, reason: str, rebalance: bool = False):
        super().__init__(message)
        self.reason, self.rebalance = reason, rebalance


@dataclasses.dataclass(frozen=True)
class Failover:
    """One change of an elastic world as this rank saw it: the dead FFN rank (or, for a rejoin, the rank that
    joined), the world left and the one joined, when the change was seen (``time.time()``: the liveness watchdog's
    find, or the join request read), when the new plane was formed, and the rounds this rank dispatched again
    (Attention ranks)."""

    dead_rank: Optional[int]
    world_left: str
    world_joined: str
    seen_at: float
    formed_at: float
    redispatched: int = 0
    joined_rank: Optional[int] = None  # a rejoin: the rank that joined (dead_rank is None then)
    dead_ranks: Tuple[int, ...] = ()  # every FFN rank dropped at this boundary (dead_rank is the first)


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
        self._world_id: Optional[str] = None  # the plane's world, kept after close (a late shutdown still names it)
        self._lock = threading.Lock()
        self._receiving = 0
        # Attention side: (stage, topk_ids, topk_weights, x, layer) per dispatched round, in dispatch order; x is
        # kept (a copy) only when elastic, to dispatch the round again after a failover.
        self._pending: Deque[tuple] = collections.deque()
        self.failovers: list = []  # Failover records, in order

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
        self._connect_store(store)
        if cfg.transport == "in_process":
            self.comm = Comm(cfg.topology, self.rank, transport="in_process", group=cfg.group, dtype=cfg.dtype,
                             timeout_s=cfg.timeout_s, idle_poll_s=cfg.idle_poll_s, join_timeout_s=cfg.timeout_s,
                             placement=cfg.placement)
        else:
            self.comm = self._shm_comm()
        self._world_id = self.comm.world_id
        self._publish_plane()

    def _connect_store(self, store) -> None:
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

    def _shm_comm(self, succeeds=None, expect_alive=None, store=None) -> Comm:
        cfg = self.config
        prefix = None if cfg.shm_prefix is None or succeeds is None else f"{cfg.shm_prefix}-{succeeds[0][:8]}"
        return Comm(cfg.topology, self.rank, transport="shm", store=self._rendezvous if store is None else store,
                    group=cfg.group, dtype=cfg.dtype, timeout_s=cfg.timeout_s, idle_poll_s=cfg.idle_poll_s,
                    join_timeout_s=cfg.join_timeout_s or cfg.timeout_s,
                    shm_prefix=cfg.shm_prefix if prefix is None else prefix, isolate_replicas=cfg.isolate_replicas,
                    placement=cfg.placement, succeeds=succeeds, checkpoint=cfg.checkpoint,
                    expect_alive=expect_alive)

    # ------------------------------------------------------------------ elastic serving

    def dead_ffn_rank(self) -> Optional[int]:
        """Elastic worlds: the FFN rank whose death aborted this rank's plane (named by the abort word, whichever
        rank's liveness watchdog saw it first), else None."""
        comm = self.comm
        if not self.config.elastic or comm is None or comm.closed:
            return None
        try:
            dead = comm.died
        except Exception:  # noqa: BLE001 - no status to read: nothing to fail over from
            return None
        return dead if dead is not None and dead >= self.config.topology.A else None

    def _dead_at_boundary(self, dead: int) -> Tuple[int, ...]:
        """Every FFN rank this failover drops, the same on every survivor: ``dead`` (the abort word's) and each FFN
        rank whose process is gone too when the first survivor fails over; that survivor writes the set under
        ``{group}/{world}/failover`` (write-once) and every other reads it."""
        A = self.config.topology.A
        mine = sorted({dead} | {r for r in self.comm.gone_peers() if r >= A})
        got = self._messages().compare_set(self._key("failover"), "", json.dumps(mine))
        return tuple(json.loads(got.decode() if isinstance(got, bytes) else got))

    def claim_fate(self, fate: str) -> str:
        """Elastic worlds: what happens to this world next, decided once for every member (``{group}/{world}/fate``,
        write-once): ``"end"`` (every Attention rank finished: the ranks leave) or ``"reform"`` (a failover or an
        admitted join: every member follows into the successor). Claims ``fate`` and returns the one that holds,
        this rank's or the one claimed first; a member acts on the returned fate only, so no rank leaves a world
        the others re-form, and none re-forms a world the others left."""
        if fate not in ("end", "reform"):
            raise ValueError(f"claim_fate: fate must be 'end' or 'reform', got {fate!r}")
        got = self._messages().compare_set(self._key("fate"), "", fate)
        return got.decode() if isinstance(got, bytes) else got

    def _fate(self) -> str:
        """This world's fate as claimed so far (:meth:`claim_fate`), "" when none was."""
        key, messages = self._key("fate"), self._messages()
        return messages.get(key).decode() if messages.check([key]) else ""

    def _reform_claimed(self, what: str) -> None:
        """Claims the re-form of this world (``what`` says which): WorldEndedError when its end was claimed first."""
        if self.claim_fate("reform") == "end":
            raise WorldEndedError(f"rank {self.rank}: {what} in world {self._world_id}, which ended (every Attention "
                                  f"rank finished): nothing to re-form")

    def fail_over(self, dead: int) -> Failover:
        """Re-forms this rank's plane without FFN rank ``dead`` and every other FFN rank dead by the time the first
        survivor fails over (every survivor does, at its next round boundary, with the same set): the table
        ``placement.without`` each, the topology with that many FFN ranks less (the FFN ranks above a dead one
        lower: this rank's :attr:`rank` may change), a Comm in the world's :func:`cam.world.successor`. An FFN
        rank keeps its slot weights (the new table keeps every survivor's slots) and tells the Attention ranks it
        serves in the new world. Raises :class:`cam.placement.ExpertsLostError` naming every expert whose last
        replica was on the dead ranks (the plane then stays aborted)."""
        from ..placement import Placement

        topo = self.config.topology
        comm = self.comm
        seen = comm.dead_rank_found_at or time.time()
        table = self.table
        if table is None:
            table = Placement.contiguous(topo.E, topo.F, topo.L)
        self._reform_claimed(f"FFN rank {dead} died")
        deaths = self._dead_at_boundary(dead)
        _check_experts_kept(table, [r - topo.A for r in deaths], deaths)
        procs = dict(comm._peers_proc)
        with self._lock:
            receiving = self._receiving
        if receiving:  # another thread's receive still waits on the aborted plane: it ends at once
            comm.abort()
        comm.close()
        self.comm = None
        return self._form_without(self._world_id, topo, table, deaths, procs, {r: r for r in range(topo.world_size)},
                                  Failover(dead, self._world_id, "", seen, 0.0))

    def _form_without(self, left: str, topo, table, deaths, procs: dict, original: dict, record: Failover) -> Failover:
        """The successor of world ``left`` (``topo`` under ``table``) without FFN ranks ``deaths``; ``procs`` are
        the members' processes (``{rank: "pid:start"}``), ``original`` their rank numbers before the first death.
        A member that dies while the successor forms ends its handshake (:class:`cam.comm.PeerDiedJoiningError`):
        the members then agree, in that successor's keys, on every member gone by then and form its successor
        without them (docs/protocol.md §18, "Several deaths")."""
        from .. import world as _world
        from ..comm import PeerDiedJoiningError, process_gone

        new = table
        for f in sorted((r - topo.A for r in deaths), reverse=True):  # the highest first: the lower keep their names
            new = new.without(f)

        def renumbered(r):
            return r - sum(1 for d in deaths if d < r)

        record = dataclasses.replace(record, dead_ranks=record.dead_ranks + tuple(original[d] for d in deaths))
        self.rank = renumbered(self.rank)
        procs = {renumbered(r): ident for r, ident in procs.items() if r not in deaths}
        original = {renumbered(r): o for r, o in original.items() if r not in deaths}
        event = deaths[0] if len(deaths) == 1 else tuple(deaths)
        succ_topo = dataclasses.replace(topo, F=topo.F - len(deaths), expert_slots=new.slots_per_rank)
        try:
            return self._reform(succ_topo, new, (left, event), record, expect_alive=procs)
        except CommJoinError as e:
            world = _world.successor(left, event)
            key, messages = f"{self.config.group}/{world}/failover", self._messages()
            if isinstance(e, PeerDiedJoiningError) and e.peer >= succ_topo.A:
                gone = sorted({e.peer} | {r for r, ident in procs.items() if r >= succ_topo.A and
                                          process_gone(ident)})
                got = messages.compare_set(key, "", json.dumps(gone))
            elif messages.check([key]):  # the other members found a member dead first and moved on
                got = messages.get(key)
            else:
                raise
            more = tuple(json.loads(got.decode() if isinstance(got, bytes) else got))
            _check_experts_kept(new, [r - succ_topo.A for r in more], tuple(original[r] for r in more))
            return self._form_without(world, succ_topo, new, more, procs, original, record)

    def _reform(self, topo, table, succeeds, record: Failover, expect_alive=None) -> Failover:
        """This rank's plane re-formed as ``topo`` under ``table`` in the successor world ``succeeds`` names (its
        old Comm closed by the caller); an FFN rank says it serves there, Attention rank 0 publishes the plane."""
        self.config = dataclasses.replace(self.config, topology=topo, placement=table)
        self.ffn_size = topo.F
        self.comm = self._shm_comm(succeeds=succeeds, expect_alive=expect_alive)
        self._world_id = self.comm.world_id
        self._publish_plane()
        if self.role == "ffn":
            self.mark_serving()
        record = dataclasses.replace(record, world_joined=self._world_id, formed_at=time.time())
        self.failovers.append(record)
        return record

    @property
    def table(self):
        """The placement this rank's plane serves now (:class:`cam.placement.Placement`; None: contiguous): the
        config's, or the one a rebalance adopted since."""
        comm = self.comm
        if comm is not None and not comm.closed and comm.placement is not None:
            return comm.placement
        return self.config.placement

    def set_placement(self, placement, weights=None, *, experts=None) -> int:
        """Rebalance between two rounds (:meth:`cam.Comm.set_placement`, docs/protocol.md §15) through the
        connector: its config keeps the adopted table (a later failover drops a dead rank from that one) and an
        elastic world's Attention rank 0 publishes it with its epoch (a joining rank builds its table on it,
        docs/connector.md "Rejoin"). Returns what ``Comm.set_placement`` returns."""
        comm = self._require(self.role)
        first = comm.set_placement(placement, weights, experts=experts)
        self.config = dataclasses.replace(self.config, placement=comm.placement)
        self._publish_plane()
        return first

    # ------------------------------------------------------------------ rejoin (elastic worlds)

    def _key(self, name: str) -> str:
        return f"{self.config.group}/{self._world_id}/{name}"

    def _publish_plane(self) -> None:
        """Attention rank 0 of an elastic world: the plane a rank that joins must match (topology, dtype, table, and
        the table's epoch: a rebalance adopted after a joiner read it refuses the join)."""
        if self.config.elastic and self.rank == 0:
            record = _plane_record(dataclasses.replace(self.config, placement=self.table))
            record["epoch"] = self.comm.placement_epoch
            self._messages().set(self._key("plane"), json.dumps(record))

    def join_running(self, store=None, timeout_s: Optional[float] = None) -> None:
        """A new or restarted rank joins a running elastic world (docs/connector.md, "Rejoin"), instead of
        :meth:`init_afd_connector`.

        An FFN rank's config is the world after the join: the topology with one FFN rank more, this rank the last
        (``A + F - 1``), and the table ``running.with_rank(held)`` (the running table, every replica where it is,
        and this rank's slots). An Attention rank rejoins as the rank it was, in the slot of its fenced (dead)
        replica: its config is the running world's (the same topology, table and checkpoint identity); replicas
        of one rank (``P == 1``) only.

        It asks the current world through the store; the FFN ranks decide at their next check (a round boundary)
        and the plane is re-formed with it in the world's successor. Refused (:class:`JoinRefusedError`, a
        ``ValueError``, naming what differs, before anything is created) when the topology, the dtype, the running
        table or the checkpoint identity differ from the world's, or while another join is decided; by the
        deciding FFN rank while the world is in a rebalance (``rebalance``) or, for an Attention rank, while its
        slot is held by a live process. ``TimeoutError`` when no FFN rank answers within ``timeout_s`` (default
        the config's). :class:`WorldEndedError`, within ``idle_poll_s``, when the world's end is claimed (every
        Attention rank finished) before its members re-formed with this rank, decided or not: no member comes."""
        from .. import world as _world

        cfg, topo = self.config, self.config.topology
        if not cfg.elastic or cfg.transport != "shm":
            raise ValueError("join_running: a connector of an elastic shm world joins a running world")
        if self.role == "ffn" and self.rank != topo.world_size - 1:
            raise ValueError(f"join_running: a joining FFN rank is the last one, rank {topo.world_size - 1} of this "
                             f"config, not {self.rank}")
        if self.role == "attention" and topo.P != 1:
            raise ValueError(f"join_running: Attention rank {self.rank} is one of P = {topo.P} participants of its "
                             f"replica; a replica rejoins one rank at a time only when P = 1")
        if self.is_initialized:
            return
        bound = cfg.timeout_s if timeout_s is None else timeout_s
        self._connect_store(store)
        messages = self._messages()
        left = _world.current(messages, cfg.group)
        if left is None:
            raise ValueError(f"join_running: group {cfg.group!r} has no world on this store to join")
        self._world_id = left
        deadline = time.monotonic() + bound
        while not messages.check([self._key("plane")]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"join_running: world {left} published no plane within {bound:g} s")
            time.sleep(cfg.idle_poll_s)
        plane = json.loads(messages.get(self._key("plane")).decode())
        why = _join_mismatch(plane, cfg, self.role)
        if why:
            raise JoinRefusedError(f"join_running: rank {self.rank} cannot join world {left}: {why}", why)
        nonce = uuid.uuid4().hex
        request = json.dumps({"nonce": nonce, "rank": self.rank, "role": self.role, "epoch": plane.get("epoch", 0),
                              **_plane_record(cfg)})
        ask = self._join_slot(messages)
        got = messages.compare_set(ask, "", request)
        if (got.decode() if isinstance(got, bytes) else got) != request:
            why = "another join into it is being decided"
            raise JoinRefusedError(f"join_running: rank {self.rank} cannot join world {left}: {why}; try again after "
                                   f"it", why)
        ended = _UntilWorldEnds(messages, self._key("fate"), cfg.idle_poll_s,
                                f"join_running: rank {self.rank} was admitted to world {left}, which then ended "
                                f"(every Attention rank finished) before it re-formed with it: nothing to join")
        while not messages.check([ask + "/verdict"]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"join_running: no FFN rank of world {left} answered the join within {bound:g} s")
            ended.raise_if_ended(f"join_running: world {left} ended (every Attention rank finished) before any FFN "
                                 f"rank decided rank {self.rank}'s join: nothing to join")
            if _world.current(messages, cfg.group) != left:  # the world moved on (a failover): ask its successor
                self._world_id = None
                return self.join_running(store=self._store, timeout_s=max(deadline - time.monotonic(), 0.001))
            time.sleep(cfg.idle_poll_s)
        verdict = json.loads(messages.get(ask + "/verdict").decode())
        if not verdict["accept"]:
            raise JoinRefusedError(f"join_running: world {left} refused rank {self.rank}: {verdict['reason']}",
                                   verdict["reason"], bool(verdict.get("rebalance")))
        seen = time.time()
        # Accepted, but the members re-form only if the world's fate is "reform": an end claimed first (every
        # Attention rank finished between the verdict and the members' next boundary) means no member comes, so the
        # successor's handshake watches the fate and ends with WorldEndedError instead of at join_timeout_s.
        ended.raise_if_ended()
        try:
            self.comm = self._shm_comm(succeeds=(left, nonce), store=ended)
        finally:
            ended.lift()
        self._world_id = self.comm.world_id
        if self.role == "ffn":
            self.mark_serving()
        self._publish_plane()
        self.failovers.append(Failover(None, left, self._world_id, seen, time.time(), joined_rank=self.rank))

    def running_table(self, store=None, below: Optional[int] = None, timeout_s: Optional[float] = None):
        """The table of the running elastic world of this config's group (its Attention rank 0 publishes it), as a
        rank about to :meth:`join_running` builds its own from it; with ``below``, once the world has fewer than
        ``below`` FFN ranks (its survivors failed over). Bounded by ``timeout_s`` (default the config's)."""
        from .. import world as _world
        from ..placement import Placement

        cfg = self.config
        bound = cfg.timeout_s if timeout_s is None else timeout_s
        if self._rendezvous is None:
            self._connect_store(store)
        messages = self._messages()
        deadline = time.monotonic() + bound
        while True:
            current = _world.current(messages, cfg.group)
            key = f"{cfg.group}/{current}/plane"
            if current is not None and messages.check([key]):
                table = Placement.from_dict(json.loads(messages.get(key).decode())["placement"])
                if below is None or table.ffn_ranks < below:
                    return table
            if time.monotonic() > deadline:
                raise TimeoutError(f"running_table: group {cfg.group!r} published no plane"
                                   f"{'' if below is None else f' of fewer than {below} FFN ranks'} within {bound:g} s")
            time.sleep(cfg.idle_poll_s)

    def _join_slot(self, messages) -> str:
        """The key of the next join request of this rank's world: ``join/<k>``, the first ``k`` not refused. Refused
        requests stay where they are (write-once), so a joiner refused once can ask again in the same world."""
        k = 0
        while messages.check([self._key(f"join/{k}")]) and messages.check([self._key(f"join/{k}/verdict")]) and \
                not json.loads(messages.get(self._key(f"join/{k}/verdict")).decode())["accept"]:
            k += 1
        return self._key(f"join/{k}")

    def _join_request(self) -> Optional[dict]:
        """The open join request of this rank's current world (the first not refused) and, once decided, its
        verdict (``request["verdict"]``)."""
        if not self.config.elastic or self._rendezvous is None or self._world_id is None:
            return None
        messages = self._messages()
        key = self._join_slot(messages)
        if not messages.check([key]):
            return None
        request = json.loads(messages.get(key).decode())
        request["key"] = key
        if messages.check([key + "/verdict"]):
            request["verdict"] = json.loads(messages.get(key + "/verdict").decode())
        return request

    def poll_join(self) -> bool:
        """FFN rank of an elastic world, between iterations (:func:`cam.serve_ffn` calls it at each check): decides
        a pending join request (the first FFN rank to decide writes the verdict for all: the joiner's topology,
        dtype and table against this world's, and no rebalance of the world under way nor adopted since the joiner
        read the table: :class:`JoinRefusedError` with ``rebalance`` on the joiner) and, once accepted, ends the
        plane's waits (abort) and re-forms it with the joiner. True when this rank re-formed."""
        request = self._join_request()
        if request is None:
            return False
        if "verdict" not in request:
            why, rebalance = "", False
            comm = self.comm
            if comm is not None and not comm.closed:
                underway = comm.rebalance_underway()
                if underway:
                    why, rebalance = f"world {self._world_id} is in a rebalance ({underway}): join after it", True
                elif request.get("epoch", 0) != comm.placement_epoch:
                    why, rebalance = (f"world {self._world_id} adopted table epoch {comm.placement_epoch} after the "
                                      f"joiner read epoch {request.get('epoch', 0)} (a rebalance): join again on the "
                                      f"table it publishes"), True
            why = why or _join_mismatch(dataclasses.replace(self.config, placement=self.table), request,
                                        request.get("role", "ffn")) or self._slot_taken(request)
            if not why and self._fate() == "end":
                why = f"world {self._world_id} ended (every Attention rank finished)"
            verdict = json.dumps({"accept": not why, "reason": why, "rebalance": rebalance})
            self._messages().compare_set(request["key"] + "/verdict", "", verdict)
            request = self._join_request()
            if request is None:  # refused: the next request is another joiner's
                return False
        if not request.get("verdict", {}).get("accept"):
            return False
        return self._admit(request)

    def _slot_taken(self, request: dict) -> str:
        """Why an Attention rank's join cannot take its slot: "" once the slot's holder in this world is gone (its
        replica is fenced, or about to be), else the live process holding it."""
        from .. import world as _world

        rank = request["rank"]
        if request.get("role") != "attention":
            return ""
        key = self._key(f"claim/{rank}")
        messages = self._messages()
        holder = messages.get(key).decode() if messages.check([key]) else ""
        if holder and _world.holder_alive(holder) and not messages.check([self._key(f"left/{rank}")]):
            return (f"Attention rank {rank} of world {self._world_id} is held by live process "
                    f"{holder.split(':')[0]}: a replica rejoins once its rank died (its replica fenced)")
        return ""

    def _admit(self, request: dict) -> bool:
        """Re-forms this rank's plane with the accepted joiner (every member does at its next round boundary): an
        FFN rank joins as the last FFN rank under its table; an Attention rank takes its slot back, the world's
        topology and table unchanged."""
        from ..placement import Placement

        self._reform_claimed(f"rank {request['rank']} was admitted")
        topo, running = self.config.topology, self.table
        comm = self.comm
        comm.abort()  # the other members' waits end now; every round not combined is dispatched again
        comm.close()
        self.comm = None
        if request.get("role") == "attention":
            return bool(self._reform(topo, running, (self._world_id, request["nonce"]),
                                     Failover(None, self._world_id, "", time.time(), 0.0,
                                              joined_rank=request["rank"])))
        table = Placement.from_dict(request["placement"])
        return bool(self._reform(dataclasses.replace(topo, F=topo.F + 1, expert_slots=table.slots_per_rank), table,
                                 (self._world_id, request["nonce"]),
                                 Failover(None, self._world_id, "", time.time(), 0.0, joined_rank=request["rank"])))

    def _recover(self, error: CommAbortedError, received: int = 0) -> None:
        """Attention rank, elastic: after the plane aborted on an FFN rank's death, fail over and dispatch again
        every round not received, in dispatch order (each exactly once). Re-raises ``error`` when no FFN rank's
        death caused it; :class:`RoundsLostError` when the dead rank held an expert's last replica."""
        from ..placement import ExpertsLostError

        dead = self.dead_ffn_rank()
        if dead is None:
            request = self._join_request()
            if request is None or not request.get("verdict", {}).get("accept"):
                raise self._replica_lost(error, len(self._pending) + received) from error
            self._admit(request)
            record = self.failovers[-1]
        else:
            try:
                record = self.fail_over(dead)
            except ExpertsLostError as e:
                raise RoundsLostError(self.rank, e.dead_ranks, len(self._pending) + received, e.lost) from error
        for _, ids, _, x, layer in self._pending:
            ops.dispatch_send(self.comm, x, ids, layer)
        self.failovers[-1] = dataclasses.replace(record, redispatched=len(self._pending))

    @property
    def store(self):
        return self._store

    @property
    def world_id(self) -> str:
        """The world this rank's plane is (``Comm.world_id``): every serving message it writes or reads is that
        world's, so a store shared with another plane of the group, or left over from an earlier one, is never
        read as this one's (docs/connector.md, "Trust model")."""
        if self._world_id is None:
            raise ValueError("AsyncAFDConnector: call init_afd_connector() first")
        return self._world_id

    @property
    def lost_replicas(self) -> dict:
        """``{replica: cam.LostReplica}`` of every replica fenced in this world (replica isolation). On an FFN rank
        each names the dead rank and the rounds of that replica this rank dropped (exact between two FFN
        iterations); ``str()`` of one is the report sentence."""
        comm = self.comm
        return {} if comm is None or comm.closed else comm.lost_replicas

    def _replica_lost(self, error: CommAbortedError, in_flight: int) -> CommAbortedError:
        """On an Attention rank, an abort caused by the fence of its own replica becomes a ReplicaLostError, and one
        this rank's watchdog raised on a store failure a StoreFailedError naming it."""
        comm = self.comm
        failure = getattr(comm, "store_failure", None)
        if failure is not None:
            return StoreFailedError(self.rank, failure, error)
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

    def finish(self, timeout_s: Optional[float] = None) -> None:
        """Attention rank: tells the FFN ranks this rank sends no more rounds. Refused while a dispatched round is
        not received yet (its FFN work must not be cut short). Once every Attention rank finished, every FFN rank's
        :func:`cam.serve_ffn` loop ends at its next idle poll. Elastic worlds: returns once the world ended (every
        Attention rank finished), following every re-form until then (bounded by ``timeout_s``, default the
        config's; docs/connector.md "The end of an elastic world"), so the rank may then close and exit."""
        self._require("attention")
        if self._pending:
            raise ValueError(f"finish: {len(self._pending)} dispatched round(s) not received yet; call "
                             "recv_ffn_output for each first")
        self._mark_done()
        if self.config.elastic:
            self._stay_until_the_end(self.config.timeout_s if timeout_s is None else timeout_s)

    def _mark_done(self) -> None:
        self._messages().set(DONE_KEY.format(group=self.config.group, world=self.world_id, rank=self.rank), "1")

    def _stay_until_the_end(self, timeout_s: float) -> None:
        """Elastic: this Attention rank finished but stays a member until the world ends. A member that left while
        the others re-form would be waited for, or taken for dead, by the successor's handshake; so it follows
        every re-form (a failover, an admitted join: nothing to dispatch again) and says it finished again in the
        successor, until every Attention rank finished and the world's end holds (:meth:`claim_fate`). Bounded by
        ``timeout_s``: TimeoutError naming the Attention ranks not finished."""
        topo = self.config.topology
        deadline = time.monotonic() + timeout_s
        while True:
            comm, messages = self.comm, self._messages()
            if int(comm.status()["abort"]) != 0:
                try:
                    self._follow_reform()
                except WorldEndedError:  # its end was claimed first: nobody re-forms, this rank leaves
                    return
                self._mark_done()
                continue
            # A fenced replica's ranks (replica isolation: one of them died) finish nothing; a rank of it that
            # rejoins does so in a successor, which this rank follows.
            fenced = set(comm.fenced_replicas)
            missing = [r for r in range(topo.A) if r // topo.P not in fenced and not messages.check(
                [DONE_KEY.format(group=self.config.group, world=self.world_id, rank=r)])]
            if not missing and self.claim_fate("end") == "end":
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"finish on rank {self.rank}: world {self.world_id} did not end within "
                                   f"{timeout_s:g} s" + (f" (Attention rank(s) {missing} not finished)" if missing
                                                         else " (a re-form was claimed and never began)"))
            time.sleep(self.config.idle_poll_s)

    def _follow_reform(self) -> None:
        """A finished Attention rank whose plane was aborted: the re-form every member follows (the dead FFN rank's
        failover, or the admitted join), with no round to dispatch again; WorldEndedError when there is none to
        follow (the world ended, or lost an expert's last replica); else CommAbortedError (another abort)."""
        from ..placement import ExpertsLostError

        dead = self.dead_ffn_rank()
        if dead is not None:
            try:
                self.fail_over(dead)
            except ExpertsLostError:
                # No successor serves the world (the other Attention ranks report their lost rounds); every round
                # of this rank was received, so it has nothing lost and nothing to follow.
                raise WorldEndedError(f"finish on rank {self.rank}: FFN rank {dead} died holding an expert's last "
                                      f"replica after this rank received all its rounds") from None
            return
        request = self._join_request()
        if request is None or not request.get("verdict", {}).get("accept"):
            raise self._replica_lost(CommAbortedError(
                f"finish on rank {self.rank}: the plane of world {self.world_id} was aborted (abort word "
                f"{self.comm.status()['abort']}) and no re-form follows"), 0)
        self._admit(request)

    def request_shutdown(self, reason: str = "requested", lost=()) -> None:
        """Any rank: asks every FFN rank to stop serving at its next idle poll (docs/protocol.md, "Shutdown");
        ``lost``: Attention ranks seen dead, which every FFN rank fences before it reports."""
        post_shutdown(self._messages(), self.config.group, reason, lost, world=self.world_id)

    def mark_serving(self, failure: Optional[str] = None) -> None:
        """FFN rank: tells the Attention ranks it serves (its loop is about to run its first iteration), or, with
        ``failure``, that it failed before and never will (their :meth:`wait_ffn_serving` then raises, quoting it)."""
        self._require("ffn")
        value = SERVING if failure is None else FAILED_PREFIX + (str(failure) or "unknown")
        self._messages().set(SERVING_KEY.format(group=self.config.group, world=self.world_id, rank=self.rank), value)

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
        keys = {r: SERVING_KEY.format(group=self.config.group, world=self.world_id, rank=r)
                for r in range(topo.A, topo.world_size)}
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
        return shutdown_message(self._messages(), self.config.group, self.attn_size, world=self.world_id)

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
        self._require("attention")
        if not isinstance(topk_weights, torch.Tensor) or topk_weights.dtype != torch.float32:
            raise TypeError("send_attn_output: topk_weights must be a float32 tensor [B, K]")
        if tuple(topk_weights.shape) != tuple(topk_ids.shape):
            raise ValueError(f"send_attn_output: topk_weights shape {tuple(topk_weights.shape)} differs from "
                             f"topk_ids {tuple(topk_ids.shape)}")
        layer = context.metadata.layer_idx
        kept = hidden_states.clone() if self.config.elastic else None  # the caller may reuse its buffer
        while True:  # each failover removes one FFN rank: at most F - 1 of them before one reports rounds lost
            try:
                ops.dispatch_send(self.comm, hidden_states, topk_ids, layer)
                break
            except CommAbortedError as e:
                if not self.config.elastic:
                    raise self._replica_lost(e, len(self._pending)) from e
                self._recover(e, received=1)
        self._pending.append((context.metadata.stage_idx, topk_ids, topk_weights, kept, layer))

    def recv_ffn_output(self, ref_tensor: Optional[torch.Tensor] = None, ubatch_idx: int = 0, **_) -> torch.Tensor:
        """The weighted routed sum ``[B, H]`` of the oldest dispatched round, which must belong to ``ubatch_idx``
        (results come back in dispatch order: FIFO per stage, stages interleaved as they were sent)."""
        self._require("attention")
        if not self._pending:
            raise ValueError("recv_ffn_output: nothing was dispatched")
        stage, ids, weights = self._pending[0][:3]
        if stage != ubatch_idx:
            raise ValueError(f"recv_ffn_output: the oldest dispatched round is stage {stage}, not {ubatch_idx}; "
                             "receive in dispatch order")
        while True:  # each failover removes one FFN rank: at most F - 1 of them before one reports rounds lost
            with self._Receiving(self):
                try:
                    out = ops.combine_recv(self.comm, ids, weights)
                    break
                except CommAbortedError as e:
                    if not self.config.elastic:
                        self._pending.popleft()
                        raise self._replica_lost(e, len(self._pending) + 1) from e
                    failed = e
            # Elastic: the round is still pending, so it is dispatched again with the others, and received next.
            self._recover(failed)
        self._pending.popleft()
        return out

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


class _UntilWorldEnds:
    """The store as a joiner sees it until it is a member: once the world's fate (``fate_key``, write-once) is
    ``end``, a read raises :class:`WorldEndedError` (``message``) once, looked at most every ``poll_s``; after it
    (and after :meth:`lift`: the fate is ``reform`` for good, the members came) it only passes reads through, so
    the failed handshake's release and the Comm, which keeps this store for the rest of its life, read the store as
    it is."""

    def __init__(self, store, fate_key: str, poll_s: float, message: str):
        self._store, self._fate_key, self._poll_s, self._message = store, fate_key, poll_s, message
        self._watching, self._next = True, 0.0

    def lift(self) -> None:
        self._watching = False

    def raise_if_ended(self, message: Optional[str] = None) -> None:
        """WorldEndedError when the world's end holds (read now)."""
        store, key = self._store, self._fate_key
        if store.check([key]) and store.get(key).decode() == "end":
            raise WorldEndedError(message or self._message)

    def check(self, keys) -> bool:
        if self._watching and time.monotonic() >= self._next:
            self._next = time.monotonic() + self._poll_s
            try:
                self.raise_if_ended()
            except WorldEndedError:
                self._watching = False
                raise
        return self._store.check(keys)

    def __getattr__(self, name):
        return getattr(self._store, name)


def split_tokens(num_tokens: int, participants: int) -> Sequence[Tuple[int, int]]:
    """Contiguous balanced split of a replica's tokens over its participants: [(start, end)] per participant."""
    base, extra = divmod(num_tokens, participants)
    bounds, start = [], 0
    for p in range(participants):
        end = start + base + (1 if p < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def _check_experts_kept(table, indices, dead_ranks) -> None:
    """Raises :class:`cam.placement.ExpertsLostError` naming every expert whose every replica is on FFN indices
    ``indices`` of ``table`` (``dead_ranks``: those ranks as the caller names them, ``.dead_ranks`` of the error)."""
    from ..placement import ExpertsLostError

    lost = {}
    for l in range(table.layers):
        gone = tuple(e for e in range(table.experts) if all(f in indices for f, _ in table.replicas(l, e)))
        if gone:
            lost[l] = gone
    if lost:
        err = ExpertsLostError(indices[0], lost)
        err.dead_ranks = tuple(dead_ranks)
        if len(indices) > 1:
            err.args = (f"FFN indices {', '.join(map(str, indices))} held the last replica of {err.named}: no "
                        f"surviving replica serves them",)
        raise err


def _plane_record(cfg: ConnectorConfig) -> dict:
    """What a joining rank must match: the topology's fields, the dtype, the table and the checkpoint identity
    (docs/connector.md, "Rejoin")."""
    from ..placement import Placement

    topo = cfg.topology
    table = cfg.placement if cfg.placement is not None else Placement.contiguous(topo.E, topo.F, topo.L)
    fields = {f.name: getattr(topo, f.name) for f in dataclasses.fields(topo)}
    return {"topology": {k: v if v is None or isinstance(v, bool) else int(v) for k, v in fields.items()},
            "dtype": str(cfg.dtype), "placement": table.as_dict(), "checkpoint": cfg.checkpoint}


def _join_mismatch(plane: dict, joiner, role: str = "ffn") -> str:
    """Why a joiner (its plane record, or its ConnectorConfig) of ``role`` cannot join ``plane`` (a member's record,
    or its ConnectorConfig): "" when it can. An FFN joiner has one FFN rank more, and the members' table is its
    table without its own slots (no replica of a member moves); an Attention joiner has the world's topology and
    table. Both have the world's dtype and, where both sides give one, its checkpoint identity."""
    from .. import checkpoint_identity
    from ..placement import Placement, PlacementError

    if isinstance(plane, ConnectorConfig):
        plane = _plane_record(plane)
    if isinstance(joiner, ConnectorConfig):
        joiner = _plane_record(joiner)
    if not isinstance(plane, dict) or not isinstance(joiner, dict):
        return "no plane record"
    ours, theirs = plane["topology"], joiner["topology"]
    grows = role == "ffn"
    diffs = [f"{k}={theirs.get(k)!r} (the world's {k}={ours.get(k)!r})" for k in ours
             if (k != "F" or not grows) and theirs.get(k) != ours.get(k)]
    if grows and theirs.get("F") != ours.get("F", 0) + 1:
        diffs.append(f"F={theirs.get('F')!r} (a joiner has the world's F={ours.get('F')!r} + 1)")
    if joiner.get("dtype") != plane.get("dtype"):
        diffs.append(f"dtype={joiner.get('dtype')} (the world's dtype={plane.get('dtype')})")
    if diffs:
        return "a different topology: " + ", ".join(diffs)
    ckpt, joiner_ckpt = plane.get("checkpoint"), joiner.get("checkpoint")
    if ckpt is not None and joiner_ckpt is not None and ckpt.get("digest") != joiner_ckpt.get("digest"):
        differ = checkpoint_identity.compare(joiner_ckpt, ckpt)[:3]
        return "a different checkpoint: " + "; ".join(f"{field} {mine!r} (the world's {theirs!r})"
                                                     for field, mine, theirs in differ)
    try:
        if not grows:
            if Placement.from_dict(joiner["placement"]).digest() != Placement.from_dict(plane["placement"]).digest():
                return "another table than the world's (an Attention rank rejoins with the running table)"
            return ""
        mine = Placement.from_dict(joiner["placement"]).without(theirs["F"] - 1)
        if mine.digest() != Placement.from_dict(plane["placement"]).digest():
            return "its table moves replicas of the running ranks (it must be the running table with_rank its slots)"
    except PlacementError as e:
        return f"its table cannot be served: {e}"
    return ""
