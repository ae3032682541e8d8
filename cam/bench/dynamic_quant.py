"""cam-bench quant: dynamic_quant (the Ascend C kernel on the current backend) vs torch's own per-token quant of the
same math and vs a cold memcpy of the input bytes, measured side by side in the same run."""

from .common import (ColdMemcpy, float_in, int_in, json_path, llc_bytes, print_table, summarize, time_call, torch_quant,
                     write_json)

# Token counts x hidden sizes of a DeepSeek-like prefill, scaled so a run takes seconds on 2 CPUs.
_SHAPES = [(128, 2048), (512, 2048), (256, 7168), (64, 16384)]


def run(args) -> int:
    import torch

    import cam

    torch.manual_seed(0)
    cold = ColdMemcpy(llc_bytes())
    results, rows = [], []
    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        for m, h in _SHAPES:
            x = torch.randn(m, h, dtype=dtype)
            op = summarize(time_call(lambda: cam.ops.dynamic_quant(x), warmup=2, repeat=args.repeat, budget_s=args.budget))
            base = summarize(time_call(lambda: torch_quant(x), warmup=2, repeat=args.repeat, budget_s=args.budget))
            nbytes = x.numel() * x.element_size()
            cold_s = cold.seconds(nbytes, repeat=15)
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
                "cold_memcpy_s": cold_s,
                "op_over_cold_memcpy": cold_s / op["median_s"],
            }
            results.append(r)
            rows.append([dtype_name, m, h, f"{r['op_GBps']:.3f}", f"{r['baseline_GBps']:.3f}", f"{r['op_over_baseline']:.2f}",
                         f"{r['op_over_cold_memcpy']:.3f}"])
    print_table(
        f"dynamic_quant on backend '{cam.backend()}' vs torch's quant and a cold memcpy of the input bytes (input GB/s, "
        f"median; ratio > 1: op faster; a large cold memcpy ran at {cold.gbps():.2f} GB/s)",
        ["dtype", "M", "H", "op GB/s", "torch GB/s", "op/torch", "op/cold memcpy"],
        rows,
    )
    write_json(args.json, "quant", results, baseline="vectorized torch per-token quant, same process, same run; and a cold single-threaded memcpy of "
                        "the input bytes", llc_bytes=cold.llc, cold_memcpy_GBps=cold.gbps())
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("dynamic_quant", aliases=["quant"], help="dynamic_quant vs a torch baseline")
    p.add_argument("--json", metavar="PATH", type=json_path, help="write results as JSON")
    p.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"], choices=["bfloat16", "float16"])
    p.add_argument("--repeat", type=int_in(1, 100_000), default=20, help="max timed calls per case")
    p.add_argument("--budget", type=float_in(0.0, 3600.0), default=1.0, help="seconds per case, at least 3 calls")
    p.set_defaults(run=run)
