"""cam-bench quant: dynamic_quant (the Ascend C kernel on the current backend) vs a vectorized torch baseline of
the same math, measured side by side."""

import torch

from .common import float_in, int_in, print_table, summarize, time_call, write_json

# Token counts x hidden sizes of a DeepSeek-like prefill, scaled so a run takes seconds on 2 CPUs.
_SHAPES = [(128, 2048), (512, 2048), (256, 7168), (64, 16384)]


def torch_baseline(x: torch.Tensor):
    """Per-token quant in vectorized torch ops (same formula as the kernel, not bit-identical on tiny rows)."""
    xf = x.float()
    amax = xf.abs().amax(dim=1, keepdim=True)
    inv = 127.0 / amax
    q = torch.clamp(torch.round(xf * inv), -127, 127).to(torch.int8)
    return q, (amax / 127.0).squeeze(1)


def run(args) -> int:
    import cam

    torch.manual_seed(0)
    results, rows = [], []
    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        for m, h in _SHAPES:
            x = torch.randn(m, h, dtype=dtype)
            op = summarize(time_call(lambda: cam.ops.dynamic_quant(x), warmup=2, repeat=args.repeat, budget_s=args.budget))
            base = summarize(time_call(lambda: torch_baseline(x), warmup=2, repeat=args.repeat, budget_s=args.budget))
            nbytes = x.numel() * x.element_size()
            r = {
                "op": "dynamic_quant",
                "dtype": dtype_name,
                "M": m,
                "H": h,
                "op_median_s": op["median_s"],
                "baseline_median_s": base["median_s"],
                "op_GBps": nbytes / op["median_s"] / 1e9,
                "baseline_GBps": nbytes / base["median_s"] / 1e9,
                "op_over_baseline": base["median_s"] / op["median_s"],
            }
            results.append(r)
            rows.append([dtype_name, m, h, f"{r['op_GBps']:.3f}", f"{r['baseline_GBps']:.3f}", f"{r['op_over_baseline']:.2f}"])
    print_table(
        f"dynamic_quant on backend '{cam.backend()}' vs torch baseline (input GB/s, median; ratio > 1: op faster)",
        ["dtype", "M", "H", "op GB/s", "torch GB/s", "op/torch"],
        rows,
    )
    write_json(args.json, "quant", results, baseline="vectorized torch per-token quant, same process, same run")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("dynamic_quant", aliases=["quant"], help="dynamic_quant vs a torch baseline")
    p.add_argument("--json", metavar="PATH", help="write results as JSON")
    p.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"], choices=["bfloat16", "float16"])
    p.add_argument("--repeat", type=int_in(1, 100_000), default=20, help="max timed calls per case")
    p.add_argument("--budget", type=float_in(0.0, 3600.0), default=1.0, help="seconds per case, at least 3 calls")
    p.set_defaults(run=run)
