"""cam-bench dispatch / combine: the data plane with in-process ranks (threads), against a cold memcpy of the same
bytes measured in the same run.

One plane runs rounds of dispatch_send -> dispatch_recv -> combine_send -> combine_recv; barriers separate the
dispatch stage (all Attention ranks send, every FFN rank receives its work item) from the combine stage (every
FFN rank sends back, every Attention rank reduces). Effective bytes are what the stage delivers: dispatch, the rows
(and scales) materialized on the FFN ranks; combine, the expert rows written back to the Attention ranks. The
baseline copies that many bytes with one cold single-threaded memcpy (source and destination not in any cache, as
fresh activations are; common.ColdMemcpy) on the same machine in the same run, and the absolute GB/s of a large
cold copy is reported with it, so a run on another machine can be read against its own memory.
"""

from __future__ import annotations

from .common import ColdMemcpy, int_in, json_path, llc_bytes, plane_ids, print_table, run_plane, write_json

_CASES = [
    # D, P, F, E, K, H, B
    (2, 1, 2, 16, 4, 2048, 128),
    (2, 2, 2, 16, 8, 1024, 128),
    (4, 1, 4, 32, 8, 2048, 64),
]


def _delivered_bytes(topo, ids_per_rank, stage: str, act_bytes: int) -> int:
    """What the stage delivers: dispatch the wire rows (int8 + one fp32 scale when quantized, else activations),
    combine the expert rows written back (activations)."""
    rows = sum(int((ids != -1).sum()) for ids in ids_per_rank)
    if stage == "dispatch":
        return rows * (topo.H + 4 if topo.quantized else topo.H * act_bytes)
    return rows * topo.H * act_bytes


def _run(args, stage: str) -> int:
    import torch

    import cam

    dtype = getattr(torch, args.dtype)
    cold = ColdMemcpy(llc_bytes())
    results, rows = [], []
    for D, P, F, E, K, H, B in _CASES:
        topo = cam.Topology(D=D, P=P, F=F, E=E, K=K, H=H, Bmax=B, L=1, slots=2, quantized=not args.bf16)
        nbytes = _delivered_bytes(topo, plane_ids(topo), stage, dtype.itemsize)
        dispatch_s, combine_s, _ = run_plane(topo, args.rounds, dtype)
        samples = (dispatch_s if stage == "dispatch" else combine_s)[1:]  # first round warms up
        op_s = sorted(samples)[len(samples) // 2]
        base_s = cold.seconds(nbytes, repeat=15)
        r = {
            "op": stage,
            "D": D, "P": P, "F": F, "E": E, "K": K, "H": H, "B": B,
            "quantized": topo.quantized,
            "dtype": args.dtype,
            "bytes": nbytes,
            "op_median_s": op_s,
            "memcpy_s": base_s,
            "op_GBps": nbytes / op_s / 1e9,
            "memcpy_GBps": nbytes / base_s / 1e9,  # of this op's bytes, cold
            "op_over_memcpy": base_s / op_s,
            "rounds": len(samples),
            "cold_memcpy_GBps": cold.gbps(),
        }
        results.append(r)
        rows.append([f"{D}x{P}+{F}", E, K, H, B, "int8" if topo.quantized else args.dtype, f"{nbytes / 1e6:.2f}",
                     f"{r['op_GBps']:.3f}", f"{r['memcpy_GBps']:.2f}", f"{r['op_over_memcpy']:.4f}"])
    print_table(
        f"{stage} on backend '{cam.backend()}', in-process ranks (effective GB/s, median round; cold memcpy of the "
        f"same bytes in the same run; a large cold memcpy ran at {cold.gbps():.2f} GB/s)",
        ["DxP+F", "E", "K", "H", "B", "wire", "MB", "op GB/s", "memcpy GB/s", "op/memcpy"],
        rows,
    )
    write_json(args.json, stage, results,
               baseline="cold single-threaded memcpy (numpy copyto, source and destination cycling through pools of twice "
                        "the LLC) of the stage's delivered bytes, median of 15, same run",
               llc_bytes=cold.llc, cold_memcpy_GBps=cold.gbps())
    return 0


def add_parsers(sub) -> None:
    for stage, text in (("dispatch", "dispatch_send + dispatch_recv"), ("combine", "combine_send + combine_recv")):
        p = sub.add_parser(stage, help=f"{text} vs a memcpy of the same bytes")
        p.add_argument("--json", metavar="PATH", type=json_path, help="write results as JSON")
        p.add_argument("--rounds", type=int_in(2, 100_000), default=6, help="rounds per case (the first is warm-up)")
        p.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
        p.add_argument("--bf16", action="store_true", help="unquantized dispatch (activations on the wire)")
        p.set_defaults(run=lambda args, stage=stage: _run(args, stage))
