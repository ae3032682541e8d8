"""The least time a class of GMM schedules can take in the twin's timing model: a floor, not a bound.

A bound (:mod:`cam.bench.bounds`) comes from the op's semantics alone: every weight, x row and output crossing HBM
once. A floor adds what A2/A3 forces on every schedule of the class cam's W1 and W2 belong to, and takes the best
case of everything else, so no schedule of the class is predicted faster by the same model:

- **Output-stationary units in L0C.** A unit's int32 accumulator lives in L0C (128 KiB: ``tm · tn ≤ l0c / 4``)
  over the whole K; each row tile of a group streams that group's whole K × N weight once, and each n-tile streams
  the tile's rows of x once, unless the tile's rows fit L1 over all K (then x is read once per row tile; the whole
  L1 is granted to x, more than any schedule has, since the weights' chunks need room too).
- **The accumulator leaves the cube through GM as int32.** On A2/A3 ``Fixpipe`` writes L0C to GM or L1, not to the
  vector cores' UB, and the dequant of docs/gmm.md §1 is not one of its quant modes: each output element's int32
  crosses GM once (written, then read by the vector cores).
- **Best case for the rest.** Every re-read (a weight's second and later reads, x's re-reads, the accumulator's
  read) hits L2; every first read misses; the cores' own pipes cost nothing; the work divides evenly over cores.

The model's memory rule (docs/twin.md "Timing model", "Memory."): a stretch lasts at least
``(missed reads + writes) / hbm_bytes_per_s_die + hit reads / l2 bandwidth``. The floor is the larger of the least
such time over every tile shape (``tm`` any height, ``tn`` a multiple of the 16-column fractal) and the cube's
compute time. Schedules outside the class (partial sums accumulated across K outside L0C, x kept over K in a taller
tile than L1 holds) move more bytes through GM, not fewer."""

from __future__ import annotations

from math import ceil

GMM_OPS = ("gmm_swiglu_quant_multi_layer", "gmm_multi_layer")

_ACC = 4         # int32 accumulator bytes
_SCALE = 4       # fp32 scale per row / per weight column
_FRACTAL_N = 16  # an NZ fractal's columns: n-tiles are whole fractals
_L0C_BYTES = 128 * 1024  # L0C of the A2/A3 descriptions (docs/twin.md "Core kinds and memories")
_L1_BYTES = 512 * 1024   # L1 of the same descriptions


def gmm_schedule_floor(op: str, group_rows, *, H: int, I: int, device: dict, l2: str = "lo",
                       l0c_bytes: int = _L0C_BYTES, l1_bytes: int = _L1_BYTES) -> dict:
    """The floor of `op` (W1 ``gmm_swiglu_quant_multi_layer`` or W2 ``gmm_multi_layer``, W8A8) on one FFN rank whose
    experts hold ``group_rows`` rows each, on ``device`` (the timing constants by name) at the L2 bandwidth's ``l2``
    end ("lo" or "hi"). Returns the floor in seconds, the tile shape that reaches it, what binds it ("memory" or
    "cube") and the byte counts of that shape."""
    if op not in GMM_OPS:
        raise ValueError(f"op {op!r} is not one of {GMM_OPS}")
    if l2 not in ("lo", "hi"):
        raise ValueError(f"l2 must be 'lo' or 'hi', got {l2!r}")
    rows = [int(r) for r in group_rows]
    if any(r < 0 for r in rows):
        raise ValueError(f"group_rows must be non-negative, got {rows}")
    for name, v in (("H", H), ("I", I), ("l0c_bytes", l0c_bytes), ("l1_bytes", l1_bytes)):
        if not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if op == "gmm_swiglu_quant_multi_layer":  # x [R, H] int8 -> [R, 2I] int32 -> y [R, I] int8 + y_scale
        k, n, out_row = H, 2 * I, I + _SCALE
    else:  # y [R, I] int8 -> [R, H] int32 -> out [R, H] bf16
        k, n, out_row = I, H, 2 * H
    total = sum(rows)
    active = [r for r in rows if r]
    hbm_rate = device["hbm_bytes_per_s_die"]
    l2_rate = device[f"l2_bytes_per_s_die_{l2}"]
    cube_s = total * k * n / (device["aic_per_die"] * device["cube_int8_macs_per_cycle"] * device["core_clock_hz"])
    # What every schedule of the class moves whatever its tiles: each active weight, its column scales, x and its
    # row scales read once from HBM; the accumulator written once and read back once; the output written once.
    first_reads = len(active) * (k * n + n * _SCALE) + total * (k + _SCALE)
    writes = total * n * _ACC + total * out_row
    acc_reads = total * n * _ACC
    best = None
    for tn in range(_FRACTAL_N, ceil(n / _FRACTAL_N) * _FRACTAL_N + 1, _FRACTAL_N):
        for tm in range(1, l0c_bytes // (_ACC * tn) + 1):
            weight_reads = sum(ceil(r / tm) for r in active) * k * n
            x_reads = total * k * (1 if tm * k <= l1_bytes else ceil(n / tn))
            rereads = weight_reads + x_reads - len(active) * k * n - total * k
            seconds = (first_reads + writes) / hbm_rate + (rereads + acc_reads) / l2_rate
            if best is None or seconds < best["memory_s"]:
                best = {"memory_s": seconds, "tm": tm, "tn": tn, "hbm_bytes": first_reads + writes,
                        "l2_bytes": rereads + acc_reads}
    if best is None:  # no tile fits L0C: no schedule of the class exists
        raise ValueError(f"no tile of at least 1 x {_FRACTAL_N} int32 fits l0c_bytes {l0c_bytes}")
    floor = max(best["memory_s"], cube_s)
    return {"floor_s": floor, "limit": "memory" if best["memory_s"] >= cube_s else "cube", "cube_s": cube_s, **best}
