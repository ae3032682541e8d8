"""cam-bench dispatch / combine: the data plane with in-process ranks (threads), against a memcpy of the same bytes
measured in the same run.

One plane runs rounds of dispatch_send -> dispatch_recv -> combine_send -> combine_recv; barriers separate the
dispatch stage (all Attention ranks send, every FFN rank receives its work item) from the combine stage (every
FFN rank sends back, every Attention rank reduces). Effective bytes are what the stage delivers: dispatch, the rows
(and scales) materialized on the FFN ranks; combine, the expert rows written back to the Attention ranks. The
baseline copies that many bytes with one torch memcpy on the same machine in the same run.
"""

from __future__ import annotations

import threading
import time
import uuid

import numpy as np
import torch

from .common import int_in, print_table, write_json

_CASES = [
    # D, P, F, E, K, H, B
    (2, 1, 2, 16, 4, 2048, 128),
    (2, 2, 2, 16, 8, 1024, 128),
    (4, 1, 4, 32, 8, 2048, 64),
]


def _delivered_bytes(topo, ids_per_rank, stage: str) -> int:
    rows = sum(int((ids != -1).sum()) for ids in ids_per_rank)
    if stage == "dispatch":
        return rows * (topo.H * topo.dispatch_elem_bytes + (4 if topo.quantized else 0))
    return rows * topo.H * topo.act_dtype_bytes


def _memcpy_seconds(nbytes: int, repeat: int) -> float:
    """Best-of-``repeat`` seconds of one single-threaded memcpy of ``nbytes`` (numpy copyto). Single-threaded on
    purpose: a multi-threaded copy on a shared, loaded machine waits for its slowest thread's time slice and
    would make the baseline look many times slower than memory is."""
    n = max(nbytes, 1)
    src = np.ones(n, dtype=np.uint8)
    # Offset the destination by a page and a line: power-of-two sizes with equally aligned buffers alias in the
    # caches and would also understate memcpy.
    dst = np.empty(n + 4160, dtype=np.uint8)[4160:]
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return best


def _ids(topo) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, topo.E, (topo.Bmax, topo.K), generator=g, dtype=torch.int32) for _ in range(topo.A)]


def _run_plane(topo, rounds: int, dtype) -> tuple[list[float], list[float], list[torch.Tensor]]:
    import cam

    world = topo.world_size
    barrier = threading.Barrier(world + 1, timeout=300)
    ids = _ids(topo)
    g = torch.Generator().manual_seed(1)
    xs = [(torch.randn((topo.Bmax, topo.H), generator=g)).to(dtype) for _ in range(topo.A)]
    ws = [torch.rand((topo.Bmax, topo.K), generator=g) for _ in range(topo.A)]
    errors = []
    group = f"bench-{uuid.uuid4().hex[:8]}"

    def rank_main(rank: int) -> None:
        try:
            with cam.Comm(topo, rank, group=group, dtype=dtype, idle_poll_s=0.5) as comm:
                out = torch.zeros((topo.recv_rows, topo.H), dtype=dtype)
                for _ in range(rounds):
                    barrier.wait()
                    if comm.is_attention:
                        cam.ops.dispatch_send(comm, xs[rank], ids[rank], 0)
                        wi = None
                    else:
                        served = 0
                        while served < topo.D:  # one work item per replica this round
                            if served:
                                cam.ops.combine_send(comm, out, wi)
                            _, _, _, wi = cam.ops.dispatch_recv(comm)
                            served += int(wi[0])
                    barrier.wait()  # dispatch stage done
                    if comm.is_attention:
                        cam.ops.combine_recv(comm, ids[rank], ws[rank])
                    else:
                        cam.ops.combine_send(comm, out, wi)
                    barrier.wait()  # combine stage done
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    dispatch_s, combine_s = [], []
    try:
        for _ in range(rounds):
            barrier.wait()
            t0 = time.perf_counter()
            barrier.wait()
            t1 = time.perf_counter()
            barrier.wait()
            t2 = time.perf_counter()
            dispatch_s.append(t1 - t0)
            combine_s.append(t2 - t1)
    except threading.BrokenBarrierError:
        pass
    for t in threads:
        t.join(300)
    if errors:
        raise errors[0]
    return dispatch_s, combine_s, ids


def _run(args, stage: str) -> int:
    import cam

    dtype = getattr(torch, args.dtype)
    results, rows = [], []
    for D, P, F, E, K, H, B in _CASES:
        topo = cam.Topology(D=D, P=P, F=F, E=E, K=K, H=H, Bmax=B, L=1, slots=2, quantized=not args.bf16)
        nbytes = _delivered_bytes(topo, _ids(topo), stage)
        before_s = _memcpy_seconds(nbytes, repeat=30)
        dispatch_s, combine_s, _ = _run_plane(topo, args.rounds, dtype)
        samples = (dispatch_s if stage == "dispatch" else combine_s)[1:]  # first round warms up
        op_s = sorted(samples)[len(samples) // 2]
        # before and after the plane, best of both: a neighbour's burst on a shared machine only ever slows it
        base_s = min(before_s, _memcpy_seconds(nbytes, repeat=30))
        r = {
            "op": stage,
            "D": D, "P": P, "F": F, "E": E, "K": K, "H": H, "B": B,
            "quantized": topo.quantized,
            "dtype": args.dtype,
            "bytes": nbytes,
            "op_median_s": op_s,
            "memcpy_s": base_s,
            "op_GBps": nbytes / op_s / 1e9,
            "memcpy_GBps": nbytes / base_s / 1e9,
            "op_over_memcpy": base_s / op_s,
            "rounds": len(samples),
        }
        results.append(r)
        rows.append([f"{D}x{P}+{F}", E, K, H, B, "int8" if topo.quantized else args.dtype, f"{nbytes / 1e6:.2f}",
                     f"{r['op_GBps']:.3f}", f"{r['memcpy_GBps']:.2f}", f"{r['op_over_memcpy']:.4f}"])
    print_table(
        f"{stage} on backend '{cam.backend()}', in-process ranks (effective GB/s, median round; memcpy of the same "
        "bytes in the same run)",
        ["DxP+F", "E", "K", "H", "B", "wire", "MB", "op GB/s", "memcpy GB/s", "op/memcpy"],
        rows,
    )
    write_json(args.json, stage, results,
               baseline="single-threaded memcpy (numpy copyto) of the stage's delivered bytes, best of 30 before and after the plane, same run")
    return 0


def add_parsers(sub) -> None:
    for stage, text in (("dispatch", "dispatch_send + dispatch_recv"), ("combine", "combine_send + combine_recv")):
        p = sub.add_parser(stage, help=f"{text} vs a memcpy of the same bytes")
        p.add_argument("--json", metavar="PATH", help="write results as JSON")
        p.add_argument("--rounds", type=int_in(2, 100_000), default=6, help="rounds per case (the first is warm-up)")
        p.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
        p.add_argument("--bf16", action="store_true", help="unquantized dispatch (activations on the wire)")
        p.set_defaults(run=lambda args, stage=stage: _run(args, stage))
