"""The configuration every rank of a ``cam-run`` world reads, and what it builds from it (model, workload, topology).
Everything is a pure function of the config, so every process builds the same things without exchanging them."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Optional, Tuple

import torch

from ..connector import ConnectorConfig
from ..models import PRESETS as MODEL_PRESETS
from ..models import MoEModel
from ..topology import Topology
from .workload import Workload, WorkloadSpec, make_workload


@dataclasses.dataclass(frozen=True)
class RunConfig:
    mode: str
    model: str
    workload: dict
    D: int
    P: int
    F: int
    slots: int
    master_addr: str
    master_port: int
    timeout_s: float
    idle_poll_s: float
    cost_model: bool
    attention_cost: Tuple[float, float, float]
    out_dir: str
    progress: bool
    shm_prefix: str
    graph: bool = False  # FFN ranks replay a captured iteration (cam-run --graph)
    keep_going: bool = False  # replica isolation: a dead Attention rank loses only its replica (cam-run --keep-going)
    # snapshot batching (cam-run --batch-items): each FFN receive takes every ready work item up to this many rows
    # and serves them with one W1 and one W2 launch; None: one work item per receive
    batch_rows: Optional[int] = None

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(dataclasses.asdict(self), f)

    @staticmethod
    def load(path: str) -> "RunConfig":
        with open(path) as f:
            d = json.load(f)
        d["attention_cost"] = tuple(d["attention_cost"])
        return RunConfig(**d)

    @property
    def world_size(self) -> int:
        return self.D * self.P + self.F

    def workload_spec(self) -> WorkloadSpec:
        return WorkloadSpec(**self.workload)

    def connector_config(self, topology: Topology) -> ConnectorConfig:
        return ConnectorConfig(topology, self.master_addr, self.master_port, torch.bfloat16, self.timeout_s,
                               self.idle_poll_s, group="afd", shm_prefix=self.shm_prefix,
                               isolate_replicas=self.keep_going)


def rank_threads(world: int) -> int:
    """torch intra-op threads of each rank, and of the launcher's --check: the CPUs shared out over the world's
    processes, at least one. torch's default (a thread per CPU in every process) oversubscribes the CPUs as soon
    as the world has more ranks than CPUs: every small op's threads then spin against the other ranks' (on a
    loaded 2-CPU machine a [30, 128] x [128, 128] float64 matmul took 8 ms with 2 threads, 0.02 ms with one)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // max(1, world))


def topology_for(model, workload: Workload, D: int, P: int, F: int, slots: int) -> Topology:
    """The data plane for this model and workload: Bmax is the largest micro-batch a participant sends."""
    largest = 1
    for replica in range(D):
        for batch in workload.batches[replica]:
            lens = [int(workload.requests[r].tokens.numel()) for r in batch]
            for stage in (lens[0::2], lens[1::2]) if len(lens) >= 2 else (lens,):
                largest = max(largest, math.ceil(sum(stage) / P))
    return Topology(D=D, P=P, F=F, E=model.num_experts, K=model.top_k, H=model.hidden, Bmax=largest,
                    L=len(model.moe_layers), slots=slots, quantized=True)


def plan(cfg: RunConfig) -> Tuple[Workload, Topology]:
    """(workload, topology) of a run, without the model's weights: validates the topology (ValueError naming the
    field) at the cost of a few small tensors."""
    config = MODEL_PRESETS[cfg.model]
    workload = make_workload(cfg.workload_spec(), cfg.D, config.vocab_size)
    return workload, topology_for(config, workload, cfg.D, cfg.P, cfg.F, cfg.slots)


def build(cfg: RunConfig):
    """(model, workload, topology) of a run."""
    return (MoEModel(MODEL_PRESETS[cfg.model]),) + plan(cfg)

