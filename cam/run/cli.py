"""``cam-run``: asynchronous AFD prefill end to end on the twin, with processes as ranks.

Spawns A Attention + F FFN processes, feeds them a seeded workload, watches them (the moment one dies it raises the
abort key and every other rank's waits end at once), and reports per-request TTFT, makespan, throughput and FFN
idle time. ``--mode async`` is this library's model (FFN ranks serve any ready replica); ``--mode sync`` puts a
global barrier across replicas at every layer, with the same ops and the same batches; ``--mode colocated`` is the
expert-parallel deployment AFD is compared with: D processes, each one device holding Attention rank d and FFN rank
D + d (the FFN loop on a thread, one compute timeline per device), with the sync barrier per layer.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import traceback
from typing import Dict, List

# Only modules that need neither torch nor the extension (cam's package is lazy): flags are parsed and refused
# before `import torch`, which costs seconds (over a minute on a loaded machine). The run imports the rest.
from ..serve.policy import add_row_budget_flag
from ..sim.presets import ASSIGNS
from ..sim.presets import PRESETS as WORKLOAD_PRESETS
from .bound import DEFAULT_COSTS as DEFAULT_BOUND_COSTS
from .bound import critical_path
from .bound import load_costs as load_bound_costs
from .run_dir import check_keep_dir, make_run_dir
from .start import (WORKER_BOOTSTRAP, exit_now, kill_and_reap, launcher_store, start_joiner, start_method,
                    start_ranks)
from .start import worker_command  # noqa: F401 - the command line of one exec-started rank: API
from .timeline import ATTENTION_PHASES
from .trace import write_trace

# How often the launcher looks at its ranks and the store: a few syscalls and one store round trip each time. Every
# stage change (all ready, Attention done, all gone) is seen this late, so it is short.
_POLL_S = 0.01
_GRACE_S = 20.0
# The run's clock starts this long after the last rank said it is ready, so that every rank has the start time
# before it passes. A rank blocked in the store wait gets it within a round trip, but on a loaded 2-CPU machine it
# may not run for tens of ms; the makespan would count that, so the margin stays what it always was and makespans
# compare across versions.
_START_MARGIN_S = 0.1


# The launcher's phases, in the order it reaches them, each printed once as one line with the seconds since the
# command started (unless --quiet): "ranks started" (forked or executed, waiting for the store), "store up", "joined"
# (every rank's handshake done), "loaded" (every rank built its part of the model and warmed up: the run starts),
# "attention done" (the FFN ranks are told to stop), "stopped" (every process gone), "results", "checked" (--check).
PHASES = ("ranks started", "store up", "joined", "loaded", "attention done", "stopped", "results", "checked")
# How often the launcher reads the ranks' join states before every rank joined (one store read per rank)
_JOIN_LOOK_S = 0.1


def _phase_printer(marks: Dict[str, float], quiet: bool):
    """``say(phase, detail)``: one line per phase of :data:`PHASES`, with the seconds since the command started
    (``marks["process"]``, else ``marks["run"]``)."""
    origin = marks["process"] if math.isfinite(marks.get("process", math.nan)) else marks["run"]

    def say(phase: str, detail: str = "") -> None:
        if phase not in PHASES:
            raise ValueError(f"cam-run: unknown phase {phase!r}")
        if not quiet:
            print(f"cam-run: {time.time() - origin:7.2f} s  {phase}{': ' + detail if detail else ''}", flush=True)

    return say


def joined_ranks(store, group: str) -> int:
    """How many ranks published the ``joined`` state in ``group``'s join status (cam.rank_status)."""
    from ..rank_status import members

    return sum(1 for status in members(store, group).values() if status.get("state") == "joined")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _parse(argv):
    p = argparse.ArgumentParser(prog="cam-run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["async", "sync", "colocated"], default="async",
                   help="colocated: --replicas devices, each an Attention replica and an FFN rank (--ffn must equal "
                        "--replicas, --participants 1)")
    p.add_argument("--preset", choices=sorted(WORKLOAD_PRESETS), default="default", help="workload preset")
    p.add_argument("--model", choices=["tiny", "small"], default=None,
                   help="model preset (cam.models.PRESETS; default tiny)")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="run a transformers checkpoint directory (config.json + *.safetensors; DeepSeek-V3, "
                        "DeepSeek-V4, Qwen2-MoE or Qwen3-MoE) instead of a --model preset: its routed experts through "
                        "cam.convert (with DeepSeek-V4's swiglu_limit on every FFN rank), --check also against the "
                        "model run natively (docs/run.md, \"A checkpoint\")")
    p.add_argument("--weights", choices=["w8a8", "w4a8"], default="w8a8",
                   help="with --checkpoint: the routed experts' format. w4a8: per-channel int4 weights "
                        "(cam.quantize_weight(bits=4)) held packed on the FFN ranks (half the bytes) and run by the "
                        "int4 kernels, --check against the "
                        "native model with the same dequantized int4 weights (docs/gmm.md §9)")
    p.add_argument("--replicas", type=int, default=2, help="Attention DP replicas D")
    p.add_argument("--participants", type=int, default=1,
                   help="Attention ranks per replica P: each runs 1/P of every micro-batch's tokens (sequence "
                        "parallel) and gets exactly its own tokens back (docs/run.md)")
    p.add_argument("--ffn", type=int, default=2,
                   help="FFN ranks F (at most the model's experts; contiguous: floor or ceil E / F experts each)")
    p.add_argument("--slots", type=int, default=2, help="rounds in flight per Attention rank")
    p.add_argument("--requests", type=int, help="override the preset's number of requests")
    p.add_argument("--seed", type=int, help="override the preset's seed")
    p.add_argument("--skew", type=float, help="override the preset's length skew across replicas")
    p.add_argument("--cost-model", action="store_true",
                   help="emulate attention time with calibrated sleeps (shows scheduling on a 2-CPU machine)")
    p.add_argument("--attention-cost", type=float, nargs=3, default=(0.002, 0.0004, 0.00001), metavar=("A", "B", "C"),
                   help="cost model: seconds = A + B*tokens + C*sum(len^2) per micro-batch per layer")
    p.add_argument("--timeout", type=float, default=120.0, help="bound of every wait inside a round (s)")
    p.add_argument("--idle-poll", type=float, default=0.02, help="FFN idle poll before an empty work item (s)")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON")
    p.add_argument("--timeline", metavar="PNG", help="draw each rank's work over time (needs matplotlib)")
    p.add_argument("--trace", metavar="JSON",
                   help="write each rank's phases as a Chrome trace (Perfetto, chrome://tracing), one process per rank")
    p.add_argument("--bound-costs", metavar="FILE", default=DEFAULT_BOUND_COSTS,
                   help="cam-sim cost file (device name or path) for the critical-path bound's non-attention service "
                        f"times under --cost-model (default {DEFAULT_BOUND_COSTS}; docs/run.md)")
    p.add_argument("--check", action="store_true", help="compare every request with the single-process reference")
    p.add_argument("--graph", action="store_true",
                   help="FFN ranks run their iteration as one captured graph, replayed (docs/graph.md)")
    p.add_argument("--placement", default="contiguous", metavar="SPEC",
                   help="expert placement: contiguous (expert e on FFN rank e // R), balanced (round robin: any E and "
                        "F), hot:K (balanced plus a second replica of the K experts the model routes most on this "
                        "workload) or a JSON file (docs/run.md §7)")
    p.add_argument("--batch-items", action="store_true",
                   help="snapshot batching: each FFN receive takes every ready work item, up to --row-budget rows, "
                        "and serves them with one W1 and one W2 launch (default: one work item per receive)")
    add_row_budget_flag(p, deprecated=("--batch-rows",),
                        help="row budget of one batched receive (default: every replica's work item fits, D x the "
                             "topology's rows per work item; at least one work item's rows)")
    p.add_argument("--assign", choices=ASSIGNS, default="round-robin",
                   help="which Attention replica takes an arriving request: round robin in arrival order (the "
                        "preset's static batches), or, decided at each arrival by a coordinator on Attention rank 0, "
                        "the replica with the fewest tokens / requests assigned and not yet finished, each replica "
                        "batching what it was given up to the preset's max_batch_tokens (docs/run.md §8)")
    p.add_argument("--rebalance-every", type=int, default=0, metavar="N",
                   help="every rank rebalances the expert placement (Comm.set_placement: every expert to another "
                        "FFN rank) after each N steps of a replica; --check covers the rounds after (docs/run.md §7)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--keep", metavar="DIR", help="keep per-rank results and outputs in DIR")
    p.add_argument("--keep-going", action="store_true",
                   help="an Attention rank that dies mid-run loses only its replica: the others finish (--check covers "
                        "them), the report names the lost replica; exit code 3 (docs/connector.md)")
    return p.parse_args(argv)


# Per-worker memory a rank needs (torch + the model + windows), to bound the processes a run may start.
_RANK_BYTES = 512 << 20
_MAX_SKEW = 100.0
_MAX_COST_S = 10.0
_MAX_REQUESTS = 100_000


def max_processes() -> int:
    """How many rank processes this machine can take: a few per CPU, and no more than the memory available."""
    cpus = os.cpu_count() or 1
    limit = 16 * cpus
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    limit = min(limit, int(line.split()[1]) * 1024 // _RANK_BYTES)
    except OSError:
        pass
    return max(limit, 2)


def _finite(flag: str, value: float, lo: float, hi: float, lo_open: bool = False) -> None:
    if not math.isfinite(value) or value < lo or (lo_open and value == lo) or value > hi:
        bound = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise ValueError(f"{flag} must be a finite number in {bound}, got {value!r}")


def _writable(flag: str, path: str) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ValueError(f"{flag} {path!r} is a directory")
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK) or (os.path.exists(path) and
                                                                         not os.access(path, os.W_OK)):
        raise ValueError(f"{flag} {path!r} cannot be written (missing or read-only directory)")


def check_args(args) -> None:
    """Every flag checked before any process, port or temporary directory exists; errors name the flag."""
    for flag in ("replicas", "participants", "ffn", "slots"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if args.slots > 64:
        raise ValueError(f"--slots must be <= 64, got {args.slots}")
    if args.mode == "colocated":
        if args.participants != 1:
            raise ValueError(f"--mode colocated: each device is one Attention rank, so --participants must be 1, got "
                             f"{args.participants}")
        if args.ffn != args.replicas:
            raise ValueError(f"--mode colocated: each device is an Attention replica and an FFN rank, so --ffn must "
                             f"equal --replicas ({args.replicas}), got {args.ffn}")
        if args.graph:
            raise ValueError("--graph needs --mode async or sync: a colocated FFN rank shares its process's device")
    world = args.replicas if args.mode == "colocated" else args.replicas * args.participants + args.ffn
    limit = max_processes()
    if world > limit:
        raise ValueError(f"--replicas x --participants + --ffn = {world} rank processes; this machine takes at most "
                         f"{limit} ({os.cpu_count()} CPUs, ~{_RANK_BYTES >> 20} MiB per rank)")
    _finite("--timeout", args.timeout, 0.0, float("inf"), lo_open=True)
    _finite("--idle-poll", args.idle_poll, 0.0, float("inf"), lo_open=True)
    if args.skew is not None:
        _finite("--skew", args.skew, 0.0, _MAX_SKEW)
    if args.requests is not None and not 1 <= args.requests <= _MAX_REQUESTS:
        raise ValueError(f"--requests must be in [1, {_MAX_REQUESTS}], got {args.requests}")
    if args.seed is not None and not 0 <= args.seed < 2**63:
        raise ValueError(f"--seed must be in [0, 2^63), got {args.seed}")
    for name, value in zip("ABC", args.attention_cost):
        _finite(f"--attention-cost {name}", value, 0.0, _MAX_COST_S)
    if args.json:
        _writable("--json", args.json)
    if args.timeline:
        _writable("--timeline", args.timeline)
        if importlib.util.find_spec("matplotlib") is None:
            raise ValueError("--timeline needs matplotlib (pip install matplotlib)")
    if args.trace:
        _writable("--trace", args.trace)
    if args.cost_model:
        load_bound_costs(args.bound_costs)  # a missing or malformed cost file is refused before anything starts
    if args.keep:
        check_keep_dir(args.keep)
    if args.row_budget is not None and not args.batch_items:
        flag = args.row_budget_flag
        raise ValueError(f"{flag} sets the row budget of --batch-items; add --batch-items or drop {flag}")
    if args.batch_items and args.mode == "colocated":
        raise ValueError("--batch-items is an FFN-side policy of AFD: drop it or use --mode async or sync")
    if args.row_budget is not None and args.row_budget < 1:  # a flag's range; the rule itself is ServePolicy's
        raise ValueError(f"{args.row_budget_flag} must be >= 1, got {args.row_budget}")
    if args.weights != "w8a8" and args.checkpoint is None:
        raise ValueError(f"--weights {args.weights} needs --checkpoint (a --model preset's experts are W8A8)")
    if args.checkpoint is not None:
        if args.model is not None:
            raise ValueError("--checkpoint replaces --model: give one of them")
        if not os.path.isdir(args.checkpoint) or not os.path.isfile(os.path.join(args.checkpoint, "config.json")):
            raise ValueError(f"--checkpoint {args.checkpoint!r} is not a directory with a config.json")
        if args.cost_model:
            raise ValueError("--cost-model with --checkpoint is not supported: the critical-path bound's model shape "
                             "is a --model preset's")
        if importlib.util.find_spec("transformers") is None:
            raise ValueError("--checkpoint needs transformers (pip install 'cam[transformers]')")
    if args.keep_going and args.assign != "round-robin":
        raise ValueError(f"--keep-going needs --assign round-robin: under --assign {args.assign} the coordinator "
                         "would go on giving requests to a lost replica")
    if args.keep_going and args.mode != "async":
        raise ValueError(f"--keep-going needs --mode async: the {args.mode} mode's per-layer barrier waits for every "
                         "replica")
    if args.rebalance_every < 0:
        raise ValueError(f"--rebalance-every must be >= 0 (0: no rebalance), got {args.rebalance_every}")
    if args.rebalance_every:
        for bad, why in ((args.assign != "round-robin", f"--assign {args.assign}"),
                         (args.keep_going, "--keep-going"), (args.mode == "colocated", "--mode colocated")):
            if bad:
                raise ValueError(f"--rebalance-every is not driven with {why}: every rank must join every rebalance "
                                 f"at a step boundary of the static round-robin batches")
    # Last, as it needs the runtime (torch, the extension): every check above runs without it.
    from .. import _runtime

    try:
        _runtime.check_timeout_chain("cam-run", args.timeout, args.idle_poll)
    except ValueError as e:
        raise ValueError(str(e).replace("timeout_s", "--timeout").replace("idle_poll_s", "--idle-poll")) from None
    if args.checkpoint is not None:
        from .checkpoint import checkpoint_shape

        checkpoint_shape(args.checkpoint)  # its config and files, before any process (ValueError naming the flag)


# Topology fields the flags set, for a refusal from cam.Topology (which names the field, not the flag).
_TOPOLOGY_FLAGS = {"D": "--replicas", "P": "--participants", "F": "--ffn", "slots": "--slots",
                   "Bmax": "--preset/--requests/--skew (the largest micro-batch) with --participants",
                   "E": "--model (its experts)", "K": "--model (its top-k)", "H": "--model (its hidden size)",
                   "L": "--model (its MoE layers)", "expert_slots": "--placement"}


def _topology_error(e: ValueError) -> str:
    """``cam.Topology``'s refusal, followed by the flags that set the fields it names."""
    import re

    text = str(e)
    fields = [f for f in _TOPOLOGY_FLAGS if re.search(rf"(?<![A-Za-z_]){re.escape(f)}(?![A-Za-z_])", text)]
    if not fields:
        return text
    return text + " (set by " + ", ".join(f"{f}: {_TOPOLOGY_FLAGS[f]}" for f in fields) + ")"


def _placement_summary(placement) -> dict:
    """The report's placement: the slots per FFN rank and, per layer, the experts with more than one replica."""
    if placement is None:
        return {"kind": "contiguous"}
    return {"kind": "table", "slots_per_rank": placement["slots_per_rank"],
            "replicated": [[e for e, reps in enumerate(layer) if len(reps) > 1] for layer in placement["layers"]]}


def _batch_rows(requested, topo, flag: str = "--row-budget") -> int:
    """--batch-items' row budget, known once the topology is: ServePolicy's rule (C's: a batch holds at least one
    whole work item, chunks being cut at the topology's rows per work item); by default every replica's item fits."""
    if requested is None:
        return topo.D * topo.recv_rows
    from ..serve.policy import ServePolicy

    try:
        ServePolicy(row_budget=requested).validated(topo, f"{flag} {requested}")
    except ValueError as e:
        raise ValueError(f"{e} (--model, --replicas, --participants and the preset set the topology)") from None
    return requested


def _config(args, out_dir: str, port: int):
    from .setup import RunConfig

    spec = dataclasses.asdict(WORKLOAD_PRESETS[args.preset])
    for key in ("requests", "seed", "skew"):
        value = getattr(args, key)
        if value is not None:
            spec["num_requests" if key == "requests" else key] = value
    cfg = RunConfig(mode=args.mode, model=args.model or "tiny", workload=spec, D=args.replicas, P=args.participants,
                    F=args.ffn, slots=args.slots, master_addr="127.0.0.1", master_port=port,
                    timeout_s=args.timeout, idle_poll_s=args.idle_poll, cost_model=args.cost_model,
                    attention_cost=tuple(args.attention_cost), out_dir=out_dir, progress=not args.quiet,
                    shm_prefix=f"cam-run-{os.getpid()}-{port}", graph=args.graph, keep_going=args.keep_going,
                    batch_rows=args.row_budget if args.batch_items else None, assign=args.assign,
                    rebalance_every=args.rebalance_every,
                    checkpoint=None if args.checkpoint is None else os.path.abspath(args.checkpoint),
                    weights=args.weights)
    return cfg


def _remove_leftover_windows(prefix: str) -> None:
    """Windows are unlinked once every rank mapped them; a rank killed before that leaves its segment behind."""
    shm = "/dev/shm"
    if os.path.isdir(shm):
        for name in os.listdir(shm):
            if name.startswith(prefix + "-"):
                try:
                    os.unlink(os.path.join(shm, name))
                except OSError:
                    pass


def _percentile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, int(round(q / 100 * (len(ordered) - 1)))))
    return ordered[idx]


def batches_run(results: Dict[int, dict], topo) -> Dict[int, List[List[int]]]:
    """The batches each replica ran, in order, as its first participant recorded them (lockstep modes: one per
    step, empty where the replica had no request): round robin's static batches, or under --assign the ones the
    replicas took during the run."""
    out: Dict[int, List[List[int]]] = {}
    for r in results.values():
        if r["role"] == "attention" and r["participant"] == 0:
            out[r["replica"]] = [list(b["requests"]) for b in r["batches"]]
    return out


def _report(cfg, built, results: Dict[int, dict]) -> dict:
    model, workload, topo = built
    done, replica_of = {}, {}
    for r in results.values():
        if r["role"] == "attention":
            for b in r["batches"]:
                for rid in b["requests"]:
                    if replica_of.setdefault(rid, r["replica"]) != r["replica"]:
                        raise RuntimeError(f"request {rid} ran on replicas {replica_of[rid]} and {r['replica']}")
                    done[rid] = b["end_s"]
    ttft = {rid: done[rid] - workload.requests[rid].arrival_s for rid in done}
    tokens = sum(int(workload.requests[rid].tokens.numel()) for rid in done)
    makespan = max(done.values()) if done else 0.0
    ffn = [r for r in results.values() if r["role"] == "ffn"]
    values = list(ttft.values())
    coordinator = next((r["assign_log"] for r in results.values() if "assign_log" in r), None)
    return {
        "mode": cfg.mode,
        "assign": cfg.assign,
        # Which replica ran each request; under --assign (not round robin) also every decision of the coordinator
        # with the completions and queues it saw (cam/run/assign.py).
        "assignment": {str(k): v for k, v in sorted(replica_of.items())},
        **({"assign_log": coordinator} if coordinator is not None else {}),
        "graph": cfg.graph,
        "batch_rows": cfg.batch_rows,
        "placement": _placement_summary(cfg.placement),
        # --rebalance-every: the placement epoch every rank ended at (one per rebalance adopted; all equal)
        "rebalances": sorted({r.get("placement_epoch", 0) for r in results.values()}),
        "cost_model": cfg.cost_model,
        "topology": {"D": topo.D, "P": topo.P, "F": topo.F, "E": topo.E, "K": topo.K, "H": topo.H,
                     "Bmax": topo.Bmax, "L": topo.L, "slots": topo.slots},
        # Devices (processes) the run occupies: colocated, each holds an Attention and an FFN rank.
        "devices": topo.D if cfg.mode == "colocated" else topo.world_size,
        "model": cfg.model if cfg.checkpoint is None else None,
        "checkpoint": cfg.checkpoint,
        "weights": cfg.weights,
        # The clamp every FFN rank's W1 applied (worker.ffn_swiglu_limit; a --checkpoint's DeepSeek-V4
        # swiglu_limit), None for the plain SwiGLU.
        "swiglu_limit": model.swiglu_limit,
        "workload": cfg.workload,
        "requests": len(done),
        "tokens": tokens,
        "makespan_s": makespan,
        "throughput_tok_s": tokens / makespan if makespan > 0 else 0.0,
        "ttft_s": {"mean": statistics.fmean(values), "p50": _percentile(values, 50), "p90": _percentile(values, 90),
                   "p99": _percentile(values, 99), "max": max(values)} if values else {},
        "ttft_per_request_s": {str(k): v for k, v in sorted(ttft.items())},
        "ffn_idle_fraction": statistics.fmean(r["idle_fraction"] for r in ffn) if ffn else 0.0,
        "ffn": [{"rank": r["rank"], "items": len(r["items"]), "idle_fraction": r["idle_fraction"],
                 "compute_s": r["compute_s"], "recv_wait_s": r["recv_wait_s"], "rows": r.get("rows"),
                 "gmm_launches": r.get("gmm_launches")} for r in ffn],
    }


def _check(built, out_dir: str, ran: Dict[int, List[List[int]]], skip=()) -> dict:
    """Each request's final hidden states against the single-process reference forward of the same batch (``ran``:
    the batches each replica ran, ``batches_run``).
    Tolerance: the routed experts' W1 epilogue uses fp32 exp in the kernel and a once-rounded float64 exp in the
    golden, so a SwiGLU output may land one int8 level apart (docs/gmm.md); through the layers that bounds the
    difference at a few percent of an element's scale, and almost every element matches to ~1e-6."""
    model, workload, topo = built
    outputs = load_outputs(out_dir, topo.A, workload, participants=topo.P, skip_replicas=skip)
    worst_rel, mean_abs, count = 0.0, 0.0, 0
    for replica in range(topo.D):
        for batch in ran.get(replica, []) if replica not in skip else []:
            if not batch:
                continue  # a lockstep step this replica ran without requests
            prompts = [workload.requests[r].tokens for r in batch]
            ref = model.forward_reference(prompts)
            for rid, expected in zip(batch, ref):
                got = outputs[rid]
                diff = (got - expected).abs()
                worst_rel = max(worst_rel, float(diff.max() / expected.abs().max().clamp_min(1e-6)))
                mean_abs += float(diff.mean())
                count += 1
    mean_abs /= max(count, 1)
    ok = worst_rel <= 0.05 and mean_abs <= 2e-3
    return {"ok": ok, "max_rel_diff": worst_rel, "mean_abs_diff": mean_abs, "requests": count,
            "tolerance": {"max_rel_diff": 0.05, "mean_abs_diff": 2e-3}}


def _check_native(built, out_dir: str, skip=()) -> dict:
    """--checkpoint: every request's final hidden states against the transformers model itself, run natively on the
    request with the same dequantized experts (cam.run.checkpoint.native_check states its tolerance)."""
    from .checkpoint import native_check

    model, workload, topo = built
    outputs = load_outputs(out_dir, topo.A, workload, participants=topo.P, skip_replicas=skip)
    rids = sorted(outputs)
    return native_check(model, [workload.requests[r].tokens for r in rids], [outputs[r] for r in rids])


def load_outputs(out_dir: str, attention_ranks: int, workload, participants: int = 1, skip_replicas=()) -> dict:
    """Every request's final hidden states, assembled from the pieces each Attention rank saved for the tokens it
    owned; refuses a token delivered by no participant or by two. The replicas in `skip_replicas` (lost under
    --keep-going) wrote nothing: their ranks are not read and their requests are not expected."""
    import torch

    from .participants import assemble

    pieces = []
    for rank in range(attention_ranks):
        if rank // participants not in skip_replicas:
            pieces.extend(torch.load(os.path.join(out_dir, f"outputs-{rank}.pt")))
    excluded = {rid for d in skip_replicas for batch in workload.batches[d] for rid in batch}
    return assemble(pieces, {r.rid: int(r.tokens.numel()) for r in workload.requests if r.rid not in excluded})


def _bound(cfg, built, ran: Dict[int, List[List[int]]], costs_file: str, makespan: float) -> dict:
    """The critical-path bound of the batches the run ran (under --assign, the ones taken during the run); the
    simulator's prediction is for the same requests under the same policy, its batches formed as it simulates."""
    model, workload, topo = built
    if cfg.assign != "round-robin":
        replica = {rid: d for d, bs in ran.items() for b in bs for rid in b}
        workload = dataclasses.replace(
            workload, requests=[dataclasses.replace(r, replica=replica[r.rid]) for r in workload.requests],
            batches=[ran.get(d, []) for d in range(topo.D)])
    bound = critical_path(model.config, workload, topo.D, topo.P, topo.F, topo.slots, load_bound_costs(costs_file),
                          cfg.attention_cost, cfg.mode, assign=cfg.assign,
                          token_budget=cfg.workload_spec().max_batch_tokens)
    bound["makespan_over_bound"] = makespan / bound["bound_s"] if bound["bound_s"] > 0 else float("inf")
    return bound


def _draw_timeline(report: dict, results: Dict[int, dict], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise SystemExit(f"cam-run: --timeline needs matplotlib (pip install matplotlib): {e}")
    ranks = sorted(results)
    fig, ax = plt.subplots(figsize=(14, 1 + 0.6 * len(ranks)))
    cmap, replica_cmap = plt.get_cmap("tab10"), plt.get_cmap("Dark2")
    # Attention lanes: leaf phases coloured by phase; FFN lanes: items coloured by replica (another palette);
    # idle in light grey.
    phase_colour = {name: cmap(i % 10) for i, name in enumerate(ATTENTION_PHASES)}
    phase_colour["wait_arrival"] = phase_colour["idle"] = "0.9"
    used = set()
    for row, rank in enumerate(ranks):
        for s in results[rank]["spans"]:
            name = s["name"]
            if name in ("step", "layer", "recv", "compute", "send"):
                continue  # containers and an item's parts: the leaf bars say it
            if name == "item":
                colour, label = replica_cmap(s["args"]["replica"] % 8), f"FFN item, replica {s['args']['replica']}"
            else:
                colour, label = phase_colour.get(name, "0.5"), name
            ax.barh(row, s["end_s"] - s["start_s"], left=s["start_s"], color=colour, height=0.8,
                    label=None if label in used else label)
            used.add(label)
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"{'attn' if results[r]['role'] == 'attention' else 'ffn'} {r}" for r in ranks])
    ax.invert_yaxis()
    if report["makespan_s"] > 0:  # FFN ranks idle on until the launcher ends the run: not part of the schedule
        ax.set_xlim(0, report["makespan_s"] * 1.02)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_xlabel("seconds since start")
    bound = f", makespan / bound {report['bound']['makespan_over_bound']:.2f}" if "bound" in report else ""
    ax.set_title(f"cam-run --mode {report['mode']}: makespan {report['makespan_s']:.2f} s, "
                 f"FFN idle {report['ffn_idle_fraction']:.0%}{bound}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# The exec start's command line, where it always was (tests/test_readme.py checks it from a checkout's root).
_WORKER_BOOTSTRAP = WORKER_BOOTSTRAP


def run(args) -> int:
    # The wall-time profile (_wall). As the `cam-run` command, the launcher began when `cam` began importing: the
    # process may be older, since a shell running `... && cam-run` as the last command of `bash -c` execs it in its
    # own process (CI's README line counted its pip install as the launcher's start).
    marks = {"run": time.time()}
    try:
        check_args(args)
    except ValueError as e:
        print(f"cam-run: bad configuration: {e}", file=sys.stderr)
        return 2
    import torch

    from .._proc import process_start_time

    marks["process"] = _command_started if _command_started is not None else process_start_time()
    threads = torch.get_num_threads()
    try:
        return _run(args, marks)
    finally:
        torch.set_num_threads(threads)  # a caller's own setting (run() is also called in-process)


def _run(args, marks: Dict[str, float]) -> int:
    import torch

    # Imported before the ranks are forked, so that no rank imports them again (start.py).
    from ..serve.store import SignedStore
    from . import worker
    from .deaths import await_signalled_cause, failure, kill_from_env
    if args.checkpoint is not None:
        from . import checkpoint  # noqa: F401 - with transformers and its model classes
    from .setup import model_config, plan, rank_threads, resolve_placement

    port = _free_port()
    out_dir = args.keep or make_run_dir()
    os.makedirs(out_dir, exist_ok=True)
    try:
        cfg = _config(args, out_dir, port)
        # Ranks and the launcher's --check share the CPUs (setup.rank_threads). Set before this process runs any
        # torch op, so a forked rank inherits it with no thread pool behind it.
        torch.set_num_threads(rank_threads(cfg.world_size))
        cfg = dataclasses.replace(cfg, placement=resolve_placement(args.placement, cfg))
        try:
            workload, topo = plan(cfg)  # validates the topology too: E % F, sizes (ValueError naming the field)
        except ValueError as e:
            raise ValueError(_topology_error(e)) from None
        if args.batch_items:
            cfg = dataclasses.replace(cfg, batch_rows=_batch_rows(args.row_budget, topo, args.row_budget_flag))
        kill = kill_from_env(topo, cfg.expert_placement(), cfg.mode, cfg.rebalance_every)
        cfg = dataclasses.replace(cfg, kill_ffn=None if kill is None else list(kill), elastic=kill is not None)
        method = start_method()
    except ValueError as e:
        print(f"cam-run: bad configuration: {e}", file=sys.stderr)
        if not args.keep:
            shutil.rmtree(out_dir, ignore_errors=True)
        return 2
    world = topo.world_size
    limit = model_config(cfg).swiglu_limit if cfg.checkpoint is not None else None
    # Colocated: one process per device, holding two ranks of the plane (worker._main_colocated).
    processes = topo.A if cfg.mode == "colocated" else world
    config_path = os.path.join(out_dir, "config.json")
    cfg.save(config_path)
    print(f"cam-run --mode {cfg.mode}{' (cost model)' if cfg.cost_model else ''}"
          f"{f' (--assign {cfg.assign})' if cfg.assign != 'round-robin' else ''}"
          f"{' (FFN by graph replay)' if cfg.graph else ''}"
          f"{f' (batched FFN receive, {cfg.batch_rows} rows)' if cfg.batch_rows else ''}: D={topo.D} replicas x "
          f"P={topo.P}, F={topo.F} FFN ranks, E={topo.E}, K={topo.K}, H={topo.H}, "
          f"{'checkpoint ' + cfg.checkpoint if cfg.checkpoint else 'model ' + cfg.model}, "
          f"{f'W1 swiglu_limit {limit:g}, ' if limit is not None else ''}preset {args.preset}", flush=True)
    procs: Dict[int, subprocess.Popen] = {}  # or start.ForkedRank: the same interface
    exited: Dict[int, float] = {}  # when the launcher saw each rank gone
    failed: Dict[int, int] = {}
    lost: Dict[int, int] = {}  # --keep-going: Attention ranks that died after the start, {rank: exit code}
    killed: Dict[int, int] = {}  # $CAM_RUN_KILL_FFN: the FFN rank killed on purpose, which the others fail over
    restarted: Dict[int, object] = {}  # ... and its new process, which rejoins the running world
    interrupted = []

    def on_signal(signum, _frame):
        interrupted.append(signum)

    old = {}
    say = _phase_printer(marks, args.quiet)
    status_group = cfg.connector_config(topo).group  # where each rank's join status is (cam.rank_status)
    marks["spawn"] = time.time()
    try:
        # Forked ranks start before this process has a thread of its own (the store's come next); they wait for go.
        secret = secrets.token_hex(32)  # the restarted rank ($CAM_RUN_KILL_FFN) gets the run's secret too
        started_ranks, go = start_ranks(method, config_path, processes, cfg.timeout_s, secret)
        procs.update(started_ranks)
        say("ranks started", f"{processes} processes ({method}), waiting for the store")
        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        store = launcher_store(port, cfg.timeout_s)
        go()
        # The ranks sign what they write (the run's secret): their join states are read as they wrote them.
        status_store = SignedStore(store, bytes.fromhex(secret), status_group)
        say("store up", f"127.0.0.1:{port}; the ranks build, join and load")
        for rank in range(processes):
            if not args.quiet:
                role = f"attention + ffn rank {topo.A + rank}" if processes < world else \
                    "attention" if rank < topo.A else "ffn"
                print(f"rank {rank} ({role}) pid {procs[rank].pid}", flush=True)
        attention_done = False
        started = False
        joined, next_join_look = args.quiet, 0.0  # quiet: nobody reads the phase lines, so no store round trips
        start_deadline = time.monotonic() + cfg.timeout_s
        deadline = None
        while procs and any(p.poll() is None for p in procs.values()):
            time.sleep(_POLL_S)
            if not joined and time.monotonic() >= next_join_look:
                next_join_look = time.monotonic() + _JOIN_LOOK_S
                if joined_ranks(status_store, status_group) >= world:
                    joined = True
                    say("joined", f"every rank's handshake done ({world} ranks)")
            if not started and store.add(worker.READY_KEY, 0) == world:
                marks["start"] = time.time()
                store.set(worker.START_KEY, repr(marks["start"] + _START_MARGIN_S))
                started = True
                if not joined:  # a rank is ready only after its handshake: seen between two looks
                    joined = True
                    say("joined", f"every rank's handshake done ({world} ranks)")
                say("loaded", "every rank built its part of the model and warmed up; the run starts")
            if not started and time.monotonic() > start_deadline and not failed:
                failed[-1] = -1  # nobody died, but the world never came up
                print(f"cam-run: not every rank was up within {cfg.timeout_s} s", file=sys.stderr, flush=True)
            for rank, p in procs.items():
                code = p.poll()
                if code is not None:
                    exited.setdefault(rank, time.time())
                # Only what happens before the abort is a cause; exits after it are its consequences.
                if code in (None, 0) or rank in failed or rank in lost or deadline is not None or \
                        (rank in killed and rank not in restarted):
                    continue
                if rank in restarted:  # the restarted rank failed
                    failed[rank] = code
                elif started and kill is not None and (rank, code) == (kill[0], -signal.SIGKILL):
                    killed[rank] = code
                    procs[rank] = restarted[rank] = start_joiner(config_path, rank, secret)
                else:
                    (lost if args.keep_going and started and rank < topo.A else failed)[rank] = code
            if failed and all(code >= 0 for code in failed.values()) and not store.check([worker.ABORT_KEY]):
                await_signalled_cause(procs, failed, {**lost, **killed})
            if (failed or interrupted) and not store.check([worker.ABORT_KEY]):
                why = (failure(failed) if failed else f"launcher got signal {interrupted[0]}")
                store.set(worker.ABORT_KEY, why)
                print(f"cam-run: {why}; aborting every rank", file=sys.stderr, flush=True)
                deadline = time.monotonic() + _GRACE_S + cfg.idle_poll_s
            if not attention_done and (store.add(worker.ATTENTION_DONE_KEY, 0) == topo.A if processes < world else
                                       all(procs[r].poll() == 0 or r in lost for r in range(topo.A))):
                attention_done = True
                marks["shutdown"] = time.time()
                store.set(worker.SHUTDOWN_KEY, json.dumps({"lost": sorted(lost)}))
                say("attention done", f"{topo.A - len(lost)} of {topo.A} Attention ranks finished; the FFN ranks "
                    "are told to stop")
            if deadline is not None and time.monotonic() > deadline:
                break
    finally:
        kill_and_reap(list(procs.values()))
        for s, h in old.items():
            signal.signal(s, h)
        _remove_leftover_windows(cfg.shm_prefix)
        marks["exited"] = time.time()
        say("stopped", "every rank process is gone")
    if not failed and len(lost) == topo.A:
        failed = lost  # every replica lost: nothing finished
    if failed or interrupted:
        print("cam-run: FAILED: " + (failure(failed) if failed else f"interrupted by signal {interrupted[0]}"),
              file=sys.stderr)
        if not args.keep:
            shutil.rmtree(out_dir, ignore_errors=True)
        return 130 if interrupted else 1
    from .setup import make_model

    return _finish(args, cfg, (make_model(cfg), workload, topo), out_dir, lost, marks, exited,
                   {r: c for r, c in killed.items() if r not in restarted}, say)


def _finish(args, cfg, built, out_dir: str, lost: Dict[int, int], marks: Dict[str, float],
            exited: Dict[int, float], killed: Dict[int, int], say=lambda *a: None) -> int:
    """After every rank is gone: the results, the report, --check and the files asked for."""
    topo = built[2]
    results = {}
    for rank in range(topo.world_size):
        if rank not in lost and rank not in killed:
            with open(os.path.join(out_dir, f"result-{rank}.json")) as f:
                results[rank] = json.load(f)
    report = _report(cfg, built, results)
    marks["report"] = time.time()
    say("results", f"{len(results)} ranks' results read")
    if lost:
        report["lost_replicas"] = _lost_replicas(built, lost, results)
    if cfg.kill_ffn is not None:
        report["fault"] = {"killed": cfg.kill_ffn[0], "round": cfg.kill_ffn[1],
                           "restarted": cfg.kill_ffn[0] not in killed and cfg.kill_ffn[0] in results,
                           "failovers": {str(r): x.get("failovers", []) for r, x in sorted(results.items())}}
    if cfg.cost_model:
        report["bound"] = _bound(cfg, built, batches_run(results, topo), args.bound_costs, report["makespan_s"])
    if args.check:
        skip = [d["replica"] for d in report.get("lost_replicas", [])]
        report["check"] = _check(built, out_dir, batches_run(results, topo), skip=skip)
        if cfg.rebalance_every:  # every rank adopted every rebalance, and the outputs above are still the reference's
            from .setup import rebalance_count

            want = [rebalance_count(cfg, built[1])]
            report["check"]["rebalances"] = {"want": want[0], "got": report["rebalances"]}
            report["check"]["ok"] = report["check"]["ok"] and report["rebalances"] == want
        if cfg.checkpoint is not None:
            report["check"]["native"] = _check_native(built, out_dir, skip)
            report["check"]["reference_ok"] = report["check"]["ok"]
            report["check"]["ok"] = report["check"]["ok"] and report["check"]["native"]["ok"]
    marks["checked"] = time.time()
    if args.check:
        say("checked", "PASS" if report["check"]["ok"] else "FAIL")
    report["wall_s"] = _wall(marks, results, exited)
    _print(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.json}")
    if args.timeline:
        _draw_timeline(report, results, args.timeline)
        print(f"wrote {args.timeline}")
    if args.trace:
        write_trace(args.trace, results, report)
        print(f"wrote {args.trace}")
    if not args.keep:
        shutil.rmtree(out_dir, ignore_errors=True)
    return 4 if not report.get("check", {"ok": True})["ok"] else 3 if lost else 0


def _wall(marks: Dict[str, float], results: Dict[int, dict], exited: Dict[int, float]) -> dict:
    """Where the launcher's wall time went, up to the report (docs/run.md, "Wall time"), and each rank's start-up
    stages. Every stage is the time between two marks; a mark a run did not reach makes its stages absent."""
    def span(a, b, m=marks):
        return m[b] - m[a] if a in m and b in m and math.isfinite(m[a]) else None

    stages = {"launcher_start": span("process", "run"),  # interpreter, imports (torch, cam)
              "prepare": span("run", "spawn"),  # flags, workload, model, store, config
              "ranks_up": span("spawn", "start"),  # until every rank said it was ready
              "run": span("start", "shutdown"),  # until every Attention rank finished
              "drain": span("shutdown", "exited"),  # FFN ranks told to stop, every process gone
              "results": span("exited", "report"),
              "check": span("report", "checked")}
    total = span("process", "checked") if math.isfinite(marks["process"]) else span("run", "checked")
    ranks = {}
    for rank, r in sorted(results.items()):
        m = dict(r.get("startup", {}))
        if rank in exited:
            m["exited"] = exited[rank]
        ranks[str(rank)] = {k: v for k, v in (("start", span("process", "main", m)), ("build", span("main", "built", m)),
                                               ("connect", span("built", "connected", m)),
                                               ("warm_up", span("connected", "warmed", m)),
                                               ("wait_start", span("warmed", "started", m)),
                                               ("exit", span("done", "exited", m))) if v is not None}
        if "process" in m and math.isfinite(m["process"]) and "spawn" in marks:
            ranks[str(rank)]["spawned_after"] = m["process"] - marks["spawn"]
    # --checkpoint: what each rank read of the checkpoint ({part: {"bytes", "s"[, "experts"]}}), inside its warm-up
    loaded = {str(rank): r["loaded"] for rank, r in sorted(results.items()) if r.get("loaded")}
    return {"total": total, **{k: v for k, v in stages.items() if v is not None}, "ranks": ranks,
            **({"loaded": loaded} if loaded else {})}


def _loaded_line(loaded: Dict[str, dict]) -> str:
    """The report's line on what the ranks read of a checkpoint: per part, the largest rank's bytes and time."""
    parts = []
    for part, who in (("attention", "attention model without routed experts"), ("experts", "routed experts")):
        got = [x[part] for x in loaded.values() if part in x]
        if got:
            big = max(got, key=lambda x: x["bytes"])
            n = f", {big['experts']} experts" if "experts" in big else ""
            parts.append(f"{who} {big['bytes'] / 2**20:.2f} MiB{n} in {big['s']:.2f} s ({len(got)} ranks)")
    return "; ".join(parts)


def _lost_replicas(built, lost: Dict[int, int], results: Dict[int, dict]) -> List[dict]:
    """--keep-going: each lost replica, how its rank died, the requests excluded from the report and --check, and
    the rounds of it each FFN rank dropped (what the FFN ranks' Comms counted, cam.LostReplica)."""
    from .deaths import failure

    _, workload, topo = built
    out = []
    for replica in sorted({r // topo.P for r in lost}):
        ranks = sorted(r for r in lost if r // topo.P == replica)
        dropped, reports = {}, []
        for r in results.values():
            for item in r.get("lost_replicas", []):
                if item["replica"] == replica:
                    dropped[str(r["rank"])] = item["dropped_rounds"]
                    reports.append(item["report"])
        out.append({"replica": replica, "ranks": ranks, "how": [failure({r: lost[r]}) for r in ranks],
                    "requests_excluded": sorted(rid for b in workload.batches[replica] for rid in b),
                    "dropped_rounds": dropped, "ffn_reports": reports})
    return out


def _print(report: dict) -> None:
    t = report["ttft_s"]
    print(f"mode {report['mode']}{' (cost model)' if report['cost_model'] else ''}"
          f"{', assign ' + report['assign'] if report['assign'] != 'round-robin' else ''}: "
          f"{report['requests']} requests, {report['tokens']} tokens")
    print(f"  makespan    {report['makespan_s']:.3f} s   throughput {report['throughput_tok_s']:.1f} tok/s")
    if t:
        print(f"  TTFT        mean {t['mean']:.3f} s  p50 {t['p50']:.3f}  p90 {t['p90']:.3f}  p99 {t['p99']:.3f}")
    print(f"  FFN idle    {report['ffn_idle_fraction']:.1%}  "
          + "  ".join(f"rank {f['rank']}: {f['items']} items" for f in report["ffn"]))
    if "bound" in report:
        b = report["bound"]
        print(f"  bound       {b['bound_s']:.3f} s ({b['binding']}; longest replica chain "
              f"{max(b['replica_chain_s']):.3f} s, FFN work / F {b['ffn_work_per_rank_s']:.3f} s)   "
              f"makespan / bound {b['makespan_over_bound']:.2f}")
    if "check" in report:
        c = report["check"]
        passed = c.get("reference_ok", c["ok"])  # --checkpoint: c["ok"] also needs the native comparison
        print(f"  check       {'PASS' if passed else 'FAIL'}: max rel diff {c['max_rel_diff']:.2e}, "
              f"mean abs diff {c['mean_abs_diff']:.2e} vs the single-process reference ({c['requests']} requests)")
        if "native" in c:
            n = c["native"]
            print(f"  native      {'PASS' if n['ok'] else 'FAIL'}: each MoE block on native's input within "
                  f"{n['max_block_rel_diff']:.2e} of native's; max rel diff {n['max_rel_diff']:.2e} per token vs "
                  f"the transformers model with the same dequantized experts ({n['tokens_bounded']} tokens; "
                  f"{n['tokens_after_a_flip']} after a routing or indexer flip, not bounded); greedy next token equal "
                  f"in {n['greedy_equal']} of {n['requests']} requests ({n['greedy_near_ties']} near-ties)")
    if "wall_s" in report:
        w = report["wall_s"]
        print(f"  wall        {w['total']:.2f} s: " + ", ".join(
            f"{k.replace('_', ' ')} {w[k]:.2f}" for k in ("launcher_start", "prepare", "ranks_up", "run", "drain",
                                                           "results", "check") if k in w))
        slowest = max(w["ranks"].values(), key=lambda r: sum(r.get(k, 0.0) for k in ("start", "build", "connect",
                                                                                    "warm_up")), default=None)
        if slowest:
            print("              slowest rank up: " + ", ".join(f"{k.replace('_', ' ')} {v:.2f}"
                                                               for k, v in slowest.items()))
        if w.get("loaded"):
            print("  loaded      " + _loaded_line(w["loaded"]))
    for lost in report.get("lost_replicas", []):
        print(f"  LOST        replica {lost['replica']} ({'; '.join(lost['how'])}): its "
              f"{len(lost['requests_excluded'])} requests are excluded from this report and --check; rounds of it "
              f"dropped in flight: " + (", ".join(f"FFN rank {r}: {n}" for r, n in lost["dropped_rounds"].items())
                                        or "none reported"))
    if "fault" in report:
        f = report["fault"]
        again = sum(x["redispatched"] for fs in f["failovers"].values() for x in fs)
        print(f"  FAILOVER    FFN rank {f['killed']} killed after {f['round']} work item(s) (${'CAM_RUN_KILL_FFN'}): "
              f"the survivors failed over, {again} round(s) dispatched again over the death and the rejoin; "
              f"{'restarted, it rejoined and served' if f['restarted'] else 'its restart did not report'}")
    print("  per-request TTFT (s): " + " ".join(f"{k}:{v:.2f}" for k, v in report["ttft_per_request_s"].items()))


def main(argv=None) -> int:
    return run(_parse(argv))


_command_started = None  # set by console_main: when the `cam-run` command's own work began


def console_main() -> None:
    """The ``cam-run`` command: main(), then the process ends at once. Everything the run opened is closed by then
    (reports written, ranks reaped, windows unlinked); the interpreter's finalization would only tear down torch,
    about 0.5 s of a 2-CPU machine's time for nothing."""
    global _command_started
    import cam

    _command_started = getattr(cam, "_import_started", None)
    code = 1
    try:
        code = main()
    except SystemExit as e:  # argparse: --help, usage errors
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 - printed as the interpreter would, then the same exit code
        traceback.print_exc()
        code = 1
    finally:
        exit_now(code)


if __name__ == "__main__":
    console_main()
