"""Fit twin costs from measured ``cam-run`` runs, and compare predictions with measurements.

``cam-run`` is run as a subprocess (bounded by a timeout, from a scratch directory so a source checkout's ``cam/``
cannot shadow the installed package) with ``--cost-model --json --keep``; its per-rank records give:

- FFN work items: ``end - recv_done`` (W1 + W2 + combine_send) against rows, a least-squares line
  (-> ``w1.fixed_s``, ``w1.per_row_s``); the receive of an item that was ready at once, the 10th percentile of
  ``recv_done - start`` (-> ``dispatch_recv.fixed_s``).
- Attention: the emulated attention is known exactly (cam-run sleeps ``A + B*tokens + C*sum(len^2)`` per
  micro-batch and layer; -> ``attention.nonempty_s/per_token_s/per_len2_s``). What is not known is the real
  per-layer Python/torch work around it (pre_moe, shared experts, dispatch/combine launches, the store barrier of
  sync mode). Those few overheads are fitted so that the simulator, run on the same batches, reproduces the
  measured per-batch durations (a bounded Gauss-Newton on non-negative parameters).

The simulator never imports ``cam._C``; only the ``cam-run`` subprocess runs kernels.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

import numpy as np

from .colocated import ColocatedSimulation
from .costs import CostModel, OpCost
from .engine import Simulation
from .shapes import ModelShape, SimTopology, model_presets
from .workload import SimWorkload

# cam-run's --attention-cost, passed explicitly so the emulated part is known, not assumed.
DEFAULT_ATTENTION_COST = (0.002, 0.0004, 0.00001)


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One cam-run invocation (cam-run's flags of the same names)."""

    preset: str = "default"
    mode: str = "async"
    model: str = "tiny"
    replicas: int = 2
    ffn: int = 2
    slots: int = 2
    requests: Optional[int] = None
    seed: Optional[int] = None
    attention_cost: tuple = DEFAULT_ATTENTION_COST
    assign: str = "round-robin"

    def argv(self) -> List[str]:
        ffn = self.replicas if self.mode == "colocated" else self.ffn
        a = ["--preset", self.preset, "--mode", self.mode, "--model", self.model, "--replicas", str(self.replicas),
             "--ffn", str(ffn), "--slots", str(self.slots), "--cost-model", "--quiet",
             "--attention-cost", *[repr(float(x)) for x in self.attention_cost]]
        if self.requests is not None:
            a += ["--requests", str(self.requests)]
        if self.seed is not None:
            a += ["--seed", str(self.seed)]
        if self.assign != "round-robin":
            a += ["--assign", self.assign]
        return a

    def workload(self) -> SimWorkload:
        over = {}
        if self.requests is not None:
            over["num_requests"] = self.requests
        if self.seed is not None:
            over["seed"] = self.seed
        # --assign other than round robin: the preset's requests, batched dynamically as cam-run then batches them.
        return SimWorkload.from_cam_run(self.preset, self.replicas, dynamic=self.assign != "round-robin", **over)

    def topology(self) -> SimTopology:
        # Colocated: --replicas devices, each also an FFN rank (cam-run refuses --ffn != --replicas there).
        return SimTopology(D=self.replicas, F=self.replicas if self.mode == "colocated" else self.ffn, P=1,
                           slots=self.slots)

    def shape(self) -> ModelShape:
        return model_presets()[self.model]


def run_cam_run(spec: RunSpec, timeout_s: float = 300.0, cam_run: Optional[List[str]] = None) -> dict:
    """Run cam-run once; returns {"spec", "report" (its --json), "ranks" (its per-rank records)}."""
    cmd = list(cam_run) if cam_run else [sys.executable, "-c", "import sys; from cam.run.cli import main; "
                                                                 "sys.exit(main())"]
    with tempfile.TemporaryDirectory(prefix="cam-sim-cal-") as tmp:
        keep = os.path.join(tmp, "keep")
        out = os.path.join(tmp, "report.json")
        try:
            proc = subprocess.run(cmd + spec.argv() + ["--json", out, "--keep", keep], cwd=tmp,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"cam-run {' '.join(spec.argv())} did not finish within {timeout_s} s") from None
        if proc.returncode != 0:
            raise RuntimeError(f"cam-run {' '.join(spec.argv())} failed ({proc.returncode}): "
                               f"{proc.stderr.strip()[-2000:]}")
        with open(out) as f:
            report = json.load(f)
        ranks = {}
        for name in os.listdir(keep):
            if name.startswith("result-") and name.endswith(".json"):
                with open(os.path.join(keep, name)) as f:
                    ranks[int(name[7:-5])] = json.load(f)
    return {"spec": dataclasses.asdict(spec), "report": report, "ranks": ranks}


def load_runs(path: str) -> dict:
    """The cam-run records saved by ``cam-sim --calibrate ... --json PATH``."""
    with open(path) as f:
        d = json.load(f)
    for key in ("calibration_runs", "validation_runs"):
        if key not in d:
            raise ValueError(f"{path}: not a cam-sim --calibrate --json output (no {key})")
        for run in d[key]:
            run["ranks"] = {int(k): v for k, v in run["ranks"].items()}
    return d


def _spec(run: dict) -> RunSpec:
    d = dict(run["spec"])
    d["attention_cost"] = tuple(d["attention_cost"])
    return RunSpec(**d)


def _lsq_line(x: np.ndarray, y: np.ndarray):
    """y ~ a + b x with a, b >= 0."""
    if len(x) >= 2 and np.ptp(x) > 0:
        b, a = np.polyfit(x, y, 1)
        if a < 0:
            a, b = 0.0, float(np.dot(x, y) / max(np.dot(x, x), 1e-30))
        if b < 0:
            a, b = float(np.mean(y)), 0.0
        return float(a), float(b)
    return float(np.mean(y)) if len(y) else 0.0, 0.0


# Attention-side overheads fitted through the simulator: (op, term); the barrier only from sync runs, the
# all-to-all only from colocated ones (there it stands for the per-layer store barrier and the hand-offs between a
# device's two ranks, which the colocated model folds into its collective).
_FITTED = (("attention", "fixed_s"), ("dispatch_send", "fixed_s"), ("barrier", "fixed_s"), ("all_to_all", "fixed_s"))
_FITTED_BY_MODE = {("barrier", "fixed_s"): "sync", ("all_to_all", "fixed_s"): "colocated"}


def _costs(base: Dict[str, dict], theta: Sequence[float], attention_cost, fitted=_FITTED) -> CostModel:
    ops = {k: dict(v) for k, v in base.items()}
    a, b, c = attention_cost
    ops["attention"] = {"nonempty_s": a, "per_token_s": b, "per_len2_s": c}
    for (op, term), v in zip(fitted, theta):
        ops.setdefault(op, {})
        ops[op][term] = ops[op].get(term, 0.0) + float(v)
    return CostModel({k: OpCost(**v) for k, v in ops.items()}, name="twin-calibrated")


def _batch_durations(run: dict) -> Dict[tuple, float]:
    out = {}
    for r in run["ranks"].values():
        if r["role"] == "attention":
            for b in r["batches"]:
                if b["requests"]:
                    out[(b["replica"], tuple(b["requests"]))] = b["end_s"] - b["start_s"]
    return out


def _simulated_durations(run: dict, costs: CostModel) -> Dict[tuple, float]:
    spec = _spec(run)
    wl = spec.workload()
    if spec.mode == "colocated":
        sim = ColocatedSimulation(spec.shape(), spec.topology(), wl, costs, routing="balanced")
    else:
        sim = Simulation(spec.shape(), spec.topology(), wl, costs, mode=spec.mode, routing="balanced")
    sim.run()
    out = {}
    # Batch start: async = max(free, arrival of its last request); sync and colocated = the step's first barrier.
    # Duration is finish - start, reconstructed from the finish times of consecutive batches.
    for d, batches in enumerate(wl.batches):
        prev = 0.0
        for rids in batches:
            end = float(sim.finish[rids[0]])
            gate = max(float(wl.arrival_s[r]) for r in rids)
            out[(d, tuple(rids))] = end - max(prev, gate)
            prev = end
    return out


def fit(runs: Sequence[dict]) -> CostModel:
    """Costs fitted from cam-run records (``run_cam_run`` outputs) of one model and one machine."""
    if not runs:
        raise ValueError("calibration needs at least one cam-run record")
    if any(_spec(r).assign != "round-robin" for r in runs):
        raise ValueError("calibration fits per-batch durations of the static (round-robin) batches; a run with "
                         "--assign forms its batches during the run")
    models = {_spec(r).model for r in runs}
    if len(models) != 1:
        raise ValueError(f"calibration runs must share one model, got {sorted(models)}")
    attention_costs = {_spec(r).attention_cost for r in runs}
    if len(attention_costs) != 1:
        raise ValueError("calibration runs must share one --attention-cost")
    attention_cost = attention_costs.pop()
    rows, work, recv = [], [], []
    for run in runs:
        for r in run["ranks"].values():
            if r["role"] == "ffn":
                for it in r["items"]:
                    rows.append(it["rows"])
                    work.append(it["end_s"] - it["recv_done_s"])
                    recv.append(it["recv_done_s"] - it["start_s"])
    if not rows:
        raise ValueError("calibration runs recorded no FFN work items")
    a, b = _lsq_line(np.array(rows, float), np.array(work, float))
    base = {"w1": {"fixed_s": a, "per_row_s": b},
            "dispatch_recv": {"fixed_s": float(np.percentile(recv, 10))}}
    modes = {_spec(r).mode for r in runs}
    fitted = tuple(f for f in _FITTED if f not in _FITTED_BY_MODE or _FITTED_BY_MODE[f] in modes)
    n_theta = len(fitted)
    measured = [_batch_durations(r) for r in runs]

    def residuals(theta):
        c = _costs(base, theta, attention_cost, fitted)
        res = []
        for run, meas in zip(runs, measured):
            sim = _simulated_durations(run, c)
            res.extend(sim[k] - v for k, v in sorted(meas.items()) if k in sim)
        return np.array(res)

    theta = np.full(n_theta, 1e-3)
    r = residuals(theta)
    for _ in range(12):
        jac = np.empty((len(r), n_theta))
        for j in range(n_theta):
            step = max(1e-5, 0.05 * theta[j])
            t2 = theta.copy()
            t2[j] += step
            jac[:, j] = (residuals(t2) - r) / step
        # Terms the runs cannot tell apart (attention and dispatch_send overheads both come once per MoE micro-batch
        # and layer when no run has dense-only work between them) make the Jacobian singular: the step is taken
        # in the directions the data determine (the minimum-norm solution), not blown up along the others.
        delta, *_ = np.linalg.lstsq(jac, -r, rcond=1e-6)
        improved = False
        for scale in (1.0, 0.5, 0.25, 0.1):
            cand = np.maximum(theta + scale * delta, 0.0)
            rc = residuals(cand)
            if np.dot(rc, rc) < np.dot(r, r):
                theta, r, improved = cand, rc, True
                break
        if not improved:
            break
    costs = _costs(base, theta, attention_cost, fitted)
    meta = {"source": "cam-sim --calibrate: fitted from cam-run --cost-model runs on this machine (twin backend)",
            "runs": [dict(r["spec"], measured_makespan_s=r["report"]["makespan_s"]) for r in runs],
            "ffn_items": len(rows),
            "batch_duration_rms_residual_s": float(np.sqrt(np.mean(r * r))) if len(r) else 0.0,
            "note": "w1 carries the whole W1 + W2 + combine_send time of a work item (fitted per row); attention "
                    "fixed/per-token and dispatch_send fixed are the real per-layer work around cam-run's emulated "
                    "attention sleep; barrier is sync mode's store barrier; all_to_all (colocated runs) the "
                    "per-layer store barrier and the hand-offs between a device's two ranks"}
    return CostModel(costs.ops, name="twin-calibrated", meta=meta)


def predict(run_or_spec, costs: CostModel) -> dict:
    """The simulator's makespan and mean TTFT for a cam-run configuration (and the measurement, if given a run)."""
    from .report import simulate

    spec = _spec(run_or_spec) if isinstance(run_or_spec, dict) else run_or_spec
    rep = simulate(spec.shape(), spec.topology(), spec.workload(), costs, mode=spec.mode, routing="balanced",
                   assign=spec.assign)
    out = {"preset": spec.preset, "mode": spec.mode, "predicted": {"makespan_s": rep["makespan_s"],
                                                                   "ttft_mean_s": rep["ttft_s"]["mean"]}}
    if isinstance(run_or_spec, dict):
        m = run_or_spec["report"]
        out["measured"] = {"makespan_s": m["makespan_s"], "ttft_mean_s": m["ttft_s"]["mean"]}
        out["rel_error"] = {k: out["predicted"][k] / out["measured"][k] - 1.0 for k in out["measured"]}
    return out


# The equal-devices comparison on the twin (docs/sim.md §8): AFD on two devices (one Attention replica, one FFN rank)
# against colocated on two (each device both), in a configuration where each one wins. The emulated attention is
# small enough that an FFN rank's work and the colocated lockstep matter, large enough to dominate the CPU noise.
EQUAL_DEVICES_ATTENTION_COST = (0.01, 0.0002, 0.0)
_AFD_2 = {"mode": "async", "replicas": 1, "ffn": 1}
_COLOCATED_2 = {"mode": "colocated", "replicas": 2, "ffn": 2}


def equal_devices_validation(presets: Sequence[str] = ("default", "arrivals"), repeats: int = 3,
                             attention_cost=EQUAL_DEVICES_ATTENTION_COST, model: str = "tiny",
                             calibrate_preset: str = "default", timeout_s: float = 300.0, log=None) -> dict:
    """Calibrate on one run of each deployment (``calibrate_preset``), then for every preset measure each deployment
    ``repeats`` times (fresh runs) and compare the medians of makespan and mean TTFT with the prediction; the winner
    (lower mean TTFT) measured and predicted. Returns a JSON-able record with every run's report."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    import statistics

    def spec(preset, kind):
        return RunSpec(preset=preset, model=model, attention_cost=tuple(attention_cost), **kind)

    def measure(s):
        if log:
            log(f"cam-run {' '.join(s.argv())}")
        return run_cam_run(s, timeout_s=timeout_s)

    cal = [measure(spec(calibrate_preset, k)) for k in (_AFD_2, _COLOCATED_2)]
    costs = fit(cal)
    configs = []
    for preset in presets:
        row = {"preset": preset}
        for name, kind in (("afd", _AFD_2), ("colocated", _COLOCATED_2)):
            s = spec(preset, kind)
            reports = [measure(s)["report"] for _ in range(repeats)]
            med = {"makespan_s": statistics.median(r["makespan_s"] for r in reports),
                   "ttft_mean_s": statistics.median(r["ttft_s"]["mean"] for r in reports)}
            pred = predict(s, costs)["predicted"]
            row[name] = {"spec": dataclasses.asdict(s), "devices": reports[0].get("devices"),
                         "measured_median": med, "predicted": pred,
                         "rel_error": {k: pred[k] / med[k] - 1.0 for k in med},
                         "measured_runs": [{"makespan_s": r["makespan_s"], "ttft_mean_s": r["ttft_s"]["mean"]}
                                           for r in reports]}
        for what in ("measured_median", "predicted"):
            a, c = row["afd"][what]["ttft_mean_s"], row["colocated"][what]["ttft_mean_s"]
            row[f"{what.split('_')[0]}_winner"] = "afd" if a < c else "colocated"
        configs.append(row)
    return {"attention_cost": list(attention_cost), "repeats": repeats, "costs": costs.to_dict(),
            "calibration_runs": cal, "configs": configs}
