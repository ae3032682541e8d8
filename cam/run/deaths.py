"""Rank deaths in a ``cam-run`` world: which death the launcher names as a run's cause, and the testing fault that
kills an FFN rank on purpose (elastic serving; docs/connector.md, `cam-run`).

The fault is injected through the environment variable ``CAM_RUN_KILL_FFN=RANK:ROUND`` (a testing hook, not a
flag): FFN rank ``RANK`` SIGKILLs itself once it has served ``ROUND`` work items with rows, the world runs elastic
(``ConnectorConfig(elastic=True)``), the survivors fail over without it, the launcher restarts it (``start_joiner``)
and it rejoins the running world with its old slots (:func:`rejoin_setup`), and ``--check`` covers every request
as usual. The launcher refuses it, naming the experts, when the rank holds the last replica of some expert (use a
placement with replicas, e.g. ``--placement hot:E``), and with ``--mode colocated`` or ``--rebalance-every``.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Dict, Optional, Tuple

__all__ = ["KILL_ENV", "await_signalled_cause", "die_after", "failure", "join_running_world", "kill_from_env",
           "rejoin_setup", "UntilShutdown"]

KILL_ENV = "CAM_RUN_KILL_FFN"
_POLL_S = 0.01
# How long the launcher, seeing a rank fail, watches the others for a signal death that caused it.
_CAUSE_GRACE_S = 1.0


def kill_from_env(topo, placement, mode: str, rebalance_every: int,
                  environ=os.environ) -> Optional[Tuple[int, int]]:
    """``(rank, round)`` of ``$CAM_RUN_KILL_FFN``, checked against the world (ValueError naming the variable and
    what is wrong), or None when it is unset."""
    text = environ.get(KILL_ENV)
    if not text:
        return None
    rank, sep, round_ = text.partition(":")
    if not sep or not rank.strip().isdigit() or not round_.strip().isdigit() or int(round_) < 1:
        raise ValueError(f"${KILL_ENV}={text!r}: expected RANK:ROUND, an FFN rank and the work item (>= 1) after "
                         f"which it is killed")
    rank, round_ = int(rank), int(round_)
    if not topo.A <= rank < topo.world_size:
        raise ValueError(f"${KILL_ENV}={text!r}: rank {rank} is no FFN rank (FFN ranks are [{topo.A}, "
                         f"{topo.world_size}))")
    if mode == "colocated":
        raise ValueError(f"${KILL_ENV}: --mode colocated holds an Attention rank in every FFN rank's process")
    if rebalance_every:
        raise ValueError(f"${KILL_ENV}: --rebalance-every is not supported with a failover (the tables it moves to "
                         f"name every FFN rank)")
    from ..placement import ExpertsLostError, Placement

    table = placement if placement is not None else Placement.contiguous(topo.E, topo.F, topo.L)
    try:
        table.without(rank - topo.A)
    except ExpertsLostError as e:
        raise ValueError(f"${KILL_ENV}={text!r}: FFN rank {rank} holds the last replica of {e.named}; give a "
                         f"placement with replicas (--placement hot:E replicates every expert)") from None
    return rank, round_


def await_signalled_cause(procs, failed: Dict[int, int], lost: Dict[int, int]) -> None:
    """Ranks that exit with an error are usually the consequence of another's death: their liveness watchdog sees a
    SIGKILLed peer go while the kernel still tears it down, before the launcher can reap it. So before naming a
    cause, watch the other ranks a bounded moment (_CAUSE_GRACE_S) for one killed by a signal; failure names it."""
    grace = time.monotonic() + _CAUSE_GRACE_S
    while time.monotonic() < grace:
        for rank, p in procs.items():
            code = p.poll()
            if code is not None and code < 0 and rank not in failed and rank not in lost:
                failed[rank] = code
        if any(code < 0 for code in failed.values()):
            return
        time.sleep(_POLL_S)


def failure(failed: Dict[int, int]) -> str:
    # A rank killed by a signal is a cause; ranks that exited with an error in the same poll are usually its
    # consequences (their Comm's liveness watchdog aborted the plane within milliseconds), so name it first.
    ranks = sorted((r for r in failed if r >= 0), key=lambda r: (failed[r] >= 0, r))
    if not ranks:
        return "the world did not come up in time"
    first = ranks[0]
    code = failed[first]
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    return f"rank {first} {how}"


def die_after(rounds: int, state: dict) -> None:
    """The killed FFN rank, after each work item it served with rows: it dies as a crash does (SIGKILL, no cleanup)
    once it served ``rounds`` of them (counted in ``state``)."""
    state["served"] = state.get("served", 0) + 1
    if state["served"] >= rounds:
        os.kill(os.getpid(), signal.SIGKILL)


def rejoin_setup(cfg, rank: int, built, store):
    """The killed FFN rank ``rank``, restarted: ``(its RunConfig, its rank, built, its connector)`` as the last FFN
    rank of the running world, once the survivors failed over without it (bounded wait): the running table with the
    slots the rank held before (``Placement.with_rank``), so its weights are loaded into the same slots."""
    import dataclasses

    from ..connector import AsyncAFDConnector
    from ..placement import Placement

    model, workload, topo = built
    probe = AsyncAFDConnector(rank, "ffn", cfg.connector_config(topo))
    running = probe.running_table(store, below=topo.F)
    before = cfg.expert_placement() or Placement.contiguous(topo.E, topo.F, topo.L)
    table = running.with_rank([before.slot_experts(layer, rank - topo.A) for layer in range(topo.L)])
    topo = dataclasses.replace(topo, F=running.ffn_ranks + 1, expert_slots=table.slots_per_rank)
    cfg = dataclasses.replace(cfg, F=topo.F, placement=table.as_dict(), kill_ffn=None, elastic=True)
    rank = topo.world_size - 1
    return cfg, rank, (model, workload, topo), AsyncAFDConnector(rank, "ffn", cfg.connector_config(topo))


class UntilShutdown:
    """The store as the restarted rank sees it while it joins: once the launcher's shutdown key is set (every
    request served before the rank could join), its next wait raises naming that, instead of waiting out --timeout.

    Only while it joins: the connector and its Comm keep this store for the rest of the rank's life, and a member
    must read the store as every member does (:meth:`joined` lifts the refusal). The run's end is then the shutdown
    message its serve loop reads, and its Comm's liveness watchdog tells a peer's orderly exit (its ``left`` key)
    from a death by reading that key here: a refusal there could only be read as "gone without leaving", so every
    Attention rank finishing the run would be taken for dead and the plane aborted under the ranks still serving."""

    def __init__(self, store, shutdown_key: str):
        self._store, self._key = store, shutdown_key
        self._joining = True

    def joined(self) -> None:
        """The rank is a member of the running world: the run's end no longer refuses its store reads."""
        self._joining = False

    def check(self, keys) -> bool:
        if self._joining and self._store.check([self._key]):
            raise RuntimeError("the run ended before the restarted FFN rank could join it (every request was served "
                               "first): give a longer workload")
        return self._store.check(keys)

    def __getattr__(self, name):
        return getattr(self._store, name)


def join_running_world(connector, store, shutdown_key: str) -> None:
    """The restarted rank joins the running world (``connector.join_running``) through ``store`` refusing once the
    run ended (:class:`UntilShutdown`), and reads it as a member once it joined."""
    guard = UntilShutdown(store, shutdown_key)
    try:
        connector.join_running(store=guard)
    finally:
        guard.joined()
