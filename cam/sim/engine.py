"""The discrete-event core: the schedule cam's ops implement, with costs instead of kernels.

Attention side (one entity per replica; its P participants run the same rounds on 1/P of the tokens each and
publish together, so the readiness rule "all P participants published" holds at the replica's publish time).
Per batch, per layer, exactly as ``cam-run``'s worker drives the connector:
    dense layer:  for each micro-batch: attention, dense MLP
    MoE layer:    for each micro-batch: attention, dispatch_send (publishes round r), shared experts;
                  then for each micro-batch in dispatch order: combine_recv (waits until every FFN rank completed
                  that round)
``--mode sync`` adds a barrier across all replicas before every layer (a replica without a batch runs an empty
one, whose rounds every FFN rank still consumes). Slots: with ``slots >= micro-batches`` the slot-free wait never
binds in this schedule (round r - slots was combine-received a layer earlier); fewer slots deadlock and are
refused by ``SimTopology``.

FFN side (one server per FFN rank, docs/protocol.md §7): ``dispatch_recv`` selects round robin over *ready*
replicas starting after the last served one, and consumes a replica's rounds in order, one work item per
selection. A round with more rows for an FFN rank than ``capacity`` is several work items (chunks: whole experts
while they fit, an expert larger than the capacity split by rows; see ``chunks``); each chunk is one selection, so
other ready replicas are interleaved between chunks, and the round is complete for that FFN rank after its last
chunk. An idle FFN rank notices a published round after ``ffn_wake``. The work item costs dispatch_recv + W1 + W2
+ combine_send.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from typing import Dict, List, Optional

import numpy as np

from .costs import CostModel, Work
from ..placement import Placement
from .placement import RowSplit, expected_fanout_of, parse_placement
from .presets import ASSIGNS, assign_replica
from .shapes import ModelShape, SimTopology
from .workload import SimWorkload, split_pieces

_PUBLISH, _FFN_DONE, _WAKE, _REPLICA, _ARRIVE = 0, 1, 2, 3, 4
ROUTINGS = ("uniform", "balanced")


def expected_fanout(model: ModelShape, F: int) -> float:
    """Expected FFN ranks a token's K experts hit (K distinct experts uniformly among E; R = E/F per rank)."""
    E, K, R = model.experts, model.top_k, model.experts // F
    if E - R < K:
        return float(F)
    return F * (1.0 - math.comb(E - R, K) / math.comb(E, K))


class _Costs:
    """The cost model bound to a model shape and topology: attention-side costs per micro-batch and vectorized FFN
    work-item costs."""

    def __init__(self, costs: CostModel, model: ModelShape, topo: SimTopology, fanout: Optional[float] = None):
        self.c, self.m, self.t = costs, model, topo
        self.fanout = expected_fanout(model, topo.F) if fanout is None else fanout
        self.wake = costs.seconds("ffn_wake", Work())
        self.barrier = costs.seconds("barrier", Work())
        H, I = model.hidden, model.moe_intermediate
        # Per-op terms of the FFN work item in rows m and active experts a (docs/sim.md, "what an op costs").
        self._ffn = []
        for name, flop_per_row, byte_per_row, byte_per_expert, net_per_row in (
                ("dispatch_recv", 0.0, H + 4.0, 0.0, 0.0),
                ("w1", 4.0 * H * I, H + I, 2.0 * H * I, 0.0),
                ("w2", 2.0 * I * H, I + 2.0 * H, 1.0 * I * H, 0.0),
                ("combine_send", 0.0, 0.0, 0.0, 2.0 * H)):
            op = costs.op(name)
            self._ffn.append((op, flop_per_row, byte_per_row, byte_per_expert, net_per_row))

    def ffn_items(self, m: np.ndarray, a: np.ndarray) -> np.ndarray:
        """Seconds of work items of m rows touching a experts (arrays)."""
        m = np.asarray(m, dtype=np.float64)
        a = np.asarray(a, dtype=np.float64)
        total = np.zeros_like(m)
        for op, fpr, bpr, bpe, npr in self._ffn:
            t = op.fixed_s + op.per_row_s * m + np.where(m > 0, op.nonempty_s, 0.0)
            comp = (fpr * m) / (op.tflops * 1e12) if op.tflops else 0.0
            mem = (bpr * m + bpe * a) / (op.gbps * 1e9) if op.gbps else 0.0
            t = t + np.maximum(comp, mem)
            if op.net_gbps:
                t = t + npr * m / (op.net_gbps * 1e9)
            total += t
        return total

    def item(self, m: float, a: float) -> float:
        """``ffn_items`` of one item, in plain floats (chunks are cut one FFN rank at a time)."""
        total = 0.0
        for op, fpr, bpr, bpe, npr in self._ffn:
            t = op.fixed_s + op.per_row_s * m + (op.nonempty_s if m > 0 else 0.0)
            comp = fpr * m / (op.tflops * 1e12) if op.tflops else 0.0
            mem = (bpr * m + bpe * a) / (op.gbps * 1e9) if op.gbps else 0.0
            t += comp if comp > mem else mem
            if op.net_gbps:
                t += npr * m / (op.net_gbps * 1e9)
            total += t
        return total

    def table(self, rows_max: int, active) -> np.ndarray:
        """Item seconds for every row count 0..rows_max, with ``active(m)`` experts touched."""
        m = np.arange(rows_max + 1, dtype=np.float64)
        return self.ffn_items(m, active(m))

    def stage_parts(self, lens: List[int], link: bool = True, prefix: Optional[List[int]] = None) -> tuple:
        """(attention, dense MLP, shared experts, dispatch_send, combine_recv) seconds of one participant for a
        micro-batch of prompts (or prompt chunks) ``lens``; ``prefix``: the tokens of each prompt already processed
        by earlier steps (chunked prefill), whose keys and values the chunk's queries attend to as well;
        ``link=False`` leaves out dispatch_send's bytes on the link (the colocated mode's all-to-all carries them)."""
        m, P, c = self.m, self.t.P, self.c
        n = sum(lens) / P
        context = sum(prefix) / P if prefix else 0.0
        if m.attn_window:
            pairs, index = sparse_attention(m, lens, prefix)
            len2, extra = 2.0 * pairs / P, index / P
        else:
            len2, extra = attention_len2(lens, prefix) / P, 0.0
        H, K = m.hidden, m.top_k
        attn = c.seconds("attention", Work(tokens=n, len2=len2, flop=2.0 * m.attn_params * n
                                           + m.attn_pair_flops * len2 / 2 + m.context_flops_per_token * context
                                           + extra,
                                           byte=2.0 * m.attn_params))
        dense = c.seconds("dense_mlp", Work(tokens=n, flop=6.0 * H * m.dense_intermediate * n,
                                            byte=6.0 * H * m.dense_intermediate))
        # Tensor parallelism inside the replica: the row-parallel output projection ends in an all-reduce of the
        # micro-batch's bf16 activations (2 (P-1)/P of them leave each rank in a ring); a dense MLP ends in another;
        # a MoE layer's ranks each dispatch 1/P of the tokens and all-gather the combined rows ((P-1)/P).
        if P > 1:
            act = 2.0 * H * sum(lens)
            attn += self.tp_collective(2.0 * (P - 1) / P * act)
            dense += self.tp_collective(2.0 * (P - 1) / P * act)
            gather = self.tp_collective((P - 1) / P * act)
        else:
            gather = 0.0
        si = m.shared_experts * m.shared_intermediate
        shared = c.seconds("shared", Work(tokens=n, flop=6.0 * H * si * n, byte=6.0 * H * si)) if si else 0.0
        send = c.seconds("dispatch_send", Work(tokens=n, rows=n * K, byte=2.0 * H * n,
                                               net_byte=n * self.fanout * (H + 4.0) if link else 0.0))
        recv = c.seconds("combine_recv", Work(tokens=n, rows=n * K, byte=2.0 * H * n * (K + 1))) + gather
        return attn, dense, shared, send, recv

    def tp_collective(self, net_byte: float) -> float:
        """Seconds of one TP collective in which each rank sends ``net_byte`` bytes (``tp_all_reduce``)."""
        return self.c.seconds("tp_all_reduce", Work(tokens=1.0, net_byte=net_byte))

    def stage(self, pieces: List[tuple]) -> tuple:
        """(dense layer, MoE layer before publish, MoE layer after publish, combine_recv) seconds of one participant
        for a micro-batch of pieces ``(request, tokens, prefix)``."""
        attn, dense, shared, send, recv = self.stage_parts([n for _, n, _ in pieces],
                                                           prefix=[p for _, _, p in pieces])
        return attn + dense, attn + send, shared, recv


def attention_len2(lens: List[int], prefix: Optional[List[int]] = None) -> float:
    """Twice the causal (query, key) pairs of prompt chunks: a chunk of c tokens after p tokens already processed has
    c·p + c²/2 pairs (each of its queries sees the p cached keys and the chunk's earlier ones), so the attention
    terms ``attn_pair_flops · len2 / 2`` and ``per_len2_s · len2`` grow with the context, not only the chunk. A
    whole prompt (p = 0) gives the prompt's len²."""
    if not prefix:
        return float(sum(c * c for c in lens))
    return float(sum(c * c + 2 * c * p for c, p in zip(lens, prefix)))


def _sum_min(n: int, w: int) -> int:
    """Σ_{i=1..n} min(i, w)."""
    return n * (n + 1) // 2 if n <= w else w * (w + 1) // 2 + (n - w) * w


def _sum_floor(n: int, r: int) -> int:
    """Σ_{i=1..n} ⌊i / r⌋."""
    q = n // r
    return r * q * (q - 1) // 2 + q * (n - q * r + 1)


def _sum_floor_capped(n: int, r: int, k: int) -> int:
    """Σ_{i=1..n} min(k, ⌊i / r⌋)."""
    edge = k * r - 1  # the last i with ⌊i / r⌋ < k
    return _sum_floor(min(n, edge), r) + k * max(0, n - edge)


def sparse_attention(m: ModelShape, lens: List[int], prefix: Optional[List[int]] = None) -> tuple:
    """(query, key) pairs and indexer FLOPs of compressed, sparse attention (``m.attn_window`` > 0), per layer on
    average over the model's layers, for chunks ``lens`` after ``prefix`` processed tokens. A query seeing i keys
    (itself and every earlier one) attends to min(i, window) of them in every layer, plus min(topk, ⌊i/csa_ratio⌋)
    compressed rows in a CSA layer (whose indexer scores all ⌊i/csa_ratio⌋) and ⌊i/hca_ratio⌋ in an HCA layer."""
    window = csa = hca = scored = 0
    for c, p in zip(lens, prefix or [0] * len(lens)):
        a, b = p, p + c
        window += _sum_min(b, m.attn_window) - _sum_min(a, m.attn_window)
        csa += _sum_floor_capped(b, m.csa_ratio, m.csa_topk) - _sum_floor_capped(a, m.csa_ratio, m.csa_topk)
        scored += _sum_floor(b, m.csa_ratio) - _sum_floor(a, m.csa_ratio)
        hca += _sum_floor(b, m.hca_ratio) - _sum_floor(a, m.hca_ratio)
    L = m.layers
    pairs = window + (m.csa_layers * csa + m.hca_layers * hca) / L
    return float(pairs), float(m.csa_layers * scored * m.index_pair_flops / L)


def critical_path(chains, device_work) -> float:
    """The critical-path bound of every mode (docs/sim.md §1, "Outputs"): a lower bound on any schedule's makespan for
    these steps, the longer of the longest replica chain (a replica's own dependent work, with no other replica
    contending for what it waits on) and the busiest device's total work."""
    return float(max(list(chains) + list(device_work)))


def chunks(counts: np.ndarray, capacity: int) -> List[tuple]:
    """Work items of one FFN rank's round: per-local-expert row counts -> [(rows, experts touched)].

    Experts are taken in order. An expert that fits in ``capacity`` is never split: it joins the open chunk if it
    fits there, else it opens a new one. An expert larger than ``capacity`` is split by rows: its first rows fill the
    open chunk, then full chunks of its own, and its remainder opens the next chunk."""
    out = []
    rows = active = 0
    for n in counts.tolist():
        if n == 0:
            continue
        if n > capacity:
            if rows:
                take = capacity - rows
                out.append((capacity, active + (1 if take else 0)))  # a full open chunk holds none of its rows
                n -= take
                rows = active = 0
            full, n = divmod(n, capacity)
            out.extend([(capacity, 1)] * full)
            if n:
                rows, active = n, 1
            continue
        if rows + n > capacity:
            out.append((rows, active))
            rows = active = 0
        rows += n
        active += 1
    if rows or not out:
        out.append((rows, active))
    return out


class ReplicaState:
    """One Attention replica's schedule in a simulation (its requests, batch, layer and clocks); the colocated
    baseline keeps one per device."""

    __slots__ = ("d", "next_req", "reqs", "batch_idx", "rids", "stages", "layer", "wait_rounds", "wait_t",
                 "busy", "chain", "batches_run", "assigned", "idle", "free_at", "prefilled", "ops", "op", "rounds",
                 "wait_g", "cc", "cdone")

    def __init__(self, d, reqs):
        self.d = d
        self.reqs = reqs  # request ids of this replica, arrival order
        self.next_req = 0
        self.batch_idx = 0
        self.rids: List[int] = []
        self.stages: List[tuple] = []
        self.layer = 0
        self.wait_rounds: List[int] = []
        self.wait_t = 0.0
        self.busy = 0.0
        self.chain = 0.0
        self.batches_run = 0
        self.assigned: List[int] = []  # --assign: requests assigned at arrival
        self.idle = False
        self.free_at = 0.0
        self.prefilled = 0  # chunked prefill: tokens of the head request served by earlier steps
        # Two-stage micro-batching: the MoE layers' ops in stream order, the next one, each (micro-batch, layer)'s
        # round, the round a combine waits for, and the uncontended chain's clock and round completions.
        self.ops: List[tuple] = []
        self.op = 0
        self.rounds: Dict[tuple, int] = {}
        self.wait_g = -1
        self.cc = 0.0
        self.cdone: Dict[int, float] = {}


class Simulation:
    """One simulated run. ``run()`` returns the raw per-request and per-rank figures; ``cam.sim.report`` turns them
    into the report."""

    def __init__(self, model: ModelShape, topo: SimTopology, workload: SimWorkload, costs: CostModel,
                 mode: str = "async", seed: int = 0, routing: str = "uniform", expert_skew: float = 0.0,
                 trace: bool = False, placement=None, batch_rows: Optional[int] = None,
                 assign: str = "round-robin", step_overhead_s: float = 0.0, two_stage: bool = False):
        if mode not in ("async", "sync"):
            raise ValueError(f"mode must be 'async' or 'sync', got {mode!r}")
        if routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
        if expert_skew < 0:
            raise ValueError(f"expert_skew must be >= 0, got {expert_skew}")
        if assign not in ASSIGNS:
            raise ValueError(f"assign must be one of {ASSIGNS}, got {assign!r}")
        if assign != "round-robin" and workload.batches is not None:
            raise ValueError(f"assign {assign!r} needs a dynamically batched workload (cam-run presets bring "
                             "their own static batches and assignment)")
        self.assign = assign
        if not step_overhead_s >= 0:
            raise ValueError(f"step_overhead_s must be >= 0, got {step_overhead_s}")
        # The serving engine's host time per step (scheduling, input preparation) before a step's first layer.
        self.step_overhead = float(step_overhead_s)
        # Two-stage micro-batching (async only; a sync barrier per layer leaves nothing to pipeline): a micro-batch
        # goes on to its next MoE layer after its own combine, not after every micro-batch's round of the layer.
        self.two_stage = bool(two_stage) and mode == "async"
        if workload.num_replicas > topo.D:
            raise ValueError(f"workload uses {workload.num_replicas} replicas, topology has D={topo.D}")
        self.model, self.topo, self.wl, self.mode = model, topo, workload, mode
        self.routing = routing
        # batch_rows: snapshot batching (an FFN rank takes every ready item, in round-robin order, up to this many
        # rows, into one launch), checked and sized by the serving path's policy; None: one work item per
        # dispatch_recv.
        if batch_rows is not None:
            # Here, not at the top: the rule is C's, and asking it loads cam's extension (an unbatched run does not).
            from .row_budget import batch_policy

            batch_rows = batch_policy(model, topo, workload, batch_rows, f"batch_rows = {batch_rows}").batch_rows
        self.batch_rows = batch_rows
        # trace: every publish (g, replica, t) and work item (f, replica, g, start, end, last chunk), for tests and
        # timelines; off by default (it costs memory at scale).
        self.trace = {"publish": [], "items": []} if trace else None
        self.rng = np.random.default_rng(seed)
        E, F = model.experts, topo.F
        # Expert popularity per MoE layer: uniform, or Zipf(expert_skew) over a per-layer random permutation.
        if expert_skew > 0:
            base = 1.0 / np.arange(1, E + 1) ** expert_skew
            base /= base.sum()
            self.popularity = [base[self.rng.permutation(E)] for _ in range(model.moe_layers)]
        else:
            self.popularity = [np.full(E, 1.0 / E)] * model.moe_layers
        # Placement: None = cam's default (expert e on rank e // R, E % F == 0), drawn per rank; otherwise a
        # cam.placement.Placement per MoE layer (or one of one layer, or of every layer), drawn per expert and split
        # over its replicas (cam.sim.placement.RowSplit).
        if isinstance(placement, str):
            placement = parse_placement(placement, E, F, self.popularity)
        elif isinstance(placement, Placement):
            if placement.layers not in (1, model.moe_layers):
                raise ValueError(f"placement: a table of {placement.layers} layers for {model.moe_layers} MoE layers")
            placement = [placement] * model.moe_layers if placement.layers == 1 else \
                [RowSplit(placement, l) for l in range(model.moe_layers)]
        if placement is None and E % F:
            placement = [Placement.contiguous(E, F, layers=1)] * model.moe_layers
        if placement is not None:
            if len(placement) != model.moe_layers:
                raise ValueError(f"placement: {len(placement)} tables for {model.moe_layers} MoE layers")
            placement = [p if isinstance(p, RowSplit) else RowSplit(p) for p in placement]
            for p in placement:
                if p.F != F or p.experts != E:
                    raise ValueError(f"placement: a table for E={p.experts}, F={p.F}; the run has E={E}, F={F}")
        self.place = placement
        fanout = None
        if placement is not None:
            fanout = float(np.mean([expected_fanout_of(E, model.top_k, p.distinct_per_rank) for p in placement]))
        self.cost = _Costs(costs, model, topo, fanout)
        if placement is None:
            self.R = E // F
            self.rank_popularity = [p.reshape(F, self.R).sum(axis=1) for p in self.popularity]
        self._table = np.zeros(0)

    # ------------------------------------------------------------------ routing

    def _active(self, m: np.ndarray) -> np.ndarray:
        """Experts of one FFN rank touched by m rows: exact for balanced routing (min(R, m)); for drawn routing the
        expectation with the rank's rows spread uniformly over its R experts."""
        R = self.R
        if self.routing == "balanced":
            return np.minimum(m, R)
        return R * (1.0 - (1.0 - 1.0 / R) ** m)

    def _item_cost(self, rows: np.ndarray) -> np.ndarray:
        top = int(rows.max()) if len(rows) else 0
        if top >= len(self._table):
            self._table = self.cost.table(max(top, 2 * len(self._table)), self._active)
        return self._table[rows]

    def _route(self, moe_layer: int, tokens: int):
        """Per-FFN-rank work of a round: (per-rank item seconds, {f: [chunk seconds]}, total rows).

        Drawn routing: the round's token-slots fall on FFN ranks as a multinomial over the ranks' summed expert
        popularity; per-expert counts inside a rank (needed only to cut chunks) are drawn conditionally on the
        rank's rows, which gives exactly the per-expert multinomial."""
        if self.place is not None:
            return self._route_placed(moe_layer, tokens)
        R = self.R
        slots = tokens * self.model.top_k
        rows = self._draw(slots, self.rank_popularity[moe_layer])
        cost = self._item_cost(rows)

        def per_expert(f: int) -> np.ndarray:
            within = self.popularity[moe_layer][f * R:(f + 1) * R]
            return self._draw(int(rows[f]), within / within.sum())

        chunked = self._chunk(rows, cost, per_expert)
        if self.batch_rows is not None:
            self._last_rows = (rows, self._active(rows.astype(np.float64)))
        return cost, chunked, slots

    def _route_placed(self, moe_layer: int, tokens: int):
        """``_route`` under a placement table: per-expert row counts (a multinomial over expert popularity, or the
        exact even split), each expert's rows split over its replicas (cam.sim.placement.RowSplit); the experts an item
        touches are its local slots with rows, exactly."""
        place = self.place[moe_layer]
        slots = tokens * self.model.top_k
        counts = self._draw(slots, self.popularity[moe_layer])
        rows, active = place.split(counts)
        cost = self.cost.ffn_items(rows, active)
        chunked = self._chunk(rows, cost, lambda f: place.slot_rows(counts, f))
        if self.batch_rows is not None:
            self._last_rows = (rows, active)
        return cost, chunked, slots

    def _draw(self, n: int, p: np.ndarray) -> np.ndarray:
        """n rows over len(p) bins: the exact even split under balanced routing (or for no rows), else a
        multinomial over p."""
        if self.routing == "balanced" or n == 0:
            q, r = divmod(n, len(p))
            out = np.full(len(p), q, dtype=np.int64)
            out[:r] += 1
            return out
        return self.rng.multinomial(n, p)

    def _chunk(self, rows: np.ndarray, cost: np.ndarray, per_slot) -> Dict[int, List[float]]:
        """The chunks of every FFN rank whose rows exceed the capacity: {f: [chunk seconds]}, ``cost[f]`` set to
        their sum (in place), their (rows, experts) pairs kept for batching. ``per_slot(f)``: rows per local
        expert of rank f."""
        cap = self.topo.capacity
        chunked: Dict[int, List[float]] = {}
        self._last_pairs = {}
        if cap is None or rows.max() <= cap:
            return chunked
        for f in np.flatnonzero(rows > cap).tolist():
            pairs = chunks(per_slot(f), cap)
            chunked[f] = [self.cost.item(rows_c, active_c) for rows_c, active_c in pairs]
            cost[f] = sum(chunked[f])
            self._last_pairs[f] = pairs
        return chunked

    # ------------------------------------------------------------------ run

    def run(self) -> dict:
        m, topo, wl = self.model, self.topo, self.wl
        D, F = topo.D, topo.F
        self.heap: list = []
        self._order = itertools.count()  # ties in time go in the order events were scheduled: deterministic
        n_layers, first_dense = m.layers, m.first_dense
        self.ttft = np.full(wl.num_requests, np.nan)
        self.finish = np.full(wl.num_requests, np.nan)
        # Rounds, by global id g.
        self.round_replica: List[int] = []
        self.round_cost: List[list] = []
        self.round_chunks: List[dict] = []
        self.round_rows: List[tuple] = []  # batching: (rows per rank, experts touched per rank, chunks, MoE layer)
        self.launches = 0
        self.round_remaining: List[int] = []
        self.round_complete: List[float] = []
        self.rounds_of: List[List[int]] = [[] for _ in range(D)]
        self.published = [0] * D
        self.total_rows = 0
        # FFN ranks.
        self.ready = [[] for _ in range(F)]
        self.rr = [0] * F
        self.consumed = [[0] * D for _ in range(F)]
        self.progress: List[Dict[int, int]] = [{} for _ in range(F)]
        self.ffn_busy = [False] * F
        self.ffn_time = [0.0] * F
        self.items = 0
        reqs = [[] for _ in range(D)]
        self._sync_idle = False
        self._unassigned = 0
        for rid in np.argsort(wl.arrival_s, kind="stable").tolist():
            if self.assign == "round-robin":
                reqs[int(wl.replica[rid])].append(rid)
            else:  # assigned at arrival, by the policy
                self._push(float(wl.arrival_s[rid]), _ARRIVE, rid)
                self._unassigned += 1
        self.reps = [ReplicaState(d, reqs[d]) for d in range(D)]
        self.barrier_count = 0
        self.barrier_t = 0.0
        self.steps = 0
        if self.mode == "async":
            for rep in self.reps:
                self._next_batch(rep, 0.0)
        else:
            for rep in self.reps:
                self._sync_arrive(rep, 0.0)
        heap = self.heap
        pop = heapq.heappop
        select = self._select if self.batch_rows is None else self._select_batch
        remaining = self.round_remaining
        while heap:
            t, _, kind, x, y = pop(heap)
            if kind == _FFN_DONE:
                if type(y) is tuple:  # a batched launch: every item's own round, in the order they were taken
                    for g in y:
                        remaining[g] -= 1
                        if remaining[g] == 0:
                            self._round_complete(g, t)
                elif y >= 0:
                    remaining[y] -= 1
                    if remaining[y] == 0:
                        self._round_complete(y, t)
                select(x, t)
            elif kind == _PUBLISH:
                self._publish(x, t)
            elif kind == _WAKE:
                select(x, t)
            elif kind == _ARRIVE:
                self._arrive(x, t)
            elif x < 0:  # --assign, sync: the step that waited for an arrival
                self._sync_step(t)
            else:
                self._next_batch(self.reps[x], t)
        unfinished = int(np.isnan(self.ttft).sum())
        if unfinished:
            raise RuntimeError(f"simulation ended with {unfinished} request(s) unserved (a schedule bug)")
        return self._raw()

    def _push(self, t, kind, x, y=0):
        heapq.heappush(self.heap, (t, next(self._order), kind, x, y))

    # ------------------------------------------------------------------ Attention side

    def _arrive(self, rid: int, t: float) -> None:
        """--assign: request rid arrives at t and joins the replica the policy picks; an idle replica starts."""
        finish, length = self.finish, self.wl.length
        for r in self.reps:
            # Not finished by t (a replica's schedule may already run ahead of t: its finish times are known).
            r.assigned = [x for x in r.assigned if not finish[x] <= t]
        rep = self.reps[assign_replica(self.assign, [length[r.assigned].tolist() for r in self.reps])]
        rep.reqs.append(rid)
        rep.assigned.append(rid)
        self._unassigned -= 1
        # The start is an event at t, after every arrival at the same instant (those were scheduled first), so
        # requests arriving together are assigned before any of them starts.
        if self.mode == "async":
            if rep.idle:
                rep.idle = False
                self._push(max(t, rep.free_at), _REPLICA, rep.d)
        elif self._sync_idle:
            self._sync_idle = False
            self._push(t, _REPLICA, -1)

    def _take_batch(self, rep: ReplicaState, t: float) -> List[tuple]:
        """Dynamic batching: the requests of this replica that arrived by t, in order, up to the token budget, as
        pieces ``(request, tokens, prefix)``. Without chunking a piece is a whole prompt (the first always, however
        long). With chunked prefill (vLLM's scheduler: a request partly prefilled goes first, then waiting ones, each
        taking what is left of ``max_num_batched_tokens``) the last piece may be a chunk; the request stays at the
        head of the queue and its next chunk opens the next step."""
        wl = self.wl
        budget = wl.token_budget
        out, used = [], 0
        while rep.next_req < len(rep.reqs):
            rid = rep.reqs[rep.next_req]
            if wl.arrival_s[rid] > t:
                break
            done = rep.prefilled
            n = int(wl.length[rid]) - done
            take = n
            if wl.chunked:
                take = min(n, budget - used)
                if take <= 0:
                    break
            elif out and used + n > budget:
                break
            out.append((rid, take, done))
            used += take
            if take < n:
                rep.prefilled = done + take
                break
            rep.prefilled = 0
            rep.next_req += 1
        return out

    def _pieces(self, rids: List[int]) -> List[tuple]:
        """A static batch's requests as whole-prompt pieces."""
        return [(r, int(self.wl.length[r]), 0) for r in rids]

    def _finishing(self, pieces: List[tuple]) -> List[int]:
        """The requests whose last token is in this step (their TTFT is the step's end)."""
        return [r for r, n, p in pieces if n + p == int(self.wl.length[r])]

    def _begin(self, rep: ReplicaState, pieces: List[tuple], t: float) -> None:
        rep.rids = self._finishing(pieces)
        rep.stages = [(sum(n for _, n, _ in s),) + self.cost.stage(s)
                      for s in split_pieces(pieces, self.topo.ubatches, self.topo.ubatch_split)]
        rep.layer = 0
        rep.batches_run += 1
        gate = max((float(self.wl.arrival_s[r]) for r, _, _ in pieces), default=0.0)
        rep.chain = max(rep.chain, gate) + self.step_overhead

    def _next_batch(self, rep: ReplicaState, t: float) -> None:
        """Async: the replica is free at t; start its next batch (or wait for an arrival)."""
        wl = self.wl
        if wl.batches is not None:
            own = wl.batches[rep.d] if rep.d < len(wl.batches) else []
            while rep.batch_idx < len(own) and not own[rep.batch_idx]:
                rep.batch_idx += 1  # an empty step of a lockstep run: nothing to run without the barrier
            if rep.batch_idx >= len(own):
                return
            rids = self._pieces(own[rep.batch_idx])
            rep.batch_idx += 1
            start = max(t, max(float(wl.arrival_s[r]) for r, _, _ in rids))
        else:
            if rep.next_req >= len(rep.reqs):
                rep.idle, rep.free_at = True, t  # --assign: the next request assigned to it starts it
                return
            first = float(wl.arrival_s[rep.reqs[rep.next_req]])
            if first > t:
                self._push(first, _REPLICA, rep.d)
                return
            rids = self._take_batch(rep, t)
            start = t
        self._begin(rep, rids, start)
        self._advance(rep, start + self.step_overhead)

    def _advance(self, rep: ReplicaState, t: float) -> None:
        """Run layers from rep.layer at time t until a MoE layer waits for the FFN side, a barrier, or the end."""
        m = self.model
        while True:
            if rep.layer == m.layers:
                self._batch_end(rep, t)
                return
            if self.mode == "sync" and rep.layer > 0:
                self._sync_layer_arrive(rep, t)
                return
            if self.two_stage and rep.layer >= m.first_dense:
                self._two_stage_begin(rep, t)
                return
            t = self._layer(rep, t)
            if t is None:
                return

    def _layer(self, rep: ReplicaState, t: float) -> Optional[float]:
        """Run layer rep.layer from t. Dense: returns the end time. MoE: publishes the rounds and returns None."""
        m = self.model
        if rep.layer < m.first_dense:
            for st in rep.stages:
                t += st[1]
                rep.busy += st[1]
            rep.chain += sum(st[1] for st in rep.stages)
            rep.layer += 1
            return t
        moe = rep.layer - m.first_dense
        rep.wait_rounds = []
        pubs, costs_f = [], []
        t0 = t
        for st in rep.stages:
            t += st[2]
            rep.busy += st[2] + st[3]
            g, cost = self._new_round(rep, moe, st, t)
            rep.wait_rounds.append(g)
            pubs.append(t - t0)
            costs_f.append(cost)
            t += st[3]
        rep.wait_t = t
        # Critical path of this layer with no other replica contending: each FFN rank serves the micro-batches in
        # order as they are published.
        c = rep.chain
        done_f = np.zeros(self.topo.F)
        end = c + (t - t0)
        for s, st in enumerate(rep.stages):
            done_f = np.maximum(done_f, c + pubs[s]) + costs_f[s]
            end = max(end, float(done_f.max())) + st[4]
        rep.chain = end
        return None

    def _new_round(self, rep: ReplicaState, moe: int, st: tuple, t: float) -> tuple:
        """Route a micro-batch's round of MoE layer ``moe``, register it and publish it at t: (round, FFN costs)."""
        d = rep.d
        cost, chunked, rows = self._route(moe, st[0])
        g = len(self.round_replica)
        self.round_replica.append(d)
        self.round_cost.append(cost.tolist())
        self.round_chunks.append(chunked)
        if self.batch_rows is not None:
            self.round_rows.append((self._last_rows[0].tolist(), self._last_rows[1].tolist(),
                                    self._last_pairs, moe))
        self.round_remaining.append(self.topo.F)
        self.round_complete.append(math.nan)
        self.rounds_of[d].append(g)
        self.total_rows += rows
        self._push(t, _PUBLISH, g)
        return g, cost

    def _two_stage_begin(self, rep: ReplicaState, t: float) -> None:
        """The MoE layers of a batch under two-stage micro-batching (the vLLM AFD plugin's CAMAsyncUbatchScheduler:
        two micro-batch threads taking turns on one stream, s0 dispatch L, s1 dispatch L, s0 combine L, s0 dispatch
        L+1, s1 combine L, s1 dispatch L+1, ...): the stream's ops in that order, a combine waiting for its own
        round only."""
        m, S = self.model, len(rep.stages)
        ops = []
        for moe in range(m.moe_layers):
            for s in range(S):
                if moe:
                    ops.append(("combine", s, moe - 1))
                ops.append(("dispatch", s, moe))
        ops.extend(("combine", s, m.moe_layers - 1) for s in range(S))
        rep.ops, rep.op, rep.rounds, rep.cdone = ops, 0, {}, {}
        rep.cc = rep.chain
        self._two_stage_run(rep, t)

    def _two_stage_run(self, rep: ReplicaState, t: float) -> None:
        """Run the stream's ops from rep.op at t until a combine waits for a round not yet complete, or the end. The
        uncontended chain (each FFN rank serving this replica's rounds in order as they are published) runs the same
        ops beside it."""
        F = self.topo.F
        while rep.op < len(rep.ops):
            kind, s, moe = rep.ops[rep.op]
            st = rep.stages[s]
            if kind == "combine":
                g = rep.rounds[(s, moe)]
                done = self.round_complete[g]
                if done != done:  # not complete yet: _round_complete resumes the stream
                    rep.wait_g, rep.wait_t = g, t
                    return
                t = max(t, done) + st[4]
                rep.busy += st[4]
                rep.cc = max(rep.cc, rep.cdone.pop(g)) + st[4]
            else:
                t += st[2]
                rep.busy += st[2] + st[3]
                g, cost = self._new_round(rep, moe, st, t)
                rep.rounds[(s, moe)] = g
                rep.cc += st[2]
                done_f = rep.cdone.get("ffn", np.zeros(F))
                done_f = np.maximum(done_f, rep.cc) + cost
                rep.cdone["ffn"] = done_f
                rep.cdone[g] = float(done_f.max())
                rep.cc += st[3]
                t += st[3]
            rep.op += 1
        rep.chain = rep.cc
        rep.layer = self.model.layers
        self._batch_end(rep, t)

    def _resume(self, rep: ReplicaState) -> None:
        """Every round of the waiting MoE layer is complete: combine_recv in dispatch order, then go on."""
        t = rep.wait_t
        for g, st in zip(rep.wait_rounds, rep.stages):
            t = max(t, self.round_complete[g]) + st[4]
            rep.busy += st[4]
        rep.layer += 1
        self._advance(rep, t)

    def _batch_end(self, rep: ReplicaState, t: float) -> None:
        for rid in rep.rids:
            self.finish[rid] = t
            self.ttft[rid] = t - float(self.wl.arrival_s[rid])
        rep.rids = []
        if self.mode == "async":
            if self.assign == "round-robin":
                self._next_batch(rep, t)
            else:  # an event, so every request arriving by t is assigned before the replica takes its next batch
                self._push(t, _REPLICA, rep.d)
        else:
            self._sync_arrive(rep, t)

    # ------------------------------------------------------------------ sync mode

    def _sync_arrive(self, rep: ReplicaState, t: float) -> None:
        """Sync: a replica finished its step at t; the next step's layer-0 barrier."""
        wl = self.wl
        if wl.batches is not None and rep.d < len(wl.batches) and rep.batch_idx < len(wl.batches[rep.d]):
            # cam-run's worker sleeps until its batch's last request arrived, then enters the barrier (an empty
            # static batch: a step this replica ran without requests, as cam-run --assign records them).
            t = max([t] + [float(wl.arrival_s[r]) for r in wl.batches[rep.d][rep.batch_idx]])
        # --assign: the step starts as an event, after every request arriving by then has been assigned.
        self._barrier(t, self._sync_step if self.assign == "round-robin" else lambda u: self._push(u, _REPLICA, -1))

    def _sync_layer_arrive(self, rep: ReplicaState, t: float) -> None:
        self._barrier(t, self._sync_layer)

    def _barrier(self, t: float, release) -> None:
        self.barrier_t = max(self.barrier_t, t) if self.barrier_count else t
        self.barrier_count += 1
        if self.barrier_count == self.topo.D:
            self.barrier_count = 0
            release(self.barrier_t + self.cost.barrier)

    def _sync_step(self, t: float) -> None:
        wl = self.wl
        if wl.batches is not None:
            steps = max(len(b) for b in wl.batches)
            if self.steps >= steps:
                return
            batches = []
            for rep in self.reps:
                own = wl.batches[rep.d] if rep.d < len(wl.batches) else []
                batches.append(self._pieces(own[rep.batch_idx]) if rep.batch_idx < len(own) else [])
                rep.batch_idx += 1
        else:
            pending = [float(wl.arrival_s[rep.reqs[rep.next_req]]) for rep in self.reps
                       if rep.next_req < len(rep.reqs)]
            if not pending:
                if self._unassigned:  # --assign: the step starts when the next request arrives and is assigned
                    self._sync_idle = True
                return
            t = max(t, min(pending))  # nobody has anything: the step starts at the next arrival
            batches = [self._take_batch(rep, t) for rep in self.reps]
        self.steps += 1
        for rep, rids in zip(self.reps, batches):
            self._begin(rep, rids, t)
        self._sync_layer(t + self.step_overhead)

    def _sync_layer(self, t: float) -> None:
        for rep in self.reps:
            end = self._layer(rep, t)
            if end is not None:  # dense layer: done at `end`, on to the next barrier (or the step's end)
                self._advance(rep, end)

    # ------------------------------------------------------------------ FFN side

    def _publish(self, g: int, t: float) -> None:
        d = self.round_replica[g]
        self.published[d] += 1
        if self.trace is not None:
            self.trace["publish"].append((g, d, t))
        was = self.published[d] - 1
        wake = self.cost.wake
        for f in range(self.topo.F):
            if self.consumed[f][d] == was:  # d was not ready for f: it is now
                bisect.insort(self.ready[f], d)
                if not self.ffn_busy[f]:
                    self.ffn_busy[f] = True
                    if wake > 0:
                        self._push(t + wake, _WAKE, f)
                    elif self.batch_rows is None:
                        self._select(f, t)
                    else:
                        self._select_batch(f, t)

    def _rr_start(self, f: int) -> Optional[int]:
        """Index in FFN rank f's ready list where its round robin resumes (the first ready replica from rr_next,
        wrapping), or None when nothing is ready (the rank goes idle)."""
        lst = self.ready[f]
        if not lst:
            self.ffn_busy[f] = False
            return None
        i = bisect.bisect_left(lst, self.rr[f])
        return 0 if i == len(lst) else i

    def _select(self, f: int, t: float) -> None:
        """dispatch_recv of FFN rank f at t: round robin over ready replicas from rr_next (protocol §7)."""
        i = self._rr_start(f)
        if i is None:
            return
        lst = self.ready[f]
        d = lst[i]
        consumed = self.consumed[f]
        k = consumed[d]
        g = self.rounds_of[d][k]
        pieces = self.round_chunks[g].get(f) if self.round_chunks[g] else None
        if pieces:
            prog = self.progress[f]
            ci = prog.get(d, 0)
            cost = pieces[ci]
            last = ci == len(pieces) - 1
            if last:
                del prog[d]
            else:
                prog[d] = ci + 1
        else:
            cost = self.round_cost[g][f]
            last = True
        if last:
            consumed[d] = k + 1
            if k + 1 == self.published[d]:
                del lst[i]
        self.rr[f] = d + 1
        self.ffn_time[f] += cost
        self.items += 1
        if self.trace is not None:
            self.trace["items"].append((f, d, g, t, t + cost, last))
        heapq.heappush(self.heap, (t + cost, next(self._order), _FFN_DONE, f, g if last else -1))

    def _select_batch(self, f: int, t: float) -> None:
        """Snapshot batching: dispatch_recv of FFN rank f at t takes the ready items in the single-item mode's order
        (round robin over ready replicas from rr_next, each replica's rounds in order, a chunked round chunk by
        chunk) while they fit ``batch_rows`` rows (the first always), without waiting for anything not yet
        published, and serves them as one launch: the work-item formula over the summed rows, with the experts
        touched counted once per (layer, local expert) group. Every taken item's round completes at the launch's
        end; the next selection starts after the last replica served."""
        i = self._rr_start(f)
        if i is None:
            return
        lst = self.ready[f]
        consumed, prog = self.consumed[f], self.progress[f]
        budget = self.batch_rows
        total, taken, done, groups, last_d = 0, [], [], {}, lst[i]
        full = False
        for d in lst[i:] + lst[:i]:
            while consumed[d] < self.published[d]:
                k = consumed[d]
                g = self.rounds_of[d][k]
                rows, active, pairs, layer = self.round_rows[g]
                pieces = pairs.get(f)
                if pieces:
                    ci = prog.get(d, 0)
                    m, a = pieces[ci]
                    last = ci == len(pieces) - 1
                else:
                    m, a, last = rows[f], active[f], True
                if taken and total + m > budget:
                    full = True
                    break
                if pieces:
                    if last:
                        del prog[d]
                    else:
                        prog[d] = ci + 1
                if last:
                    consumed[d] = k + 1
                    done.append(g)
                total += m
                groups[layer] = groups.get(layer, 0.0) + a
                taken.append((d, g, last))
                last_d = d
                if not last:
                    break  # a round's next chunk is the next selection's, as in the single-item mode
            if full:
                break
        lst[:] = [d for d in lst if consumed[d] < self.published[d]]
        slots = self.R if self.place is None else 0
        touched = 0.0
        for layer, a in groups.items():
            cap = slots or int(self.place[layer].slots_per_rank[f])
            touched += min(float(cap), a)
        cost = self.cost.item(float(total), touched)
        self.rr[f] = last_d + 1
        self.ffn_time[f] += cost
        self.items += len(taken)
        self.launches += 1
        if self.trace is not None:
            for d, g, last in taken:
                self.trace["items"].append((f, d, g, t, t + cost, last))
            self.trace.setdefault("launches", []).append((f, t, [d for d, _, _ in taken], total))
        heapq.heappush(self.heap, (t + cost, next(self._order), _FFN_DONE, f, tuple(done)))

    def _round_complete(self, g: int, t: float) -> None:
        self.round_complete[g] = t
        rep = self.reps[self.round_replica[g]]
        if self.two_stage:
            if rep.wait_g == g:
                rep.wait_g = -1
                self._two_stage_run(rep, rep.wait_t)
        elif rep.wait_rounds and rep.wait_rounds[-1] == g:
            self._resume(rep)

    # ------------------------------------------------------------------ output

    def _raw(self) -> dict:
        return {
            "ttft_s": self.ttft,
            "finish_s": self.finish,
            "makespan_s": float(np.nanmax(self.finish)),
            "ffn_busy_s": list(self.ffn_time),
            "attention_busy_s": [rep.busy for rep in self.reps],
            "critical_path_s": critical_path([rep.chain for rep in self.reps], self.ffn_time),
            "replica_chain_s": [rep.chain for rep in self.reps],
            "rounds": len(self.round_replica),
            "work_items": self.items,
            "launches": self.items if self.batch_rows is None else self.launches,
            "routed_rows": self.total_rows,
            "batches": sum(rep.batches_run for rep in self.reps),
        }
