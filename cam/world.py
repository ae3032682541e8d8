"""The world id: which instance of a plane a store key belongs to (docs/protocol.md §17, "World").

A ``torch.distributed`` store outlives planes and may be shared by several. A group name alone does not tell two
planes apart, so every key the handshake and the serving tier write sits under ``{group}/{world_id}/``
(:func:`prefix`), where the world id is agreed at rendezvous: the first rank to arrive writes a fresh one under
``{group}/world`` (write-once), and each rank claims its slot in it (``{prefix}/claim/{rank}``, write-once). A rank
that finds the world's key taken reads it and joins that world, unless the world is over (a rank of it published a
failure, the holder of this rank's slot closed its Comm or its process is gone, or the world is still forming after
``join_timeout_s``): then it replaces the key with a fresh world, once for all ranks (compare-and-set). A slot held
by a live process that has not left means another plane uses this group on this store now: refused with
:class:`GroupInUseError`, naming the group.

Importing it does not import torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from typing import Optional

from ._proc import start_ticks
from .errors import CommJoinError

__all__ = ["GroupInUseError", "WORLD_KEY", "current", "join", "prefix", "successor"]

WORLD_KEY = "{group}/world"
# How often a rank whose slot is taken looks again while it waits for the holder's world to be decided over.
_POLL_S = 0.01


class GroupInUseError(CommJoinError):
    """A Comm's group name is in use on its store by a live plane: the rank's slot in that plane's world is held by
    a live process that has not closed its Comm. The message names the group, the world and the holder."""


def prefix(group: str, world_id: str) -> str:
    """The key prefix of world ``world_id`` of ``group``: every handshake and serving key of that world is under it."""
    return f"{group}/{world_id}"


def current(store, group: str) -> Optional[str]:
    """The world id ``group`` has in ``store`` now (the last one agreed), None before any rank arrived. A
    supervisor that posts a message to a running plane addresses it to this world."""
    key = WORLD_KEY.format(group=group)
    if not store.check([key]):
        return None
    return json.loads(store.get(key).decode())["id"]


def successor(world_id: str, event) -> str:
    """The world the members of ``world_id`` form after ``event`` (elastic serving, docs/protocol.md §18): the death
    of rank ``event`` (an int; a tuple: the ranks dead at one boundary), or the join whose request carries nonce
    ``event`` (a str). The same id on every
    member without a message, and a new one, so no key of the world they left is read."""
    if isinstance(event, (tuple, list)):  # several deaths at one boundary
        change = "without/" + ",".join(str(int(r)) for r in sorted(event)) if len(event) > 1 else \
            f"without/{int(event[0])}"
    else:
        change = f"without/{int(event)}" if isinstance(event, int) else f"with/{event}"
    return hashlib.sha256(f"{world_id}/{change}".encode()).hexdigest()[:32]


def identity() -> str:
    """This process as a slot holder: "pid:start-ticks" (a reused pid is told apart), "" where /proc is missing."""
    ticks = start_ticks(os.getpid())
    return "" if ticks is None else f"{os.getpid()}:{ticks}"


def _parse(raw: str, group: str, rank: int, key: str) -> dict:
    """A world key's value as this rank reads it; one it cannot read is another run's (signed with a secret this
    rank does not hold): the group is in use."""
    try:
        world = json.loads(raw)
        if isinstance(world, dict) and isinstance(world.get("id"), str):
            return world
    except ValueError:
        pass
    raise GroupInUseError(f"Comm: rank {rank}: group {group!r} is in use on this store by another run: its world key "
                          f"{key!r} is not one this rank can read (signed with a run secret this rank does not hold)."
                          f" Give this plane another group name, or the run's secret")


def holder_alive(holder: str) -> bool:
    """Whether the process a claim value names (``pid:start-ticks/...``, :func:`identity`) still runs."""
    return _alive(holder)


def _alive(holder: str) -> bool:
    ident = holder.split("/", 1)[0]
    pid, sep, _ = ident.partition(":")
    if not sep or not pid.isdigit():
        return False
    ticks = start_ticks(int(pid))
    return ticks is not None and f"{pid}:{ticks}" == ident


def _over(store, group: str, world: dict, rank: int, world_size: int, join_timeout_s: float) -> Optional[str]:
    """Why ``world`` is over for a rank that wants slot ``rank``, or None while it is live."""
    p = prefix(group, world["id"])
    failed = [r for r in range(world_size) if store.check([f"{p}/failed/{r}"])]
    if failed:
        return f"rank(s) {', '.join(map(str, failed))} of it failed"
    claim = f"{p}/claim/{rank}"
    if store.check([claim]):
        holder = store.get(claim).decode()
        if store.check([f"{p}/left/{rank}"]):
            return f"the holder of rank {rank} left it"
        if not _alive(holder):
            return f"the holder of rank {rank} (process {holder.split(':')[0] or '?'}) is gone"
        return None
    formed = all(store.check([f"{p}/claim/{r}"]) for r in range(world_size))
    if not formed and time.time() - float(world.get("t", 0)) > join_timeout_s:
        return f"it is still forming after join_timeout_s={join_timeout_s:g} s"
    return None


def join(store, group: str, rank: int, world_size: int, join_timeout_s: float, *, after=None) -> str:
    """Agrees on the world of ``group`` that rank ``rank`` joins in ``store`` and claims its slot there; returns the
    world id. Bounded by ``join_timeout_s``. Raises :class:`GroupInUseError` when a live plane holds the slot.

    ``after``: ``(world id, event)`` of the world this rank leaves for its :func:`successor` (an elastic
    failover or a join): the rank joins exactly that successor, replacing the world key only while it still names the world
    left, so the survivors meet in one world whatever order they arrive in."""
    if after is not None:
        return _join_successor(store, group, rank, *after)
    key = WORLD_KEY.format(group=group)
    me = f"{identity()}/{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + join_timeout_s
    while True:
        fresh = json.dumps({"id": uuid.uuid4().hex, "t": time.time()})
        try:
            raw = store.compare_set(key, "", fresh)
        except PermissionError as e:
            raise GroupInUseError(f"Comm: rank {rank}: group {group!r} is in use on this store by another run: its "
                                  f"world key {key!r} is not signed with this run's secret ({e}). Give this plane "
                                  f"another group name, or remove the key once that run is over") from None
        raw = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        world = _parse(raw, group, rank, key)
        p = prefix(group, world["id"])
        why = None if raw == fresh else _over(store, group, world, rank, world_size, join_timeout_s)
        if why is None:
            got = store.compare_set(f"{p}/claim/{rank}", "", me)
            got = got.decode() if isinstance(got, bytes) else got
            if got == me:
                return world["id"]
            why = _over(store, group, world, rank, world_size, join_timeout_s)
            if why is None:
                pid = got.split(":")[0] or "?"
                raise GroupInUseError(f"Comm: rank {rank}: group {group!r} is in use on this store: rank {rank} of "
                                      f"its world {world['id']} is held by live process {pid}, which has not closed "
                                      f"its Comm. Give this plane another group name, or close that plane first")
        # Over: one rank replaces it with a fresh world (compare-and-set), every rank then reads that one.
        store.compare_set(key, raw, json.dumps({"id": uuid.uuid4().hex, "t": time.time()}))
        if time.monotonic() > deadline:
            raise TimeoutError(f"Comm: rank {rank}: no world of group {group!r} agreed within join_timeout_s="
                               f"{join_timeout_s:g} s (the last one found was over: {why})")
        time.sleep(_POLL_S)


def _join_successor(store, group: str, rank: int, left: str, event) -> str:
    key = WORLD_KEY.format(group=group)
    target = successor(left, event)
    value = json.dumps({"id": target, "t": time.time(), "after": left})
    raw = store.compare_set(key, "", value)
    raw = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    found = _parse(raw, group, rank, key)["id"]
    if found == left:
        raw = store.compare_set(key, raw, value)
        raw = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        found = _parse(raw, group, rank, key)["id"]
    if found != target:
        raise CommJoinError(f"Comm: rank {rank}: group {group!r} moved on to world {found} while the members of "
                            f"world {left} were forming its successor {target} ({event!r})")
    me = f"{identity()}/{uuid.uuid4().hex[:8]}"
    got = store.compare_set(f"{prefix(group, target)}/claim/{rank}", "", me)
    got = got.decode() if isinstance(got, bytes) else got
    if got != me:
        raise GroupInUseError(f"Comm: rank {rank}: group {group!r}: rank {rank} of world {target} (the successor of "
                              f"{left} after {event!r}) is already held by process {got.split(':')[0]}")
    return target
