"""The configuration every rank of a ``cam-run`` world reads, and what it builds from it (model, workload, topology).
Everything is a pure function of the config, so every process builds the same things without exchanging them."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import List, Optional, Tuple

import torch

from ..connector import ConnectorConfig
from ..models import PRESETS as MODEL_PRESETS
from ..models import MoEModel
from ..placement import Placement, PlacementError
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
    # expert placement (cam-run --placement), resolved by the launcher: placement_to_dict's form; None: contiguous
    placement: Optional[dict] = None
    # cam-run --checkpoint DIR: the model is this transformers checkpoint (cam/run/checkpoint.py), not --model
    checkpoint: Optional[str] = None
    # cam-run --weights: the checkpoint's routed experts as w8a8 or w4a8 (cam/run/checkpoint.py, WEIGHT_BITS)
    weights: str = "w8a8"
    # cam-run --assign: round-robin (the workload's static batches) or a policy decided at each arrival
    # (cam/run/assign.py: fewest-tokens, shortest-queue), the replicas batching dynamically
    assign: str = "round-robin"
    # cam-run --rebalance-every N: every Attention rank rebalances after each N-th step (0: never); rebalance_tables
    rebalance_every: int = 0
    # $CAM_RUN_KILL_FFN (cam/run/deaths.py): [FFN rank, round] killed on purpose (and restarted: it rejoins)
    kill_ffn: Optional[List[int]] = None
    # elastic serving (ConnectorConfig.elastic): set with kill_ffn
    elastic: bool = False

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
                               isolate_replicas=self.keep_going, placement=self.expert_placement(),
                               elastic=self.elastic)

    def expert_placement(self) -> Optional[Placement]:
        return None if self.placement is None else placement_from_dict(self.placement)


def rebalance_table(cfg: RunConfig, topo: Topology, k: int) -> Placement:
    """The table rebalance ``k`` (1, 2, ...) of a --rebalance-every run adopts: the run's table (contiguous without
    --placement) with every replica moved from FFN index f to (f + k) % F, so each rebalance moves every expert to
    another rank (F > 1) and a run's outputs must not change (--check)."""
    base = cfg.expert_placement() or Placement.contiguous(topo.E, topo.F, topo.L)
    return Placement(base.experts, base.ffn_ranks, base.slots_per_rank,
                     [[[((f + k) % base.ffn_ranks, j) for f, j in base.replicas(l, e)] for e in range(base.experts)]
                      for l in range(base.layers)])


def rebalance_count(cfg: RunConfig, workload) -> int:
    """How many rebalances a --rebalance-every run makes: one per N steps of the replica with the most steps;
    every rank joins each (a replica with fewer steps joins the rest after its last step)."""
    n = cfg.rebalance_every
    return max(len(b) for b in workload.batches) // n if n else 0


def model_config(cfg: RunConfig):
    """The run's model shape: the --model preset, or the --checkpoint directory's (no weights loaded)."""
    if cfg.checkpoint is not None:
        from .checkpoint import checkpoint_shape

        return checkpoint_shape(cfg.checkpoint)
    return MODEL_PRESETS[cfg.model]


def make_model(cfg: RunConfig):
    """The run's model with its weights: the --model preset's MoEModel, or the --checkpoint's model
    (cam.run.checkpoint.load_model)."""
    if cfg.checkpoint is not None:
        from .checkpoint import load_model

        return load_model(cfg.checkpoint, cfg.weights)
    return MoEModel(MODEL_PRESETS[cfg.model])


def rank_threads(world: int) -> int:
    """torch intra-op threads of each rank, and of the launcher's --check: the CPUs shared out over the world's
    processes, at least one. torch's default (a thread per CPU in every process) oversubscribes the CPUs as soon
    as the world has more ranks than CPUs: every small op's threads then spin against the other ranks' (on a
    loaded 2-CPU machine a [30, 128] x [128, 128] float64 matmul took 8 ms with 2 threads, 0.02 ms with one)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // max(1, world))


def placement_to_dict(p: Placement) -> dict:
    """A placement as JSON (the form a --placement file holds): ``layers[l][e]`` lists expert e's ``[f, slot]``."""
    return {"experts": p.experts, "ffn_ranks": p.ffn_ranks, "slots_per_rank": p.slots_per_rank,
            "layers": [[[list(r) for r in p.replicas(l, e)] for e in range(p.experts)] for l in range(p.layers)]}


def placement_from_dict(d: dict) -> Placement:
    return Placement(d["experts"], d["ffn_ranks"], d["slots_per_rank"], d["layers"])


def expert_popularity(model: MoEModel, workload: Workload) -> torch.Tensor:
    """How often the model's own routers choose each routed expert over every prompt of the workload, summed over
    the MoE layers ([E] int64): what ``--placement hot:K`` replicates the K most chosen of."""
    counts = torch.zeros(model.config.num_experts, dtype=torch.int64)

    def count(_, ids):
        counts.add_(torch.bincount(ids.reshape(-1).long(), minlength=counts.numel()))

    model.forward_reference([r.tokens for r in workload.requests], on_route=count)
    return counts


def resolve_placement(spec: str, cfg: "RunConfig") -> Optional[dict]:
    """``--placement``: ``contiguous`` (``Placement.contiguous``: None, the Comm's default, when F divides E, else
    its table of floor or ceil E / F experts per FFN rank), ``balanced`` (experts dealt round robin over
    the FFN ranks: any E and F), ``hot:K`` (balanced plus one more replica of each of the K experts the model's
    routers choose most on this run's workload), or a JSON file in :func:`placement_to_dict`'s form. ValueError
    naming --placement for anything else, before any rank exists."""
    config = model_config(cfg)
    E, L = config.num_experts, len(config.moe_layers)
    try:
        if spec == "contiguous":
            if E < cfg.F:
                raise ValueError(f"--ffn {cfg.F}: more FFN ranks than the model's E = {E} experts (a rank would "
                                 f"hold none)")
            return None if E % cfg.F == 0 else placement_to_dict(Placement.contiguous(E, cfg.F, layers=L))
        if spec == "balanced":
            return placement_to_dict(Placement.balanced(E, cfg.F, layers=L))
        if spec.startswith("hot:"):
            k = spec[4:]
            if not k.isdigit() or not 1 <= int(k) <= E:
                raise ValueError(f"--placement {spec!r}: K must be an int in [1, E = {E}]")
            workload = make_workload(cfg.workload_spec(), cfg.D, config.vocab_size)
            counts = expert_popularity(make_model(cfg), workload)
            hot = sorted(range(E), key=lambda e: (-int(counts[e]), e))[:int(k)]
            return placement_to_dict(Placement.balanced(E, cfg.F, layers=L, replicate=hot))
        if not os.path.isfile(spec):
            raise ValueError(f"--placement {spec!r} is neither contiguous, balanced, hot:K nor a readable JSON file")
        with open(spec) as f:
            d = json.load(f)
        if not isinstance(d, dict) or not {"slots_per_rank", "layers"} <= set(d):
            raise ValueError(f"--placement {spec!r}: a JSON object with slots_per_rank and layers is expected")
        d = dict(d, experts=d.get("experts", E), ffn_ranks=d.get("ffn_ranks", cfg.F))
        if (d["experts"], d["ffn_ranks"], len(d["layers"])) != (E, cfg.F, L):
            raise ValueError(f"--placement {spec!r} places E = {d['experts']} experts on F = {d['ffn_ranks']} ranks "
                             f"over {len(d['layers'])} layers; this run has E = {E} (--model), F = {cfg.F} (--ffn), "
                             f"L = {L}")
        return placement_to_dict(placement_from_dict(d))
    except (PlacementError, TypeError, KeyError, json.JSONDecodeError) as e:
        raise ValueError(f"--placement {spec!r}: {e}") from None


def topology_for(model, workload: Workload, D: int, P: int, F: int, slots: int,
                 expert_slots: Optional[int] = None, token_budget: Optional[int] = None) -> Topology:
    """The data plane for this model and workload: Bmax is the largest micro-batch a participant sends. With
    ``token_budget`` (cam-run --assign: batches formed during the run) the largest any batch can hold: a batch of
    two requests or more fits the budget, a single request is its own length."""
    largest = 1
    if token_budget is not None:
        lens = [int(r.tokens.numel()) for r in workload.requests]
        largest = math.ceil(max(min(token_budget, sum(lens)), max(lens)) / P)
    for replica in range(D if token_budget is None else 0):
        for batch in workload.batches[replica]:
            lens = [int(workload.requests[r].tokens.numel()) for r in batch]
            for stage in (lens[0::2], lens[1::2]) if len(lens) >= 2 else (lens,):
                largest = max(largest, math.ceil(sum(stage) / P))
    if isinstance(getattr(model, "path", None), str):  # --checkpoint: its config.json, as every caller reads it
        return Topology.from_checkpoint(model.path, D=D, P=P, F=F, Bmax=largest, slots=slots, quantized=True,
                                        expert_slots=expert_slots)
    return Topology(D=D, P=P, F=F, E=model.num_experts, K=model.top_k, H=model.hidden, Bmax=largest,
                    L=len(model.moe_layers), slots=slots, quantized=True, expert_slots=expert_slots)


def plan(cfg: RunConfig) -> Tuple[Workload, Topology]:
    """(workload, topology) of a run, without the model's weights: validates the topology (ValueError naming the
    field) at the cost of a few small tensors."""
    config = model_config(cfg)
    workload = make_workload(cfg.workload_spec(), cfg.D, config.vocab_size)
    slots = None if cfg.placement is None else cfg.placement["slots_per_rank"]
    budget = None if cfg.assign == "round-robin" else cfg.workload_spec().max_batch_tokens
    return workload, topology_for(config, workload, cfg.D, cfg.P, cfg.F, cfg.slots, slots, budget)


def build(cfg: RunConfig):
    """(model, workload, topology) of a run."""
    return (make_model(cfg),) + plan(cfg)

