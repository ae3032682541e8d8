"""The critical-path lower bound of a ``cam-run --cost-model`` workload, from the cost model's service times.

No schedule can finish the run's batches sooner than

    bound = max( max over replicas d of chain(d),  total FFN work / F )

- ``chain(d)``: replica d's own batches, one after the other (each no earlier than its last request's arrival),
  layer by layer: its attention service, and for an MoE layer each micro-batch's FFN work items served the moment
  they are published, with no other replica contending for the FFN ranks;
- ``total FFN work / F``: every work item's service time, spread perfectly over the F FFN ranks.

Both come from the simulator (``cam.sim``, imported: its ``Simulation`` computes the per-replica chain and the FFN
work with the same definitions, ``docs/sim.md``), run on cam-run's own batches with balanced routing (every FFN
rank gets an equal share of each round's rows: the total is what matters, and it is routing-independent when an
item's cost is affine in its rows). The attention service is exactly what ``--cost-model`` sleeps (``--attention-cost``,
per participant: ``A + (B·tokens + C·Σlen²) / P``); every other service time comes from a cam-sim cost file
(``--bound-costs``, default ``twin-cpu``: the twin's FFN work item, fitted from measured work items; see its
``meta``). Measured walls never enter the bound, so ``makespan / bound`` is the share of the run that is neither
service nor unavoidable dependency: scheduling waits plus whatever real work the cost file leaves out.
"""

from __future__ import annotations

import dataclasses

from ..sim.colocated import ColocatedSimulation
from ..sim.costs import CostModel, OpCost
from ..sim.engine import Simulation
from ..sim.shapes import ModelShape, SimTopology
from ..sim.workload import SimWorkload

DEFAULT_COSTS = "twin-cpu"


def load_costs(name_or_path: str) -> CostModel:
    """A cam-sim cost file, by device name (``cam/sim/devices``) or path; ValueError naming the flag otherwise."""
    try:
        return CostModel.load(name_or_path)
    except (OSError, ValueError) as e:
        raise ValueError(f"--bound-costs {name_or_path!r}: {e}") from None


def bound_costs(costs: CostModel, attention_cost) -> CostModel:
    """``costs`` with its attention op replaced by cam-run's emulated attention (the file's attention terms, which a
    calibration fits to another --attention-cost, do not apply)."""
    a, b, c = attention_cost
    ops = dict(costs.ops)
    ops["attention"] = OpCost(nonempty_s=a, per_token_s=b, per_len2_s=c)
    return dataclasses.replace(costs, ops=ops)


def sim_workload(workload) -> SimWorkload:
    """cam-run's workload (``cam.run.workload.Workload``) with its static batches, for the simulator."""
    import numpy as np

    reqs = workload.requests
    return SimWorkload(np.array([r.arrival_s for r in reqs], dtype=np.float64),
                       np.array([int(r.tokens.numel()) for r in reqs], dtype=np.int64),
                       np.array([r.replica for r in reqs], dtype=np.int64),
                       batches=[[list(b) for b in bs] for bs in workload.batches], description="cam-run workload")


def critical_path(model_config, workload, D: int, P: int, F: int, slots: int, costs: CostModel, attention_cost,
                  mode: str = "async", assign: str = "round-robin", token_budget=None) -> dict:
    """The bound and its two terms for cam-run's workload (see the module docstring), plus what the simulator
    predicts for ``mode`` with the same costs. ``workload.batches`` are the batches the run ran (lockstep modes:
    one per step, empty where a replica had none); under ``assign`` other than round robin the prediction is the
    simulator's own run of the same requests under that policy, batching dynamically up to ``token_budget``."""
    shape = ModelShape.from_config(model_config)
    # The simulator refuses slots < micro-batches (a deadlock it cannot run); the bound does not depend on slots.
    topo = SimTopology(D=D, F=F, P=P, slots=max(slots, 2))
    full = bound_costs(costs, attention_cost)
    wl = sim_workload(workload)
    colocated = mode == "colocated"
    # Colocated: one timeline per device, its own attention work plus its shard's experts (no FFN pool to spread
    # them over), so the bound is the busiest device's chain.
    raw = (ColocatedSimulation(shape, topo, wl, full, routing="balanced") if colocated else
           Simulation(shape, topo, wl, full, mode="async", routing="balanced")).run()
    chains = [float(c) for c in raw["replica_chain_s"]]
    ffn_total = float(sum(raw["ffn_busy_s"]))
    bound = max(chains) if colocated else max(max(chains), ffn_total / F)
    if assign != "round-robin":
        dynamic = dataclasses.replace(wl, batches=None, token_budget=token_budget)
        predicted = (ColocatedSimulation(shape, topo, dynamic, full, routing="balanced", assign=assign) if colocated
                     else Simulation(shape, topo, dynamic, full, mode=mode, routing="balanced", assign=assign)
                     ).run()["makespan_s"]
    elif mode in ("async", "colocated"):
        predicted = raw["makespan_s"]
    else:
        predicted = Simulation(shape, topo, wl, full, mode=mode, routing="balanced").run()["makespan_s"]
    binding = "device chain" if colocated else "replica chain" if max(chains) >= ffn_total / F else "FFN work"
    return {
        "assign": assign,
        "bound_s": bound,
        "replica_chain_s": chains,
        "ffn_work_s": ffn_total,
        "ffn_work_per_rank_s": ffn_total / F,
        "binding": binding,
        "simulated_makespan_s": float(predicted),
        "costs": costs.name,
        "attention_cost": list(attention_cost),
    }
