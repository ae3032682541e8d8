"""The colocated expert-parallel deployment AFD is measured against (``cam-sim --mode colocated``, docs/sim.md §8).

N devices; every device is one Attention replica *and* one expert shard (the contiguous placement over N ranks,
or ``--placement``). A device runs one timeline: its attention, its shared experts and the routed experts of every
device's tokens that landed on its shard take turns, nothing overlaps. Per MoE layer and micro-batch:

    attention (each device, its own tokens)
    dispatch all-to-all        a collective: starts when the last device arrives
    routed experts (W1 + W2)   each device, the rows of all devices routed to its shard, one grouped launch
    combine all-to-all         a collective again
    shared experts, combine    each device, its own tokens

Dense layers need no collective: a device runs them as soon as its previous layer ended, so the next collective
absorbs the skew. The batches of one step are formed together (the collectives make the devices lockstep, as in
sync AFD): a device without requests in a step still joins every collective and still serves the experts of the
others' tokens. Nothing is chunked (the colocated GMM sizes its buffer to the step).

An all-to-all costs the ``all_to_all`` op of the cost file with ``net_byte`` = the largest volume one device sends
or receives in it: dispatch ``H + 4`` bytes (int8 row + scale) and combine ``2 H`` bytes (bf16) per routed row that
crosses devices (a row routed to its own device's shard does not). This is the per-rank link model of the AFD
modes (docs/sim.md §2): no incast, no fabric.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .engine import Simulation, ReplicaState, critical_path
from .presets import assign_replica
from .workload import split_pieces


class ColocatedSimulation(Simulation):
    """``Simulation`` for ``mode="colocated"``: N = F devices, each an expert shard; D data-parallel Attention
    replicas of P tensor-parallel devices each (D * P = N; P = 1: every device its own replica)."""

    def __init__(self, model, topo, workload, costs, **kw):
        if topo.P == 1 and topo.D != topo.F:
            raise ValueError(f"colocated mode: every device is a replica and an expert shard, so D must equal F "
                             f"(the device count N), got D={topo.D}, F={topo.F}")
        if topo.D * topo.P != topo.F:
            raise ValueError(f"colocated mode: every device is a rank of one of D replicas of P tensor-parallel "
                             f"ranks and an expert shard, so D * P must equal F (the device count N; with P = 1 "
                             f"every device is its own replica), got D={topo.D}, P={topo.P}, F={topo.F}")
        if kw.get("batch_rows") is not None:
            raise ValueError("colocated mode: --batch-items is an FFN-side policy of AFD; a colocated device serves "
                             "every row of a collective in one launch already")
        if kw.get("mode", "colocated") != "colocated":
            raise ValueError(f"ColocatedSimulation runs mode 'colocated', got {kw['mode']!r}")
        kw["mode"] = "async"  # the base class's checks; the schedule below is its own
        super().__init__(model, topo, workload, costs, **kw)
        self.mode = "colocated"
        c = self.cost.c
        self._a2a = c.op("all_to_all")
        # The expert work of one device per collective: the FFN work item's compute terms (receive = local reorder,
        # W1, W2), without combine_send's link term, which the combine all-to-all carries.
        self._expert_ops = [term for term in self.cost._ffn if term[0] is not c.op("combine_send")] \
            if "combine_send" in c.ops else list(self.cost._ffn)

    # ------------------------------------------------------------------ costs

    def _expert_seconds(self, rows: np.ndarray, active: np.ndarray) -> np.ndarray:
        m = rows.astype(np.float64)
        a = np.asarray(active, dtype=np.float64)
        total = np.zeros_like(m)
        for op, fpr, bpr, bpe, _ in self._expert_ops:
            t = op.fixed_s + op.per_row_s * m + np.where(m > 0, op.nonempty_s, 0.0)
            comp = fpr * m / (op.tflops * 1e12) if op.tflops else 0.0
            mem = (bpr * m + bpe * a) / (op.gbps * 1e9) if op.gbps else 0.0
            total += t + np.maximum(comp, mem)
        return total

    def _all_to_all(self, sent: np.ndarray, received: np.ndarray) -> float:
        op = self._a2a
        t = op.fixed_s + (op.nonempty_s if sent.any() else 0.0)
        if op.net_gbps:
            t += max(float(sent.max()), float(received.max())) / (op.net_gbps * 1e9)
        self.collective_time += t  # every device takes part in every collective
        return t

    def _rank_rows(self, moe_layer: int, tokens: int):
        """Rows landing on each device's shard for a collective of ``tokens`` tokens, and experts they touch."""
        slots = tokens * self.model.top_k
        if self.place is not None:
            rows, active = self.place[moe_layer].split(self._draw(slots, self.popularity[moe_layer]))
        else:
            rows = self._draw(slots, self.rank_popularity[moe_layer])
            active = self._active(rows.astype(np.float64))
        return rows, active

    def _parts(self, pieces: List[tuple]) -> tuple:
        """(dense layer, MoE layer before the dispatch all-to-all, shared experts, combine_recv) seconds of one
        device for a micro-batch of pieces ``(request, tokens, prefix)``: the AFD stage costs, dispatch_send without
        its link bytes."""
        attn, dense, shared, send, recv = self.cost.stage_parts([n for _, n, _ in pieces], link=False,
                                                                prefix=[p for _, _, p in pieces])
        return attn + dense, attn + send, shared, recv

    # ------------------------------------------------------------------ run

    def run(self) -> dict:
        m, wl, N, F = self.model, self.wl, self.topo.D, self.topo.F
        self.ttft = np.full(wl.num_requests, np.nan)
        self.finish = np.full(wl.num_requests, np.nan)
        self.reps = [ReplicaState(d, []) for d in range(N)]
        order = np.argsort(wl.arrival_s, kind="stable").tolist()
        if self.assign == "round-robin":
            for rid in order:
                self.reps[int(wl.replica[rid])].reqs.append(rid)
        self._pending = [] if self.assign == "round-robin" else order  # --assign: not yet assigned, arrival order
        self.ffn_time = np.zeros(F)
        self.collectives = 0
        self.collective_time = 0.0
        self.total_rows = 0
        self.step_count = 0
        t = 0.0
        K, H = m.top_k, m.hidden
        cross = (F - 1) / F  # rows routed to the device's own shard stay local
        steps = max(len(b) for b in wl.batches) if wl.batches is not None else None
        while True:
            if wl.batches is not None:
                if self.step_count >= steps:
                    break
                batches = []
                for rep in self.reps:
                    own = wl.batches[rep.d] if rep.d < len(wl.batches) else []
                    b = self._pieces(own[self.step_count]) if self.step_count < len(own) else []
                    batches.append(b)
                    if b:  # cam-run's ranks start a step once their batch's last request arrived
                        t = max(t, max(float(wl.arrival_s[r]) for r, _, _ in b))
            else:
                self._assign_until(t)
                waiting = [float(wl.arrival_s[rep.reqs[rep.next_req]]) for rep in self.reps
                           if rep.next_req < len(rep.reqs)]
                if not waiting:
                    if not self._pending:
                        break
                    t = max(t, float(wl.arrival_s[self._pending[0]]))
                    continue
                t = max(t, min(waiting))
                self._assign_until(t)
                batches = [self._take_batch(rep, t) for rep in self.reps]
            self.step_count += 1
            t = self._step(batches, t + self.step_overhead, K, H, cross)
        unfinished = int(np.isnan(self.ttft).sum())
        if unfinished:
            raise RuntimeError(f"simulation ended with {unfinished} request(s) unserved (a schedule bug)")
        return self._raw()

    def _assign_until(self, t: float) -> None:
        """--assign: give every request arrived by t to a device, each by the policy as it stood at its arrival
        (what was finished by then is known: every earlier step has ended)."""
        if self.assign == "round-robin":
            return
        wl, finish = self.wl, self.finish
        while self._pending and float(wl.arrival_s[self._pending[0]]) <= t:
            rid = self._pending.pop(0)
            a = float(wl.arrival_s[rid])
            for r in self.reps:
                r.assigned = [x for x in r.assigned if not finish[x] <= a]
            rep = self.reps[assign_replica(self.assign, [wl.length[r.assigned].tolist() for r in self.reps])]
            rep.reqs.append(rid)
            rep.assigned.append(rid)

    def _step(self, batches, t: float, K: int, H: int, cross: float) -> float:
        # Timelines per replica (its P tensor-parallel devices run it in step); expert shards per device.
        N = self.topo.D
        stages = []
        for rep, pieces in zip(self.reps, batches):
            parts = [(sum(n for _, n, _ in s),) + self._parts(s)
                     for s in split_pieces(pieces, self.topo.ubatches, self.topo.ubatch_split)] if pieces else []
            stages.append(parts)
            rep.rids = self._finishing(pieces)
            if pieces:
                rep.batches_run += 1
        S = max(len(s) for s in stages)
        empty = (0, 0.0, 0.0, 0.0, 0.0)
        stages = [s + [empty] * (S - len(s)) for s in stages]
        busy = np.zeros(N)
        if self.topo.overlap:
            td = self._layers_overlapped(stages, S, t, busy, K, H, cross)
        else:
            td = self._layers_serial(stages, S, t, busy, K, H, cross)
        for d, rep in enumerate(self.reps):
            rep.busy += float(busy[d])
            for rid in rep.rids:
                self.finish[rid] = float(td[d])
                self.ttft[rid] = float(td[d]) - float(self.wl.arrival_s[rid])
            rep.rids = []
        # The step ends for everyone at the last device's end: the next step's first collective waits for it.
        return float(td.max())

    def _layers_serial(self, stages, S: int, t: float, busy: np.ndarray, K: int, H: int, cross: float) -> np.ndarray:
        """A step's layers with nothing overlapping on a device: per micro-batch, attention, the dispatch
        all-to-all, the experts, the combine all-to-all, then shared experts and combine. Returns each replica's
        end."""
        m, N, P = self.model, self.topo.D, self.topo.P
        td = np.full(N, t)
        for layer in range(m.layers):
            if layer < m.first_dense:
                for d in range(N):
                    dense = sum(st[1] for st in stages[d])
                    td[d] += dense
                    busy[d] += dense
                continue
            moe = layer - m.first_dense
            for s in range(S):
                tokens = np.array([stages[d][s][0] for d in range(N)], dtype=np.float64)
                attn = np.array([stages[d][s][2] for d in range(N)])
                td += attn
                busy += attn
                rows, active = self._rank_rows(moe, int(tokens.sum()))
                self.total_rows += int(tokens.sum()) * K
                fan = self.cost.fanout
                # dispatch: a device sends its tokens' rows (1/P of its replica's) to the shards they hit, a shard
                # receives its rows
                start = float(td.max()) + self._all_to_all(tokens / P * fan * (H + 4.0) * cross,
                                                           rows * (H + 4.0) * cross)
                expert = self._expert_seconds(rows, active)
                self.ffn_time += expert
                done = start + expert
                end = float(done.max()) + self._all_to_all(rows * 2.0 * H * cross,
                                                           tokens / P * K * 2.0 * H * cross)
                tail = np.array([stages[d][s][3] + stages[d][s][4] for d in range(N)])
                td = end + tail
                busy += tail
                self.collectives += 1
        return td

    def _layers_overlapped(self, stages, S: int, t: float, busy: np.ndarray, K: int, H: int,
                           cross: float) -> np.ndarray:
        """A step's layers with the two-micro-batch overlap of DeepSeek-V3's prefill (arXiv 2412.19437 §3.4.1: two
        micro-batches of similar work, the attention and MoE of one overlapping the dispatch and combine of the
        other): each device has a compute stream and the collectives a communication stream. Per MoE layer the
        compute stream runs every micro-batch's attention, then each one's experts (once its dispatch is done), then
        each one's shared experts and combine (once its combine all-to-all is done); the communication stream runs
        the dispatches, then the combines, in micro-batch order, each a collective that starts when every device is
        ready. Returns each replica's end (its devices step together)."""
        m, N, P, F = self.model, self.topo.D, self.topo.P, self.topo.F
        of = np.arange(F) // P  # the replica of each device
        tc = np.full(F, t)  # compute stream of each device
        comm = t  # the communication stream (collectives are global)
        fan = self.cost.fanout
        for layer in range(m.layers):
            if layer < m.first_dense:
                dense = np.array([sum(st[1] for st in stages[d]) for d in range(N)])
                tc += dense[of]
                busy += dense
                continue
            moe = layer - m.first_dense
            ready, work = [], []
            for s in range(S):
                attn = np.array([stages[d][s][2] for d in range(N)])
                tc += attn[of]
                busy += attn
                ready.append(float(tc.max()))
            dispatched = []
            for s in range(S):
                tokens = np.array([stages[d][s][0] for d in range(N)], dtype=np.float64)
                rows, active = self._rank_rows(moe, int(tokens.sum()))
                self.total_rows += int(tokens.sum()) * K
                comm = max(comm, ready[s]) + self._all_to_all(tokens / P * fan * (H + 4.0) * cross,
                                                               rows * (H + 4.0) * cross)
                dispatched.append(comm)
                work.append((tokens, rows, self._expert_seconds(rows, active)))
            expert_done = []
            for s in range(S):
                expert = work[s][2]
                self.ffn_time += expert
                tc = np.maximum(tc, dispatched[s]) + expert
                expert_done.append(float(tc.max()))
            for s in range(S):
                tokens, rows, _ = work[s]
                comm = max(comm, expert_done[s]) + self._all_to_all(rows * 2.0 * H * cross,
                                                                     tokens / P * K * 2.0 * H * cross)
                tail = np.array([stages[d][s][3] + stages[d][s][4] for d in range(N)])
                tc = np.maximum(tc, comm) + tail[of]
                busy += tail
                self.collectives += 1
        return np.array([float(tc[of == d].max()) for d in range(N)])

    def _device_compute(self) -> List[float]:
        """Each device's own compute: its replica's (per rank) and its shard's experts."""
        P = self.topo.P
        return [self.reps[i // P].busy + float(e) for i, e in enumerate(self.ffn_time)]

    def _device_work(self) -> List[float]:
        """Each device's own work: its compute and the collectives it takes part in, after them on one timeline,
        beside them with the overlap (compute and communication streams)."""
        comm = self.collective_time
        return [max(c, comm) if self.topo.overlap else c + comm for c in self._device_compute()]

    def _raw(self) -> dict:
        return {
            "ttft_s": self.ttft,
            "finish_s": self.finish,
            "makespan_s": float(np.nanmax(self.finish)),
            "ffn_busy_s": self.ffn_time.tolist(),
            "attention_busy_s": [rep.busy for rep in self.reps],
            "critical_path_s": critical_path([], self._device_work()),
            # Per device, its compute alone (cam.run.bound's colocated bound reads it as the device chain).
            "replica_chain_s": self._device_compute(),
            "rounds": self.collectives,
            "work_items": self.collectives * self.topo.F,
            "launches": self.collectives * self.topo.F,
            "routed_rows": self.total_rows,
            "batches": sum(rep.batches_run for rep in self.reps),
        }
