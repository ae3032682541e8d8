"""Threads-as-ranks harness for the data-plane tests: every rank is a thread with its own cam.Comm (in-process
transport), every join has a deadline, and an exception in any rank is re-raised in the test."""

from __future__ import annotations

import faulthandler
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import torch

import cam
from _window_layout import WindowLayout
from cam.reference.dispatch_combine import chunk_bounds, round_trip_plane
from cam.reference.dynamic_quant import dynamic_quant


def unique_group(tag: str = "t") -> str:
    return f"{tag}-{uuid.uuid4().hex[:10]}"


def run_ranks(topo: cam.Topology, bodies: Dict[int, Callable[[cam.Comm], object]], *, timeout: float = 60.0,
              group: Optional[str] = None, rank_kw: Optional[Dict[int, dict]] = None,
              **comm_kw) -> Tuple[Dict[int, object], Dict[int, BaseException]]:
    """Runs ``bodies[rank](comm)`` on one thread per rank of the plane (ranks without a body only join and wait
    for the others). ``rank_kw[rank]`` overrides Comm arguments for one rank. Returns (results, errors) per
    rank; fails the test if a rank is still running at the deadline."""
    group = group or unique_group()
    results: Dict[int, object] = {}
    errors: Dict[int, BaseException] = {}
    done = threading.Event()
    finished = []
    lock = threading.Lock()

    def main(rank: int) -> None:
        try:
            with cam.Comm(topo, rank, group=group, **{**comm_kw, **(rank_kw or {}).get(rank, {})}) as comm:
                body = bodies.get(rank)
                if body is not None:
                    results[rank] = body(comm)
                else:
                    # an idle rank: keep the comm open until the others are done
                    done.wait(timeout)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            errors[rank] = e
        finally:
            with lock:
                finished.append(rank)
                if len([r for r in finished if r in bodies]) == len(bodies):
                    done.set()

    threads = [threading.Thread(target=main, args=(r,), daemon=True, name=f"rank{r}") for r in range(topo.world_size)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    if alive:
        # Where the live ranks wait, and what ended the others: a rank that raised or returned early is usually why
        # the rest still wait, and its error is otherwise lost behind this one.
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        ended = {r: (repr(errors[r]) if r in errors else "returned") for r in sorted(finished)}
        raise AssertionError(f"ranks still running after {timeout} s: {alive}; the ranks that ended: {ended}")
    return results, errors


def raise_first(errors: Dict[int, BaseException]) -> None:
    if errors:
        rank = min(errors)
        raise AssertionError(f"rank {rank} failed: {errors[rank]!r}") from errors[rank]


def expert_fn(quantized: bool, dtype: torch.dtype):
    """A per-expert function that makes every routing mistake visible: dequantize, scale by (global expert + 1)."""

    def fn(e: torch.Tensor, rows: torch.Tensor, scales: Optional[torch.Tensor]) -> torch.Tensor:
        v = rows.to(torch.float32)
        if quantized:
            v = v * scales[:, None]
        return (v * (e.to(torch.float32) + 1)[:, None]).to(dtype)

    return fn


def slot_experts(comm: cam.Comm, layer: int) -> torch.Tensor:
    """[R] int64: the routed expert each local slot of this FFN rank holds in ``layer`` (the FFN side's view of
    the placement; the contiguous one without a table)."""
    topo, f = comm.topology, comm.rank - comm.topology.A
    if comm.placement is None:
        return torch.arange(topo.R) + f * topo.R
    return torch.tensor(comm.placement.slot_experts(layer, f), dtype=torch.int64)


@dataclass
class Round:
    layer: int
    x: torch.Tensor
    ids: torch.Tensor
    w: torch.Tensor


def make_rounds(topo: cam.Topology, counts: List[List[int]], *, seed: int = 0, dtype=torch.bfloat16,
                ids_fn=None, layers=None) -> List[List[Round]]:
    """rounds[a][r] for Attention rank a; counts[a][r] = B of that round."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for a, bs in enumerate(counts):
        rounds = []
        for r, b in enumerate(bs):
            x = (torch.randn((b, topo.H), generator=g) * 3).to(dtype)
            if ids_fn is not None:
                ids = ids_fn(a, r, b).to(torch.int32)
            else:
                ids = torch.randint(-1, topo.E, (b, topo.K), generator=g, dtype=torch.int32)
            w = torch.rand((b, topo.K), generator=g, dtype=torch.float32)
            layer = layers[a][r] if layers is not None else r % topo.L
            rounds.append(Round(layer, x, ids, w))
        out.append(rounds)
    return out


@dataclass
class Served:
    replica: int
    seq: int
    layer: int
    rows: torch.Tensor
    scales: torch.Tensor
    counts: torch.Tensor
    work_item: torch.Tensor
    first_row: int = 0   # the chunk's first row in its round (chunk words of the work item)
    round_rows: int = 0  # the round's rows for this FFN rank

    @property
    def last(self) -> bool:
        return self.first_row + self.rows.shape[0] == self.round_rows


@dataclass
class FfnLog:
    served: List[Served] = field(default_factory=list)
    empties: int = 0
    plane_id: int = 0  # Comm.plane_id of the rank: word 7 of every work item it produced
    batches: List[List[int]] = field(default_factory=list)  # batched mode: the replicas of each non-empty batch


def ffn_server(topo: cam.Topology, n_items: int, *, deadline_s: float = 60.0, on_item=None, dtype=torch.bfloat16):
    """FFN body: serve until n_items rounds went through combine_send (a round delivered in chunks counts once, at
    its last chunk); empty items pass through combine_send too (a no-op)."""
    chunk = WindowLayout(topo).work_item_chunk_off

    def body(comm: cam.Comm) -> FfnLog:
        log = FfnLog(plane_id=comm.plane_id)
        fn = expert_fn(topo.quantized, dtype)
        end = time.monotonic() + deadline_s
        while sum(s.last for s in log.served) < n_items:
            assert time.monotonic() < end, f"FFN rank {comm.rank} served {len(log.served)} items, not {n_items} rounds"
            ex, sc, cnt, wi = cam.ops.dispatch_recv(comm)
            view = cam.WorkItem(wi)
            out = torch.zeros((topo.recv_rows, topo.H), dtype=dtype)
            if view.kind == 1:
                n = view.rows
                e = torch.repeat_interleave(slot_experts(comm, view.layer), cnt)
                out[:n] = fn(e, ex[:n], sc[:n] if topo.quantized else None)
                log.served.append(Served(view.replica, view.seq, view.layer, ex[:n].clone(),
                                         sc[:n].clone() if topo.quantized else None, cnt.clone(), wi.clone(),
                                         int(wi[chunk]), int(wi[chunk + 1])))
                if on_item is not None:
                    on_item(comm, log)
            else:
                log.empties += 1
            cam.ops.combine_send(comm, out, wi)
        return log

    return body


def serve_batch(topo: cam.Topology, comm: cam.Comm, row_budget: int, log: FfnLog, dtype=torch.bfloat16,
                before_combine=None) -> int:
    """One batched dispatch_recv -> expert_fn per row (its expert from the group table) -> one batched combine_send.
    Appends each item to log.served (as the one-item server would) and the batch's replicas to log.batches;
    returns the number of work items in the batch."""
    chunk = WindowLayout(topo).work_item_chunk_off
    fn = expert_fn(topo.quantized, dtype)
    ex, sc, groups, origin, items = cam.ops.dispatch_recv(comm, row_budget=row_budget)
    out = torch.zeros((row_budget, topo.H), dtype=dtype)
    n = int(groups[:, 2].sum())
    if n:
        held = torch.stack([slot_experts(comm, int(l)) for l in groups[:, 0].tolist()])  # [groups, R]
        e = torch.repeat_interleave(held[torch.arange(groups.shape[0]), groups[:, 1]], groups[:, 2])
        out[:n] = fn(e, ex[:n], sc[:n] if topo.quantized else None)
    base, taken = 0, []
    for i in range(items.shape[0]):
        wi = items[i]
        view = cam.WorkItem(wi)
        if view.kind != 1:
            continue
        rows = view.rows
        taken.append(view.replica)
        g = groups[i * topo.R:(i + 1) * topo.R]
        assert torch.all(g[:, 0] == view.layer) and torch.equal(g[:, 2], view.counts(topo.R)), \
            "group table != work item"
        log.served.append(Served(view.replica, view.seq, view.layer, ex[base:base + rows].clone(),
                                 sc[base:base + rows].clone() if topo.quantized else None, view.counts(topo.R).clone(),
                                 wi.clone(), int(wi[chunk]), int(wi[chunk + 1])))
        base += rows
    assert base == n
    if taken:
        log.batches.append(taken)
    else:
        log.empties += 1
    if before_combine is not None:
        before_combine(comm, ex, sc, groups, origin, items, out)
    cam.ops.combine_send(comm, out, items)
    return len(taken)


def capture_batched_loop(topo: cam.Topology, comm: cam.Comm):
    """A batched FFN loop (dispatch_recv over the whole receive budget -> combine_send of zero rows) captured once on
    the rank's stream, for tests that replay it: returns (graph, the receive outputs, the zero rows)."""
    import importlib

    from cam.graph import Graph

    budget = topo.recv_rows
    specs = importlib.import_module("cam.ops.dispatch_recv").batch_output_specs(comm, budget)
    recv = tuple(torch.zeros(s, dtype=d) for d, s in specs)
    out = torch.zeros((budget, topo.H), dtype=torch.bfloat16)
    graph = Graph()
    # Ranks here are threads of one process: under GLOBAL another rank's synchronize would break this capture.
    with graph.capture(stream=comm.stream, mode="thread_local"):
        cam.ops.dispatch_recv(comm, row_budget=budget, out=recv)
        cam.ops.combine_send(comm, out, recv[4])
    return graph, recv, out


def ffn_batch_server(topo: cam.Topology, n_items: int, row_budget: int, *, deadline_s: float = 60.0,
                     dtype=torch.bfloat16, start=None, before_combine=None):
    """FFN body in batched mode: serve until n_items rounds completed (at their last chunks). ``start`` (an
    Event) is waited for before the first poll, so a test can make every replica ready first."""

    def body(comm: cam.Comm) -> FfnLog:
        log = FfnLog(plane_id=comm.plane_id)
        if start is not None:
            assert start.wait(deadline_s), "the Attention ranks never published"
        end = time.monotonic() + deadline_s
        while sum(s.last for s in log.served) < n_items:
            assert time.monotonic() < end, f"FFN rank {comm.rank} served {len(log.served)} items, not {n_items} rounds"
            serve_batch(topo, comm, row_budget, log, dtype, before_combine)
        return log

    return body


def attention_body(rounds: List[Round], *, in_flight: int = 1):
    """Attention body: dispatch and combine its rounds, keeping up to `in_flight` rounds dispatched ahead."""

    def body(comm: cam.Comm) -> List[torch.Tensor]:
        outs = []
        sent = 0
        for r in range(len(rounds)):
            while sent < len(rounds) and sent - r < in_flight:
                rd = rounds[sent]
                cam.ops.dispatch_send(comm, rd.x, rd.ids, rd.layer)
                sent += 1
            outs.append(cam.ops.combine_recv(comm, rounds[r].ids, rounds[r].w))
        return outs

    return body


def check_against_golden(topo: cam.Topology, rounds: List[List[Round]], results, dtype=torch.bfloat16,
                         placement=None) -> None:
    """Attention outputs == golden round trip of the whole plane (routed by ``placement``, None: contiguous, or a
    list of one per round); every FFN payload and metadata == golden dispatch."""
    fn = expert_fn(topo.quantized, dtype)
    for r in range(len(rounds[0])):
        golden = round_trip_plane(topo, [(rounds[a][r].x, rounds[a][r].ids, rounds[a][r].w) for a in range(topo.A)],
                                  fn, quant_fn=dynamic_quant, global_ids=True,
                                  placement=placement[r] if isinstance(placement, list) else placement,
                                  layer=[rounds[d * topo.P][r].layer for d in range(topo.D)])
        for a in range(topo.A):
            got = results[a][r]
            assert got.dtype == dtype and torch.equal(got, golden["out"][a]), f"combine output of rank {a} round {r}"
        for d in range(topo.D):
            for f in range(topo.F):
                log = results[topo.A + f]
                items = [s for s in log.served if s.replica == d and s.seq == r + 1]  # in the order served
                gd = golden["dispatch"][(d, topo.A + f)]
                n = gd["rows"].shape[0]
                # the round's work items are exactly the golden chunks of its rows, each once, in order
                bounds = chunk_bounds(gd["counts"].tolist(), topo.recv_rows)
                assert [(s.first_row, s.first_row + s.rows.shape[0]) for s in items] == bounds, (d, r, f)
                assert len(bounds) <= topo.max_chunks_per_round
                for item, (lo, hi) in zip(items, bounds):
                    assert item.layer == rounds[d * topo.P][r].layer and item.round_rows == n
                    want = torch.bincount(gd["local_expert"][lo:hi], minlength=topo.R)
                    assert torch.equal(item.counts, want), (d, r, f, lo)
                    assert torch.equal(item.rows, gd["rows"][lo:hi]), (d, r, f, lo)
                    if topo.quantized:
                        assert torch.equal(item.scales, gd["scales"][lo:hi]), (d, r, f, lo)
                    view = cam.WorkItem(item.work_item)
                    assert view.rows == hi - lo and view.ffn_rank == topo.A + f
                    assert view.fingerprint == log.plane_id and torch.equal(view.counts(topo.R), want)
    assert len({results[topo.A + f].plane_id for f in range(topo.F)}) == 1, "FFN ranks disagree on the plane id"


def run_round_trip(topo: cam.Topology, rounds: List[List[Round]], *, in_flight: int = 1, timeout: float = 90.0,
                   dtype=torch.bfloat16, **comm_kw):
    bodies = {a: attention_body(rounds[a], in_flight=in_flight) for a in range(topo.A)}
    for f in range(topo.F):
        bodies[topo.A + f] = ffn_server(topo, topo.D * len(rounds[0]), dtype=dtype)
    results, errors = run_ranks(topo, bodies, timeout=timeout, dtype=dtype, **comm_kw)
    raise_first(errors)
    check_against_golden(topo, rounds, results, dtype=dtype, placement=comm_kw.get("placement"))
    return results


# ----------------------------------------------------------------------------- the real FFN (W1 then W2) and its golden

@dataclass
class ExpertSet:
    """Every routed expert's int8 W1 ``[E, H, 2I]`` and W2 ``[E, I, H]`` with fp32 scales, per layer, as ND tensors
    drawn here (the golden reads these, never the cam objects built from them)."""
    w1: List[torch.Tensor]
    s1: List[torch.Tensor]
    w2: List[torch.Tensor]
    s2: List[torch.Tensor]
    swiglu_limit: Optional[float] = None

    def experts(self) -> "cam.ExpertWeights":
        return cam.ExpertWeights(cam.LayerWeights(self.w1, self.s1), cam.LayerWeights(self.w2, self.s2),
                                 swiglu_limit=self.swiglu_limit)


def expert_set(topo: cam.Topology, inter: int = 16, *, seed: int = 0, swiglu_limit=None) -> ExpertSet:
    """Random int8 weights; scales small enough that W1's SwiGLU stays in its interesting range."""
    g = torch.Generator().manual_seed(seed)

    def w(k, n):
        return [torch.randint(-128, 128, (topo.E, k, n), generator=g, dtype=torch.int8) for _ in range(topo.L)]

    def s(n, scale):
        return [(torch.rand(topo.E, n, generator=g) * scale + scale / 10).float() for _ in range(topo.L)]

    return ExpertSet(w(topo.H, 2 * inter), s(2 * inter, 2e-3), w(inter, topo.H), s(topo.H, 5e-2), swiglu_limit)


def real_expert_fn(ws: ExpertSet, layer: int):
    """round_trip_plane's expert function for layer ``layer``: cam.reference's W1 then W2 of each row's global
    expert (rows are independent: W1 quantizes per row)."""
    from cam.reference import gmm as ref

    def fn(e: torch.Tensor, rows: torch.Tensor, scales: Optional[torch.Tensor]) -> torch.Tensor:
        out = torch.zeros((rows.shape[0], ws.w2[layer].shape[2]), dtype=torch.bfloat16)
        for u in torch.unique(e).tolist():
            idx = (e == u).nonzero().flatten()
            counts = torch.tensor([idx.numel()], dtype=torch.int64)
            y, ys, _ = ref.gmm_swiglu_quant_multi_layer(rows[idx], scales[idx], [ws.w1[layer][u:u + 1]],
                                                        [ws.s1[layer][u:u + 1]], counts, 0,
                                                        swiglu_limit=ws.swiglu_limit)
            out[idx] = ref.gmm_multi_layer(y, ys, [ws.w2[layer][u:u + 1]], [ws.s2[layer][u:u + 1]], counts, 0)
        return out

    return fn


def real_ffn_step(comm: cam.Comm, weights: "cam.FfnWeights", log: FfnLog) -> bool:
    """One dispatch_recv -> W1 -> W2 -> combine_send with the real GMM ops over ``weights`` (an empty item goes
    through combine_send as zeros). Returns whether it served a work item (appended to ``log``)."""
    topo = comm.topology
    chunk = WindowLayout(topo).work_item_chunk_off
    ex, sc, cnt, wi = cam.ops.dispatch_recv(comm)
    view = cam.WorkItem(wi)
    if view.kind != 1:
        log.empties += 1
        cam.ops.combine_send(comm, torch.zeros((topo.recv_rows, topo.H), dtype=comm.dtype), wi)
        return False
    y, ys = cam.ops.gmm_swiglu_quant_multi_layer(ex, sc, weights.w1, cnt, view.layer_index,
                                                 swiglu_limit=weights.swiglu_limit)
    out = cam.ops.gmm_multi_layer(y, ys, weights.w2, cnt, view.layer_index)
    n = view.rows
    log.served.append(Served(view.replica, view.seq, view.layer, ex[:n].clone(), sc[:n].clone(), cnt.clone(),
                             wi.clone(), int(wi[chunk]), int(wi[chunk + 1])))
    cam.ops.combine_send(comm, out, wi)
    return True


def real_ffn_server(n_items: int, weights: "cam.FfnWeights", *, deadline_s: float = 90.0, log: Optional[FfnLog] = None):
    """FFN body with the real W1/W2: serve until n_items more rounds completed (at their last chunks)."""

    def body(comm: cam.Comm) -> FfnLog:
        out = log if log is not None else FfnLog(plane_id=comm.plane_id)
        goal = sum(s.last for s in out.served) + n_items
        end = time.monotonic() + deadline_s
        while sum(s.last for s in out.served) < goal:
            assert time.monotonic() < end, f"FFN rank {comm.rank} did not complete {n_items} rounds"
            real_ffn_step(comm, weights, out)
        return out

    return body


def check_real_rounds(topo: cam.Topology, rounds: List[List[Round]], outs: Dict[int, List[torch.Tensor]],
                      ws: ExpertSet, tables: list) -> None:
    """Every Attention rank's combine output of round r == the golden round trip with the real experts under
    ``tables[r]`` (every replica of a round on one layer)."""
    for r, table in enumerate(tables):
        layer = rounds[0][r].layer
        assert all(rounds[a][r].layer == layer for a in range(topo.A))
        golden = round_trip_plane(topo, [(rounds[a][r].x, rounds[a][r].ids, rounds[a][r].w) for a in range(topo.A)],
                                  real_expert_fn(ws, layer), quant_fn=dynamic_quant, global_ids=True,
                                  placement=table, layer=layer)["out"]
        for a in range(topo.A):
            got = outs[a][r]
            differ = int((got.view(torch.int16) != golden[a].view(torch.int16)).sum())
            assert differ == 0, f"round {r} of Attention rank {a}: {differ} of {got.numel()} elements differ"
