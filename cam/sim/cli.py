"""``cam-sim``: plan an asynchronous AFD prefill deployment before renting it.

Simulates the schedule cam's ops implement (slot limit, readiness, round-robin selection, chunked work items,
shared experts on the Attention side; sync mode = a barrier across replicas per layer) with per-op costs, and
reports TTFT, SLO-compliant throughput, makespan, utilisation and the critical-path bound, for async and sync, over
A:F splits (``--sweep``) and arrival rates (``--rates``). ``--calibrate`` fits twin costs from measured ``cam-run``
runs and checks the simulator's predictions against further runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import List

from ..serve.policy import add_row_budget_flag
from . import serving
from .costs import CostModel, device_files
from .engine import ROUTINGS
from .presets import ASSIGNS
from .shapes import ModelShape, SimTopology, model_presets
from .workload import LENGTH_DISTS, SimWorkload


def _floats(s: str) -> List[float]:
    return [float(x) for x in s.split(",") if x.strip()]


MODES = ("async", "sync", "colocated")


def _modes(s: str) -> List[str]:
    alias = {"both": ["async", "sync"], "all": list(MODES)}
    out = []
    for x in (alias.get(s.strip()) or [y.strip() for y in s.split(",") if y.strip()]):
        if x not in MODES:
            raise argparse.ArgumentTypeError(f"unknown mode {x!r}: modes are {', '.join(MODES)} (or both, all)")
        if x not in out:
            out.append(x)
    if not out:
        raise argparse.ArgumentTypeError("needs at least one mode")
    return out


def _parse(argv):
    p = argparse.ArgumentParser(prog="cam-sim", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("model and topology")
    g.add_argument("--model", default="deepseek-v3", help="model shape: deepseek-v3, or one of cam-run's models "
                                                           "(cam.models.PRESETS: tiny, small)")
    g.add_argument("--model-json", metavar="PATH", help="model shape as JSON (cam.sim.ModelShape fields)")
    g.add_argument("--replicas", "-D", type=int, default=16, help="Attention DP replicas D")
    g.add_argument("--participants", "-P", type=int, default=1,
                   help="Attention ranks per replica P (tensor-parallel: each 1/P of the attention, plus the TP "
                        "collectives of docs/sim.md §11)")
    g.add_argument("--ffn", "-F", type=int, default=16,
                   help="FFN ranks F (any F: when F does not divide the experts, the contiguous placement gives "
                        "ranks floor or ceil of E/F experts)")
    g.add_argument("--slots", type=int, default=2, help="rounds in flight per Attention rank")
    g.add_argument("--capacity", type=int, help="rows per work item per FFN rank (default: never chunked)")
    g.add_argument("--ubatches", type=int, default=2, help="micro-batches per layer")
    g.add_argument("--ubatch-split", choices=("requests", "tokens"),
                   help="how a step is cut into micro-batches: requests (every other request, as cam-run) or tokens "
                        "(equal token spans); default the --engine's")
    g.add_argument("--two-stage", choices=("on", "off"),
                   help="async AFD: the Attention side's two micro-batches as two stages on one stream, each going on "
                        "to its next MoE layer after its own combine (the AFD plugin's scheduler); default the "
                        "--engine's")
    g.add_argument("--colocated-overlap", choices=("on", "off"),
                   help="the colocated baseline overlaps one micro-batch's all-to-all with the other's compute; "
                        "default the --engine's")
    g = p.add_argument_group("costs")
    g.add_argument("--costs", default="ascend-a3-like",
                   help=f"cost JSON path or a shipped device ({', '.join(device_files())}), or a --calibrate output")
    g = p.add_argument_group("workload")
    g.add_argument("--cam-run-preset", metavar="NAME",
                   help="use cam-run's workload preset instead (its static batches; with --assign other than "
                        "round-robin, dynamic batches of its max_batch_tokens, as cam-run --assign)")
    g.add_argument("--requests", type=int, default=1000)
    g.add_argument("--lengths", choices=LENGTH_DISTS, default="lognormal")
    g.add_argument("--mean-len", type=float, default=2048)
    g.add_argument("--min-len", type=int, default=16)
    g.add_argument("--max-len", type=int, default=32768)
    g.add_argument("--sigma", type=float, default=0.8, help="lognormal log-std")
    g.add_argument("--trace", metavar="CSV", help="arrival_s,length per request (with --lengths trace)")
    g.add_argument("--rates", type=_floats, default=[0.0],
                   help="comma-separated Poisson arrival rates in requests/s (0 = closed batch)")
    g.add_argument("--token-budget", type=int, default=None,
                   help="max tokens per batch per replica; with an --engine, the engine's per-step budget (a longer "
                        "prompt is chunked); default the engine's max_num_batched_tokens, 16384 without one")
    g.add_argument("--engine", default="none", choices=sorted(serving.ENGINES),
                   help="serving engine whose behaviour and defaults apply (docs/sim.md §11): none (neutral: whole "
                        "prompts, as cam-run), vllm, vllm-afd-recipe")
    g.add_argument("--loads", type=_floats,
                   help="comma-separated offered loads, as multiples of the rate the colocated baseline sustains on "
                        "the same devices (the highest Poisson rate keeping >= --sustain of requests within --slo, "
                        "found by bisection and printed); replaces --rates, needs --slo")
    g.add_argument("--sustain", type=float, default=0.9,
                   help="with --loads: the SLO attainment that defines the sustained rate")
    g = p.add_argument_group("simulation")
    g.add_argument("--mode", type=_modes, default="both",
                   help="comma-separated modes: async, sync (AFD with a barrier per layer), colocated (every device "
                        "an Attention replica and an expert shard, an all-to-all per layer); both = async,sync; "
                        "all = async,sync,colocated")
    g.add_argument("--devices", type=int,
                   help="devices of the colocated mode (default: as many as the AFD deployment, D*P + F, or "
                        "--total-ranks with --sweep)")
    g.add_argument("--step-overhead", type=float, default=None, metavar="SECONDS",
                   help="the serving engine's host time per step, before its first layer (every mode); default the "
                        "--engine's (0: no public figure)")
    g.add_argument("--colocated-tp", type=lambda s: [int(x) for x in s.split(",") if x.strip()], default=[1],
                   help="comma-separated tensor-parallel degrees of the colocated baseline's Attention replicas "
                        "(16 devices at 4,2,8: DP4xTP4, DP8xTP2, DP2xTP8); each is run and the best per rate is "
                        "the one AFD is compared with (docs/sim.md §11); default 1 (every device its own replica)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--routing", choices=ROUTINGS, default="uniform",
                   help="uniform: rows per expert drawn per round; balanced: exact even split")
    g.add_argument("--expert-skew", type=float, default=0.0, help="Zipf exponent of expert popularity (0 = uniform)")
    g.add_argument("--placement", metavar="SPEC",
                   help="expert placement: contiguous (default: expert e on rank e*F//E), hot:K (the contiguous "
                        "one plus a second replica of each layer's K most popular experts), or a JSON table "
                        "{\"F\": F, \"experts\": [[[rank, slot], ...], ...]}; a row goes to replica (t + k0) %% r, "
                        "k0 the token's first top-k index naming the expert")
    g.add_argument("--assign", choices=ASSIGNS, default="round-robin",
                   help="which Attention replica takes an arriving request: round robin in arrival order, or at its "
                        "arrival the one with the fewest tokens / requests not yet finished (as cam-run --assign)")
    g.add_argument("--batch-items", action="store_true",
                   help="snapshot batching: an FFN rank serves every ready item, up to --row-budget rows, in one "
                        "grouped-matmul launch (default: one work item per dispatch_recv)")
    # 8192: the budget of the recorded study (docs/sim.md §7, with its --capacity 8192), kept so that it reproduces.
    add_row_budget_flag(g, default=8192, dest="batch_rows", deprecated=("--batch-rows",),
                        help="row budget of one batched launch, checked by the serving path's rule "
                             "(cam.serve.ServePolicy): at least one work item's rows, min(--capacity, P*Bmax*K), "
                             "Bmax the largest step's tokens per participant; default 8192, the recorded study's")
    g.add_argument("--slo", type=float, default=None, help="TTFT SLO in seconds for SLO-compliant throughput")
    g.add_argument("--sweep", action="store_true",
                   help="sweep the A:F split: every F dividing the experts with D = (total - F) / P >= 1")
    g.add_argument("--total-ranks", type=int, help="ranks to split in --sweep (default D*P + F)")
    g.add_argument("--sweep-ffn", type=lambda s: [int(x) for x in s.split(",") if x.strip()],
                   help="with --sweep: only these F values (comma-separated)")
    g.add_argument("--study", choices=sorted(serving.STUDIES),
                   help="a one-command study: its flags first, the command line's own override them (docs/sim.md "
                        "§11; afd-a3: the setting of the public A3 measurement of async prefill AFD)")
    g = p.add_argument_group("output")
    g.add_argument("--json", metavar="PATH", help="write the results as JSON")
    g.add_argument("--plot-dir", metavar="DIR", help="write TTFT CDF, throughput-vs-rate, utilisation-vs-A:F plots")
    g.add_argument("--cdf-ffn", type=int, help="TTFT CDFs of the split with this F (default: the first split)")
    g.add_argument("--quiet", action="store_true")
    g = p.add_argument_group("calibration (runs cam-run)")
    g.add_argument("--calibrate", metavar="OUT.json", help="fit twin costs from cam-run runs and write them")
    g.add_argument("--calibrate-presets", default="default", help="cam-run presets to fit on (comma-separated)")
    g.add_argument("--validate-presets", default="imbalanced,skewed",
                   help="cam-run presets to predict and compare after fitting (comma-separated; '' = none)")
    g.add_argument("--calibrate-modes", type=_modes, default="both",
                   help="cam-run modes of the calibration and validation runs (comma-separated, as --mode)")
    g.add_argument("--cam-run-replicas", type=int, default=2)
    g.add_argument("--cam-run-ffn", type=int, default=2)
    g.add_argument("--cam-run-model", default="tiny")
    g.add_argument("--cam-run-requests", type=int, help="override the presets' number of requests")
    g.add_argument("--cam-run-attention-cost", type=float, nargs=3, default=(0.25, 0.005, 0.0),
                   metavar=("A", "B", "C"),
                   help="cam-run --attention-cost of the measured runs: large enough that the emulated attention, "
                        "known exactly, dominates the CPU work that a shared machine makes noisy")
    g.add_argument("--cam-run-timeout", type=float, default=600.0, help="bound of each cam-run subprocess (s)")
    g.add_argument("--calibrate-from", metavar="RUNS.json",
                   help="refit from the cam-run records of an earlier --calibrate --json output (no new runs)")
    return p.parse_args(argv)


# Upper bounds of the integer flags: far beyond any deployment or study, and small enough that the simulator's
# per-rank and per-request arrays fit in memory (--replicas 10^12 was killed by the out-of-memory killer).
_MAX_RANKS = 1 << 16
_MAX_REQUESTS = 10_000_000
_MAX_TOKENS = 1 << 24


def _bounded(flag: str, value, lo, hi) -> None:
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value) or not lo <= value <= hi:
        raise ValueError(f"{flag} must be {'a finite number ' if isinstance(value, float) else ''}in "
                         f"[{lo:g}, {hi:g}], got {value!r}")


def _writable(flag: str, path: str, directory: bool = False) -> None:
    target = path if directory and os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if not directory and os.path.isdir(path):
        raise ValueError(f"{flag} {path!r} is a directory")
    while directory and not os.path.exists(target):  # --plot-dir is created, with its missing parents
        target = os.path.dirname(target)
    if not os.path.isdir(target) or not os.access(target, os.W_OK):
        raise ValueError(f"{flag} {path!r} cannot be written (missing or read-only directory {target!r})")


def check_args(args) -> None:
    """Every flag checked before anything is simulated, run or written; each error names its flag and bound."""
    for flag in ("replicas", "participants", "ffn", "total_ranks", "cam_run_replicas", "cam_run_ffn", "devices"):
        _bounded("--" + flag.replace("_", "-"), getattr(args, flag), 1, _MAX_RANKS)
    for flag, hi in (("slots", 64), ("ubatches", 64), ("capacity", _MAX_TOKENS), ("token_budget", _MAX_TOKENS),
                     ("min_len", _MAX_TOKENS), ("max_len", _MAX_TOKENS), ("cdf_ffn", _MAX_RANKS),
                     ("batch_rows", _MAX_TOKENS)):
        _bounded("--" + flag.replace("_", "-"), getattr(args, flag), 1, hi)
    for f in args.sweep_ffn or []:
        _bounded("--sweep-ffn", f, 1, _MAX_RANKS)
    if args.step_overhead is not None and not (math.isfinite(args.step_overhead) and args.step_overhead >= 0):
        raise ValueError(f"--step-overhead must be a finite number of seconds >= 0, got {args.step_overhead!r}")
    if not args.colocated_tp:
        raise ValueError("--colocated-tp needs at least one degree")
    for tp in args.colocated_tp:
        _bounded("--colocated-tp", tp, 1, _MAX_RANKS)
    if "colocated" in args.mode and args.batch_items:
        raise ValueError("--batch-items is an FFN-side policy of AFD: a colocated device serves all the rows of a "
                         "collective in one launch; drop colocated from --mode or --batch-items")
    _bounded("--requests", args.requests, 1, _MAX_REQUESTS)
    _bounded("--cam-run-requests", args.cam_run_requests, 1, 100_000)
    _bounded("--mean-len", float(args.mean_len), 1.0, float(_MAX_TOKENS))
    _bounded("--sigma", float(args.sigma), 0.0, 10.0)
    _bounded("--seed", args.seed, 0, 2**63 - 1)
    if not args.rates:
        raise ValueError("--rates needs at least one rate")
    for rate in args.rates:
        _bounded("--rates", float(rate), 0.0, 1e9)
    _bounded("--expert-skew", float(args.expert_skew), 0.0, 100.0)
    if args.slo is not None and (not math.isfinite(args.slo) or args.slo <= 0):
        raise ValueError(f"--slo must be a finite number of seconds > 0, got {args.slo!r}")
    if args.loads is not None:
        if args.slo is None:
            raise ValueError("--loads needs --slo: the sustained rate is defined by SLO attainment")
        if args.cam_run_preset:
            raise ValueError("--loads needs generated Poisson arrivals, not --cam-run-preset's own")
        if not args.loads:
            raise ValueError("--loads needs at least one load")
        for load in args.loads:
            _bounded("--loads", float(load), 1e-3, 1e3)
    if not 0.0 < args.sustain <= 1.0:
        raise ValueError(f"--sustain must be in (0, 1], got {args.sustain!r}")
    _bounded("--cam-run-timeout", float(args.cam_run_timeout), 1.0, 86400.0)
    for name, value in zip("ABC", args.cam_run_attention_cost):
        _bounded(f"--cam-run-attention-cost {name}", float(value), 0.0, 10.0)
    if args.min_len > args.max_len:
        raise ValueError(f"--min-len ({args.min_len}) must be <= --max-len ({args.max_len})")
    if args.lengths == "trace" and not args.trace:
        raise ValueError("--lengths trace needs --trace CSV")
    if args.placement not in (None, "contiguous") and not args.placement.startswith("hot:") \
            and not os.path.isfile(args.placement):
        raise ValueError(f"--placement {args.placement!r}: neither contiguous, hot:K nor a file (looked for "
                         f"{os.path.abspath(args.placement)!r})")
    if args.placement and args.placement.startswith("hot:"):
        k = args.placement[4:]
        if not k.isdigit():
            raise ValueError(f"--placement {args.placement!r}: hot:K needs an integer K >= 0")
    for flag in ("trace", "model_json", "calibrate_from"):
        path = getattr(args, flag)
        if path is not None and not os.path.isfile(path):
            raise ValueError(f"--{flag.replace('_', '-')}: no such file {path!r}")
    if not args.calibrate and args.costs not in device_files() and not os.path.isfile(args.costs):
        raise ValueError(f"--costs {args.costs!r}: neither a shipped device ({', '.join(device_files())}) nor a file "
                         f"(looked for {os.path.abspath(args.costs)!r})")
    for flag in ("json", "calibrate"):
        if getattr(args, flag):
            _writable("--" + flag, getattr(args, flag))
    if args.plot_dir:
        _writable("--plot-dir", args.plot_dir, directory=True)
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise ValueError("--plot-dir needs matplotlib (pip install matplotlib, or '.[viz]' from the checkout)")


def _model(args) -> ModelShape:
    if args.model_json:
        with open(args.model_json) as f:
            try:
                d = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"--model-json {args.model_json}: not JSON ({e})") from None
        return ModelShape.from_dict(d, f"--model-json {args.model_json}")
    presets = model_presets()
    if args.model not in presets:
        raise ValueError(f"--model must be one of {sorted(presets)}, got {args.model!r}")
    return presets[args.model]


def _splits(args, model: ModelShape):
    if not args.sweep:
        return [(args.replicas, args.ffn)]
    total = args.total_ranks or args.replicas * args.participants + args.ffn
    out = []
    for f in args.sweep_ffn or []:
        if f < 1 or total - f < args.participants or (total - f) % args.participants:
            raise ValueError(f"--sweep-ffn: F={f} must leave (total - F) a positive multiple of "
                             f"P={args.participants} (total {total})")
    for f in args.sweep_ffn or range(1, model.experts + 1):
        d, rest = divmod(total - f, args.participants)
        # Without --sweep-ffn: the F that divide the experts (every rank the same expert count).
        if (args.sweep_ffn or model.experts % f == 0) and d >= 1 and rest == 0:
            out.append(((total - f) // args.participants, f))
    if not out:
        raise ValueError(f"--sweep: no split of {total} ranks with F dividing {model.experts} experts")
    return out


# Progress lines (stderr): none before a run has taken this long, then at most one per interval, so a short run
# stays silent and a study's minute of bisection says what it is doing.
PROGRESS_AFTER_S = 3.0
PROGRESS_EVERY_S = 5.0


class Progress:
    """``tick(what)`` before each simulation: prints ``cam-sim: [N s] what`` on stderr once the run is older than
    PROGRESS_AFTER_S, at most every PROGRESS_EVERY_S; silent with --quiet."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.start = time.perf_counter()
        self.last = None

    def tick(self, what: str) -> None:
        now = time.perf_counter()
        if self.quiet or now - self.start < PROGRESS_AFTER_S or \
                (self.last is not None and now - self.last < PROGRESS_EVERY_S):
            return
        self.last = now
        print(f"cam-sim: [{now - self.start:.0f} s] {what}", file=sys.stderr, flush=True)


def _progress(args) -> Progress:
    if getattr(args, "progress", None) is None:
        args.progress = Progress(args.quiet)
    return args.progress


def simulate_grid(args) -> dict:
    args.progress = Progress(args.quiet)
    model = _model(args)
    costs = CostModel.load(args.costs)
    if args.cam_run_preset:
        from ..models import PRESETS as CAM_RUN_MODELS
        from .presets import PRESETS as CAM_RUN_PRESETS

        if args.model not in CAM_RUN_MODELS or args.model_json:
            raise ValueError(f"--cam-run-preset needs --model one of cam-run's models {sorted(CAM_RUN_MODELS)}, "
                             f"got {args.model!r}")
        if args.cam_run_preset not in CAM_RUN_PRESETS:
            raise ValueError(f"--cam-run-preset must be one of {sorted(CAM_RUN_PRESETS)}, got {args.cam_run_preset!r}")
        args.rates = [CAM_RUN_PRESETS[args.cam_run_preset].arrival_rate]  # the preset brings its own arrivals
    afd = [m for m in args.mode if m != "colocated"]
    plan = [(D, F, afd, args.participants) for D, F in _splits(args, model)] if afd else []
    if args.batch_items:
        check_row_budget(args, model, plan)
    # The colocated deployment (and the load axis's baseline) on as many devices as the AFD one.
    N = args.devices or (args.total_ranks if args.sweep and args.total_ranks else
                         args.replicas * args.participants + args.ffn)
    if "colocated" in args.mode:
        if args.cam_run_preset and N < args.replicas:
            raise ValueError(f"--devices {N}: cam-run preset {args.cam_run_preset!r} spreads its requests over "
                             f"{args.replicas} replicas")
        for tp in args.colocated_tp:
            if N % tp:
                raise ValueError(f"--colocated-tp {tp} does not divide the colocated deployment's {N} devices")
            plan.append((N // tp, N, ["colocated"], tp))
    cdf_split = (args.cdf_ffn or _splits(args, model)[0][1]) if afd else None
    runs, curves = [], {}
    t_start = time.perf_counter()
    load_axis = None
    if args.loads is not None:
        load_axis = sustained_rate(args, model, costs, N)
        args.rates = [load * load_axis["rate_req_s"] for load in args.loads]
        if not args.quiet:
            print(f"colocated N={N} sustains {load_axis['rate_req_s']:.4g} req/s (>= {args.sustain:.0%} of requests "
                  f"within the {args.slo:g} s TTFT SLO; bisection over {len(load_axis['bisection'])} rates); "
                  f"loads {', '.join(f'{x:g}' for x in args.loads)}", flush=True)
    total = sum(len(modes) for *_, modes, _ in plan) * len(args.rates)
    for D, F, modes, tp in plan:
        colocated = modes == ["colocated"]
        topo = _topology(args, D, F, colocated, tp)
        for i, rate in enumerate(args.rates):
            wl = _workload(args, D, rate, colocated)
            for mode in modes:
                where = f"N={F} DP{D}xTP{tp}" if colocated else f"D={D} F={F}"
                _progress(args).tick(f"run {len(runs) + 1}/{total}: {mode} {where} at {rate:.4g} req/s")
                t0 = time.perf_counter()
                rep = _simulate(args, model, topo, wl, costs, mode)
                rep["rate"] = rate
                if load_axis is not None:
                    rep["load"] = args.loads[i]
                rep["wall_s"] = time.perf_counter() - t0
                per = rep.pop("ttft_per_request_s")
                if colocated or F == cdf_split:
                    label = (f"colocated N={F}" + (f" DP{D}xTP{tp}" if args.colocated_tp != [1] else "")
                             if colocated else f"{mode} D={D} F={F}") \
                        + (f" load {args.loads[i]:g}" if load_axis is not None else f" {rate:g} req/s" if rate else "")
                    curves[label] = list(per.values())
                runs.append(rep)
                if not args.quiet:
                    _line(rep)
    result = {"model": model.to_dict(), "costs": costs.name, "cost_meta": costs.meta, "runs": runs,
              "summary": _summary(runs), "wall_s": time.perf_counter() - t_start}
    if load_axis is not None:
        result["load_axis"] = load_axis
    return result, curves


def check_row_budget(args, model: ModelShape, plan) -> None:
    """--row-budget on every AFD split of ``plan``, by the serving path's rule (cam.sim.row_budget): refused, before
    anything is simulated, in the words of the flag the user typed."""
    from .row_budget import batch_policy  # the rule is C's: only a --batch-items run loads cam's extension

    for D, F, _, _ in plan:
        batch_policy(model, _topology(args, D, F, False), _workload(args, D, args.rates[0], False), args.batch_rows,
                     f"{args.batch_rows_flag} {args.batch_rows} (D={D} F={F})")


def _topology(args, D: int, F: int, colocated: bool, tp: int = 1) -> SimTopology:
    eng = serving.engine(args.engine)
    overlap = eng.colocated_overlap if args.colocated_overlap is None else args.colocated_overlap == "on"
    return SimTopology(D=D, F=F, P=tp if colocated else args.participants, slots=args.slots,
                       capacity=None if colocated else args.capacity, ubatches=args.ubatches,
                       ubatch_split=args.ubatch_split or eng.ubatch_split, overlap=overlap and colocated)


def _workload(args, D: int, rate: float, colocated: bool) -> SimWorkload:
    if args.cam_run_preset:
        # --assign other than round robin: the preset's requests, batched as cam-run --assign batches them.
        return SimWorkload.from_cam_run(args.cam_run_preset, args.replicas if colocated else D,
                                        dynamic=args.assign != "round-robin")
    return SimWorkload.generate(args.requests, D, lengths=args.lengths, mean_len=args.mean_len, min_len=args.min_len,
                                max_len=args.max_len, sigma=args.sigma, trace=args.trace, rate=rate,
                                token_budget=token_budget(args), seed=args.seed,
                                chunked=serving.engine(args.engine).chunked_prefill)


def token_budget(args) -> int:
    """--token-budget, or the named engine's max_num_batched_tokens, or 16384 with no engine."""
    if args.token_budget is not None:
        return args.token_budget
    return serving.engine(args.engine).max_num_batched_tokens or 16384


def _simulate(args, model, topo, wl, costs, mode: str, per_request: bool = True) -> dict:
    from .report import simulate

    return simulate(model, topo, wl, costs, mode=mode, seed=args.seed, routing=args.routing,
                    expert_skew=args.expert_skew, slo_s=args.slo, per_request=per_request, placement=args.placement,
                    assign=args.assign, batch_rows=args.batch_rows if args.batch_items and mode != "colocated" else None,
                    step_overhead_s=serving.engine(args.engine).step_overhead_s if args.step_overhead is None
                    else args.step_overhead,
                    two_stage=serving.engine(args.engine).two_stage if args.two_stage is None
                    else args.two_stage == "on")


# Bisection steps of the sustained rate: the bracket shrinks to 1/256 of its first width.
_BISECT_STEPS = 8


def sustained_rate(args, model, costs, N: int) -> dict:
    """The highest rate the colocated baseline on N devices sustains: the best over its --colocated-tp degrees
    (each found by ``sustained_rate_of``), every degree's own result recorded."""
    found = [dict(sustained_rate_of(args, model, costs, N, tp), tp=tp) for tp in args.colocated_tp]
    if len(found) == 1:
        found[0].pop("tp")
        return found[0]
    best = max(found, key=lambda f: f["rate_req_s"])
    return dict(best, baseline=f"colocated N={N} DP{N // best['tp']}xTP{best['tp']}", per_tp=found)


def sustained_rate_of(args, model, costs, N: int, tp: int = 1) -> dict:
    """The highest Poisson rate at which colocated on N devices (replicas of ``tp`` devices) keeps >= args.sustain
    of the requests within the TTFT SLO: the bracket's top starts at the closed batch's request throughput (no
    open-loop rate above it is sustained for long) and doubles while it still passes; then bisection. The same seed
    at every rate, so only the arrival times scale."""
    topo = _topology(args, N // tp, N, True, tp)
    tried = []

    def attainment(rate: float) -> float:
        _progress(args).tick(f"the colocated baseline's sustained rate (N={N} DP{N // tp}xTP{tp}): trying "
                             f"{rate:.4g} req/s ({len(tried) + 1} tried)")
        rep = _simulate(args, model, topo, _workload(args, N // tp, rate, True), costs, "colocated",
                        per_request=False)
        tried.append({"rate_req_s": rate, "slo_attainment": rep["slo"]["compliant_fraction"]})
        return rep["slo"]["compliant_fraction"]

    _progress(args).tick(f"the colocated baseline's sustained rate (N={N} DP{N // tp}xTP{tp}): its closed batch")
    closed = _simulate(args, model, topo, _workload(args, N // tp, 0.0, True), costs, "colocated", per_request=False)
    if closed["slo"]["compliant_fraction"] >= args.sustain:
        raise ValueError(f"--loads: colocated on {N} devices keeps {closed['slo']['compliant_fraction']:.0%} of "
                         f"requests within the {args.slo:g} s SLO even when all {closed['requests']} arrive at once, "
                         "so it sustains any rate: tighten --slo or raise --requests")
    lo, hi = 0.0, closed["requests"] / closed["makespan_s"]
    for _ in range(10):
        if attainment(hi) < args.sustain:
            break
        lo, hi = hi, 2 * hi
    for _ in range(_BISECT_STEPS):
        mid = (lo + hi) / 2
        if attainment(mid) >= args.sustain:
            lo = mid
        else:
            hi = mid
    if lo == 0.0:
        raise ValueError(f"--loads: colocated on {N} devices keeps {args.sustain:.0%} of requests within the "
                         f"{args.slo:g} s SLO at no rate down to {hi:.3g} req/s; raise --slo")
    return {"baseline": f"colocated N={N}", "rate_req_s": lo, "slo_s": args.slo, "sustain": args.sustain,
            "closed_batch_req_s": closed["requests"] / closed["makespan_s"], "bisection": tried}


def _line(r: dict) -> None:
    t = r["ttft_s"]
    slo = f"  SLO ok {r['slo']['compliant_fraction']:.0%} goodput {r['slo']['goodput_tok_s']:.0f} tok/s" \
        if "slo" in r else ""
    where = f"N={r['devices']:<7d}" if r["mode"] == "colocated" else f"D={r['topology']['D']:<3d} F={r['topology']['F']:<3d}"
    if r["mode"] == "colocated" and r["topology"]["P"] > 1:
        where = f"N={r['devices']} DP{r['topology']['D']}xTP{r['topology']['P']}".ljust(len(where))
    print(f"{r['mode']:9s} {where} rate {r['rate']:<6g} "
          f"makespan {r['makespan_s']:9.3f} s  TTFT mean {t['mean']:8.3f} p50 {t['p50']:8.3f} p90 {t['p90']:8.3f} "
          f"p99 {t['p99']:8.3f}  util FFN {r['ffn_utilisation']:.0%} Attn {r['attention_utilisation']:.0%}  "
          f"crit/makespan {r['critical_path_efficiency']:.2f}{slo}  ({r['wall_s']:.1f} s wall)", flush=True)


def _summary(runs: List[dict]) -> dict:
    """Async gain per (rate, split), and the best split per (rate, mode) by SLO-compliant throughput (else
    throughput)."""
    def key(r):
        return (r["rate"], r["topology"]["D"], r["topology"]["F"])

    by = {}
    for r in runs:
        by.setdefault(key(r), {})[r["mode"]] = r
    metric = "goodput_tok_s" if runs and "slo" in runs[0] else "throughput_tok_s"

    def value(r):
        return r["slo"]["goodput_tok_s"] if "slo" in r else r["throughput_tok_s"]

    gains = []
    for (rate, D, F), m in sorted(by.items()):
        if "async" in m and "sync" in m:
            a, s = m["async"], m["sync"]
            gains.append({"rate": rate, "D": D, "F": F,
                          f"{metric}_async_over_sync": value(a) / value(s) if value(s) else None,
                          "ttft_mean_async_over_sync": a["ttft_s"]["mean"] / s["ttft_s"]["mean"],
                          "makespan_async_over_sync": a["makespan_s"] / s["makespan_s"]})
    # AFD against the colocated deployment on the same number of devices, per rate.
    vs = []
    # With several --colocated-tp degrees, the best of them per rate stands for "colocated".
    colo = {}
    for r in runs:
        k = (r["rate"], r["devices"])
        if r["mode"] == "colocated" and (k not in colo or value(r) > value(colo[k])):
            colo[k] = r
    for r in runs:
        c = colo.get((r["rate"], r["devices"]))
        if r["mode"] == "colocated" or c is None:
            continue
        vs.append({"rate": r["rate"], "mode": r["mode"], "D": r["topology"]["D"], "F": r["topology"]["F"],
                   "devices": r["devices"], "colocated_tp": c["topology"]["P"],
                   f"{metric}_over_colocated": value(r) / value(c) if value(c) else None,
                   "ttft_p50_over_colocated": r["ttft_s"]["p50"] / c["ttft_s"]["p50"],
                   "ttft_p99_over_colocated": r["ttft_s"]["p99"] / c["ttft_s"]["p99"],
                   "makespan_over_colocated": r["makespan_s"] / c["makespan_s"]})
    best = {}
    for r in runs:
        k = f"{r['mode']}@{r['rate']:g}"
        if k not in best or value(r) > best[k][metric]:
            best[k] = {"D": r["topology"]["D"], "F": r["topology"]["F"], "P": r["topology"]["P"], metric: value(r)}
    return {"metric": metric, "async_gain": gains, "afd_over_colocated": vs, "best_split": best}


def _print_summary(summary: dict) -> None:
    """The summary's two answers as lines: async over sync per split, and the best split per mode and rate."""
    metric = summary["metric"].replace("_tok_s", "")
    for g in summary["async_gain"]:
        ratio = g[f"{summary['metric']}_async_over_sync"]
        print(f"async/sync  D={g['D']:<3d} F={g['F']:<3d} rate {g['rate']:<6g} {metric} "
              f"{'n/a' if ratio is None else f'{ratio:.2f}x'}  TTFT mean {g['ttft_mean_async_over_sync']:.2f}x  "
              f"makespan {g['makespan_async_over_sync']:.2f}x")
    for v in summary["afd_over_colocated"]:
        ratio = v[f"{summary['metric']}_over_colocated"]
        print(f"{v['mode']}/colocated D={v['D']:<3d} F={v['F']:<3d} ({v['devices']} devices) rate {v['rate']:<6g} "
              f"{metric} {'n/a' if ratio is None else f'{ratio:.2f}x'}  TTFT p50 {v['ttft_p50_over_colocated']:.2f}x "
              f"p99 {v['ttft_p99_over_colocated']:.2f}x  makespan {v['makespan_over_colocated']:.2f}x")
    for key, b in sorted(summary["best_split"].items()):
        mode, rate = key.split("@")
        print(f"best split  {mode:5s} rate {rate:<6s} D={b['D']} F={b['F']} ({metric} {b[summary['metric']]:.0f} tok/s)")


def calibrate(args) -> dict:
    from .calibrate import RunSpec, fit, load_runs, predict, run_cam_run

    def specs(presets):
        return [RunSpec(preset=p, mode=m, model=args.cam_run_model, replicas=args.cam_run_replicas,
                        ffn=args.cam_run_ffn, requests=args.cam_run_requests,
                        attention_cost=tuple(args.cam_run_attention_cost))
                for p in presets.split(",") if p for m in args.calibrate_modes]

    def measure(spec_list, what):
        out = []
        for spec in spec_list:
            if not args.quiet:
                print(f"cam-sim: {what} run: cam-run {' '.join(spec.argv())}", flush=True)
            out.append(run_cam_run(spec, timeout_s=args.cam_run_timeout))
        return out

    if args.calibrate_from:
        earlier = load_runs(args.calibrate_from)
        cal, val = earlier["calibration_runs"], earlier["validation_runs"]
    else:
        cal = measure(specs(args.calibrate_presets), "calibration")
        val = measure(specs(args.validate_presets), "validation")
    costs = fit(cal)
    costs.save(args.calibrate)
    out = {"costs": costs.to_dict(), "calibration": [predict(r, costs) for r in cal],
           "validation": [predict(r, costs) for r in val], "calibration_runs": cal, "validation_runs": val}
    if not args.quiet:
        for label in ("calibration", "validation"):
            for v in out[label]:
                e = v["rel_error"]
                print(f"  {label:11s} {v['preset']:10s} {v['mode']:5s} makespan pred {v['predicted']['makespan_s']:.3f}"
                      f" s vs measured {v['measured']['makespan_s']:.3f} s ({e['makespan_s']:+.1%}); TTFT mean pred "
                      f"{v['predicted']['ttft_mean_s']:.3f} vs {v['measured']['ttft_mean_s']:.3f} "
                      f"({e['ttft_mean_s']:+.1%})")
        print(f"cam-sim: wrote {args.calibrate}")
    return out


def main(argv=None) -> int:
    try:
        argv = serving.expand_study(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        print(f"cam-sim: bad configuration: {e}", file=sys.stderr)
        return 2
    args = _parse(argv)
    try:
        check_args(args)
    except ValueError as e:
        print(f"cam-sim: bad configuration: {e}", file=sys.stderr)
        return 2
    try:
        if args.calibrate:
            result = calibrate(args)
            curves = {}
        else:
            result, curves = simulate_grid(args)
    except (ValueError, OSError, RuntimeError) as e:
        print(f"cam-sim: {e}", file=sys.stderr)
        return 2
    if not args.quiet and not args.calibrate:
        _print_summary(result["summary"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        if not args.quiet:
            print(f"wrote {args.json}")
    if args.plot_dir and not args.calibrate:
        from .plots import all_plots

        for path in all_plots(result, curves, args.plot_dir, args.slo):
            if not args.quiet:
                print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
