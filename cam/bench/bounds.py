"""Each op's bound from its semantics (docs/twin.md, "Op bounds"): the bytes its inputs and outputs must cross HBM,
the bytes the protocol must carry over the peer link and its multiply-accumulates, over the device's HBM bandwidth,
link bandwidth and cube peak. Never the bytes a kernel happens to move: a bound changes only with the op's meaning.

The shape is one round of an AFD plane: one Attention rank holding ``tokens`` tokens of hidden size ``H`` routes
each to ``K`` of ``E`` experts spread over ``F`` FFN ranks (``E / F`` each); an FFN rank receives ``rows`` expert
rows (token, expert pairs) carried as ``pairs`` distinct (token, rank) rows, runs W1 (``H -> 2 I``, SwiGLU, int8)
and W2 (``I -> H``, bf16) on them and sends the expert rows back. Wire rows are int8 plus one fp32 scale;
activations are 2-byte (bf16)."""

from __future__ import annotations

OPS = ("dynamic_quant", "dispatch_send", "dispatch_recv", "gmm_swiglu_quant_multi_layer", "gmm_multi_layer",
       "combine_send", "combine_recv")
FFN_CHAIN = ("dispatch_recv", "gmm_swiglu_quant_multi_layer", "gmm_multi_layer", "combine_send")

_ACT = 2     # bf16 bytes
_SCALE = 4   # fp32 scale per row
_ID = 4      # int32 expert id / fp32 combine weight


def routing_stats(ids, E: int, F: int, placed=None, slots_per_rank: int | None = None) -> dict:
    """From [tokens, K] expert ids (-1: empty slot): per FFN rank its expert rows, distinct tokens, per-slot
    counts; the Attention rank's (token, rank) pairs in total. placed: the [tokens, K, 2] (FFN index, local slot)
    of every row under a placement table (cam.placement.Placement.route; -1 for an empty slot), when the experts
    are not placed contiguously (E / F per rank). slots_per_rank: the length of every rank's counts (the
    placement's slots_per_rank, so counts of several Attention ranks' rounds line up slot by slot); without it,
    one past the highest slot any row of this round uses."""
    import torch

    ids = ids.to(torch.int64)
    valid = ids >= 0
    if placed is None:
        per_rank = E // F
        rank_of = torch.where(valid, ids // per_rank, torch.full_like(ids, -1))
        slot_of = torch.where(valid, ids % per_rank, torch.full_like(ids, -1))
    else:
        placed = placed.to(torch.int64)
        rank_of, slot_of = placed[..., 0], placed[..., 1]
        per_rank = int(slot_of.max()) + 1 if slot_of.numel() else 1
        if slots_per_rank is not None:
            if slots_per_rank < per_rank:
                raise ValueError(f"slots_per_rank {slots_per_rank} is below the highest slot routed ({per_rank - 1})")
            per_rank = slots_per_rank
    rows, pairs, counts = [], [], []
    for r in range(F):
        hit = rank_of == r
        rows.append(int(hit.sum()))
        pairs.append(int(hit.any(dim=1).sum()))
        counts.append(torch.bincount(slot_of[hit], minlength=per_rank).tolist())
    return {"rows": rows, "pairs": pairs, "counts": counts, "pairs_total": sum(pairs)}


def op_bound(op: str, *, tokens: int, H: int, I: int, E: int, K: int, F: int, rows: int, pairs: int,
             pairs_total: int, active_experts: int, device: dict) -> dict:
    """The op's bound in seconds on `device` (the constants table, by name) and what sets it. rows / pairs: the FFN
    rank's (the one whose op is bounded); active_experts: its experts with at least one row (their weights must be
    read)."""
    if op not in OPS:
        raise ValueError(f"op {op!r} is not one of {OPS}")
    for name, v in (("tokens", tokens), ("H", H), ("I", I), ("E", E), ("K", K), ("F", F), ("rows", rows),
                    ("pairs", pairs), ("pairs_total", pairs_total), ("active_experts", active_experts)):
        if not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be a non-negative int, got {v!r}")
    wire = H + _SCALE
    hbm = link = macs = 0
    if op == "dynamic_quant":
        hbm = tokens * H * _ACT + tokens * H + tokens * _SCALE
    elif op == "dispatch_send":
        hbm = tokens * H * _ACT + tokens * K * _ID
        link = pairs_total * wire
    elif op == "dispatch_recv":
        hbm = pairs * wire + rows * wire
        link = pairs * wire  # this rank's ingress
    elif op == "gmm_swiglu_quant_multi_layer":
        macs = rows * H * 2 * I
        hbm = rows * H + rows * _SCALE + active_experts * H * 2 * I + active_experts * 2 * I * 4 + rows * I + \
            rows * _SCALE
    elif op == "gmm_multi_layer":
        macs = rows * I * H
        hbm = rows * I + rows * _SCALE + active_experts * I * H + active_experts * H * 4 + rows * H * _ACT
    elif op == "combine_send":
        hbm = rows * H * _ACT
        link = rows * H * _ACT
    elif op == "combine_recv":
        hbm = tokens * K * H * _ACT + tokens * H * _ACT + tokens * K * _ID
        link = tokens * K * H * _ACT  # the Attention rank's ingress from every FFN rank
    cube_peak = device["aic_per_die"] * device["cube_int8_macs_per_cycle"] * device["core_clock_hz"]
    terms = {"hbm": hbm / device["hbm_bytes_per_s_die"], "link": link / device["link_bytes_per_s_rank"],
             "cube": macs / cube_peak}
    limit = max(terms, key=terms.get)
    return {"bound_s": terms[limit], "limit": limit, "hbm_bytes": hbm, "link_bytes": link, "macs": macs,
            "terms_s": terms}


def ffn_chain_bound(bounds: dict) -> float:
    """The FFN rank's critical path bound for one round: its four ops run one after the other on its data."""
    return sum(bounds[op]["bound_s"] for op in FFN_CHAIN)


def ffn_chain_floor_one_sender(bounds: dict) -> float:
    """The FFN rank's critical path's floor for one round with one Attention rank (P = 1), from the same terms: its
    rows are published only once the Attention rank's egress has carried every FFN rank's rows (dispatch_send's
    link term, where dispatch_recv's bound counts this rank's ingress alone), and its combine rows land only as the
    Attention rank's ingress takes every FFN rank's (combine_recv's link term, where combine_send's bound counts this
    rank's egress alone); W1 and W2 in between at their bounds. With more Attention ranks those links are shared
    differently and this floor does not apply."""
    return (bounds["dispatch_send"]["terms_s"]["link"] + bounds["gmm_swiglu_quant_multi_layer"]["bound_s"] +
            bounds["gmm_multi_layer"]["bound_s"] + bounds["combine_recv"]["terms_s"]["link"])
