"""Seeded prefill workloads: prompts with varied lengths and arrival times, and the batches each Attention DP
replica runs. Which request lands in which batch is a function of the seed only, never of timing, so the async
and the sync mode compute exactly the same batches."""

from __future__ import annotations

import dataclasses
import random
from typing import Dict, List, Tuple

import torch


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


@dataclasses.dataclass(frozen=True)
class Request:
    rid: int
    replica: int
    tokens: torch.Tensor  # int64 [T]
    arrival_s: float


@dataclasses.dataclass(frozen=True)
class Workload:
    requests: List[Request]
    batches: List[List[List[int]]]  # batches[replica][i] = request ids of that replica's i-th batch

    def batch_tokens(self, replica: int, index: int) -> Tuple[List[torch.Tensor], List[int]]:
        rids = self.batches[replica][index]
        prompts = [self.requests[r].tokens for r in rids]
        return prompts, [int(p.numel()) for p in prompts]


def make_workload(spec: WorkloadSpec, num_replicas: int, vocab_size: int) -> Workload:
    if num_replicas < 1:
        raise ValueError("num_replicas must be >= 1")
    rng = random.Random(spec.seed)
    gen = torch.Generator().manual_seed(spec.seed)
    requests: List[Request] = []
    t = 0.0
    for rid in range(spec.num_requests):
        replica = rid % num_replicas
        factor = 1.0 + spec.skew * (replica / (num_replicas - 1) if num_replicas > 1 else 0.0)
        length = max(1, int(round(rng.randint(spec.min_len, spec.max_len) * factor)))
        if spec.arrival_rate > 0:
            t += rng.expovariate(spec.arrival_rate)
        tokens = torch.randint(0, vocab_size, (length,), generator=gen, dtype=torch.int64)
        requests.append(Request(rid, replica, tokens, t))
    batches: List[List[List[int]]] = [[] for _ in range(num_replicas)]
    for replica in range(num_replicas):
        current: List[int] = []
        used = 0
        for r in (r for r in requests if r.replica == replica):
            n = int(r.tokens.numel())
            if current and used + n > spec.max_batch_tokens:
                batches[replica].append(current)
                current, used = [], 0
            current.append(r.rid)
            used += n
        if current:
            batches[replica].append(current)
    return Workload(requests, batches)
