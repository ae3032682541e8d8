"""Expert placement in the simulator, on top of :class:`cam.placement.Placement` (the one table and replica rule,
docs/protocol.md §15; docs/sim.md, "Placement").

The replica rule: row (token slot ``t``, top-k index ``k``) of expert ``e`` goes to
``replicas(e)[(t + k0) % len(replicas(e))]``, ``k0`` the smallest top-k index of token ``t`` whose id is ``e``
(``Placement.replica``). The simulator draws per-expert row counts, not tokens, so it applies the rule's
expectation (:class:`RowSplit`): an expert's ``n`` rows of a round are split over its ``r`` replicas as evenly as
possible (the first ``n mod r`` replicas one more), which is what the rule gives on consecutive token slots (rows
counted per token: a token naming an expert twice sends both rows to one replica). What is simulator-only here:
that split, the hottest-experts replication driven by a popularity vector, and the one-layer JSON form of
``cam-sim --placement FILE``.
"""

from __future__ import annotations

import json
import math
from typing import Optional, Sequence

import numpy as np

from ..placement import Placement

__all__ = ["Placement", "RowSplit", "expected_fanout_of", "placement_from_json", "placement_to_dict",
           "parse_placement", "replicate_hottest"]


class RowSplit:
    """One layer of a :class:`cam.placement.Placement` as the simulator reads it: per-expert row counts of a round
    split over the replicas, per FFN rank and per local slot.

    Attributes:
        F, experts: the table's FFN ranks and experts.
        slots_per_rank: per FFN rank, its highest held slot + 1 (a rank's slots the simulator can touch).
        distinct_per_rank: per FFN rank, the distinct experts it holds.
        replicated: whether an expert has more than one replica.
    """

    def __init__(self, placement: Placement, layer: int = 0):
        self.F, self.experts = placement.ffn_ranks, placement.experts
        reps = [placement.replicas(layer, e) for e in range(self.experts)]
        self.replicated = any(len(r) > 1 for r in reps)
        self.slots_per_rank = np.zeros(self.F, dtype=np.int64)
        held = [set() for _ in range(self.F)]
        for e, r in enumerate(reps):
            for f, s in r:
                self.slots_per_rank[f] = max(self.slots_per_rank[f], s + 1)
                held[f].add(e)
        self.distinct_per_rank = np.array([len(h) for h in held])
        # Flat replica entries for the vectorized split: expert, index among its replicas, replica count, rank, slot.
        arr = np.array([(e, j, len(r), f, s) for e, r in enumerate(reps) for j, (f, s) in enumerate(r)],
                       dtype=np.int64)
        self._e, self._j, self._r, self._f, self._s = (arr[:, i] for i in range(5))

    def split(self, counts: np.ndarray):
        """Per-expert row counts of a round -> (rows per FFN rank, local slots with rows per FFN rank)."""
        rows = self._replica_rows(counts)
        per_rank = np.bincount(self._f, weights=rows, minlength=self.F).astype(np.int64)
        active = np.bincount(self._f, weights=rows > 0, minlength=self.F)
        return per_rank, active

    def slot_rows(self, counts: np.ndarray, f: int) -> np.ndarray:
        """Rows per local slot of FFN rank f (slot order) for per-expert row counts ``counts``."""
        rows = self._replica_rows(counts)
        out = np.zeros(int(self.slots_per_rank[f]), dtype=np.int64)
        mine = self._f == f
        out[self._s[mine]] = rows[mine]
        return out

    def _replica_rows(self, counts: np.ndarray) -> np.ndarray:
        q, rem = np.divmod(np.asarray(counts, dtype=np.int64)[self._e], self._r)
        return q + (self._j < rem)


def one_layer(E: int, F: int, replicas: Sequence[Sequence[Sequence[int]]]) -> Placement:
    """A one-layer :class:`Placement` from ``replicas[e]`` = expert e's ``(rank, slot)`` pairs, every rank given as
    many slots as the highest slot named + 1 (the table's checks name a bad entry)."""
    slots = 1 + max((int(s) for reps in replicas for _, s in reps), default=0)
    return Placement(E, F, max(slots, 1), [replicas])


def replicate_hottest(popularity: np.ndarray, F: int, k: int) -> Placement:
    """The contiguous placement (one layer) plus one more replica for each of the k most popular experts, each on
    the rank with the least expected load at that point (ties: the lowest rank) among those not holding it yet, in
    that rank's next slot; a hot expert's load counts half on each of its two replicas."""
    popularity = np.asarray(popularity, dtype=np.float64)
    E = len(popularity)
    if not 0 <= k <= E:
        raise ValueError(f"placement: k (hottest experts to replicate) must be in [0, {E}], got {k}")
    base = Placement.contiguous(E, F, layers=1)
    reps = [list(base.replicas(0, e)) for e in range(E)]
    used = [sum(1 for e in base.slot_experts(0, f) if e >= 0) for f in range(F)]
    load = np.zeros(F)
    for e, r in enumerate(reps):
        load[r[0][0]] += popularity[e]
    for e in np.argsort(-popularity, kind="stable")[:k].tolist():
        holders = {f for f, _ in reps[e]}
        free = [f for f in range(F) if f not in holders]
        if not free:
            continue  # already on every rank
        share = popularity[e] / len(reps[e])
        f = min(free, key=lambda x: (load[x], x))
        for h in holders:
            load[h] -= share - popularity[e] / (len(reps[e]) + 1)
        load[f] += popularity[e] / (len(reps[e]) + 1)
        reps[e].append((f, used[f]))
        used[f] += 1
    return one_layer(E, F, reps)


def placement_to_dict(p: Placement, layer: int = 0) -> dict:
    """One layer of a table in ``cam-sim --placement FILE``'s form: ``{"F": F, "experts": [[[rank, slot], ...]
    per expert]}``."""
    return {"F": p.ffn_ranks, "experts": [[list(r) for r in p.replicas(layer, e)] for e in range(p.experts)]}


def placement_from_json(path: str, E: int, F: int) -> Placement:
    """:func:`placement_to_dict`'s form read from ``path``, checked against the model's E and the topology's F."""
    with open(path) as fh:
        d = json.load(fh)
    if not isinstance(d, dict) or "experts" not in d:
        raise ValueError(f"placement {path!r}: expected an object with 'experts' (and 'F')")
    if int(d.get("F", F)) != F:
        raise ValueError(f"placement {path!r}: made for F={d['F']}, the topology has F={F}")
    if len(d["experts"]) != E:
        raise ValueError(f"placement {path!r}: {len(d['experts'])} experts, the model has {E}")
    return one_layer(E, F, d["experts"])


def expected_fanout_of(E: int, K: int, distinct_per_rank: Sequence[int]) -> float:
    """Expected FFN ranks a token's K distinct uniformly chosen experts hit, rank f holding ``distinct_per_rank[f]``
    of them (a replicated expert counted on each rank that holds it: an upper bound)."""
    total = math.comb(E, K)
    return float(sum(1.0 - (math.comb(E - r, K) / total if E - r >= K else 0.0) for r in distinct_per_rank))


def parse_placement(spec: Optional[str], E: int, F: int, popularity_per_layer) -> Optional[list]:
    """``--placement``: None or "contiguous" (the default table), "hot:K" (replicate the K hottest experts of each
    layer), or a JSON file; returns one one-layer Placement per MoE layer, or None for the default."""
    if spec is None or spec == "contiguous":
        return None
    if spec.startswith("hot:"):
        try:
            k = int(spec[4:])
        except ValueError:
            raise ValueError(f"--placement {spec!r}: hot:K needs an integer K") from None
        return [replicate_hottest(p, F, k) for p in popularity_per_layer]
    table = placement_from_json(spec, E, F)
    return [table] * len(popularity_per_layer)
