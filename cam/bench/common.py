"""Timing and reporting shared by the cam-bench suites."""

import argparse
import json
import math
import platform
import statistics
import time


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
