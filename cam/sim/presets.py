"""cam-run's seeded workload presets and their schedule: each request's length, arrival time and replica, and the
batches each Attention DP replica runs. Pure Python (no torch, no kernels), so the simulator computes cam-run's exact
batches without importing cam-run; ``cam.run.workload`` draws each request's token ids on top of this schedule.

Which request lands in which batch is a function of the seed only, never of timing, so the async and the sync mode
compute exactly the same batches."""

from __future__ import annotations

import dataclasses
import random
from typing import Dict, List, Sequence


@dataclasses.dataclass(frozen=True)
class WorkloadSpec:
    """Args:
        num_requests: prompts in the run.
        min_len / max_len: prompt length range (tokens), drawn uniformly unless ``skew`` says otherwise.
        arrival_rate: mean requests per second (Poisson arrivals); 0 = all arrive at t = 0.
        max_batch_tokens: a replica packs arrived requests into batches of at most this many tokens
            (a longer prompt runs alone).
        skew: 0 = every replica draws lengths alike; s > 0 makes replica d's prompts longer by a factor
            (1 + s * d / (D - 1)), the load imbalance that creates stragglers.
        seed: everything above is drawn from it.
    """

    num_requests: int = 12
    min_len: int = 8
    max_len: int = 48
    arrival_rate: float = 0.0
    max_batch_tokens: int = 96
    skew: float = 0.0
    seed: int = 0

    def __post_init__(self):
        if self.num_requests < 1:
            raise ValueError("num_requests must be >= 1")
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(f"need 1 <= min_len <= max_len, got {self.min_len}, {self.max_len}")
        if self.max_batch_tokens < 1:
            raise ValueError("max_batch_tokens must be >= 1")
        if self.arrival_rate < 0 or self.skew < 0:
            raise ValueError("arrival_rate and skew must be >= 0")


PRESETS: Dict[str, WorkloadSpec] = {
    "default": WorkloadSpec(),
    # Lengths vary widely, so at every step a different replica is the straggler: what a per-layer barrier costs.
    "imbalanced": WorkloadSpec(num_requests=24, min_len=4, max_len=160, max_batch_tokens=1, seed=1),
    # One replica's prompts are consistently longer: the others finish early instead of waiting for it.
    "skewed": WorkloadSpec(num_requests=16, min_len=8, max_len=40, max_batch_tokens=80, skew=3.0),
    "arrivals": WorkloadSpec(num_requests=16, arrival_rate=8.0),
}


# Which Attention replica takes an arriving request (cam-sim and cam-run --assign): round robin in arrival order
# (the schedule below, static), or at its arrival the replica with the fewest tokens / requests assigned to it and
# not yet finished (ties: the lowest replica).
ASSIGNS = ("round-robin", "fewest-tokens", "shortest-queue")


def assign_replica(policy: str, queued_lengths: Sequence[Sequence[int]]) -> int:
    """The replica an arriving request joins under ``policy`` ("fewest-tokens" or "shortest-queue"), given the
    prompt lengths of the requests each replica has been assigned and not yet finished; ties go to the lowest
    replica. Round robin is not decided here: it is the static deal of :func:`schedule`."""
    if policy == "fewest-tokens":
        return min(range(len(queued_lengths)), key=lambda d: (sum(queued_lengths[d]), d))
    if policy == "shortest-queue":
        return min(range(len(queued_lengths)), key=lambda d: (len(queued_lengths[d]), d))
    raise ValueError(f"assign_replica decides fewest-tokens or shortest-queue, got {policy!r}")


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Per request id: ``length`` (tokens), ``arrival_s``, ``replica``; ``batches[replica][i]`` = the request ids of
    that replica's i-th batch."""

    length: List[int]
    arrival_s: List[float]
    replica: List[int]
    batches: List[List[List[int]]]


def schedule(spec: WorkloadSpec, num_replicas: int) -> Schedule:
    """The schedule ``spec`` draws for ``num_replicas`` replicas: requests dealt round robin, each replica packing
    its requests in order into batches of at most ``max_batch_tokens`` tokens."""
    if num_replicas < 1:
        raise ValueError("num_replicas must be >= 1")
    rng = random.Random(spec.seed)
    length, arrival, replica = [], [], []
    t = 0.0
    for rid in range(spec.num_requests):
        d = rid % num_replicas
        factor = 1.0 + spec.skew * (d / (num_replicas - 1) if num_replicas > 1 else 0.0)
        length.append(max(1, int(round(rng.randint(spec.min_len, spec.max_len) * factor))))
        if spec.arrival_rate > 0:
            t += rng.expovariate(spec.arrival_rate)
        arrival.append(t)
        replica.append(d)
    batches: List[List[List[int]]] = [[] for _ in range(num_replicas)]
    for d in range(num_replicas):
        current: List[int] = []
        used = 0
        for rid in (r for r in range(spec.num_requests) if replica[r] == d):
            if current and used + length[rid] > spec.max_batch_tokens:
                batches[d].append(current)
                current, used = [], 0
            current.append(rid)
            used += length[rid]
        if current:
            batches[d].append(current)
    return Schedule(length, arrival, replica, batches)
