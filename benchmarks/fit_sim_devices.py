"""Fits cam-sim's A3 and A2 device files (cam/sim/devices/ascend-a3-like.json, ascend-a2-like.json, and the afd-a3
study's ascend-a3-like-v4-flash.json) to the twin timing model's predictions of cam's own kernels (`cam-bench
predict`, docs/twin.md "Timing model"): a model's prediction, not a measurement, and labelled so in each file.

    python benchmarks/fit_sim_devices.py [--record] [--predict benchmarks/results/predict.json] [--out cam/sim/devices]

`--record` first re-records the predict record (RECORDS below; minutes: the kernels run on the twin). The record
holds every op at DeepSeek-V3 shapes for rounds of 4096, 8192 and 16384 tokens under uniform and skewed routing (the
hottest FFN rank's rows 4197 to 30875), costed for A2 and A3, which the A3 and A2 files are fitted to; and the same
at DeepSeek-V4-Flash's expert shape (H 4096, top-6), once with one Attention rank and once with 4, which the study's
A3 file is fitted to (its `meta.fitted_at` says where its lines hold; its `meta.ingress` keeps combine_send's line
with 4 Attention ranks, each one's ingress shared by 2 FFN ranks, beside the one it uses). Per device, at the L2 bandwidth
assumption's low end (the slower end), each op cam computes gets a least-squares line over those rounds:

- Attention side, per token of the round (`dispatch_send`, `combine_recv`): fixed_s + per_token_s * tokens.
- FFN side, per row of the hottest FFN rank (`dispatch_recv`, `w1`, `w2`, `combine_send`): fixed_s + per_row_s *
  rows. `dispatch_recv`'s own part: its predicted time less `dispatch_send`'s (both run from the phase's start, and a
  receiver cannot end before the sender's last row has landed; the simulator times the wait for a published round
  itself). The stall sum of the receiver's polls is not used: which core's poll saw a landing depends on thread
  timing, so on a skewed round it can miss most of the wait. `combine_send` keeps its share of the Attention rank's ingress (the
  8 FFN ranks of the record send into one Attention rank at once, so each ends when the receiver has taken the
  round's rows): fitted on the uniform rounds only, where a rank's rows are an eighth of the round's.
- The colocated baseline's `all_to_all`: fixed_s + bytes / net_gbps over cam's dispatch, the Attention rank's egress
  bytes against `dispatch_recv`'s end (the sender's time plus the last row's landing). The simulator has one op for
  both directions; cam's dispatch is the slower one (its combine moves its bytes about 10x faster in the record), so
  its line is used for both, as the published-figure file used the lower of DeepEP-Ascend's two figures.

A negative intercept is refitted through the origin. The simulator's rate terms (tflops, gbps, net_gbps) of these
ops are dropped: the fitted lines already hold compute, memory and link. What cam does not compute (attention, dense
layers, the shared expert) and the simulator's latencies (`ffn_wake`, `barrier`) keep the labelled assumptions of
the A3 file, cited in its meta; A2 takes the same figures for them (the A2 910B die has the same AI cores and clock
in the platform tables, docs/twin.md constants).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUTINGS = ("uniform", "skewed")  # the placement-table case runs another dispatch_send: not the simulator's op
TOKEN_OPS = {"dispatch_send": "dispatch_send", "combine_recv": "combine_recv"}
ROW_OPS = {"dispatch_recv": "dispatch_recv", "w1": "gmm_swiglu_quant_multi_layer", "w2": "gmm_multi_layer",
           "combine_send": "combine_send"}
KEPT = ("attention", "dense_mlp", "shared", "ffn_wake", "barrier")


def fit_line(x, y) -> tuple[float, float, float]:
    """(intercept, slope, largest relative residual) of a least-squares line, intercept >= 0 and slope >= 0."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 2 or np.ptp(x) == 0:
        raise ValueError("fit_line needs at least two distinct x values")
    slope, icept = np.polyfit(x, y, 1)
    if icept < 0:
        icept, slope = 0.0, float(x @ y / (x @ x))
    slope = max(float(slope), 0.0)
    resid = float(np.max(np.abs(icept + slope * x - y) / y))
    return float(icept), slope, resid


def points(record: dict, device: str) -> dict:
    """Per sim op: [(x, seconds)] from the record's rounds (x: tokens, rows or bytes), from its runs with one
    Attention rank; runs with several give `combine_send_spread` alone (each point its slowest work item against the
    largest item's rows: every Attention rank's ingress shared by F / A FFN ranks)."""
    out = {k: [] for k in (*TOKEN_OPS, *ROW_OPS, "all_to_all")}
    spread = [run for run in record["runs"] if run.get("attention_ranks", 1) > 1 and run["routing"] == "uniform"]
    if spread:
        out["combine_send_spread"] = []
    for run in spread:
        for rnd in run["rounds"]:
            s = rnd["devices"][device]["ops"]["combine_send"]["l2_lo"]["predicted_s"]
            out["combine_send_spread"].append((max(max(r) for r in rnd["item_rows"]), s))
    for run in record["runs"]:
        if run["routing"] not in ROUTINGS or run.get("attention_ranks", 1) > 1:
            continue
        for rnd in run["rounds"]:
            ops = rnd["devices"][device]["ops"]
            lo = {op: ops[op]["l2_lo"] for op in ops}
            for name, op in TOKEN_OPS.items():
                out[name].append((rnd["tokens"], lo[op]["predicted_s"]))
            for name, op in ROW_OPS.items():
                if name == "combine_send" and run["routing"] != "uniform":
                    continue  # its time is the Attention rank's shared ingress: the round's rows, not this rank's
                s = lo[op]["predicted_s"]
                if name == "dispatch_recv":
                    s -= lo["dispatch_send"]["predicted_s"]
                out[name].append((rnd["ffn_rank_rows"], s))
            out["all_to_all"].append((ops["dispatch_send"]["bound"]["link_bytes"], lo["dispatch_recv"]["predicted_s"]))
    return out


def device_file(record: dict, device: str, base: dict, file_name: str = "") -> dict:
    pts = points(record, device)
    spread = pts.pop("combine_send_spread", None)
    ops, fits = {}, {}
    for name, xy in pts.items():
        x, y = zip(*xy)
        icept, slope, resid = fit_line(x, y)
        if name in TOKEN_OPS:
            ops[name] = {"fixed_s": icept, "per_token_s": slope}
        elif name in ROW_OPS:
            ops[name] = {"fixed_s": icept, "per_row_s": slope}
        else:
            ops[name] = {"fixed_s": icept, "net_gbps": 1.0 / slope / 1e9}
        fits[name] = {"x": "tokens" if name in TOKEN_OPS else "rows" if name in ROW_OPS else "bytes",
                      "points": [[float(a), float(b)] for a, b in xy], "largest_relative_residual": round(resid, 4)}
    for name in KEPT:
        ops[name] = dict(base["ops"][name])
    ingress = {}
    if spread:
        x, y = zip(*spread)
        icept, slope, resid = fit_line(x, y)
        a = max(run.get("attention_ranks", 1) for run in record["runs"])
        ingress = {"combine_send_spread": {
            "fixed_s": icept, "per_row_s": slope, "x": "rows of the largest work item",
            "points": [[float(u), float(v)] for u, v in spread], "largest_relative_residual": round(resid, 4),
            "not_used_because": (f"{a} Attention ranks, each one's ingress shared by F / {a} FFN ranks at once: the "
                                 "least sharing; the one-Attention-rank record's line (all F share it, the most) is "
                                 "kept, as in every other device file; the simulator does not model the sharing, "
                                 "which in the afd-a3 study's schedule lies between the two (docs/sim.md §12, "
                                 "benchmarks/sim/ingress_share.py), and §12 reports the study with either line")}}
    bm = base["meta"]
    meta = {
        "status": (f"MODELLED from cam's kernels by the twin's timing model ({device.upper()} parameter set; "
                   f"cam-bench predict, benchmarks/results/predict.json), not measured: no Ascend device was used. "
                   "attention, dense_mlp, shared, ffn_wake and barrier remain ASSUMPTIONS (meta.assumptions)."),
        "fitted_at": _fitted_at(record),
        "fitted_by": "benchmarks/fit_sim_devices.py (its docstring says what each op's line is fitted to)",
        "modelled_ops": {k: v for k, v in fits.items()},
        **({"ingress": ingress} if ingress else {}),
        "assumptions": {"published_figures": bm.get("published_figures", {}),
                        "assumed_efficiencies": bm.get("assumed_efficiencies", {}),
                        "formula": bm.get("formula", ""),
                        "applies_to": list(KEPT),
                        "a2": "A2 takes the A3 die's figures for these (same AI cores and clock per die in the "
                              "platform tables; no primary A2 compute figure found)" if device == "a2" else ""},
    }
    file_name = file_name or ("ascend-a3-like" if device == "a3" else "ascend-a2-like")
    return {"name": file_name, "meta": meta, "ops": ops}


def _fitted_at(record: dict) -> dict:
    """The expert shape and Attention ranks of the record's runs: where the lines hold."""
    run = record["runs"][0]
    return {"shape": run.get("shape_name", "deepseek-v3"), **run["shape"],
            "attention_ranks": sorted({r.get("attention_ranks", 1) for r in record["runs"]})}


# What `--record` runs (niced, one after the other; minutes each: the kernels run on the twin), into one record: the
# DeepSeek-V3 runs the A3 and A2 files are fitted to, and the runs at the afd-a3 study's expert shape
# (DeepSeek-V4-Flash) with one and with 4 Attention ranks (combine_send's ingress), for the study's own file.
RECORDS = (
    ["--routing", "uniform", "skewed", "placed"],
    ["--shape", "deepseek-v4-flash", "--routing", "uniform", "skewed", "--attention", "1", "4"],
)
# The study's device file: from the record's runs at this shape, for this device, under this name.
STUDY_FILE = ("deepseek-v4-flash", "a3", "ascend-a3-like-v4-flash")


def record(path: str) -> None:
    """Re-records every prediction the device files are fitted to into ``path`` (cam-bench predict's record)."""
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, extra in enumerate(RECORDS):
            out = os.path.join(tmp, f"{i}.json")
            argv = ["nice", "-n", "5", sys.executable, "-c", "import sys, cam.bench; sys.exit(cam.bench.main())",
                    "predict", "--device", "a3", *extra, "--json", out]
            print("+ cam-bench " + " ".join(argv[6:-2]), flush=True)
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                runs += json.load(f)["runs"]
    with open(path, "w") as f:
        json.dump({"label": "model prediction (twin timing model), not a measurement", "runs": runs}, f, indent=1)


def runs_at(rec: dict, shape: str) -> dict:
    """The record's runs at one expert shape (a run without a shape name is DeepSeek-V3's)."""
    return dict(rec, runs=[r for r in rec["runs"] if r.get("shape_name", "deepseek-v3") == shape])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--predict", default=os.path.join(ROOT, "benchmarks", "results", "predict.json"))
    ap.add_argument("--out", default=os.path.join(ROOT, "cam", "sim", "devices"))
    ap.add_argument("--record", action="store_true",
                    help="first re-record every prediction into --predict (cam-bench predict, niced, one run after "
                         "the other: about 10 minutes on 2 loaded cores), then fit")
    ap.add_argument("--base", default=None,
                    help="device file whose assumed ops (attention, dense, shared, latencies) are kept "
                         "(default: the A3 file's 'assumptions' block, or the file itself before its first fit)")
    a = ap.parse_args(argv)
    if a.record:
        record(a.predict)
    with open(a.predict) as f:
        rec = json.load(f)
    base_path = a.base or os.path.join(a.out, "ascend-a3-like.json")
    with open(base_path) as f:
        base = json.load(f)
    if "assumptions" in base["meta"]:  # a fitted file: its kept ops and their citations
        base = {"ops": base["ops"], "meta": base["meta"]["assumptions"]}
    fits = [device_file(runs_at(rec, "deepseek-v3"), device, base) for device in ("a3", "a2")]
    study = runs_at(rec, STUDY_FILE[0])
    if study["runs"]:
        fits.append(device_file(study, STUDY_FILE[1], base, STUDY_FILE[2]))
    for d in fits:
        path = os.path.join(a.out, d["name"] + ".json")
        with open(path, "w") as f:
            json.dump(d, f, indent=2)
            f.write("\n")
        worst = max(v["largest_relative_residual"] for v in d["meta"]["modelled_ops"].values())
        print(f"{path}: {len(d['meta']['modelled_ops'])} ops fitted, largest relative residual {worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
