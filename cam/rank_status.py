"""What a rank is doing while a world forms, published so its peers can name it (docs/integrations.md §0,
"Joining is never silent").

Every rank, before it loads anything, joins a member list under a key prefix (the world's name) and publishes its
status: role, pid, claimed rank, a description of the world it expects (topology fields, checkpoint) and a state
(``starting``, ``loading n of N``, ``joining``, ``refused: ...``), with a heartbeat. A waiting handshake calls
:meth:`JoinWatch.poll` each time it looks at its missing peers, which

* compares every published description with its own and raises :class:`cam.errors.InvalidArgumentError` naming
  the differing fields and both sides (a rank refused locally publishes before it exits, so its difference is
  named too: ``-D 2`` against ``D = 1`` is an error on both sides, not a timeout);
* names a peer that published and then went silent (no heartbeat for :data:`SILENT_S`), as
  :class:`cam.errors.CommJoinError`;
* reports the peers it still waits for every :data:`REPORT_S` (who, their last state or "never published", since
  when, and the bound), on the ``cam.join`` logger.

Keys: ``{prefix}/members`` (a counter), ``{prefix}/member/{i}`` (``role/pid/rank``) and
``{prefix}/status/{role}/{pid}/{rank}`` (JSON; the rank is the one the process claims). Pure Python over a ``torch.distributed`` store's ``set``/``get``/``check``/``add``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Dict, Optional, Sequence

from .errors import CommJoinError, InvalidArgumentError

__all__ = ["JoinWatch", "StatusPublisher", "REPORT_S", "SILENT_S", "members"]

log = logging.getLogger("cam.join")

HEARTBEAT_S = 1.0  # how often a publisher refreshes its status
SILENT_S = 5.0  # a peer whose status is this old (and not final) is named as silent
REPORT_S = 5.0  # how often a waiting rank says whom it waits for
# How long a peer's differing description (or refusal) is seen before this rank raises on it: a world whose every
# rank joins meets the handshake's own field-by-field verdict first (cam.comm, naming the majority), so this one
# speaks only for a world that cannot complete (another world size, a rank refused before it joined).
MISMATCH_GRACE_S = 1.0
_FINAL = ("refused", "exited", "joined")


_publishers: Dict[tuple, "StatusPublisher"] = {}
_publishers_lock = threading.Lock()


class StatusPublisher:
    """One process's status under ``prefix`` as ``role`` and ``pid``, with ``description`` (a JSON-able dict; its
    keys shared with a peer's are compared) and a heartbeat thread (daemon) until :meth:`close`. Use
    :meth:`publish`: one publisher per (prefix, role, pid) in a process, so a rank that published early (cam-ffn,
    before loading) and then joins a handshake keeps one status, its description completed by the handshake's."""

    @classmethod
    def publish(cls, store, prefix: str, role: str, pid: int, rank: int, description: dict) -> "StatusPublisher":
        key = (prefix, role, int(pid), int(rank))
        with _publishers_lock:
            pub = _publishers.get(key)
            if pub is None or pub._stop.is_set():
                pub = _publishers[key] = cls(store, prefix, role, pid, rank, description)
                return pub
        with pub._lock:
            pub.description.update(description)
        pub._write()
        return pub

    def __init__(self, store, prefix: str, role: str, pid: int, rank: int, description: dict, *,
                 heartbeat_s: float = HEARTBEAT_S):
        self.store, self.prefix, self.role, self.pid = store, prefix, role, int(pid)
        self.description = dict(description, rank=int(rank), role=role)
        self.who = f"{role}/{self.pid}/{int(rank)}"
        self.key = f"{prefix}/status/{self.who}"
        self._state, self._detail = "starting", ""
        self.since = time.time()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._write()
        i = int(store.add(f"{prefix}/members", 1))
        store.set(f"{prefix}/member/{i}", self.who)
        self._thread = threading.Thread(target=self._beat, args=(heartbeat_s,), daemon=True,
                                        name=f"cam-status-{role}-{self.pid}")
        self._thread.start()

    def _write(self) -> None:
        with self._lock:
            body = {"role": self.role, "pid": self.pid, "description": self.description, "state": self._state,
                    "detail": self._detail, "since": self.since, "beat": time.time()}
        self.store.set(self.key, json.dumps(body))

    def _beat(self, period: float) -> None:
        while not self._stop.wait(period):
            try:
                self._write()
            except Exception:  # noqa: BLE001 - the store went away: the peers name this rank silent or gone
                return

    def set_state(self, state: str, detail: str = "") -> None:
        with self._lock:
            self._state, self._detail = state, detail
        self._write()

    def close(self, final: Optional[str] = None, detail: str = "") -> None:
        """Stops the heartbeat; ``final`` (``"refused"``, ``"exited"``) is published last, so peers read why."""
        self._stop.set()
        self._thread.join(2 * HEARTBEAT_S)
        if final is not None:
            try:
                self.set_state(final, detail)
            except Exception:  # noqa: BLE001 - nothing to tell without a store
                pass


def members(store, prefix: str) -> Dict[str, dict]:
    """``{role/pid/rank: status}`` of every member under ``prefix`` that published a status."""
    out = {}
    n = int(store.add(f"{prefix}/members", 0))
    for i in range(1, n + 1):
        key = f"{prefix}/member/{i}"
        if not store.check([key]):
            continue
        who = store.get(key).decode()
        status_key = f"{prefix}/status/{who}"
        if store.check([status_key]):
            out[who] = json.loads(store.get(status_key).decode())
    return out


def _differences(mine: dict, theirs: dict) -> list:
    return [k for k in sorted(set(mine) & set(theirs)) if k not in ("rank", "role") and mine[k] != theirs[k]]


class JoinWatch:
    """The checks a waiting handshake makes on its peers (see the module's doc). ``rank`` and ``description`` are
    this rank's, in a world of ``world`` ranks whose first ``attention_ranks`` are Attention ranks; ``bound_s`` is
    the wait's bound, reported with the missing peers."""

    def __init__(self, store, prefix: str, rank: int, attention_ranks: int, world: int, pid: int,
                 description: dict, bound_s: float, *, poll_s: float = 0.5):
        self.store, self.prefix, self.rank = store, prefix, rank
        self.ranks = {r: "attention" if r < attention_ranks else "ffn" for r in range(world)}
        self.role = self.ranks[rank]
        self.description = dict(description, rank=rank, role=self.role)
        self.bound_s, self.poll_s = float(bound_s), poll_s
        self.since = time.time()
        self._next_poll = 0.0
        self._next_report = time.monotonic() + REPORT_S
        self._seen: Dict[str, float] = {}  # who -> when its mismatch or refusal was first seen
        self.publisher = StatusPublisher.publish(store, prefix, self.role, pid, rank, self.description)
        self.publisher.set_state("joining")

    def poll(self, missing: Sequence[int]) -> None:
        """Raises on a peer that describes another world or went silent; reports ``missing`` every REPORT_S."""
        now = time.monotonic()
        if now < self._next_poll:
            return
        self._next_poll = now + self.poll_s
        found = members(self.store, self.prefix)
        for who, status in sorted(found.items()):
            if who == self.publisher.who or status.get("pid") == self.publisher.pid:
                continue  # this process's own ranks (threads) and its own earlier attempts are its own to compare
            theirs = status.get("description") or {}
            diffs = _differences(self.description, theirs)
            refused = status.get("state") == "refused" and theirs.get("rank") in missing
            if (diffs or refused) and now - self._seen.setdefault(who, now) < MISMATCH_GRACE_S:
                continue
            if diffs:
                peer = f"rank {theirs.get('rank', '?')} ({who})"
                state = status.get("state", "")
                said = f" (it is {state}{': ' + status['detail'] if status.get('detail') else ''})" if state else ""
                msg = (f"rank {self.rank} ({self.role}): {peer} expects another world{said}: " +
                       ", ".join(f"{k}={theirs[k]!r} (this rank: {k}={self.description[k]!r})" for k in diffs))
                self.publisher.close("refused", msg)
                raise InvalidArgumentError(msg)
            if refused:
                msg = (f"rank {self.rank} ({self.role}): rank {theirs.get('rank')} ({who}) refused to join: "
                       f"{status.get('detail')}")
                self.publisher.close("refused", msg)
                raise CommJoinError(msg)
            age = time.time() - float(status.get("beat", 0))
            if status.get("state") not in _FINAL and age > SILENT_S \
                    and theirs.get("rank") in missing:
                msg = (f"rank {self.rank} ({self.role}): rank {theirs.get('rank')} ({who}) published "
                       f"'{status.get('state')}' and has been silent for {age:.0f} s")
                self.publisher.close("refused", msg)
                raise CommJoinError(msg)
        if missing and now >= self._next_report:
            self._next_report = now + REPORT_S
            states = {d.get("description", {}).get("rank"): d for d in found.values()}
            parts = []
            for r in missing:
                s = states.get(r)
                what = "never published" if s is None else f"{s['state']}{' ' + s['detail'] if s['detail'] else ''}"
                parts.append(f"rank {r} ({self.ranks.get(r, '?')}): {what}")
            log.warning("rank %d (%s): waiting since %s (%.0f s of the %.0f s bound) for %s", self.rank, self.role,
                        time.strftime("%H:%M:%S", time.localtime(self.since)), time.time() - self.since,
                        self.bound_s, "; ".join(parts))

    def close(self, final: str = "exited", detail: str = "") -> None:
        self.publisher.close(final, detail)
