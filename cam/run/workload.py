"""Seeded prefill workloads: cam-run's presets and their schedule (``cam.sim.presets``: lengths, arrival times, the
batches each Attention DP replica runs, a function of the seed only) with each prompt's token ids."""

from __future__ import annotations

import dataclasses
from typing import List, Tuple

import torch

from ..sim.presets import PRESETS, WorkloadSpec, schedule

__all__ = ["PRESETS", "Request", "Workload", "WorkloadSpec", "make_workload"]


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
    """``spec``'s schedule (``cam.sim.presets.schedule``) with each request's token ids drawn from the seed."""
    plan = schedule(spec, num_replicas)
    gen = torch.Generator().manual_seed(spec.seed)
    requests = [Request(rid, plan.replica[rid],
                        torch.randint(0, vocab_size, (n,), generator=gen, dtype=torch.int64), plan.arrival_s[rid])
                for rid, n in enumerate(plan.length)]
    return Workload(requests, plan.batches)
