"""Run a simulation and summarize it: TTFT, SLO-compliant throughput, makespan, utilisation, critical-path bound."""

from __future__ import annotations

from typing import Optional

import numpy as np

from .costs import CostModel
from .colocated import ColocatedSimulation
from .engine import Simulation
from .shapes import ModelShape, SimTopology
from .workload import SimWorkload


def percentile(values: np.ndarray, q: float) -> float:
    """Nearest-rank percentile, the definition cam-run reports (index round(q/100 * (n-1)) of the sorted values)."""
    ordered = np.sort(values)
    idx = min(len(ordered) - 1, max(0, int(round(q / 100 * (len(ordered) - 1)))))
    return float(ordered[idx])


def simulate(model: ModelShape, topo: SimTopology, workload: SimWorkload, costs: CostModel, *, mode: str = "async",
             seed: int = 0, routing: str = "uniform", expert_skew: float = 0.0, slo_s: Optional[float] = None,
             per_request: bool = False, placement=None, batch_rows: Optional[int] = None,
             assign: str = "round-robin", step_overhead_s: float = 0.0, two_stage: bool = False) -> dict:
    """One simulated run, summarized as a JSON-able dict (see docs/sim.md for every field)."""
    kind = ColocatedSimulation if mode == "colocated" else Simulation
    raw = kind(model, topo, workload, costs, mode=mode, seed=seed, routing=routing, expert_skew=expert_skew,
               placement=placement, batch_rows=batch_rows, assign=assign, step_overhead_s=step_overhead_s,
               **({"two_stage": two_stage} if mode != "colocated" else {})).run()
    ttft = raw["ttft_s"]
    makespan = raw["makespan_s"]
    tokens = int(workload.length.sum())
    out = {
        "mode": mode,
        "topology": topo.to_dict(),
        # Devices the deployment occupies: colocated, each one a replica and an expert shard; AFD, D*P + F.
        "devices": topo.F if mode == "colocated" else topo.D * topo.P + topo.F,
        "workload": workload.description,
        # The serving engine's mechanisms this run applied (docs/sim.md §11).
        "serving": {"chunked_prefill": workload.chunked, "step_overhead_s": step_overhead_s,
                    "two_stage": bool(two_stage) and mode == "async"},
        "seed": seed,
        "routing": routing,
        "expert_skew": expert_skew,
        "requests": workload.num_requests,
        "tokens": tokens,
        "makespan_s": makespan,
        "throughput_tok_s": tokens / makespan if makespan > 0 else 0.0,
        "ttft_s": {"mean": float(ttft.mean()), "p50": percentile(ttft, 50), "p90": percentile(ttft, 90),
                   "p99": percentile(ttft, 99), "max": float(ttft.max())},
        "ffn_utilisation": sum(raw["ffn_busy_s"]) / (topo.F * makespan) if makespan > 0 else 0.0,
        "attention_utilisation": sum(raw["attention_busy_s"]) / (topo.D * makespan) if makespan > 0 else 0.0,
        "critical_path_s": raw["critical_path_s"],
        "critical_path_efficiency": raw["critical_path_s"] / makespan if makespan > 0 else 0.0,
        "batches": raw["batches"],
        "rounds": raw["rounds"],
        "work_items": raw["work_items"],
        "launches": raw["launches"],
        "batch_rows": batch_rows,
        "assign": assign,
        "placement": placement if isinstance(placement, str) or placement is None else "table",
        "routed_rows": raw["routed_rows"],
    }
    if slo_s is not None:
        ok = ttft <= slo_s
        out["slo"] = {"ttft_s": slo_s, "compliant_fraction": float(ok.mean()),
                      "goodput_req_s": float(ok.sum()) / makespan if makespan > 0 else 0.0,
                      "goodput_tok_s": float(workload.length[ok].sum()) / makespan if makespan > 0 else 0.0}
    if per_request:
        out["ttft_per_request_s"] = {str(i): float(v) for i, v in enumerate(ttft)}
    return out
