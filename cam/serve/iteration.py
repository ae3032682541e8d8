"""receive -> W1 -> W2 -> send: one FFN rank's iteration, eager or captured once and replayed.

Its one job is the device work of that iteration, in two halves: the data plane's (``dispatch_recv`` takes a work
item or a batch, ``combine_send`` returns it) around the routed experts' (:func:`ffn_compute`: W1 = int8 GMM +
SwiGLU + quant, W2 = int8 GMM + dequant). Eager: :func:`ffn_iteration`, :func:`ffn_batch_iteration`; captured:
:class:`CapturedFFN`. Nothing here reads the host: the layer and the per-expert counts
stay on the device, so an empty work item flows through as a no-op and a captured iteration replays correctly.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import torch

from .. import ops
from ..comm import Comm
from ..graph import Graph
from ..layer_weights import LayerWeights
from ..ops.dispatch_recv import batch_output_specs, output_specs
from ..ops.gmm import GROUP_LIST_COUNTS, GROUP_TABLE
from ..topology import Topology
from ..work_item import WorkItem
from ..convert import check_swiglu_limit
from .policy import check_items_per_check, row_budget_bounds

__all__ = ["CapturedFFN", "FFNWorkItem", "expert_weights", "ffn_batch_iteration", "ffn_compute", "ffn_iteration",
           "ffn_work_item"]


@dataclasses.dataclass
class FFNWorkItem:
    """One received work item. Every field is a device tensor of static shape; the host never reads them.

    Attributes:
        hidden_states: ``[N, H]`` rows grouped by local expert (int8 when the plane is quantized).
        dynamic_scales: ``[N]`` fp32 per-row scales (quantized plane).
        group_list: ``[R]`` int64 rows per local expert (GMM ``group_list_type`` 1).
        work_item: the device work-item record (replica, layer, sequence, rows, counts ...).
        layer_index: int64 ``[1]`` view of the record's layer word, the GMM ops' ``layer_index``.
        stage_idx: the FFN stage that received it (always 0: the FFN side is not micro-batched).
    """

    hidden_states: torch.Tensor
    dynamic_scales: torch.Tensor
    group_list: torch.Tensor
    work_item: torch.Tensor
    layer_index: torch.Tensor
    stage_idx: int = 0


def ffn_work_item(rows, scales, counts, work_item, stage_idx: int = 0) -> FFNWorkItem:
    """The :class:`FFNWorkItem` of one one-item receive's outputs ``(expand_x, scales, expert_counts, work_item)``."""
    return FFNWorkItem(rows, scales, counts, work_item, WorkItem(work_item).layer_index, stage_idx)


class CapturedFFN:
    """The FFN iteration (receive → W1 → W2 → send) captured once on the Comm's stream into a :class:`cam.Graph`
    over static buffers sized by the topology's capacity, so one graph serves every work item (docs/graph.md).
    :meth:`step` replays it: no host read per work item (an empty item flows through W1, W2 and combine_send as a
    no-op, so replays idle correctly), and status is read once per synchronize. Stop by not replaying again, or
    end a replay blocked in a device wait with ``Comm.abort()`` (the next synchronize raises
    ``CommAbortedError``).

    ``recv`` is ``(expand_x, scales, expert_counts, work_item)`` as dispatch_recv writes them, ``out`` the W2
    output handed to combine_send; both keep their addresses for the graph's life. ``swiglu_limit`` (DeepSeek-V4's
    clamped SwiGLU, :func:`cam.ops.gmm_swiglu_quant_multi_layer`) is part of the captured W1 launch: every replay
    clamps with it.

    Back-pressure: at most ``D * slots`` replays (as many work items as the plane can hold ready at once; more
    could only poll idle) are queued; a replay beyond waits for the oldest to end, so the synchronize at the end
    of a step outlasts at most that many, however many ``items``. A ``SyncTimeoutError`` returns only after the
    plane was aborted and the queued replays ended (or, if they never end, with every buffer kept for the
    process's life): dropping the CapturedFFN after it frees nothing a replay still uses."""

    def __init__(self, comm: Comm, w1: LayerWeights, w2: LayerWeights, row_budget: Optional[int] = None, *,
                 swiglu_limit: Optional[float] = None):
        check_swiglu_limit("CapturedFFN", swiglu_limit)
        self.comm = comm
        self.row_budget = row_budget
        self.swiglu_limit = swiglu_limit
        if row_budget is not None:
            check_row_budget("CapturedFFN", comm.topology, row_budget)
            self.recv = tuple(torch.zeros(shape, dtype=dtype) for dtype, shape in batch_output_specs(comm, row_budget))
            x, scales, table, _, work = self.recv
            layer, kind, record = None, GROUP_TABLE, work
            self.item = None  # a batch has no one work item: ``records`` is its table
        else:
            self.recv = tuple(torch.zeros(shape, dtype=dtype) for dtype, shape in output_specs(comm))
            item = ffn_work_item(*self.recv)
            x, scales, table, layer, kind, record = (item.hidden_states, item.dynamic_scales, item.group_list,
                                                     item.layer_index, GROUP_LIST_COUNTS, item.work_item)
            self.item = item
        # Warm-up on an empty item (zero counts, or a group table of zero rows): builds the persistent GMM address
        # tables outside the capture and gives the static W1/W2 outputs their shapes.
        self.y, self.y_scale = ops.gmm_swiglu_quant_multi_layer(x, scales, w1, table, layer, kind,
                                                                swiglu_limit=swiglu_limit)
        self.out = ops.gmm_multi_layer(self.y, self.y_scale, w2, table, layer, kind)
        self.graph = Graph()
        self.graph.max_queued = comm.topology.D * comm.topology.slots
        # Thread-local: other ranks may be threads of this process (an in-process plane, cam-ffn serving several
        # ranks), and their synchronizes of their own streams must not break this rank's capture.
        with self.graph.capture(stream=comm.stream, mode="thread_local"):
            ops.dispatch_recv(comm, out=self.recv, row_budget=row_budget)
            ops.gmm_swiglu_quant_multi_layer(x, scales, w1, table, layer, kind, out=(self.y, self.y_scale),
                                             swiglu_limit=swiglu_limit)
            ops.gmm_multi_layer(self.y, self.y_scale, w2, table, layer, kind, out=self.out)
            ops.combine_send(comm, self.out, record)

    @property
    def records(self) -> torch.Tensor:
        """The ``[n, work_item_words]`` work items of the last replay (a batch's table, or the one item as one row;
        :meth:`cam.WorkItem.table` names their words): static buffers, rewritten by the next replay."""
        return self.recv[4] if self.item is None else self.item.work_item.unsqueeze(0)

    def step(self, items: int = 1) -> None:
        """Replays ``items`` (an int >= 1) iterations, then synchronizes once (raises what the device reported)."""
        check_items_per_check("CapturedFFN.step", items)
        for _ in range(items):
            self.graph.replay(synchronize=False)
        self.graph.synchronize()

    def close(self) -> None:
        """Destroys the graph now (``Comm.close`` also ends it: a live graph holds its Comm busy)."""
        self.graph.reset()


def ffn_iteration(comm: Comm, w1: LayerWeights, w2: LayerWeights, *,
                  swiglu_limit: Optional[float] = None) -> torch.Tensor:
    """receive → W1 (int8 GMM + SwiGLU + quant) → W2 (int8 GMM + dequant) → send, as one traceable function: the
    layer and the per-expert counts never leave the device, so it compiles with torch.compile(fullgraph=True) and
    an empty work item flows through as a no-op. ``swiglu_limit``: W1's clamped SwiGLU (DeepSeek-V4,
    :func:`cam.ops.gmm_swiglu_quant_multi_layer`), checked before the receive takes a work item. Returns the
    work-item record (a device tensor)."""
    check_swiglu_limit("ffn_iteration", swiglu_limit)
    item = ffn_work_item(*ops.dispatch_recv(comm))
    ops.combine_send(comm, ffn_compute(item, w1, w2, swiglu_limit=swiglu_limit), item.work_item)
    return item.work_item


def ffn_batch_iteration(comm: Comm, w1: LayerWeights, w2: LayerWeights, row_budget: int, *,
                        swiglu_limit: Optional[float] = None) -> torch.Tensor:
    """The batched FFN iteration: one ``dispatch_recv(comm, row_budget=...)`` takes every ready replica's work item
    that fits ``row_budget`` rows, one W1 (clamped with ``swiglu_limit`` when given) and one W2 launch serve them
    all over the receive's group table (each item with its own layer), and one ``combine_send`` returns each item
    to its replica. Outputs are bit for bit those of :func:`ffn_iteration` serving the same items one by one.
    Returns the ``[I, words]`` work-item table."""
    check_row_budget("ffn_batch_iteration", comm.topology, row_budget)
    check_swiglu_limit("ffn_batch_iteration", swiglu_limit)
    x, scales, table, _, work = ops.dispatch_recv(comm, row_budget=row_budget)
    y, y_scale = ops.gmm_swiglu_quant_multi_layer(x, scales, w1, table, None, GROUP_TABLE, swiglu_limit=swiglu_limit)
    ops.combine_send(comm, ops.gmm_multi_layer(y, y_scale, w2, table, None, GROUP_TABLE), work)
    return work


def check_row_budget(who: str, topology: Topology, row_budget) -> None:
    """Before any buffer or launch: C's rule (:func:`cam.serve.policy.row_budget_bounds`) for ``row_budget``."""
    row_budget_bounds(topology, row_budget, f"{who}: row_budget = {row_budget}")


def ffn_compute(item: FFNWorkItem, w1: LayerWeights, w2: LayerWeights, *,
                swiglu_limit: Optional[float] = None) -> torch.Tensor:
    """The routed MoE of one work item (W1 clamped with ``swiglu_limit`` when given); traceable by
    torch.compile(fullgraph=True) (no host reads)."""
    y, y_scale = ops.gmm_swiglu_quant_multi_layer(item.hidden_states, item.dynamic_scales, w1, item.group_list,
                                                  item.layer_index, swiglu_limit=swiglu_limit)
    return ops.gmm_multi_layer(y, y_scale, w2, item.group_list, item.layer_index)


def expert_weights(model, topology: Topology, ffn_index: int) -> Tuple[LayerWeights, LayerWeights]:
    """LayerWeights of FFN rank ``A + ffn_index`` (its R routed experts, every MoE layer) from a
    :class:`cam.models.MoEModel`."""
    w1, s1, w2, s2 = model.routed_weights(ffn_index * topology.R, topology.R)
    return LayerWeights(w1, s1, format=model.weight_format), LayerWeights(w2, s2, format=model.weight_format)
