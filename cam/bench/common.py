"""Timing, baselines and reporting shared by the cam-bench suites (and by benchmarks/twin_speed.py, which loads this
file by path so it runs against any cam install)."""

import argparse
import json
import math
import os
import platform
import statistics
import time

import numpy as np


def time_call(fn, *, warmup: int, repeat: int, budget_s: float) -> list[float]:
    """Wall seconds of ``fn()`` per call: ``warmup`` untimed calls, then up to ``repeat`` timed ones or until
    ``budget_s`` is spent (at least 3 timed calls)."""
    for _ in range(warmup):
        fn()
    samples = []
    start = time.perf_counter()
    while len(samples) < repeat and (len(samples) < 3 or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def llc_bytes() -> int:
    """Largest cache of cpu0 in sysfs (the last level), falling back to /proc/cpuinfo's "cache size"."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            try:
                with open(os.path.join(base, entry, "size")) as f:
                    text = f.read().strip()
            except OSError:
                continue
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            digits = text[:-1] if text[-1:] in "KMG" else text
            if digits.isdigit():
                best = max(best, int(digits) * mult)
    except OSError:
        pass
    if best == 0:
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("cache size"):
                        best = int(line.split(":")[1].split()[0]) * 1024
                        break
        except (OSError, ValueError, IndexError):
            pass
    return best or (32 << 20)


def cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return sorted(have & {"avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8",
                                          "amx_tile", "amx_bf16"})
    except OSError:
        pass
    return []


class ColdMemcpy:
    """Single-threaded memcpy (numpy copyto) whose source and destination walk through pools of ``2 * LLC`` bytes
    each, so a copy never finds its bytes in cache: the conditions an op meets with fresh activations. (A buffer
    copied again and again stays in cache and reads 2-5x faster, which made op/memcpy ratios incomparable across
    runs.) Single-threaded on purpose: a multi-threaded copy on a shared, loaded machine waits for its slowest
    thread's time slice."""

    def __init__(self, llc: int):
        self.llc = llc
        self.pool = max(2 * llc, 64 << 20)
        self.src = np.ones(self.pool, dtype=np.uint8)
        # Destination offset by a page and a line: equally aligned buffers alias in the caches.
        self.dst = np.empty(self.pool + 4160, dtype=np.uint8)[4160:]
        self.dst[:] = 0  # first touch outside the timing
        self.pos = 0
        self._gbps = None

    def seconds(self, nbytes: int, repeat: int) -> float:
        """Median seconds of one cold copy of ``nbytes``."""
        n = max(int(nbytes), 64)
        if n > self.pool // 2:
            raise ValueError(f"cold memcpy of {n} bytes needs pools above {2 * n} bytes")
        samples = []
        for _ in range(repeat):
            if self.pos + n > self.pool:
                self.pos = 0
            s, d = self.src[self.pos:self.pos + n], self.dst[self.pos:self.pos + n]
            self.pos += (n + 4095) // 4096 * 4096
            t0 = time.perf_counter()
            np.copyto(d, s)
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    def gbps(self) -> float:
        """Absolute GB/s of a large cold copy (a quarter of the pool, at most 256 MiB), measured once."""
        if self._gbps is None:
            n = min(self.pool // 4, 256 << 20)
            self._gbps = n / self.seconds(n, 5) / 1e9
        return self._gbps


def summarize(samples: list[float]) -> dict:
    return {"median_s": statistics.median(samples), "min_s": min(samples), "samples": len(samples)}


def print_table(title: str, columns: list[str], rows: list[list]) -> None:
    text = [[str(c) for c in row] for row in rows]
    widths = [max(len(columns[i]), *(len(r[i]) for r in text)) for i in range(len(columns))]
    print(title)
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for r in text:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


def write_json(path: str | None, suite: str, results: list[dict], **extra) -> None:
    if not path:
        return
    import cam

    doc = {
        "suite": suite,
        "cam_version": cam.__version__,
        "backend": cam.backend(),
        "platform": cam._C.platform(),
        "host": platform.platform(),
        "results": results,
        **extra,
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"wrote {path}")


def int_in(lo: int, hi: int):
    """argparse type: an int in [lo, hi]; anything else is a usage error (exit 2) naming the flag."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be in [{lo}, {hi}], got {value}")
        return value

    parse.__name__ = "int"
    return parse


def json_path(text: str) -> str:
    """argparse type of --json: a file that can be written, checked before the benchmark runs (not after it)."""
    parent = os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text) or not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text!r} (a directory, or a missing or read-only folder)")
    return text


def float_in(lo: float, hi: float):
    """argparse type: a finite float in (lo, hi]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or not lo < value <= hi:
            raise argparse.ArgumentTypeError(f"must be a finite number in ({lo:g}, {hi:g}], got {text}")
        return value

    parse.__name__ = "float"
    return parse


def plane_ids(topo):
    """Each Attention rank's [Bmax, K] routed ids of the benchmark plane (seeded)."""
    import torch

    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, topo.E, (topo.Bmax, topo.K), generator=g, dtype=torch.int32) for _ in range(topo.A)]


def run_plane(topo, rounds: int, dtype):
    """Rounds of dispatch_send -> dispatch_recv -> combine_send -> combine_recv on an in-process plane (ranks are
    threads); barriers separate the dispatch stage (all Attention ranks send, every FFN rank receives its work
    items, one per replica) from the combine stage (every FFN rank sends each work item back, every Attention rank
    reduces). Each stage holds its own ops only: the FFN ranks keep the round's work items and combine them all in
    the combine stage (an earlier version sent the first replica's rows back between the two dispatch_recvs, so
    the dispatch stage carried half of combine_send's work). Returns the seconds of each round's dispatch and
    combine stage and the ids used. Public cam API only."""
    import threading
    import uuid

    import cam
    import torch

    world = topo.world_size
    barrier = threading.Barrier(world + 1, timeout=300)
    ids = plane_ids(topo)
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
                    items = []
                    if comm.is_attention:
                        cam.ops.dispatch_send(comm, xs[rank], ids[rank], 0)
                    else:
                        while len(items) < topo.D:  # one work item per replica this round (empty ones: idle polls)
                            _, _, _, wi = cam.ops.dispatch_recv(comm)
                            if not cam.WorkItem(wi).is_empty:
                                items.append(wi)
                    barrier.wait()  # dispatch stage done
                    if comm.is_attention:
                        cam.ops.combine_recv(comm, ids[rank], ws[rank])
                    else:
                        for wi in items:
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
        if t.is_alive():
            raise RuntimeError("a benchmark rank did not end within 300 s")
    if errors:
        raise errors[0]
    return dispatch_s, combine_s, ids


def torch_quant(x):
    """torch's own per-token quant of ``x`` in vectorized torch ops (the formula of dynamic_quant, not bit-identical
    on tiny rows): the baseline of what the same work costs in torch on this machine."""
    import torch

    xf = x.float()
    amax = xf.abs().amax(dim=1, keepdim=True)
    q = torch.clamp(torch.round(xf * (127.0 / amax)), -127, 127).to(torch.int8)
    return q, (amax / 127.0).squeeze(1)


def int_mm_groups(x, weights, counts):
    """``torch._int_mm`` per group on the rows of each expert (int8 x int8 -> int32): the int8 matmul alone, with
    torch's own threads, as the yardstick of W1 / W2. ``weights`` is [E, K, N] int8 (row-major K x N per expert)."""
    import torch

    start = 0
    for e, c in enumerate(counts):
        if c:
            torch._int_mm(x[start:start + c], weights[e])
        start += c


def fixed_cost(budget_s: float, repeat: int = 2000) -> dict:
    """The fixed cost of one op call: dynamic_quant on a [1, 32] bf16 tensor with out= given (one block, nearly no
    work: argument checks, descriptors, dispatch, launch, synchronize) against ``torch.abs(x, out=)`` on the same
    tensor, both medians of the same run. Public cam API only."""
    import cam
    import torch

    x = torch.randn(1, 32).to(torch.bfloat16)
    q, s = torch.empty(1, 32, dtype=torch.int8), torch.empty(1)
    a = torch.empty_like(x)
    op_s = statistics.median(time_call(lambda: cam.ops.dynamic_quant(x, out=(q, s)), warmup=20, repeat=repeat,
                                       budget_s=budget_s))
    abs_s = statistics.median(time_call(lambda: torch.abs(x, out=a), warmup=20, repeat=repeat, budget_s=budget_s))
    return {"op": "fixed cost", "case": "dynamic_quant on [1, 32] bf16, out= given", "op_s": op_s,
            "baseline": "torch.abs(x, out=) on the same tensor", "baseline_s": abs_s, "ratio": abs_s / op_s,
            "op_over_baseline": op_s / abs_s, "target": 0.1}
