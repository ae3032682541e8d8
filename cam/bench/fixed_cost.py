"""cam-bench fixed: what one op call costs when the op has (almost) nothing to do, against a raw torch op on the same
tiny tensor in the same run (the target: at most 10x torch.abs)."""

from .common import fixed_cost, float_in, json_path, print_table, write_json


def run(args) -> int:
    import cam

    r = fixed_cost(args.budget)
    print_table(
        f"fixed cost of one op call on backend '{cam.backend()}' (median)",
        ["op", "op µs", "torch.abs µs", "op / torch.abs"],
        [[r["case"], f"{r['op_s'] * 1e6:.1f}", f"{r['baseline_s'] * 1e6:.2f}", f"{r['op_over_baseline']:.1f}"]],
    )
    write_json(args.json, "fixed", [r], baseline="torch.abs(x, out=) on the same [1, 32] bf16 tensor, same run")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("fixed", help="fixed cost of a one-block, zero-work op call vs torch.abs")
    p.add_argument("--json", metavar="PATH", type=json_path, help="write results as JSON")
    p.add_argument("--budget", type=float_in(0.0, 3600.0), default=2.0, help="seconds per side, at least 3 calls")
    p.set_defaults(run=run)
