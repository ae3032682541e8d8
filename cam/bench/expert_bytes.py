"""cam-bench expert-bytes: the routed-expert weight bytes one layer-select FFN rank holds over every MoE layer, for
W8A8 and W4A8, against one die's HBM. Arithmetic on the model shape (no timing): the capacity case of docs/gmm.md §9.

Per routed expert of hidden H and moe intermediate I (W1 [H, 2I], W2 [I, H]):
- weights: 3·H·I bytes (int8) or 3·H·I / 2 (int4, two per byte);
- scales, fp32: per output channel 2I + H, per group of G K rows (H/G)·2I + (I/G)·H;
- W4A8 only: the int32 column sums of the activation split's recombination, 2I + H (docs/gmm.md §9.1).
An FFN rank of F holds ceil(E / F) experts of every MoE layer."""

from __future__ import annotations

import math
from typing import Optional

from .common import int_in, json_path, print_table, write_json

# 128 GB per Ascend 910C package (CloudMatrix384: 48 TB of HBM over 384 910C, arXiv 2506.12708), two dies per package;
# the OS sees one device per die.
DIE_HBM_BYTES = 64 * 10**9

FORMATS = ("w8a8", "w4a8")


def expert_bytes(hidden: int, intermediate: int, fmt: str, group_size: Optional[int] = None) -> int:
    """Bytes of one routed expert's W1 and W2 with their scales (and, for W4A8, column sums)."""
    if fmt not in FORMATS:
        raise ValueError(f"expert_bytes: fmt must be one of {list(FORMATS)}, got {fmt!r}")
    h, i = hidden, intermediate
    if group_size is not None and (fmt != "w4a8" or h % group_size or i % group_size):
        raise ValueError(f"expert_bytes: group_size {group_size} needs w4a8 and must divide H = {h} and I = {i}")
    weights = 3 * h * i if fmt == "w8a8" else 3 * h * i // 2
    channels = 2 * i + h
    scales = 4 * (channels if group_size is None else (h // group_size) * 2 * i + (i // group_size) * h)
    colsums = 4 * channels if fmt == "w4a8" else 0
    return weights + scales + colsums


def rank_bytes(shape, ffn_ranks: int, fmt: str, group_size: Optional[int] = None) -> int:
    """Routed-expert bytes an FFN rank of ``ffn_ranks`` holds over all MoE layers of ``shape``."""
    per_rank = math.ceil(shape.experts / ffn_ranks)
    return per_rank * shape.moe_layers * expert_bytes(shape.hidden, shape.moe_intermediate, fmt, group_size)


def add_parsers(sub) -> None:
    p = sub.add_parser("expert-bytes", help="routed-expert bytes per FFN rank, W8A8 vs W4A8, against a die's HBM")
    p.add_argument("--ffn-ranks", type=int_in(1, 4096), nargs="+", default=[8, 16, 32], help="FFN rank counts")
    p.add_argument("--group-size", type=int_in(1, 1 << 20), default=None,
                   help="W4A8 scales per group of this many K rows (default: per output channel)")
    p.add_argument("--json", metavar="PATH", type=json_path, help="write results as JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..sim.shapes import DEEPSEEK_V3

    shape, results, rows = DEEPSEEK_V3, [], []
    for f in args.ffn_ranks:
        for fmt in FORMATS:
            gs = args.group_size if fmt == "w4a8" else None
            b = rank_bytes(shape, f, fmt, gs)
            results.append({"model": "deepseek-v3", "ffn_ranks": f, "experts_per_rank": math.ceil(shape.experts / f),
                            "format": fmt, "group_size": gs, "bytes": b, "die_hbm_bytes": DIE_HBM_BYTES,
                            "fraction_of_die_hbm": b / DIE_HBM_BYTES, "below_die_hbm": b < DIE_HBM_BYTES})
            rows.append([f, math.ceil(shape.experts / f), fmt + (f" g{gs}" if gs else ""), f"{b / 1e9:.1f}",
                         f"{100 * b / DIE_HBM_BYTES:.0f}%", "yes" if b < DIE_HBM_BYTES else "NO"])
    print_table(f"DeepSeek-V3 routed experts per FFN rank ({shape.moe_layers} MoE layers) vs one die's "
                f"{DIE_HBM_BYTES / 1e9:.0f} GB HBM", ["ffn_ranks", "experts/rank", "format", "GB", "of HBM", "weights < HBM"],
                rows)
    write_json(args.json, "expert-bytes", results)
    return 0
