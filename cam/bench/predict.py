"""cam-bench predict: the twin's timing model's PREDICTION of each op's time on an Ascend A3 or A2 die at
DeepSeek-V3 shapes (H 7168, I 2048, E 256, top-8, 8 FFN ranks; --shape another model's experts, --attention more
Attention ranks sending into them), beside the op's bound from its semantics
(cam.bench.bounds). Nothing here is a measurement: the kernels run on the twin (CPU) with CAM_TWIN_TIMING set, each
launch's instruction record is costed for A2 and A3 at both ends of the assumed L2 bandwidth range
(docs/twin.md, "Timing model"), and the table prints the model's numbers.

One child process per round size runs every op once (dynamic_quant on the round's tokens; one plane round of
dispatch_send / dispatch_recv / combine_send / combine_recv with the Attention rank and the 8 FFN ranks as threads;
W1 and W2 on the most loaded FFN rank's rows), so a run records each launch once and costs it for both devices.
The launches of one plane phase are costed in one virtual time (docs/twin.md, "Time through GM words"): a plane op's
prediction runs from its phase's start to its end on the slowest rank, its waits on peers' writes included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from ..sim.shapes import DEEPSEEK_V3, DEEPSEEK_V4_FLASH
from .bounds import FFN_CHAIN, OPS, ffn_chain_bound, ffn_chain_floor_one_sender, op_bound, routing_stats
from .common import json_path, print_table
from .floors import GMM_OPS, gmm_schedule_floor

SHAPE = {"H": 7168, "I": 2048, "E": 256, "K": 8, "F": 8}
# --shape: the expert shapes of the models cam-sim plans for (cam.sim.shapes, each cited there), 8 FFN ranks as
# above; deepseek-v3 is SHAPE.
SHAPES = {name: {"H": m.hidden, "I": m.moe_intermediate, "E": m.experts, "K": m.top_k, "F": SHAPE["F"]}
          for name, m in (("deepseek-v3", DEEPSEEK_V3), ("deepseek-v4-flash", DEEPSEEK_V4_FLASH))}
ROUNDS = (4096, 8192, 16384)
ROUTINGS = ("uniform", "skewed", "placed")
# "placed": the skewed routing with its REPLICATED most-loaded experts (under that routing, this round) given a
# second replica by a placement table (cam.placement); --replicate names another count.
REPLICATED = 32
ZIPF_S = 1.2
# Kernel launches of each op, by the twin's kernel name (host/src: CAM_KERNEL_LAUNCH / CAM_DATAPLANE_LAUNCH).
_KERNELS = {
    "dynamic_quant": ("cam_dynamic_quant",),
    "dispatch_send": ("cam_dispatch_send",),
    "dispatch_recv": ("cam_dispatch_recv",),
    # W1 is one mixed kernel (cam_gmm_swiglu_quant_multi_layer), and so is W2 (cam_gmm_multi_layer); W4A8 launches
    # the activation split (cam_gmm_split_int4) before either (docs/gmm.md §9).
    "gmm_swiglu_quant_multi_layer": ("cam_gmm_swiglu_quant_multi_layer", "cam_gmm_split_int4"),
    "gmm_multi_layer": ("cam_gmm_multi_layer", "cam_gmm_split_int4"),
    "combine_send": ("cam_combine_send",),
    "combine_recv": ("cam_combine_recv",),
}
# --trace's default: W1's mixed kernel, its cube and vector cores on one timeline.
TRACE_KERNEL = "cam_gmm_swiglu_quant_multi_layer"
# The per-rank bandwidth production EP kernels publish on A3 (sgl-project/sgl-kernel-npu README, DeepEP-Ascend,
# normal mode, EP8, 4096 tokens, H 7168, top-8; anchors-4.md section 2). Printed beside the prediction, never used.
EXTERNAL_A3_EP8_4096 = {"dispatch": 146e9, "combine": 125e9}
PLATFORM = "ascend910_93"  # one A3 die; an A2 (910B1) has the same core counts and memories, so one trace serves both


def _ids(tokens: int, routing: str, shape: dict = SHAPE, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(tokens + seed)
    E, K = shape["E"], shape["K"]
    if routing == "uniform":  # K distinct experts per token, uniformly at random
        return torch.rand(tokens, E, generator=g).argsort(dim=1)[:, :K].to(torch.int32)
    if routing in ("skewed", "placed"):
        # K distinct experts per token drawn with Zipf(ZIPF_S) popularity over a seeded order of the experts (the
        # skew cam-sim's study uses, docs/sim.md): hot experts, so one FFN rank carries more rows than the others.
        order = torch.randperm(E, generator=g)
        weight = torch.empty(E)
        weight[order] = 1.0 / torch.arange(1, E + 1, dtype=torch.float32) ** ZIPF_S
        return torch.multinomial(weight.expand(tokens, E), K, replacement=False, generator=g).to(torch.int32)
    raise ValueError(f"routing {routing!r} is not one of {ROUTINGS}")


def hottest(ids, E: int, count: int) -> list:
    """The ``count`` experts with the most rows in ``ids`` ([tokens, K], -1: empty slot), most-loaded first; ties
    go to the lower expert id, so the choice is deterministic."""
    import torch

    ids = ids.flatten().to(torch.int64)
    load = torch.bincount(ids[ids >= 0], minlength=E)
    order = sorted(range(E), key=lambda e: (-int(load[e]), e))
    return order[:count]


def _placement(ids, routing: str, shape: dict = SHAPE, replicated: int = REPLICATED):
    """For "placed": Placement.balanced with the ``replicated`` most-loaded experts of this round replicated, as
    cam.placement would place them; None (the contiguous placement) otherwise."""
    if routing != "placed":
        return None
    from cam.placement import Placement

    return Placement.balanced(shape["E"], shape["F"], 1, replicate=hottest(ids, shape["E"], replicated))


def _mark(path: str, name: str) -> None:
    with open(path, "a") as f:
        f.write(json.dumps({"marker": name}) + "\n")


WEIGHTS = ("w8a8", "w4a8")  # the GMMs' expert weights: int8, or int4 packed (W4A8, docs/gmm.md §9)


def _scale_groups(k: int, k_group: int) -> tuple:
    """The weight scales' group dimension for K rows in groups of k_group ([E, K / k_group, N]); none per channel."""
    return (k // k_group,) if k_group else ()


def _worker(tokens: int, routing: str, out: str, weight_format: str = "w8a8", shape_name: str = "deepseek-v3",
            attention: int = 1, replicated: int = REPLICATED, k_group: int = 0) -> int:
    """Runs every op once at this round size with timing on (CAM_TWIN_TIMING=out set by the parent). With
    ``attention`` > 1 Attention ranks, each sends ``tokens`` tokens (routed with its own seed); each FFN
    rank takes one work item from each, and the combine runs in ``attention`` groups, one item per FFN rank each,
    FFN rank f sending to Attention rank (f + j) % attention in group j: every Attention rank's ingress shared by
    F / attention FFN ranks (with one Attention rank, by all F). k_group: W1's and W2's weight scales in groups of
    that many K rows (0: per output channel)."""
    import threading
    import uuid

    import torch

    import cam

    shape = SHAPES[shape_name]
    H, I, E, K, F = (shape[k] for k in ("H", "I", "E", "K", "F"))
    A = attention
    ids_of = [_ids(tokens, routing, shape, seed=7919 * a) for a in range(A)]
    placement = _placement(torch.cat(ids_of), routing, shape, replicated)
    item_stats = [routing_stats(ids, E, F, placement.route(0, ids) if placement is not None else None,
                                slots_per_rank=placement.slots_per_rank if placement is not None else None)
                  for ids in ids_of]
    stats = {"rows": [sum(st["rows"][f] for st in item_stats) for f in range(F)],
             "pairs": [sum(st["pairs"][f] for st in item_stats) for f in range(F)],
             "pairs_total": sum(st["pairs_total"] for st in item_stats),
             "counts": [[sum(c) for c in zip(*(st["counts"][f] for st in item_stats))] for f in range(F)]}
    g = torch.Generator().manual_seed(1)
    xs_in = [torch.randn(tokens, H, generator=g).to(torch.bfloat16) for _ in range(A)]

    _mark(out, "dynamic_quant")
    cam.ops.dynamic_quant(xs_in[0])

    # One plane round: Attention ranks 0..A-1, FFN ranks A..A+F-1.
    _mark(out, "plane")
    # Windows and the FFN working set sized to this round's routing, not the worst case (P * Bmax * K rows per FFN
    # rank: 8 GiB of expert rows at 16384 tokens, more than this machine should hold for a prediction).
    topo = cam.Topology(D=A, P=1, F=F, E=E, K=K, H=H, Bmax=tokens, L=1, slots=1, quantized=True,
                        capacity=max(max(st["rows"]) for st in item_stats),
                        window_tokens=max(max(st["pairs"]) for st in item_stats),
                        expert_slots=placement.slots_per_rank if placement is not None else None)
    weights = torch.rand(tokens, K, generator=g)
    barrier = threading.Barrier(topo.world_size, timeout=1800)
    errors = []
    group = f"predict-{uuid.uuid4().hex[:8]}"

    def rank_main(rank: int) -> None:
        try:
            with cam.Comm(topo, rank, group=group, dtype=torch.bfloat16, idle_poll_s=0.5,
                          placement=placement) as comm:
                barrier.wait()
                if comm.is_attention:
                    cam.ops.dispatch_send(comm, xs_in[rank], ids_of[rank], 0)
                    barrier.wait()
                    if A > 1:
                        for _ in range(A + 1):  # the FFN ranks' combine groups, one item each, then their end
                            barrier.wait()
                        if rank == 0:
                            _mark(out, "combine_recv")
                        barrier.wait()
                    cam.ops.combine_recv(comm, ids_of[rank], weights)
                else:
                    items = {}
                    while len(items) < A:
                        _, _, _, wi = cam.ops.dispatch_recv(comm)
                        item = cam.WorkItem(wi)
                        if not item.is_empty:
                            items[item.replica] = wi
                    barrier.wait()
                    expert_out = torch.zeros((topo.recv_rows, H), dtype=torch.bfloat16)
                    f = rank - A
                    if A == 1:
                        cam.ops.combine_send(comm, expert_out, items[0])
                        return
                    for j in range(A):
                        if j == 0 and f == 0:
                            _mark(out, "combine_spread")
                        barrier.wait()  # one group per j: no two of them overlap in host time
                        cam.ops.combine_send(comm, expert_out, items[(f + j) % A])
                    barrier.wait()
                    barrier.wait()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(topo.world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(3600)
    if errors:
        raise errors[0]

    # W1 and W2 on the most loaded FFN rank's rows and group sizes (every work item's rows together).
    r = max(range(F), key=lambda i: stats["rows"][i])
    rows, counts = stats["rows"][r], stats["counts"][r]
    e_local = placement.slots_per_rank if placement is not None else E // F
    gl = torch.tensor(counts, dtype=torch.int64)
    li = torch.tensor([0], dtype=torch.int64)
    xq = torch.randint(-127, 128, (rows, H), generator=g, dtype=torch.int8)
    xs = torch.rand(rows, generator=g) * 1e-2 + 1e-3
    lo, hi, fmt = (-8, 8, "int4") if weight_format == "w4a8" else (-127, 128, "int8")
    w1 = cam.LayerWeights([torch.randint(lo, hi, (e_local, H, 2 * I), generator=g, dtype=torch.int8)],
                          [torch.rand(e_local, *_scale_groups(H, k_group), 2 * I, generator=g) * 1e-2], format=fmt)
    _mark(out, "gmm_swiglu_quant_multi_layer")
    y, ys = cam.ops.gmm_swiglu_quant_multi_layer(xq, xs, w1, gl, li, 1)
    del w1
    w2 = cam.LayerWeights([torch.randint(lo, hi, (e_local, I, H), generator=g, dtype=torch.int8)],
                          [torch.rand(e_local, *_scale_groups(I, k_group), H, generator=g) * 1e-2], format=fmt)
    _mark(out, "gmm_multi_layer")
    cam.ops.gmm_multi_layer(y, ys, w2, gl, li, 1)
    _mark(out, "end")
    with open(out, "a") as f:
        f.write(json.dumps({"routing_stats": {k: stats[k] for k in ("rows", "pairs", "pairs_total")},
                            "item_rows": [st["rows"] for st in item_stats],
                            "item_pairs_total": [st["pairs_total"] for st in item_stats],
                            "critical_rank": r, "critical_counts": counts}) + "\n")
    return 0


def _parse(path: str) -> dict:
    """The worker's file: constants, per-op launch costs (by marker and kernel name), routing stats."""
    constants, launches, stats = None, {}, None
    section = None
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "constants" in rec:
                constants = rec["constants"]
            elif "marker" in rec:
                section = rec["marker"]
            elif "routing_stats" in rec:
                stats = rec
            elif "kernel" in rec and section is not None:
                launches.setdefault(section, []).append(rec)
    return {"constants": constants, "launches": launches, "stats": stats}


def bound_shapes(tokens: int, attention: int, dims: dict, st: dict) -> dict:
    """Each op's op_bound arguments: the shape of the rank whose op is bounded, the one the prediction times.

    The FFN-side ops (dispatch_recv, W1, W2) are bounded on the FFN rank with the most rows (``critical_rank``):
    every Attention rank's work item for it together. With one Attention rank, the sender-side ops (dynamic_quant,
    dispatch_send, combine_recv) are bounded on the round itself and combine_send on that FFN rank's rows. With ``attention`` > 1 each
    Attention rank holds ``tokens / attention`` tokens, so they are bounded on one rank's share: dynamic_quant on
    its tokens; dispatch_send and combine_recv on the Attention rank with the most (token, FFN rank) pairs, its
    tokens and its pairs; combine_send, costed one work item per launch, on the largest work item's rows. The
    bound's formula is op_bound's either way; only whose share it is given changes. st: the worker's record
    (routing_stats of every item together, item_rows / item_pairs_total per Attention rank, critical rank and
    its per-slot counts)."""
    r = st["critical_rank"]
    ffn = {"tokens": tokens, **{k: dims[k] for k in ("H", "I", "E", "K", "F")},
           "rows": st["routing_stats"]["rows"][r], "pairs": st["routing_stats"]["pairs"][r],
           "pairs_total": st["routing_stats"]["pairs_total"],
           "active_experts": sum(1 for c in st["critical_counts"] if c)}
    shapes = {op: dict(ffn) for op in OPS}
    if attention == 1:
        return shapes
    share = tokens // attention
    sender = max(range(attention), key=lambda a: st["item_pairs_total"][a])
    for op in ("dynamic_quant", "dispatch_send", "combine_recv"):
        shapes[op].update(tokens=share, pairs_total=st["item_pairs_total"][sender])
    shapes["combine_send"].update(rows=max(max(item) for item in st["item_rows"]))
    return shapes


def _critical(rec: dict, consts: dict) -> str:
    """What set a launch's time: its peers when it spent most of it waiting for their writes to land, the die's
    memory or the rank's link when their floor covers it (no core's pipe was the limit), else the critical core's
    busiest pipe."""
    # A launch that spent most of its time waiting for peers' signal words to land waited on its peers.
    if rec["stalls"].get("GM word landing", 0.0) >= 0.5 * rec["seconds"]:
        return "peers"
    floor = rec["bandwidth_floor_seconds"]
    if floor >= 0.95 * (rec["seconds"] - consts.get("launch_seconds", 0.0)):
        link = rec.get("link_bytes", 0.0) / consts["link_bytes_per_s_rank"] if consts else 0.0
        return "link" if link >= 0.5 * floor else "HBM/L2"
    return max(rec["critical_busy"], key=rec["critical_busy"].get)


def _op_cost(op: str, parsed: dict, device: str, l2: str) -> dict | None:
    """The op's predicted cost: the sum of its launches (GMM with W4A8: the split and the mixed kernel); for a plane
    op, the slowest rank's launch (every FFN rank runs its own)."""
    section = "plane" if op in ("dispatch_send", "dispatch_recv", "combine_send", "combine_recv") else op
    # Several Attention ranks: the combine's own groups (_worker), each launch one work item.
    if op == "combine_send" and "combine_spread" in parsed["launches"]:
        section = "combine_spread"
    if op == "combine_recv" and "combine_recv" in parsed["launches"]:
        section = "combine_recv"
    recs = [r for r in parsed["launches"].get(section, [])
            if r["kernel"] in _KERNELS[op] and r["device"] == device and r["l2"] == l2]
    if not recs:
        return None
    if section in ("plane", "combine_spread", "combine_recv"):
        recs = [max(recs, key=lambda r: r["seconds"])]
    total = sum(r["seconds"] for r in recs)
    busy, stalls = {}, {}
    crit = {}
    for r in recs:
        for p, v in r["busy"].items():
            busy[p] = busy.get(p, 0.0) + v
        for p, v in r["critical_busy"].items():
            crit[p] = crit.get(p, 0.0) + v
        for k, v in r["stalls"].items():
            stalls[k] = stalls.get(k, 0.0) + v
    cores = max(r["block_dim"] for r in recs)
    consts = (parsed.get("constants") or {}).get(device) or {}
    critical = _critical(max(recs, key=lambda r: r["seconds"]), consts) if consts else max(crit, key=crit.get)
    return {
        "predicted_s": total,
        "launches": len(recs),
        "block_dim": cores,
        "busy_fraction": {p: v / (total * cores) for p, v in busy.items() if v > 0},
        "critical_core_busy_fraction": {p: v / total for p, v in crit.items() if v > 0},
        "critical_pipe": critical,
        "stalls_s": dict(sorted(stalls.items(), key=lambda kv: -kv[1])[:4]),
        "peer_waits": sum(r.get("peer_waits", 0) for r in recs),
        "l2_hit_fraction": max(r["l2_hit_fraction"] for r in recs),
    }


def predict(rounds=ROUNDS, routing: str = "uniform", timeout_s: float = 3600.0, trace: str | None = None,
            trace_kernel: str = TRACE_KERNEL, weights: str = "w8a8", shape: str = "deepseek-v3",
            attention: int = 1, replicated: int = REPLICATED, k_group: int = 0) -> dict:
    """Runs each round size's worker and costs what it recorded. trace: write the first round's first launch of
    `trace_kernel` as a Perfetto trace (one track per pipe per core; A3, L2 low end). shape: a key of SHAPES;
    attention: Attention ranks, each sending 1/attention of the round's tokens (_worker), so that an FFN rank's rows
    are the round's whatever the ranks. replicated: for routing "placed", how many of the most-loaded experts the
    placement table replicates. k_group: the GMMs' weight scales in groups of that many K rows (0: per output
    channel)."""
    results = {"label": "model prediction (twin timing model), not a measurement", "shape": dict(SHAPES[shape]),
               "shape_name": shape, "attention_ranks": attention,
               "routing": routing, "weights": weights, "platform_traced": PLATFORM, "rounds": []}
    if routing == "placed":
        results["replicated"] = replicated
    if k_group:
        results["k_group"] = k_group
    dims = SHAPES[shape]
    for tokens in rounds:
        with tempfile.TemporaryDirectory(prefix="cam-predict-") as d:
            path = os.path.join(d, "timing.jsonl")
            env = dict(os.environ, CAM_TWIN_TIMING=path, CAM_TWIN_PLATFORM=PLATFORM)
            if trace and tokens == rounds[0]:
                env.update(CAM_TWIN_TIMING_TRACE=os.path.abspath(trace), CAM_TWIN_TIMING_TRACE_KERNEL=trace_kernel)
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "cam.bench.predict", "--_worker", str(tokens // attention), routing,
                                   path, weights, shape, str(attention), str(replicated), str(k_group)],
                                  env=env, capture_output=True, text=True, timeout=timeout_s)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                raise RuntimeError(f"predict worker for {tokens} tokens failed:\n{proc.stderr[-4000:]}")
            parsed = _parse(path)
        results["constants"] = parsed["constants"]
        st = parsed["stats"]
        shapes = bound_shapes(tokens, attention, dims, st)
        entry = {"tokens": tokens, "wall_s": wall, "ffn_rank_rows": shapes["gmm_multi_layer"]["rows"], "devices": {}}
        if attention > 1:  # rows of each (Attention rank, FFN rank) work item: combine_send's own x
            entry.update(tokens_per_attention_rank=tokens // attention, item_rows=st["item_rows"],
                         bounded_sender_pairs=shapes["dispatch_send"]["pairs_total"],
                         bounded_item_rows=shapes["combine_send"]["rows"])
        for device in ("a3", "a2"):
            consts = parsed["constants"][device]
            bounds = {op: op_bound(op, **shapes[op], device=consts) for op in OPS}
            ops = {}
            for op in OPS:
                lo, hi = _op_cost(op, parsed, device, "lo"), _op_cost(op, parsed, device, "hi")
                if lo is None:
                    continue
                ops[op] = {"l2_lo": lo, "l2_hi": hi, "bound": bounds[op],
                           "ratio_lo": lo["predicted_s"] / bounds[op]["bound_s"],
                           "ratio_hi": hi["predicted_s"] / bounds[op]["bound_s"]}
            chain_pred = sum(ops[op]["l2_lo"]["predicted_s"] for op in FFN_CHAIN if op in ops)
            entry["devices"][device] = {"ops": ops, "ffn_chain": {
                "predicted_s_l2_lo": chain_pred,
                "predicted_s_l2_hi": sum(ops[op]["l2_hi"]["predicted_s"] for op in FFN_CHAIN if op in ops),
                "bound_s": ffn_chain_bound(bounds)}}
            chain = entry["devices"][device]["ffn_chain"]
            if attention == 1:
                chain["floor_one_sender_s"] = ffn_chain_floor_one_sender(bounds)
            if weights == "w8a8" and not k_group and all(op in ops for op in GMM_OPS):
                # The least an output-stationary W1 / W2 schedule takes in this model (cam.bench.floors): beside
                # the bound, never instead of it. W8A8 per channel only: the floor counts int8 weights, one plane.
                floors = {op: {l2: gmm_schedule_floor(op, st["critical_counts"], H=dims["H"], I=dims["I"],
                                                      device=consts, l2=l2) for l2 in ("lo", "hi")}
                          for op in GMM_OPS}
                for op in GMM_OPS:
                    ops[op]["schedule_floor"] = floors[op]
                    ops[op]["ratio_floor_lo"] = ops[op]["l2_lo"]["predicted_s"] / floors[op]["lo"]["floor_s"]
                # The chain's floor with W1 and W2 at their schedule floors (the other ops at their bounds, or at
                # the one Attention rank's links with P = 1).
                base = chain.get("floor_one_sender_s", chain["bound_s"])
                chain["floor_gmm_schedules_s"] = base + sum(floors[op]["lo"]["floor_s"] - bounds[op]["bound_s"]
                                                            for op in GMM_OPS)
        results["rounds"].append(entry)
    return results


def _k_group(results: dict) -> str:
    return f", scales in groups of {results['k_group']} K rows" if results.get("k_group") else ""


def _fmt_s(s: float) -> str:
    return f"{s * 1e6:.1f}"


def _replicated(results: dict) -> str:
    """The placed routing's replica count for a header (a recorded run without it replicated the 8 hottest)."""
    if results["routing"] != "placed":
        return ""
    return f" ({results.get('replicated', 8)} most-loaded experts replicated)"


def _bounded_on(entry: dict) -> str:
    """Whose share each bound is evaluated on (bound_shapes), for a header."""
    if "tokens_per_attention_rank" not in entry:
        return "bounds on the round (the one Attention rank's) and the FFN rank with most rows"
    if "bounded_sender_pairs" not in entry:  # a record from before the per-rank bounds: the round's figures
        return "bounds on the whole round's tokens and pairs"
    return (f"bounds per rank: dynamic_quant, dispatch_send, combine_recv on one Attention rank's "
            f"{entry['tokens_per_attention_rank']} tokens ({entry['bounded_sender_pairs']} token-rank pairs, the most "
            f"of any), combine_send on the largest work item's {entry['bounded_item_rows']} rows, the FFN ops on the "
            f"FFN rank with most rows")


def print_prediction(results: dict, device: str) -> None:
    for entry in results["rounds"]:
        rows = []
        dev = entry["devices"][device]
        for op, o in dev["ops"].items():
            lo, hi, b = o["l2_lo"], o["l2_hi"], o["bound"]
            pred = _fmt_s(lo["predicted_s"]) if abs(hi["predicted_s"] - lo["predicted_s"]) < 1e-9 else \
                f"{_fmt_s(hi['predicted_s'])}-{_fmt_s(lo['predicted_s'])}"
            busy = " ".join(f"{p}:{v:.2f}" for p, v in sorted(lo["critical_core_busy_fraction"].items(),
                                                                 key=lambda kv: -kv[1])[:3])
            stall = ", ".join(f"{k} {_fmt_s(v)}" for k, v in list(lo["stalls_s"].items())[:2]) or "-"
            ext = ""
            if device == "a3" and entry["tokens"] == 4096 and op in ("dispatch_send", "combine_send"):
                # The protocol's link bytes over the predicted time, beside the published per-rank figure (their
                # byte count may be defined differently: a reference, not a like-for-like comparison).
                key = "dispatch" if op == "dispatch_send" else "combine"
                gbps = b["link_bytes"] / lo["predicted_s"] / 1e9
                ext = f"{gbps:.0f} predicted vs {EXTERNAL_A3_EP8_4096[key] / 1e9:.0f} GB/s"
            rows.append([op, lo["block_dim"], pred, busy, lo["critical_pipe"], stall, _fmt_s(b["bound_s"]),
                         b["limit"], f"{o['ratio_lo']:.1f}", ext])
        chain = dev["ffn_chain"]
        rows.append(["FFN chain", "", f"{_fmt_s(chain['predicted_s_l2_hi'])}-{_fmt_s(chain['predicted_s_l2_lo'])}",
                     "", "", "", _fmt_s(chain["bound_s"]), "", f"{chain['predicted_s_l2_lo'] / chain['bound_s']:.1f}",
                     ""])
        if "floor_one_sender_s" in chain:
            # One Attention rank's links on the chain (bounds.ffn_chain_floor_one_sender): a floor no kernel lowers.
            floor = chain["floor_one_sender_s"]
            rows.append(["FFN chain floor (1 Attention rank's links)", "", "", "", "", "", _fmt_s(floor),
                         "links, W1, W2", f"{chain['predicted_s_l2_lo'] / floor:.1f}", ""])
        for op, o in dev["ops"].items():
            if "schedule_floor" in o:
                # cam.bench.floors: the least an output-stationary schedule (C tile in L0C, int32 through GM, every
                # re-read an L2 hit) takes in this model at the L2 range's low end; its best tile in the busy column.
                f = o["schedule_floor"]["lo"]
                rows.append([f"{op} schedule floor", "", "", f"tile {f['tm']}x{f['tn']}", "", "",
                             _fmt_s(f["floor_s"]), f["limit"], f"{o['ratio_floor_lo']:.2f}", ""])
        if "floor_gmm_schedules_s" in chain:
            floor = chain["floor_gmm_schedules_s"]
            links = "links, " if "floor_one_sender_s" in chain else ""
            rows.append(["FFN chain floor (W1, W2 schedule floors)", "", "", "", "", "", _fmt_s(floor),
                         f"{links}W1, W2 floors", f"{chain['predicted_s_l2_lo'] / floor:.1f}", ""])
        print_table(
            f"MODEL PREDICTION for {device.upper()} (not a measurement): {results.get('weights', 'w8a8')} "
            f"experts{_k_group(results)} (bounds: W8A8's), {entry['tokens']} tokens, "
            f"{results['routing']}{_replicated(results)} top-{results['shape']['K']} ({results.get('shape_name', 'deepseek-v3')} shape, "
            f"{results.get('attention_ranks', 1)} Attention rank(s)), FFN rank rows {entry['ffn_rank_rows']}; "
            f"{_bounded_on(entry)}; µs; busy = critical "
            f"core's pipe busy fraction; time range = L2 bandwidth high-low end; stalls summed over cores; "
            f"a plane op's time runs from its phase's start and includes its waits on peers' writes; scalar (S) time is "
            f"the least certain term; twin wall {entry['wall_s']:.0f} s",
            ["op", "cores", "predicted µs", "busy (critical core)", "critical pipe", "top stalls µs", "bound µs",
             "bound by", "ratio", "GB/s vs DeepEP-Ascend A3 EP8 (external)"],
            rows,
        )


def _run(args) -> int:
    if args.from_json:
        with open(args.from_json) as f:
            recorded = json.load(f)
        for results in recorded["runs"]:
            print_prediction(results, args.device)
        return 0
    for t in args.rounds:
        if t < 1:
            raise SystemExit(f"--rounds: {t} tokens is not a positive count")
    experts = SHAPES[args.shape]["E"]
    if args.k_group:
        dims = SHAPES[args.shape]
        step = 64 if "w4a8" in args.weights else 32  # an int4 fractal holds 64 K values, an int8 one 32
        if args.k_group < 0 or dims["H"] % args.k_group or dims["I"] % args.k_group or args.k_group % step:
            raise SystemExit(f"--k-group: {args.k_group} K rows must divide W1's K = {dims['H']} and W2's K = "
                             f"{dims['I']} and be a multiple of {step}")
    if not 0 <= args.replicate <= experts:
        raise SystemExit(f"--replicate: {args.replicate} experts is not in [0, {experts}] ({args.shape} has "
                         f"{experts})")
    runs = []
    for a in args.attention:
        if not 1 <= a <= 16:
            raise SystemExit(f"--attention: {a} Attention ranks is not in [1, 16]")
        for t in args.rounds:
            if t % a:
                raise SystemExit(f"--attention {a}: a round of {t} tokens does not split evenly over {a} ranks")
    combos = [(r, w, a) for a in args.attention for r in args.routing for w in args.weights]
    for i, (routing, weights, attention) in enumerate(combos):
        results = predict(rounds=tuple(args.rounds), routing=routing, timeout_s=args.timeout,
                          trace=args.trace if i == 0 else None, trace_kernel=args.trace_kernel, weights=weights,
                          shape=args.shape, attention=attention, replicated=args.replicate, k_group=args.k_group)
        print_prediction(results, args.device)
        runs.append(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"label": "model prediction (twin timing model), not a measurement", "runs": runs}, f,
                      indent=1)
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("predict", help="the twin timing model's predicted op times on A3 / A2 (a model, not a "
                                       "measurement) beside each op's bound")
    p.add_argument("--device", choices=["a3", "a2"], default="a3")
    p.add_argument("--json", metavar="PATH", type=json_path, help="write every device's results as JSON")
    p.add_argument("--rounds", type=int, nargs="+", default=list(ROUNDS), help="tokens per round (default 4096 "
                                                                                 "8192 16384)")
    p.add_argument("--routing", nargs="+", choices=list(ROUTINGS), default=["uniform"],
                   help=f"uniform top-K; skewed: Zipf({ZIPF_S}) expert popularity; placed: skewed with the "
                        f"--replicate most-loaded experts replicated by a placement table (default uniform)")
    p.add_argument("--replicate", type=int, default=REPLICATED, metavar="N",
                   help=f"with --routing placed: how many of the round's most-loaded experts the placement table "
                        f"gives a second replica (default {REPLICATED})")
    p.add_argument("--weights", nargs="+", choices=list(WEIGHTS), default=["w8a8"],
                   help="the GMMs' expert weights: w8a8 int8, w4a8 int4 packed (docs/gmm.md §9); default w8a8")
    p.add_argument("--k-group", type=int, default=0, metavar="N",
                   help="the GMMs' weight scales in groups of N K rows (per-group W4A8 / W8A8, docs/gmm.md §9.2; "
                        "default: per output channel)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="deepseek-v3",
                   help="the experts' shape (H, I, E, top-K of cam.sim's model; 8 FFN ranks): the shape a cam-sim "
                        "study runs, for its device file's per-row lines (default deepseek-v3)")
    p.add_argument("--attention", type=int, nargs="+", default=[1],
                   help="Attention ranks (one run per value), each sending 1/N of the round's tokens; above 1 each "
                        "FFN rank's combine_send is costed one work item at a time, every Attention rank's ingress "
                        "shared by F / N FFN ranks (default 1: all 8 share it)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per round size's child process")
    p.add_argument("--trace", metavar="FILE", help="write the first round's first launch of --trace-kernel as a "
                                                   "Perfetto trace (one track per pipe per core)")
    p.add_argument("--trace-kernel", default=TRACE_KERNEL, help="kernel name for --trace (default: W1's)")
    p.add_argument("--from-json", metavar="FILE", help="print a recorded --json result instead of running")
    p.set_defaults(run=_run)


if __name__ == "__main__":
    if len(sys.argv) in (5, 6, 7, 8, 9, 10) and sys.argv[1] == "--_worker":
        sys.exit(_worker(int(sys.argv[2]), *sys.argv[3:7], *(int(a) for a in sys.argv[7:])))
    print("usage: cam-bench predict ...", file=sys.stderr)
    sys.exit(2)
