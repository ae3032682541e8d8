"""The FFN side's row budget in the simulator, checked by the serving path's own rule: the simulated deployment as
the :class:`cam.Topology` cam would run it on, handed to :class:`cam.serve.ServePolicy` (whose rule is C's,
``aclnnCamDispatchRecvCheckRowBudget``). The simulator refuses the budgets ``cam-ffn`` would refuse and sizes a
batched receive as the serving path does (:attr:`ServePolicy.batch_rows`).

Asking the rule loads cam's extension (and torch): only a run with a row budget imports this module
(``Simulation`` does so when given ``batch_rows``), so an unbatched simulation stays torch-free.
"""

from __future__ import annotations

from typing import Optional

from ..placement import contiguous_slots
from ..serve.policy import ServePolicy
from ..topology import Topology
from .shapes import ModelShape, SimTopology
from .workload import SimWorkload

__all__ = ["serving_topology", "batch_policy"]


def serving_topology(model: ModelShape, topo: SimTopology, workload: SimWorkload) -> Topology:
    """The deployment as cam would run it: ``Bmax`` the tokens one Attention participant may send in one round (the
    workload's largest step, :attr:`SimWorkload.max_step_tokens`, split over the replica's P participants as the
    simulator splits it), ``capacity`` the simulated one (None: the serving path's worst case, P·min(Bmax,
    window)·K rows, which the simulator never chunks at either); the contiguous placement's expert slots (any E and
    F; a work item's rows do not depend on them)."""
    bmax = -(-workload.max_step_tokens // topo.P)
    return Topology(D=topo.D, P=topo.P, F=topo.F, E=model.experts, K=model.top_k, H=model.hidden, Bmax=bmax,
                    L=model.moe_layers, slots=topo.slots, capacity=topo.capacity,
                    expert_slots=contiguous_slots(model.experts, topo.F))


def batch_policy(model: ModelShape, topo: SimTopology, workload: SimWorkload, row_budget: int,
                 label: Optional[str] = None) -> ServePolicy:
    """``ServePolicy(row_budget)`` validated on :func:`serving_topology`: a budget below one work item's rows
    (``min(capacity, P·min(Bmax, window)·K)``) raises ValueError naming ``label`` and saying what would make it
    hold; the policy's :attr:`~ServePolicy.batch_rows` is the budget the simulation then serves with."""
    served = serving_topology(model, topo, workload)
    label = f"row budget {row_budget}" if label is None else label
    try:
        return ServePolicy(row_budget=row_budget).validated(served, label)
    except ValueError as e:
        raise ValueError(f"{e}; the serving path (cam-ffn) would refuse this deployment: Bmax {served.Bmax} tokens "
                         f"per Attention participant (the largest step, {workload.max_step_tokens} tokens, over "
                         f"P={topo.P}) and capacity {served.capacity} rows per work item"
                         + (" (none set: the worst case P*Bmax*K)" if topo.capacity is None else "")
                         + f"; give a row budget >= {served.recv_rows} or a capacity <= {row_budget}") from None
