"""Workloads for the simulator: prompt lengths, arrival times, which replica serves a request, how it batches.

Two kinds:
- ``SimWorkload.generate`` draws lengths (fixed, uniform, lognormal, or a trace file) and arrivals (closed batch or
  Poisson) from a seed; each replica then batches *dynamically*: when it is free it takes the requests that have
  arrived in its queue, in order, up to a token budget (the first one always, however long).
- ``SimWorkload.from_cam_run`` takes ``cam-run``'s own workload schedule (``cam.sim.presets``, which cam-run imports
  too): the same requests, arrival times and *static* batches, so simulated and measured runs compute the same
  batches.
"""

from __future__ import annotations

import csv
import dataclasses
from typing import List, Optional, Sequence

import numpy as np

LENGTH_DISTS = ("fixed", "uniform", "lognormal", "trace")


@dataclasses.dataclass(frozen=True)
class SimWorkload:
    """Requests (``arrival_s`` ascending per replica, ``length`` tokens, ``replica``) and a batching policy:
    ``batches`` (static: per replica, lists of request ids, each started once its last request arrived) or
    ``token_budget`` (dynamic). ``chunked``: the token budget is the engine's per-step budget
    (``max_num_batched_tokens``) and a prompt longer than what is left of it is served in chunks over several steps
    (chunked prefill, docs/sim.md §11); otherwise a batch holds whole prompts and a longer prompt runs alone."""

    arrival_s: np.ndarray
    length: np.ndarray
    replica: np.ndarray
    token_budget: Optional[int] = None
    batches: Optional[List[List[List[int]]]] = None
    description: str = ""
    chunked: bool = False

    def __post_init__(self):
        n = len(self.arrival_s)
        if n < 1:
            raise ValueError("workload: need at least one request")
        if len(self.length) != n or len(self.replica) != n:
            raise ValueError("workload: arrival_s, length and replica must have the same length")
        if (self.batches is None) == (self.token_budget is None):
            raise ValueError("workload: give exactly one of batches (static) or token_budget (dynamic)")
        if self.token_budget is not None and self.token_budget < 1:
            raise ValueError(f"workload: token_budget must be >= 1, got {self.token_budget}")
        if self.chunked and self.batches is not None:
            raise ValueError("workload: chunked prefill needs dynamic batching (token_budget), not static batches")
        if np.any(self.length < 1):
            raise ValueError("workload: every prompt length must be >= 1")
        if np.any(self.arrival_s < 0) or not np.all(np.isfinite(self.arrival_s)):
            raise ValueError("workload: arrival times must be finite and >= 0")

    @property
    def num_requests(self) -> int:
        return len(self.arrival_s)

    @property
    def num_replicas(self) -> int:
        return len(self.batches) if self.batches is not None else int(self.replica.max()) + 1

    @property
    def max_step_tokens(self) -> int:
        """The most tokens one replica's step can hold, what a deployment sizes its ``Bmax`` for: the largest
        static batch; with a token budget, the budget, or a longer prompt that runs alone when nothing chunks it."""
        if self.batches is not None:
            return max(int(self.length[list(b)].sum()) for per in self.batches for b in per if len(b))
        if self.chunked:
            return int(self.token_budget)
        return max(int(self.token_budget), int(self.length.max()))

    # ------------------------------------------------------------------ constructors

    @staticmethod
    def generate(num_requests: int, replicas: int, *, lengths: str = "lognormal", mean_len: float = 2048,
                 min_len: int = 1, max_len: int = 32768, sigma: float = 0.8, trace: Optional[str] = None,
                 rate: float = 0.0, token_budget: int = 16384, seed: int = 0,
                 chunked: bool = False) -> "SimWorkload":
        """Draw a workload from ``seed``.

        Args:
            lengths: ``fixed`` (every prompt ``mean_len``), ``uniform`` in [min_len, max_len], ``lognormal`` with
                mean ``mean_len`` and log-std ``sigma`` (clipped to [min_len, max_len]), or ``trace``.
            trace: CSV with columns ``arrival_s,length`` (header optional); its arrival times replace the arrival
                process and its row count replaces ``num_requests``.
            rate: Poisson arrivals at this many requests per second; 0 = closed batch, all at t = 0.
            token_budget: a replica's batch holds at most this many tokens (a longer prompt runs alone).
            chunked: chunked prefill; ``token_budget`` is then the per-step budget and a longer prompt is chunked.
        Requests go to replicas round robin in arrival order (as cam-run assigns them).
        """
        if replicas < 1:
            raise ValueError(f"workload: replicas must be >= 1, got {replicas}")
        if lengths not in LENGTH_DISTS:
            raise ValueError(f"workload: lengths must be one of {LENGTH_DISTS}, got {lengths!r}")
        if rate < 0:
            raise ValueError(f"workload: rate must be >= 0, got {rate}")
        rng = np.random.default_rng(seed)
        if lengths == "trace":
            if not trace:
                raise ValueError("workload: lengths='trace' needs a trace file")
            arrival, length = load_trace(trace)
            num_requests = len(length)
        else:
            if num_requests < 1:
                raise ValueError(f"workload: num_requests must be >= 1, got {num_requests}")
            if not 1 <= min_len <= max_len:
                raise ValueError(f"workload: need 1 <= min_len <= max_len, got {min_len}, {max_len}")
            if lengths == "fixed":
                length = np.full(num_requests, int(mean_len), dtype=np.int64)
            elif lengths == "uniform":
                length = rng.integers(min_len, max_len + 1, size=num_requests)
            else:
                if mean_len <= 0 or sigma < 0:
                    raise ValueError("workload: lognormal needs mean_len > 0 and sigma >= 0")
                mu = np.log(mean_len) - sigma * sigma / 2  # so that the mean of the lognormal is mean_len
                length = np.rint(rng.lognormal(mu, sigma, size=num_requests))
            length = np.clip(length, min_len, max_len).astype(np.int64)
            if rate > 0:
                arrival = np.cumsum(rng.exponential(1.0 / rate, size=num_requests))
            else:
                arrival = np.zeros(num_requests)
        order = np.argsort(arrival, kind="stable")
        arrival, length = np.asarray(arrival, dtype=np.float64)[order], np.asarray(length, np.int64)[order]
        replica = np.arange(num_requests) % replicas
        desc = (f"{num_requests} requests, lengths {lengths}" + (f" mean {mean_len:g}" if lengths != "trace" else "")
                + (f", Poisson {rate:g} req/s" if rate > 0 and lengths != "trace" else "")
                + f", token budget {token_budget}" + (" (chunked prefill)" if chunked else ""))
        return SimWorkload(arrival, length, replica.astype(np.int64), token_budget=token_budget, description=desc,
                           chunked=chunked)

    @staticmethod
    def from_cam_run(preset: str, replicas: int, dynamic: bool = False, **overrides) -> "SimWorkload":
        """cam-run's workload for ``--preset`` / ``--replicas`` (``overrides``: num_requests, seed, skew, as cam-run's
        ``--requests/--seed/--skew``), with its static batches; ``dynamic``: the same requests batched as
        ``cam-run --assign`` (not round robin) batches them, dynamically with the preset's ``max_batch_tokens`` as
        the token budget. The model does not matter: it only picks token ids."""
        from .presets import PRESETS, schedule

        spec = dataclasses.replace(PRESETS[preset], **overrides)
        plan = schedule(spec, replicas)
        desc = f"cam-run preset {preset} ({spec.num_requests} requests{', dynamic batches' if dynamic else ''})"
        if dynamic:
            return SimWorkload(np.array(plan.arrival_s, dtype=np.float64), np.array(plan.length, dtype=np.int64),
                               np.array(plan.replica, dtype=np.int64), token_budget=spec.max_batch_tokens,
                               description=desc)
        return SimWorkload(np.array(plan.arrival_s, dtype=np.float64), np.array(plan.length, dtype=np.int64),
                           np.array(plan.replica, dtype=np.int64), batches=[[list(b) for b in bs] for bs in plan.batches],
                           description=desc)


def load_trace(path: str):
    """A CSV of ``arrival_s,length`` rows (a header line is skipped if it is not numeric)."""
    arrival, length = [], []
    with open(path, newline="") as f:
        for lineno, row in enumerate(csv.reader(f), 1):
            if not row or row[0].strip().startswith("#"):
                continue
            try:
                a, n = float(row[0]), int(float(row[1]))
            except (ValueError, IndexError):
                if lineno == 1:
                    continue  # header
                raise ValueError(f"trace {path}:{lineno}: expected 'arrival_s,length', got {row!r}") from None
            arrival.append(a)
            length.append(n)
    if not length:
        raise ValueError(f"trace {path}: no requests")
    return np.array(arrival, dtype=np.float64), np.array(length, dtype=np.int64)


def split_stages(lengths: Sequence[int], ubatches: int) -> List[List[int]]:
    """Micro-batches of one batch, as cam-run forms them: with two requests or more, micro-batch s takes every
    ``ubatches``-th request starting at s; a single request (or none) is one micro-batch."""
    if len(lengths) >= 2 and ubatches >= 2:
        return [list(lengths[s::ubatches]) for s in range(min(ubatches, len(lengths)))]
    return [list(lengths)]


UBATCH_SPLITS = ("requests", "tokens")


def split_pieces(pieces: Sequence[tuple], ubatches: int, by: str = "requests") -> List[List[tuple]]:
    """Micro-batches of one step's pieces ``(request, tokens, prefix)``. ``requests``: as ``split_stages`` (every
    ``ubatches``-th piece). ``tokens``: the step's tokens cut into ``ubatches`` spans as equal as whole tokens allow,
    a prompt straddling a cut split in two, its second part attending to the first as context (the token-split
    micro-batching of the vLLM AFD plugin's two-stage scheduler and of DeepSeek's two-micro-batch prefill)."""
    if by == "requests":
        return split_stages(list(pieces), ubatches)
    if by != "tokens":
        raise ValueError(f"ubatch split must be one of {UBATCH_SPLITS}, got {by!r}")
    total = sum(n for _, n, _ in pieces)
    parts = min(ubatches, total) if total else 1
    if parts <= 1:
        return [list(pieces)]
    cuts = [total * (k + 1) // parts for k in range(parts)]
    out: List[List[tuple]] = [[] for _ in range(parts)]
    pos, k = 0, 0
    for rid, n, p in pieces:
        while n:
            take = min(n, cuts[k] - pos)
            out[k].append((rid, take, p))
            pos, n, p = pos + take, n - take, p + take
            if pos == cuts[k] and k < parts - 1:
                k += 1
    return out

