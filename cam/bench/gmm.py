"""cam-bench gmm_swiglu_quant_multi_layer (W1, alias gmm1) / gmm_multi_layer (W2, alias gmm2): the layer-select
grouped matmuls on the current backend against a torch baseline measured in the same run: a per-group matmul (fp32 matmul of the
int8-valued operands, weights converted once up front) followed by the same epilogue in vectorized torch ops.

Throughput counts the matmul work actually done, 2 * rows * K * N per second, with rows = the groups' total.
The shape is DeepSeek-V3-like (hidden 7168, moe intermediate 2048, 8 local experts on an FFN rank) scaled down so
a run takes seconds on 2 CPUs; group sizes are balanced, skewed (halving per expert) and all-on-one-expert.

A second baseline is ``torch._int_mm`` on the same groups with torch's threads (the int8 matmul alone, the yardstick of
the twin's target: W1 / W2 >= 0.3x of it)."""

from .common import float_in, int_in, int_mm_groups, json_path, print_table, summarize, time_call, write_json

_W1, _W2 = "gmm_swiglu_quant_multi_layer", "gmm_multi_layer"

# Scaled DeepSeek-like FFN rank: H = 7168 / 7, I = 2048 / 8, E_local = 8 (256 routed experts over 32 FFN ranks).
_HIDDEN, _INTER, _EXPERTS, _LAYERS = 1024, 256, 8, 3


def _groups(kind: str, rows: int, experts: int) -> list[int]:
    if kind == "balanced":
        base = [rows // experts] * experts
        base[-1] += rows - sum(base)
        return base
    if kind == "skewed":  # each expert gets half of what is left, the last takes the rest
        out, left = [], rows
        for _ in range(experts - 1):
            out.append(left // 2)
            left -= left // 2
        return out + [left]
    if kind == "one_expert":
        return [rows] + [0] * (experts - 1)
    raise ValueError(kind)


def _setup(k: int, n: int, rows: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-128, 128, (rows, k), generator=g, dtype=torch.int8)
    xs = torch.rand(rows, generator=g) * 1e-2 + 1e-3
    ws = [torch.randint(-128, 128, (_EXPERTS, k, n), generator=g, dtype=torch.int8) for _ in range(_LAYERS)]
    ss = [torch.rand(_EXPERTS, n, generator=g) * 1e-2 + 1e-3 for _ in range(_LAYERS)]
    return x, xs, ws, ss


def _torch_w1(x, xs, wf, ws, counts):
    """Per-group fp32 matmul, dequant, SwiGLU, per-row quant (same formulas, not bit-identical)."""
    import torch

    half = wf.shape[2] // 2
    y = torch.empty(x.shape[0], half, dtype=torch.int8)
    ys = torch.empty(x.shape[0])
    start = 0
    for e, c in enumerate(counts):
        if c:
            rows = slice(start, start + c)
            acc = x[rows].float() @ wf[e]
            cc = acc * xs[rows, None] * ws[e][None, :]
            act, gate = cc[:, :half], cc[:, half:]
            s = act / (1 + torch.exp(-act)) * gate
            amax = s.abs().amax(dim=1, keepdim=True)
            y[rows] = torch.clamp(torch.round(s * (127.0 / amax)), -127, 127).to(torch.int8)
            ys[rows] = (amax / 127.0).squeeze(1)
        start += c
    return y, ys


def _torch_w2(y, ys, wf, ws, counts):
    import torch

    out = torch.empty(y.shape[0], wf.shape[2], dtype=torch.bfloat16)
    start = 0
    for e, c in enumerate(counts):
        if c:
            rows = slice(start, start + c)
            out[rows] = ((y[rows].float() @ wf[e]) * ys[rows, None] * ws[e][None, :]).to(torch.bfloat16)
        start += c
    return out


def _run(args, which: str) -> int:
    import torch

    import cam

    torch.manual_seed(0)
    k, n = (_HIDDEN, 2 * _INTER) if which == _W1 else (_INTER, _HIDDEN)
    layer = 1
    results, table = [], []
    x, xs, ws, ss = _setup(k, n, args.rows, seed=1 if which == _W1 else 2)
    lw = cam.LayerWeights(ws, ss)
    wf = ws[layer].float()  # the baseline's preferred layout, prepared once like the op's NZ prepack
    li = torch.tensor([layer], dtype=torch.int64)
    for kind in args.groups:
        counts = _groups(kind, args.rows, _EXPERTS)
        gl = torch.tensor(counts, dtype=torch.int64)
        if which == _W1:
            y = torch.empty(args.rows, n // 2, dtype=torch.int8)
            ysc = torch.empty(args.rows)
            op = lambda: cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, gl, li, 1, out=(y, ysc))  # noqa: E731
            base = lambda: _torch_w1(x, xs, wf, ss[layer], counts)  # noqa: E731
        else:
            out = torch.empty(args.rows, n, dtype=torch.bfloat16)
            op = lambda: cam.ops.gmm_multi_layer(x, xs, lw, gl, li, 1, out=out)  # noqa: E731
            base = lambda: _torch_w2(x, xs, wf, ss[layer], counts)  # noqa: E731
        t_op = summarize(time_call(op, warmup=2, repeat=args.repeat, budget_s=args.budget))
        t_base = summarize(time_call(base, warmup=2, repeat=args.repeat, budget_s=args.budget))
        t_mm = summarize(time_call(lambda: int_mm_groups(x, ws[layer], counts), warmup=2, repeat=args.repeat,
                                   budget_s=args.budget))
        work = 2.0 * sum(counts) * k * n
        r = {
            "op": which,
            "groups": kind,
            "group_sizes": counts,
            "M": args.rows,
            "K": k,
            "N": n,
            "E_local": _EXPERTS,
            "layers": _LAYERS,
            "op_median_s": t_op["median_s"],
            "baseline_median_s": t_base["median_s"],
            "op_GOPs": work / t_op["median_s"] / 1e9,
            "baseline_GOPs": work / t_base["median_s"] / 1e9,
            "op_over_baseline": t_base["median_s"] / t_op["median_s"],
            "int_mm_median_s": t_mm["median_s"],
            "int_mm_GOPs": work / t_mm["median_s"] / 1e9,
            "op_over_int_mm": t_mm["median_s"] / t_op["median_s"],
            "torch_threads": torch.get_num_threads(),
        }
        results.append(r)
        table.append([kind, args.rows, k, n, f"{r['op_GOPs']:.2f}", f"{r['baseline_GOPs']:.2f}",
                      f"{r['op_over_baseline']:.3f}", f"{r['int_mm_GOPs']:.2f}", f"{r['op_over_int_mm']:.3f}"])
    print_table(
        f"{results[0]['op']} on backend '{cam.backend()}' vs torch per-group matmul and torch._int_mm per group "
        f"({torch.get_num_threads()} torch threads; 2*rows*K*N per second, median; ratio > 1: op faster)",
        ["groups", "M", "K", "N", "op GOP/s", "torch GOP/s", "op/torch", "_int_mm GOP/s", "op/_int_mm"],
        table,
    )
    write_json(
        args.json,
        which,
        results,
        baseline="torch per-group fp32 matmul of the int8 operands + the same epilogue in torch ops, same process; "
                 "and torch._int_mm per group (int8 matmul alone) with torch's threads",
        work="2 * rows * K * N, rows = sum(group sizes)",
    )
    return 0


class _Asked(Exception):
    """Raised by workspace_bytes' allocator: the size is all it wanted, nothing is launched."""


def workspace_bytes(op: str, m: int, k: int, n: int, experts: int, *, k_groups: int = 1, int4: bool = False,
                    layers: int = 1) -> int:
    """The workspace bytes the op's host asks for at these shapes (its GetWorkspaceSize, through the binding), without
    any data: every tensor is a shape-only descriptor, and the allocator records the request and stops the call
    before the launch. op: W1 (gmm_swiglu_quant_multi_layer, n = the act|gate width) or W2 (gmm_multi_layer);
    k_groups: scale groups along K (1: per output channel); int4: the W4A8 form (packed int4 weights, colsums)."""
    import torch

    from .. import _C, _runtime
    from .._tensor import shape_desc

    # The host refuses a null address outside an argument check and never dereferences one before the launch, so
    # each tensor gets an address of its own, 2^36 bytes apart (never overlapping), that nothing reads.
    addresses = iter(range(1 << 40, 1 << 41, 1 << 36))

    def meta(*shape, dtype):
        _, dims, strides, code = shape_desc(torch.empty(*shape, dtype=dtype, device="meta"))
        return (next(addresses), dims, strides, code)

    if int4:
        w = meta(experts, -(-k // 64), -(-n // 16), 16, 32, dtype=torch.uint8)
    else:
        w = meta(experts, -(-n // 32), -(-k // 16), 16, 32, dtype=torch.int8)
    scale = meta(experts, k_groups, n, dtype=torch.float32) if k_groups > 1 else meta(experts, n, dtype=torch.float32)
    colsums = meta(layers, experts, k_groups, n, dtype=torch.int32) if int4 else None
    x, xs = meta(m, k, dtype=torch.int8), meta(m, dtype=torch.float32)
    gl, li = meta(experts, dtype=torch.int64), meta(1, dtype=torch.int64)
    asked = []

    def allocate(nbytes):
        asked.append(nbytes)
        raise _Asked

    if op not in (_W1, _W2):
        raise ValueError(f"op must be {_W1!r} or {_W2!r}, got {op!r}")
    try:
        if op == _W1:
            _C.gmm_swiglu_quant_multi_layer(x, xs, [w] * layers, [scale] * layers, gl, li, 1,
                                            meta(m, n // 2, dtype=torch.int8), meta(m, dtype=torch.float32), None,
                                            colsums,
                                            _runtime.default_stream(), allocate)
        else:
            _C.gmm_multi_layer(x, xs, [w] * layers, [scale] * layers, gl, li, 1, meta(m, n, dtype=torch.bfloat16),
                               None, colsums, _runtime.default_stream(), allocate)
    except _Asked:
        pass
    if len(asked) != 1:
        raise RuntimeError(f"{op}: the host asked for no workspace at these shapes")
    return asked[0]


def _add(sub, which: str, alias: str, help_text: str) -> None:
    p = sub.add_parser(which, aliases=[alias], help=help_text)
    p.add_argument("--json", metavar="PATH", type=json_path, help="write results as JSON")
    p.add_argument("--rows", type=int_in(1, 1 << 16), default=512, help="row capacity M, all rows in groups (default 512)")
    p.add_argument("--groups", nargs="+", default=["balanced", "skewed", "one_expert"],
                   choices=["balanced", "skewed", "one_expert"])
    p.add_argument("--repeat", type=int_in(1, 100_000), default=10, help="max timed calls per case")
    p.add_argument("--budget", type=float_in(0.0, 3600.0), default=2.0, help="seconds per case, at least 3 calls")
    p.set_defaults(run=lambda args: _run(args, which))


def add_parsers(sub) -> None:
    _add(sub, _W1, "gmm1", "W1 vs a torch per-group matmul baseline")
    _add(sub, _W2, "gmm2", "W2 vs a torch per-group matmul baseline")
