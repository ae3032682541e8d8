"""Golden (oracle) for the routed data plane: dispatch, combine and a whole round trip.

Plain torch, written from docs/numerics.md and docs/protocol.md, sharing nothing with the
kernel path: it never looks at windows, signals or records, only at what the ops
must produce.

* ``dispatch``   - the rows one FFN rank receives for one replica's round: one row per
  (token, top-k slot) routed to it, grouped by local expert slot, within a slot ordered
  by (participant, token, slot); int8 + fp32 scale when quantized. With a placement
  table (docs/protocol.md §15) the row of (token t, slot k) of expert e goes to replica
  ``(t + k0) % n`` of e's n replicas, each an (FFN index, local slot), k0 the first slot of
  token t whose id is e (a token's rows for one expert share a replica); without one,
  expert e is slot ``e % R`` of FFN index ``e // R``.
* ``combine``    - one participant's routed output: ``acc = acc + w[t,k] * row[t,k]`` in
  fp32 for k = 0..K-1 (multiply, then add), empty slots skipped, one final rounding.
* ``round_trip`` - dispatch to every FFN rank, an expert function, combine back.
* ``chunk_bounds`` - how a round with more rows than ``capacity`` is cut into work items (docs/protocol.md §8):
  row ranges of ``dispatch``'s row order.
* ``epoch_verdict`` - what an FFN rank does with a published round given the placement epoch each participant
  routed it by and the epoch of its slot weights (docs/protocol.md §15): serve it, hold it back, or fail.
* ``placement_buffer`` - the device form of a placement table: its epoch line, then the rows (§15).

Loops are deliberate: this is the oracle, clarity beats speed. Conditions the real ops
refuse (ids out of range, B > Bmax, more distinct tokens for one FFN rank than ``window_tokens``) raise
``ValueError`` here too. More rows than ``capacity`` is not refused: the ops deliver them in chunks.
"""

from __future__ import annotations

import importlib
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from cam.topology import Topology

__all__ = ["dispatch", "combine", "round_trip", "round_trip_plane", "chunk_bounds", "epoch_verdict",
           "placement_buffer"]

QuantFn = Callable[[torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]
# expert_fn(local_or_global_expert_ids [n] int64, rows [n,H], scales [n] fp32 or None) -> [n,H] activations
ExpertFn = Callable[[torch.Tensor, torch.Tensor, Optional[torch.Tensor]], torch.Tensor]

_ACT_DTYPES = (torch.bfloat16, torch.float16)


def _default_quant(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    # Lazy: the shared per-token quant golden is its own module (bit-exact, docs/numerics.md).
    mod = importlib.import_module("cam.reference.dynamic_quant")
    return mod.dynamic_quant(x)


def _check_participant(topo: Topology, p: int, x: torch.Tensor, ids: torch.Tensor) -> None:
    if x.dim() != 2 or x.shape[1] != topo.H:
        raise ValueError(f"participant {p}: x must be [B, H={topo.H}], got {tuple(x.shape)}")
    if x.dtype not in _ACT_DTYPES:
        raise ValueError(f"participant {p}: x dtype {x.dtype} is not bf16/fp16")
    b = x.shape[0]
    if b > topo.Bmax:
        raise ValueError(f"participant {p}: B = {b} exceeds Bmax = {topo.Bmax}")
    if tuple(ids.shape) != (b, topo.K):
        raise ValueError(f"participant {p}: topk_ids must be [B={b}, K={topo.K}], got {tuple(ids.shape)}")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(f"participant {p}: topk_ids must be an integer tensor, got {ids.dtype}")
    if ids.numel() and (int(ids.min()) < -1 or int(ids.max()) >= topo.E):
        raise ValueError(f"participant {p}: topk_ids outside [-1, E={topo.E})")


def dispatch(
    topology: Topology,
    per_participant_inputs: Sequence[Tuple[torch.Tensor, torch.Tensor]],
    ffn_rank: int,
    *,
    quant_fn: Optional[QuantFn] = None,
    placement=None,
    layer: int = 0,
) -> Dict[str, object]:
    """What FFN rank ``ffn_rank`` (global rank, in ``[A, A+F)``) receives for one replica's round.

    ``per_participant_inputs[p] = (x [B_p, H], topk_ids [B_p, K])`` for the P participants
    of the replica, in participant order. ``placement`` (anything with ``replicas(layer, e)``
    -> a sequence of (FFN index, local slot), e.g. :class:`cam.placement.Placement`) and
    ``layer`` route the rows; None is the contiguous placement.

    Returns a dict:
        ``rows``         [n, H], int8 if quantized else x's dtype;
        ``scales``       [n] fp32 (quantized only);
        ``counts``       [R] int64, rows per local expert (a GMM ``group_list`` of type 1);
        ``local_expert`` [n] int64, local expert slot of each row;
        ``expert``       [n] int64, the routed (global) expert id of each row;
        ``row_source``   list of n ``(participant, token, k)``.
    """
    topo = topology
    if not topo.A <= ffn_rank < topo.A + topo.F:
        raise ValueError(f"ffn_rank {ffn_rank} is not an FFN rank (expected [{topo.A}, {topo.A + topo.F}))")
    if len(per_participant_inputs) != topo.P:
        raise ValueError(f"expected {topo.P} participants, got {len(per_participant_inputs)}")
    for p, (x, ids) in enumerate(per_participant_inputs):
        _check_participant(topo, p, x, ids)

    f = ffn_rank - topo.A
    if placement is None and not (topo.E % topo.F == 0 and topo.R == topo.E // topo.F):
        raise ValueError(f"E = {topo.E} on F = {topo.F} ranks of {topo.R} slots needs a placement table")

    def where(e: int, t: int, k0: int) -> Tuple[int, int]:
        """(FFN index, local slot) of token t's rows of expert e, k0 = the token's first slot naming e."""
        if placement is None:
            return e // topo.R, e % topo.R
        reps = list(placement.replicas(layer, e))
        return tuple(reps[(t + k0) % len(reps)])

    # (local slot, participant, token, slot, expert) for every slot routed here; sorting the tuples is the order
    cells = []
    for p, (_, ids) in enumerate(per_participant_inputs):
        ids_list = ids.tolist()
        for t, row in enumerate(ids_list):
            for k, e in enumerate(row):
                if e == -1:
                    continue
                ff, j = where(e, t, row.index(e))
                if ff == f:
                    cells.append((j, p, t, k, e))
    cells.sort()
    n = len(cells)
    window = min(topo.Bmax, topo.window_tokens)
    for p in range(topo.P):
        tokens = len({t for (_, pp, t, _, _) in cells if pp == p})
        if tokens > window:
            raise ValueError(f"window_tokens: participant {p} sends {tokens} distinct tokens to FFN rank {ffn_rank}, "
                             f"more than {window}")

    if topo.quantized:
        quant = quant_fn or _default_quant
        payload = []
        scales_pp = []
        for x, _ in per_participant_inputs:
            q, s = quant(x)  # once per token, whatever the number of its destinations
            payload.append(q)
            scales_pp.append(s.reshape(-1))
        row_dtype = torch.int8
    else:
        payload = [x for x, _ in per_participant_inputs]
        scales_pp = None
        row_dtype = per_participant_inputs[0][0].dtype
        if any(x.dtype != row_dtype for x, _ in per_participant_inputs):
            raise ValueError("participants of one replica must use one activation dtype")

    rows = torch.empty((n, topo.H), dtype=row_dtype)
    scales = torch.empty((n,), dtype=torch.float32)
    counts = torch.zeros((topo.R,), dtype=torch.int64)
    local_expert = torch.empty((n,), dtype=torch.int64)
    expert = torch.empty((n,), dtype=torch.int64)
    row_source: List[Tuple[int, int, int]] = []
    for i, (j, p, t, k, e) in enumerate(cells):
        rows[i] = payload[p][t]
        if scales_pp is not None:
            scales[i] = scales_pp[p][t]
        counts[j] += 1
        local_expert[i] = j
        expert[i] = e
        row_source.append((p, t, k))

    out: Dict[str, object] = {
        "rows": rows,
        "counts": counts,
        "local_expert": local_expert,
        "expert": expert,
        "row_source": row_source,
    }
    if topo.quantized:
        out["scales"] = scales
    return out


def chunk_bounds(counts: Sequence[int], capacity: int) -> List[Tuple[int, int]]:
    """Work items of one round on one FFN rank, as ``[lo, hi)`` ranges of its rows in dispatch row order.

    ``counts[j]`` = the round's rows of local expert ``j`` (over all participants). Rule (docs/protocol.md §8):
    experts in order; an expert with at most ``capacity`` rows is never split - it joins the open chunk if the chunk
    stays within ``capacity``, otherwise the chunk is closed and the expert opens the next; an expert with more rows
    is split - its first rows fill the open chunk up to ``capacity``, then come chunks of exactly ``capacity`` of its
    own, and what is left opens the next chunk. A round without rows is one empty-rowed chunk ``(0, 0)``."""
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    bounds: List[Tuple[int, int]] = []
    lo = pos = 0  # open chunk [lo, pos)
    for n in counts:
        n = int(n)
        if n < 0:
            raise ValueError(f"negative expert count {n}")
        if n == 0:
            continue
        if n <= capacity:
            if pos - lo + n > capacity:
                bounds.append((lo, pos))
                lo = pos
            pos += n
            continue
        while n > 0:  # a split expert: fill the open chunk, then whole chunks, the rest stays open
            take = min(n, capacity - (pos - lo))
            pos += take
            n -= take
            if pos - lo == capacity:
                bounds.append((lo, pos))
                lo = pos
    if pos > lo or not bounds:
        bounds.append((lo, pos))
    return bounds


def batch_select(ready_rows: Sequence[Optional[int]], rr: int, row_budget: int,
                 max_items: int) -> Tuple[List[int], int]:
    """The replicas one batched dispatch_recv takes, and the fairness pointer after it (docs/protocol.md §7).

    ``ready_rows[d]`` = the rows of replica ``d``'s next chunk when every participant of its next round has
    published (and it is not fenced), else None; ``rr`` = the pointer before. Rule: scan the replicas
    ``rr, rr+1, ...`` (mod D) once; skip one that is not ready; stop at ``max_items`` items or at the first ready one
    whose chunk does not fit what is left of ``row_budget``; take the others in scan order. The pointer moves to
    the replica after the last one taken (unchanged when none was)."""
    D = len(ready_rows)
    taken: List[int] = []
    used = 0
    for n in range(D):
        if len(taken) == max_items:
            break
        d = (rr + n) % D
        rows = ready_rows[d]
        if rows is None:
            continue
        if rows > row_budget - used:
            break
        taken.append(d)
        used += rows
    return taken, ((taken[-1] + 1) % D if taken else rr)


def epoch_verdict(round_epochs: Sequence[int], weights_epoch: int) -> Tuple[str, Optional[int]]:
    """What an FFN rank does with a round every participant published (docs/protocol.md §15), and which
    participant a failure names: ``("hold", None)`` while the weights are being moved (epoch -1) or when a
    participant routed it by a newer table than the weights hold (the round is not ready yet, as if unpublished);
    ``("serve", None)`` when every participant's epoch is the weights'; otherwise ``("fail", p)`` with ``p`` the
    first participant whose epoch differs (an older table, a negative epoch, or weights whose epoch is not one).
    ``round_epochs[p]`` is participant p's record epoch. A batched receive treats a held round as not ready."""
    w = int(weights_epoch)
    es = [int(e) for e in round_epochs]
    if w == -1 or (w >= 0 and any(e > w for e in es)):
        return "hold", None
    for p, e in enumerate(es):
        if e != w:
            return "fail", p
    return "serve", None


def placement_buffer(placement, epoch: int = 0) -> torch.Tensor:
    """The int64 device form ``dispatch_send`` reads (docs/protocol.md §15): 8 words of the epoch line (word 0 the
    epoch, the rest 0), then for every layer and expert ``n, f0, j0, f1, j1, ...`` padded with -1 to ``1 + 2F``."""
    F = placement.ffn_ranks
    out = [int(epoch)] + [0] * 7
    for layer in range(placement.layers):
        for e in range(placement.experts):
            reps = placement.replicas(layer, e)
            row = [len(reps)] + [v for f, j in reps for v in (f, j)]
            out += row + [-1] * (1 + 2 * F - len(row))
    return torch.tensor(out, dtype=torch.int64)


def group_table(items: Sequence[Tuple[int, Sequence[int]]], max_items: int, R: int) -> torch.Tensor:
    """The ``[max_items * R, 3]`` int64 group table of a batch: ``items[i] = (layer, counts[R])`` of work item i in
    batch order; group ``i*R + j`` is ``(layer_i, j, counts_i[j])``, and slots past the items ``(0, j, 0)``."""
    out = torch.zeros((max_items * R, 3), dtype=torch.int64)
    out[:, 1] = torch.arange(R).repeat(max_items)
    for i, (layer, counts) in enumerate(items):
        out[i * R:(i + 1) * R, 0] = int(layer)
        out[i * R:(i + 1) * R, 2] = torch.as_tensor(list(counts), dtype=torch.int64)
    return out


def combine(
    topology: Topology,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    expert_rows_by_source: Dict[Tuple[int, int], torch.Tensor],
    *,
    dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """One participant's routed output ``out [B, H]`` in ``dtype``.

    ``expert_rows_by_source[(t, k)]`` is the expert output row [H] for token ``t``, slot
    ``k``; it must hold exactly the slots whose id is not -1. The reduction is, per
    token, ``acc = +0.0f``, then for k = 0..K-1 with ``id != -1``:
    ``acc = acc + w[t,k] * float(row)`` (fp32 multiply, then fp32 add), then one rounding
    of ``acc`` to ``dtype``.
    """
    topo = topology
    if topk_ids.dim() != 2 or topk_ids.shape[1] != topo.K:
        raise ValueError(f"topk_ids must be [B, K={topo.K}], got {tuple(topk_ids.shape)}")
    b = topk_ids.shape[0]
    if tuple(topk_weights.shape) != (b, topo.K):
        raise ValueError(f"topk_weights must be [B={b}, K={topo.K}], got {tuple(topk_weights.shape)}")
    if topk_weights.dtype != torch.float32:
        raise ValueError(f"topk_weights must be fp32, got {topk_weights.dtype}")
    if dtype not in _ACT_DTYPES:
        raise ValueError(f"dtype {dtype} is not bf16/fp16")
    ids_list = topk_ids.tolist()
    expected = {(t, k) for t in range(b) for k in range(topo.K) if ids_list[t][k] != -1}
    if set(expert_rows_by_source) != expected:
        missing = sorted(expected - set(expert_rows_by_source))[:4]
        extra = sorted(set(expert_rows_by_source) - expected)[:4]
        raise ValueError(f"rows by source do not match the routed slots (missing {missing}, extra {extra})")

    acc = torch.zeros((b, topo.H), dtype=torch.float32)
    for k in range(topo.K):
        for t in range(b):
            if ids_list[t][k] == -1:
                continue
            row = expert_rows_by_source[(t, k)].reshape(-1)
            if row.dtype not in _ACT_DTYPES:
                raise ValueError(f"row for (token {t}, slot {k}) is {row.dtype}; rows travel as bf16/fp16")
            if row.numel() != topo.H:
                raise ValueError(f"row for (token {t}, slot {k}) has {row.numel()} elements, expected H={topo.H}")
            prod = topk_weights[t, k] * row.to(torch.float32)  # fp32 product, rounded
            acc[t] = acc[t] + prod  # then fp32 sum, rounded: never fused
    return acc.to(dtype)


def round_trip(
    topology: Topology,
    replica_inputs: Sequence[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    expert_fn: ExpertFn,
    *,
    quant_fn: Optional[QuantFn] = None,
    global_ids: bool = False,
    placement=None,
    layer: int = 0,
) -> List[torch.Tensor]:
    """One replica's round through every FFN rank and back.

    ``replica_inputs[p] = (x [B_p, H], topk_ids [B_p, K], topk_weights [B_p, K] fp32)``.
    For each FFN rank: ``dispatch``, then ``expert_fn(expert_ids, rows, scales)`` (local
    expert ids in ``[0, R)``, or global ids if ``global_ids``; ``scales`` is None without
    quantization) must return ``[n, H]`` activations, which go back to their source
    (participant, token, slot). Returns ``out [B_p, H]`` per participant, in x's dtype.
    """
    topo = topology
    if len(replica_inputs) != topo.P:
        raise ValueError(f"expected {topo.P} participants, got {len(replica_inputs)}")
    dispatch_inputs = [(x, ids) for x, ids, _ in replica_inputs]
    by_source: List[Dict[Tuple[int, int], torch.Tensor]] = [dict() for _ in range(topo.P)]
    for f in range(topo.F):
        ffn_rank = topo.A + f
        d = dispatch(topo, dispatch_inputs, ffn_rank, quant_fn=quant_fn, placement=placement, layer=layer)
        ids = d["expert"] if global_ids else d["local_expert"]
        n = len(d["row_source"])
        out = expert_fn(ids, d["rows"], d.get("scales"))
        if tuple(out.shape) != (n, topo.H):
            raise ValueError(f"expert_fn returned {tuple(out.shape)} for FFN rank {ffn_rank}, expected ({n}, {topo.H})")
        for i, (p, t, k) in enumerate(d["row_source"]):
            by_source[p][(t, k)] = out[i]
    return [
        combine(topo, ids, w, by_source[p], dtype=x.dtype)
        for p, (x, ids, w) in enumerate(replica_inputs)
    ]


def round_trip_plane(
    topology: Topology,
    inputs_by_rank: Sequence[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    expert_fn: ExpertFn,
    *,
    quant_fn: Optional[QuantFn] = None,
    global_ids: bool = False,
    placement=None,
    layer: int = 0,
) -> Dict[str, object]:
    """One round of every replica of the plane: what every rank sees.

    ``inputs_by_rank[a] = (x, topk_ids, topk_weights)`` for Attention rank ``a`` in ``[0, A)``. Replicas are
    independent, so this is ``round_trip`` per replica plus ``dispatch`` per (replica, FFN rank).

    ``layer`` (with ``placement``) is one layer for every replica, or a sequence of one per replica.

    Returns ``{"out": [A tensors [B_a, H]], "dispatch": {(replica, ffn_rank): dispatch(...) dict}}``.
    """
    topo = topology
    if len(inputs_by_rank) != topo.A:
        raise ValueError(f"expected inputs for {topo.A} Attention ranks, got {len(inputs_by_rank)}")
    outs: List[torch.Tensor] = []
    per_ffn: Dict[Tuple[int, int], Dict[str, object]] = {}
    layers = [layer] * topo.D if isinstance(layer, int) else list(layer)
    for d in range(topo.D):
        replica = list(inputs_by_rank[d * topo.P:(d + 1) * topo.P])
        outs.extend(round_trip(topo, replica, expert_fn, quant_fn=quant_fn, global_ids=global_ids,
                               placement=placement, layer=layers[d]))
        for f in range(topo.F):
            per_ffn[(d, topo.A + f)] = dispatch(topo, [(x, i) for x, i, _ in replica], topo.A + f, quant_fn=quant_fn,
                                                placement=placement, layer=layers[d])
    return {"out": outs, "dispatch": per_ffn}
