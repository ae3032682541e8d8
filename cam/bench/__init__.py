"""``cam-bench``: per-op microbenchmarks. Each subcommand times the op and a baseline in the same run (the machines
are shared and noisy, so only the ratio is meaningful), prints a table and writes ``--json PATH``."""

import argparse
import importlib
import sys

# Subcommand modules; each exposes add_parsers(subparsers), registering parsers whose `run` default does the work.
_SUITES = ("dynamic_quant", "gmm", "dataplane", "ffn_loop", "fixed_cost", "expert_bytes", "predict")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="cam-bench", description=__doc__)
    sub = parser.add_subparsers(dest="suite", required=True)
    for name in _SUITES:
        importlib.import_module(f"{__name__}.{name}").add_parsers(sub)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
