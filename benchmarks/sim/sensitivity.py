"""Sensitivity of the afd-a3 study's headline figures to each assumed constant (docs/sim.md §12).

Each constant the study takes as a labelled assumption, not derived from cam's kernels, is halved and doubled in turn
(a copy of the device file with that one entry scaled, or a cam-sim flag), the study re-run (loads re-bisected, so the
baseline's sustained rate moves with the constant as it would for a deployer), and the headline figures compared with
the unscaled run's:

    python benchmarks/sim/sensitivity.py --json benchmarks/sim/results/afd-a3.json [--loads 1.0,1.5] [-- CAM-SIM FLAGS]

The record's ``sensitivity`` key is written (the rest of an existing record, from afd_a3.py, is kept) and the table
printed as markdown. For a constant that moves no figure, or moves none in opposite directions when halved and
doubled, the row says why.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from afd_a3 import headline, run_study  # noqa: E402

FIGURES = ("rate_req_s", "afd_tok_s", "afd_ttft_p50_s", "afd_ttft_p99_s", "afd_slo", "tok_s_afd_over_colocated",
           "ttft_p50_afd_over_colocated", "ttft_p99_afd_over_colocated", "slo_gain_points")

CAM_OPS = ("dispatch_send", "combine_recv", "dispatch_recv", "w1", "w2", "combine_send")

# (name, where, what it is). where: ("op", op, term) scales the device file's entry; ("flag", flag, default) a cam-sim
# flag. Every one is a labelled assumption of the study's device file (meta.assumptions), a cited stand-in
# (costs.CITED_DEFAULTS) or a workload parameter the public measurement does not give.
CONSTANTS: List[Tuple[str, tuple, str]] = [
    ("attention TFLOPS", ("op", "attention", "tflops"), "50% of BF16 peak (assumed efficiency)"),
    ("attention HBM GB/s", ("op", "attention", "gbps"), "80% of HBM peak (assumed efficiency)"),
    ("attention launch", ("op", "attention", "fixed_s"), "50 us per call (assumed)"),
    ("shared expert TOPS", ("op", "shared", "tflops"), "55% of INT8 peak (assumed efficiency)"),
    ("shared expert HBM GB/s", ("op", "shared", "gbps"), "80% of HBM peak (assumed efficiency)"),
    ("dense MLP TFLOPS", ("op", "dense_mlp", "tflops"), "50% of BF16 peak (assumed efficiency)"),
    ("FFN wake", ("op", "ffn_wake", "fixed_s"), "10 us for an idle FFN rank to see a round (assumed)"),
    ("sync barrier", ("op", "barrier", "fixed_s"), "30 us per barrier (assumed)"),
    ("TP all-reduce GB/s", ("op", "tp_all_reduce", "net_gbps"), "125 GB/s, DeepEP-Ascend's HCCS rate as a stand-in"),
    ("prompt-length sigma", ("flag", "--sigma", 0.8), "lognormal log-std (the measurement's lengths are a real mix)"),
    # Not an assumption but the twin timing model's prediction of cam's own ops (their per-token and per-row terms,
    # fitted at the study's DeepSeek-V4-Flash shape, benchmarks/fit_sim_devices.py): a model, varied like one.
    ("cam op per-token/row terms", ("ops", CAM_OPS, ("per_token_s", "per_row_s")),
     "the twin timing model's lines, fitted at H 4096 top-6"),
]

# Why a constant can move nothing at this setting, checked against the model and modes actually run.
def _unused_reason(name: str, study: dict) -> Optional[str]:
    m = study.get("model", {})
    modes = {r["mode"] for r in study["runs"]}
    if name == "dense MLP TFLOPS" and isinstance(m, dict) and m.get("first_dense", 0) == 0:
        return "the model has no dense layer (every layer MoE)"
    if name == "sync barrier" and "sync" not in modes:
        return "only sync AFD pays a barrier, and no headline figure is sync's"
    if name == "sync barrier":
        return "only sync AFD pays a barrier; headline figures are async AFD's and colocated's"
    return None


def scaled_device(base: dict, op: str, term: str, factor: float) -> dict:
    d = copy.deepcopy(base)
    entry = d["ops"].setdefault(op, {})
    if term not in entry:
        raise ValueError(f"the device file has no {op}.{term} to scale")
    entry[term] = entry[term] * factor
    return d


def load_device(name: str) -> dict:
    """The shipped device file with its cited defaults written in, so a scaled copy loaded by path is the same model."""
    from cam.sim.costs import CITED_DEFAULTS, device_files
    with open(device_files()[name]) as f:
        d = json.load(f)
    for op, terms in CITED_DEFAULTS.get(name, {}).items():
        d["ops"].setdefault(op, dict(terms))
    return d


def _at(rows: List[Dict], load: float) -> Dict:
    for r in rows:
        if abs(r["load"] - load) < 1e-9:
            return r
    raise ValueError(f"no row at load {load}")


def study_costs() -> str:
    """The device file the afd-a3 study runs on (its --costs)."""
    from cam.sim.serving import STUDIES
    flags = STUDIES["afd-a3"]
    return flags[flags.index("--costs") + 1]


def run(loads: List[float], extra: List[str], workdir: str, costs: Optional[str] = None,
        constants=CONSTANTS, log=print) -> dict:
    costs = costs or study_costs()
    base_dev = load_device(costs)
    load_flag = ["--loads", ",".join(f"{x:g}" for x in loads)]
    common = load_flag + ["--mode", "async,colocated"] + list(extra)

    def study_with(dev: dict, flags: List[str], tag: str) -> List[Dict]:
        path = os.path.join(workdir, f"{tag}.device.json")
        with open(path, "w") as f:
            json.dump(dev, f)
        st = run_study(os.path.join(workdir, f"{tag}.json"), common + ["--costs", path] + flags)
        return st, headline(st)

    base_study, base_rows = study_with(base_dev, [], "base")
    out = {"loads": loads, "cam_sim_flags": common, "costs": costs, "figures": list(FIGURES),
           "base": {f"{x:g}": {k: _at(base_rows, x)[k] for k in FIGURES} for x in loads}, "constants": []}
    for name, where, what in constants:
        moves = {}
        for factor in (0.5, 2.0):
            tag = f"{name.replace(' ', '_').replace('/', '_')}_{factor:g}"
            if where[0] == "ops":
                dev = base_dev
                for op in where[1]:
                    for term in where[2]:
                        if term in dev["ops"].get(op, {}):
                            dev = scaled_device(dev, op, term, factor)
                _, rows = study_with(dev, [], tag)
            elif where[0] == "op":
                _, op, term = where
                if term not in base_dev["ops"].get(op, {}):
                    raise ValueError(f"{costs} has no {op}.{term}")
                _, rows = study_with(scaled_device(base_dev, op, term, factor), [], tag)
            else:
                _, flag, default = where
                _, rows = study_with(base_dev, [flag, f"{default * factor:g}"], tag)
            moves[f"{factor:g}"] = {f"{x:g}": {k: _rel(_at(rows, x)[k], _at(base_rows, x)[k], k) for k in FIGURES}
                                    for x in loads}
        moved, opposite = _directions(moves)
        reason = None
        if not moved:
            reason = _unused_reason(name, base_study) or "no headline figure moved at this setting"
        elif not opposite:
            reason = ("halving and doubling move no figure in opposite directions: one side of the constant is off "
                      "the critical path (a max of two terms), or the re-bisected rate moves with it")
        out["constants"].append({"name": name, "what": what, "where": json.loads(json.dumps(where)), "moves": moves,
                                 "moved": moved, "opposite": opposite, "why_not": reason})
        log(f"{name}: moved={moved} opposite={opposite}")
    return out


def _rel(value: float, base: float, key: str) -> float:
    """Relative move (value / base - 1); SLO figures move in points of attainment, which a ratio would hide at 0."""
    if key in ("afd_slo",):
        return 100.0 * (value - base)
    if key == "slo_gain_points":
        return value - base
    return value / base - 1.0 if base else 0.0


_EPS = 1e-9


def _directions(moves: Dict) -> Tuple[bool, bool]:
    moved = opposite = False
    for load, figs in moves["0.5"].items():
        for k, lo in figs.items():
            hi = moves["2"][load][k]
            if abs(lo) > _EPS or abs(hi) > _EPS:
                moved = True
            if lo * hi < 0 and min(abs(lo), abs(hi)) > _EPS:
                opposite = True
    return moved, opposite


def markdown(sens: dict) -> str:
    load = f"{sens['loads'][0]:g}"
    cols = [("rate_req_s", "1.0x rate", "%"), ("afd_tok_s", "AFD tok/s", "%"), ("afd_ttft_p50_s", "AFD p50", "%"), ("afd_ttft_p99_s", "AFD p99", "%"),
            ("afd_slo", "AFD SLO", "pt"), ("tok_s_afd_over_colocated", "tok/s AFD/colo", "%"),
            ("ttft_p50_afd_over_colocated", "p50 AFD/colo", "%"), ("ttft_p99_afd_over_colocated", "p99 AFD/colo", "%"),
            ("slo_gain_points", "SLO gain", "pt")]
    head = "| constant (x0.5 / x2) | " + " | ".join(c[1] for c in cols) + " | note |"
    lines = [f"At {load}x load; each cell: the move when the constant is halved / doubled (% of the unscaled figure, "
             "or points of SLO attainment).", "", head, "|---" * (len(cols) + 2) + "|"]
    for c in sens["constants"]:
        cells = []
        for k, _, unit in cols:
            lo, hi = c["moves"]["0.5"][load][k], c["moves"]["2"][load][k]
            if unit == "%":
                cells.append(f"{100 * lo:+.0f} / {100 * hi:+.0f}")
            else:
                cells.append(f"{lo:+.0f} / {hi:+.0f}")
        lines.append(f"| {c['name']} | " + " | ".join(cells) + f" | {c['why_not'] or ''} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="RECORD", help="write the sensitivity into this record (other keys kept)")
    p.add_argument("--loads", default="1.0,1.5", help="loads at which to compare (the first is the table's)")
    p.add_argument("--workdir", help="keep the scaled device files and runs here (default: a temporary directory)")
    p.add_argument("cam_sim_args", nargs="*", help="after --: further cam-sim flags for every run")
    a = p.parse_args(argv)
    try:
        loads = [float(x) for x in a.loads.split(",")]
    except ValueError:
        p.error(f"--loads must be comma-separated numbers, got {a.loads!r}")
    if not loads or any(x <= 0 for x in loads):
        p.error(f"--loads must be positive, got {a.loads!r}")
    if a.json and os.path.isdir(a.json):
        p.error(f"--json {a.json} is a directory")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = a.workdir or tmp
        os.makedirs(workdir, exist_ok=True)
        sens = run(loads, a.cam_sim_args, workdir)
    if a.json:
        rec = {}
        if os.path.isfile(a.json):
            with open(a.json) as f:
                rec = json.load(f)
        rec["sensitivity"] = sens
        with open(a.json, "w") as f:
            json.dump(rec, f, indent=1)
            f.write("\n")
    print(markdown(sens))
    return 0


if __name__ == "__main__":
    sys.exit(main())
