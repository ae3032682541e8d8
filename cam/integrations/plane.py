"""What every engine integration shares, and no engine: an Attention rank's side of the data plane for a model
(:class:`AttentionPlane`) and cam's routed experts computed in one process with the data plane's numerics
(:func:`routed_local`)."""

from __future__ import annotations

import time
from typing import List

import torch

from .. import ops
from ..connector import AFDTransferContext, AFDTransferMetadata

__all__ = ["AttentionPlane", "routed_local"]


class AttentionPlane:
    """An Attention rank's side of the data plane for a model: the connector, and a trace of what the blocks did.

    Args:
        connector: an initialized Attention-rank :class:`cam.connector.AsyncAFDConnector`.
        record: keep :attr:`trace`, one ``{"name", "layer", "start_s", "end_s"}`` per dispatch, shared expert and
            combine (``time.monotonic()``), to show the overlap.
    """

    def __init__(self, connector, *, record: bool = False):
        if getattr(connector, "role", None) != "attention" or not connector.is_initialized:
            raise ValueError("AttentionPlane: connector must be an initialized Attention-rank AsyncAFDConnector")
        self.connector = connector
        self.topology = connector.config.topology
        self.dtype = connector.config.dtype
        self.record = record
        self.trace: List[dict] = []
        self._serving = False

    def span(self, name: str, layer: int, start: float) -> None:
        if self.record:
            self.trace.append({"name": name, "layer": layer, "start_s": start, "end_s": time.monotonic()})

    def check(self, x: torch.Tensor, layer: int) -> None:
        topo = self.topology
        if x.shape[-1] != topo.H:
            raise ValueError(f"AttentionPlane: hidden size {x.shape[-1]} differs from the plane's H = {topo.H}")
        if not 0 <= layer < topo.L:
            raise ValueError(f"AttentionPlane: MoE layer {layer} outside the plane's [0, {topo.L})")

    def dispatch(self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, layer: int) -> int:
        """Sends ``x [T, H]`` in rounds of at most ``Bmax`` tokens; returns the number of rounds. At most ``slots``
        are in flight: beyond, the oldest is received first (:meth:`combine` returns them all in order). The first
        call waits for every FFN rank to serve (``connector.wait_ffn_serving()``, bounded by the plane's timeout)."""
        self.check(x, layer)
        if not self._serving:
            # The first round waits, bounded, for every FFN rank to serve (a graph-mode cam-ffn captures first);
            # an FFN rank that failed before serving is then named here instead of a round timing out.
            self.connector.wait_ffn_serving()
            self._serving = True
        start = time.monotonic()
        bmax, slots = self.topology.Bmax, self.topology.slots
        x = x.to(self.dtype)
        chunks = [(s, min(s + bmax, x.shape[0])) for s in range(0, x.shape[0], bmax)] or [(0, 0)]
        self._early: List[torch.Tensor] = []
        for n, (s, e) in enumerate(chunks):
            if n >= slots:
                self._early.append(self.connector.recv_ffn_output())
            ctx = AFDTransferContext(AFDTransferMetadata(layer_idx=layer))
            self.connector.send_attn_output(x[s:e].contiguous(), ctx, topk_ids=ids[s:e].contiguous(),
                                            topk_weights=weights[s:e].contiguous())
        self._rounds = len(chunks)
        self.span("dispatch", layer, start)
        return len(chunks)

    def combine(self, layer: int) -> torch.Tensor:
        """The routed output ``[T, H]`` (the plane's dtype) of the last :meth:`dispatch`."""
        start = time.monotonic()
        outs = list(self._early)
        outs += [self.connector.recv_ffn_output() for _ in range(self._rounds - len(outs))]
        self._early = []
        self.span("combine", layer, start)
        return torch.cat(outs) if len(outs) > 1 else outs[0]


def routed_local(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, w1, w2, layer: int = 0,
                 swiglu_limit=None) -> torch.Tensor:
    """cam's routed experts of ``x [T, H]`` (bf16) in this process, with the data plane's numerics: per-token int8
    quant, rows grouped by expert in (expert, token, slot) order, W1 (with DeepSeek-V4's clamp when
    ``swiglu_limit`` is set) and W2 at MoE layer ``layer``, then ``acc = acc + w[t, k] * row[t, k]`` in fp32 for
    k = 0..K-1 and one rounding to bf16."""
    t, k = ids.shape
    h = x.shape[1]
    flat = ids.reshape(-1).to(torch.int64)
    order = torch.argsort(flat, stable=True)  # flat index is (token, slot)-major: stable keeps that within an expert
    order = order[flat[order] >= 0]
    counts = torch.bincount(flat[order], minlength=w1.num_experts).to(torch.int64)
    q, scale = ops.dynamic_quant(x.to(torch.bfloat16).contiguous())
    index = torch.tensor([layer], dtype=torch.int64)
    rows = order // k
    y, y_scale = ops.gmm_swiglu_quant_multi_layer(q[rows].contiguous(), scale[rows].contiguous(), w1, counts, index,
                                                  swiglu_limit=swiglu_limit)
    out = ops.gmm_multi_layer(y, y_scale, w2, counts, index)
    by_slot = torch.zeros(t * k, h, dtype=torch.float32)
    by_slot[order] = out.to(torch.float32)
    by_slot = by_slot.view(t, k, h)
    acc = torch.zeros(t, h, dtype=torch.float32)
    w = weights.to(torch.float32)
    for slot in range(k):
        acc = acc + w[:, slot:slot + 1] * by_slot[:, slot]
    return acc.to(torch.bfloat16)
