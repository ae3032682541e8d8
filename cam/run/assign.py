"""``cam-run --assign``: which Attention replica takes an arriving request (docs/run.md §8).

``round-robin`` is the static deal of ``cam.sim.presets.schedule``: every batch is known before the run. Under
``fewest-tokens`` and ``shortest-queue`` the choice depends on what each replica has finished when a request
arrives, so it is made during the run: a coordinator (a thread of Attention rank 0's process) assigns each request
at its arrival time by ``cam.sim.presets.assign_replica`` (the simulator's rule, imported) over the requests each
replica has been assigned and not yet finished, and writes it to the launcher's store; each replica takes its
requests in that order, as many as fit its ``max_batch_tokens`` (the first always), whenever it starts a batch.

Store keys (all under ``run/``):

- ``run/queue/{d}/{j}``: the request id of replica d's j-th request; ``END`` after its last.
- ``run/assign/{i}``: the replica of the i-th request assigned, in arrival order (the assignment log).
- ``run/finished/{d}``: how many requests replica d has finished (its participant 0 adds each batch's count at the
  batch's end). A replica runs its requests in the order it was given them, so these are the first ones.
- ``run/batch/{d}/{n}``: ``P > 1``: the request ids of replica d's n-th batch as its participant 0 took them (the
  other participants run the same batch).
- ``run/step/{s}/{a}/taken``: lockstep modes (sync, colocated): requests every replica took for step s (attempt a).

A group of requests with the same arrival time is assigned at once, on the completions read once for the group,
and written with one ``multi_set`` (a queue key before the log key that names it), so a replica never sees half
of a group. Every wait here polls the store, bounded by a deadline and ended by the rank's abort."""

from __future__ import annotations

import json
import time
from typing import List, Sequence

from ..sim.presets import ASSIGNS, assign_replica

__all__ = ["ASSIGNS", "END", "AssignFailed", "Coordinator", "ReplicaQueue", "batch_key", "finished_key", "log_key",
           "publish_batch", "queue_key", "read_batch", "taken_key", "wait_for_key"]

END = -1
# Poll interval of a replica waiting for its next request or a step's batch: a store round trip each, so short
# enough to add little to a TTFT, long enough not to steal the CPUs the ranks share (2 on the machine it was built
# on).
_POLL_S = 0.002


def queue_key(d: int, j: int) -> str:
    return f"run/queue/{d}/{j}"


def log_key(i: int) -> str:
    return f"run/assign/{i}"


def finished_key(d: int) -> str:
    return f"run/finished/{d}"


def batch_key(d: int, n) -> str:
    return f"run/batch/{d}/{n}"


def taken_key(step: int, attempt: int) -> str:
    return f"run/step/{step}/{attempt}/taken"


class AssignFailed(RuntimeError):
    pass


def _check_abort(aborted: dict, what: str) -> None:
    if "by" in aborted:
        raise AssignFailed(f"aborted while {what}: {aborted['by']}")


def wait_for_key(store, key: str, deadline: float, aborted: dict, what: str) -> None:
    """Until ``key`` exists: polled, ended by the abort, RuntimeError past ``deadline`` (time.time())."""
    while not store.check([key]):
        _check_abort(aborted, what)
        if time.time() > deadline:
            raise AssignFailed(f"{what}: store key {key} not set by the deadline")
        time.sleep(_POLL_S)


def _sleep_until(when: float, aborted: dict, what: str) -> None:
    while True:
        _check_abort(aborted, what)
        left = when - time.time()
        if left <= 0:
            return
        time.sleep(min(left, 0.05))


class Coordinator:
    """Assigns every request at its arrival. ``decide`` is the policy alone (no store, no clock); ``run`` is the
    thread's body."""

    def __init__(self, policy: str, lengths: Sequence[int], arrivals: Sequence[float], replicas: int):
        if policy not in ASSIGNS or policy == "round-robin":
            raise ValueError(f"--assign {policy!r}: the coordinator decides fewest-tokens or shortest-queue "
                             "(round robin is static)")
        if len(lengths) != len(arrivals) or not lengths:
            raise ValueError("Coordinator: one length and one arrival per request, at least one request")
        self.policy, self.lengths, self.arrivals, self.D = policy, list(lengths), list(arrivals), replicas
        self.assigned: List[List[int]] = [[] for _ in range(replicas)]
        self.log: List[dict] = []

    def groups(self) -> List[List[int]]:
        """Request ids in arrival order (ties: the lower id first), grouped by equal arrival time."""
        order = sorted(range(len(self.arrivals)), key=lambda r: (self.arrivals[r], r))
        out: List[List[int]] = []
        for rid in order:
            if out and self.arrivals[out[-1][0]] == self.arrivals[rid]:
                out[-1].append(rid)
            else:
                out.append([rid])
        return out

    def decide(self, group: Sequence[int], finished: Sequence[int], at_s: float = 0.0) -> List[tuple]:
        """Assign ``group`` (requests arriving together), given how many requests each replica has finished;
        returns [(rid, replica, position in that replica's queue)] and logs each decision with what it saw."""
        if len(finished) != self.D:
            raise ValueError(f"finished: one count per replica ({self.D}), got {len(finished)}")
        for d, n in enumerate(finished):
            if not 0 <= n <= len(self.assigned[d]):
                raise AssignFailed(f"replica {d} reports {n} requests finished of {len(self.assigned[d])} assigned")
        out = []
        for rid in group:
            queued = [[self.lengths[x] for x in self.assigned[d][finished[d]:]] for d in range(self.D)]
            d = assign_replica(self.policy, queued)
            out.append((rid, d, len(self.assigned[d])))
            self.log.append({"rid": rid, "replica": d, "at_s": at_s, "finished": list(finished),
                             "queued_requests": [len(q) for q in queued], "queued_tokens": [sum(q) for q in queued]})
            self.assigned[d].append(rid)
        return out

    def run(self, store, t0: float, aborted: dict) -> List[dict]:
        """Assign each group at ``t0`` + its arrival, on the completions the store holds then."""
        i = 0
        for group in self.groups():
            _sleep_until(t0 + self.arrivals[group[0]], aborted, "waiting for the next arrival to assign")
            finished = [int(store.add(finished_key(d), 0)) for d in range(self.D)]
            at = time.time() - t0  # after the counts were read: a finish counted here happened before `at`
            decided = self.decide(group, finished, at)
            keys = [queue_key(d, j) for _, d, j in decided] + [log_key(i + k) for k in range(len(decided))]
            values = [str(rid) for rid, _, _ in decided] + [str(d) for _, d, _ in decided]
            i += len(decided)
            store.multi_set(keys, values)
        store.multi_set([queue_key(d, len(self.assigned[d])) for d in range(self.D)], [str(END)] * self.D)
        return self.log


class ReplicaQueue:
    """Replica d's requests as the coordinator wrote them, read in order (participant 0 of the replica), and taken
    into batches of at most ``budget`` tokens (the first request always)."""

    def __init__(self, store, d: int, lengths: Sequence[int], budget: int, aborted: dict):
        if budget < 1:
            raise ValueError(f"ReplicaQueue: budget must be >= 1 token, got {budget}")
        self.store, self.d, self.lengths, self.budget, self.aborted = store, d, lengths, budget, aborted
        self.pending: List[int] = []  # read, not yet taken
        self.next_j = 0
        self.ended = False

    def _read(self) -> None:
        while not self.ended:
            key = queue_key(self.d, self.next_j)
            if not self.store.check([key]):
                return
            rid = int(self.store.get(key).decode())
            self.next_j += 1
            if rid == END:
                self.ended = True
            else:
                self.pending.append(rid)

    def _pack(self) -> List[int]:
        out, used = [], 0
        while self.pending:
            n = int(self.lengths[self.pending[0]])
            if out and used + n > self.budget:
                break
            out.append(self.pending.pop(0))
            used += n
        return out

    def take(self) -> List[int]:
        """What has been assigned to this replica by now and fits one batch; [] if nothing has."""
        self._read()
        return self._pack()

    def take_next(self, deadline: float) -> List[int]:
        """The next batch, waiting (until ``deadline``, time.time()) for an assignment if none is queued; [] once
        every request was assigned and this replica has none left."""
        while True:
            self._read()
            if self.pending:
                return self._pack()
            if self.ended:
                return []
            _check_abort(self.aborted, f"replica {self.d} waiting for a request")
            if time.time() > deadline:
                raise AssignFailed(f"replica {self.d}: no request assigned by the deadline (the coordinator on "
                                   "Attention rank 0 stopped?)")
            time.sleep(_POLL_S)


def publish_batch(store, d: int, n, rids: Sequence[int]) -> None:
    store.set(batch_key(d, n), json.dumps(list(rids)))


def read_batch(store, d: int, n, deadline: float, aborted: dict) -> List[int]:
    wait_for_key(store, batch_key(d, n), deadline, aborted, f"participant of replica {d} waiting for batch {n}")
    return [int(x) for x in json.loads(store.get(batch_key(d, n)).decode())]
