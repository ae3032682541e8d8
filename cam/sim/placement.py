"""Expert placement in the simulator: which (FFN rank, local slot) replicas hold each routed expert, and which
replica a routed row goes to (docs/sim.md, "Placement"; the kernels' contract is docs/protocol.md).

The replica rule: row (token slot ``t``, top-k index ``k``) of expert ``e`` goes to
``replicas(e)[(t + k0) % len(replicas(e))]``, ``k0`` the smallest top-k index of token ``t`` whose id is ``e``
(``k0 = k`` unless the token names ``e`` twice). All of a token's rows for one expert go to one replica, and an
expert's rows spread over its replicas token by token. The simulator draws per-expert row counts, not tokens, so it
applies the rule's expectation: an expert's ``n`` rows of a round are split over its ``r`` replicas as evenly as
possible (the first ``n mod r`` replicas one more), which is what the rule gives on consecutive token slots (rows
counted per token: a token naming an expert twice sends both rows to one replica).
"""

from __future__ import annotations

import json
import math
from typing import Optional, Sequence, Tuple

import numpy as np


class Placement:
    """A placement of E routed experts on F FFN ranks. ``replicas[e]`` is the list of (rank, slot) pairs holding
    expert ``e``; each (rank, slot) holds one expert. Any E and F (E % F != 0 included)."""

    def __init__(self, replicas: Sequence[Sequence[Tuple[int, int]]], F: int):
        if F < 1:
            raise ValueError(f"placement: F must be >= 1, got {F}")
        if not replicas:
            raise ValueError("placement: no experts")
        seen = {}
        table = []
        for e, reps in enumerate(replicas):
            reps = [(int(f), int(s)) for f, s in reps]
            if not reps:
                raise ValueError(f"placement: expert {e} has no replica (a replica count of zero)")
            for f, s in reps:
                if not 0 <= f < F:
                    raise ValueError(f"placement: expert {e} names FFN rank {f}, outside the FFN set [0, {F})")
                if s < 0:
                    raise ValueError(f"placement: expert {e} names local slot {s} < 0 on FFN rank {f}")
                if (f, s) in seen:
                    raise ValueError(f"placement: FFN rank {f} slot {s} holds both expert {seen[(f, s)]} and {e}")
                seen[(f, s)] = e
            table.append(tuple(reps))
        self.F = F
        self.replicas: Tuple[Tuple[Tuple[int, int], ...], ...] = tuple(table)
        self.slots_per_rank = np.zeros(F, dtype=np.int64)
        for f, s in seen:
            self.slots_per_rank[f] = max(self.slots_per_rank[f], s + 1)
        # Flat replica entries for the vectorized split: expert, index among its replicas, replica count, rank, slot.
        ent = [(e, j, len(reps), f, s) for e, reps in enumerate(self.replicas) for j, (f, s) in enumerate(reps)]
        arr = np.array(ent, dtype=np.int64)
        self._e, self._j, self._r, self._f, self._s = (arr[:, i] for i in range(5))
        self.distinct_per_rank = np.array([len({seen[(f, s)] for (ff, s) in seen if ff == f}) for f in range(F)])

    @property
    def experts(self) -> int:
        return len(self.replicas)

    @property
    def replicated(self) -> bool:
        return any(len(r) > 1 for r in self.replicas)

    def pick(self, row: Sequence[int], t: int, k: int) -> Tuple[int, int]:
        """The (rank, slot) that row (token slot t, top-k index k) goes to, ``row`` being token t's top-k expert
        ids (its expert is ``row[k]``; -1 is an empty slot, which goes nowhere)."""
        row = [int(e) for e in row]
        e = row[k]
        if not 0 <= e < self.experts:
            raise ValueError(f"placement: top-k index {k} of the row {row} names no expert in [0, {self.experts})")
        reps = self.replicas[e]
        return reps[(t + row.index(e)) % len(reps)]

    def split(self, counts: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
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

    def to_dict(self) -> dict:
        return {"F": self.F, "experts": [[list(r) for r in reps] for reps in self.replicas]}

    # ------------------------------------------------------------------ built-ins

    @staticmethod
    def contiguous(E: int, F: int) -> "Placement":
        """Expert e on rank ``e * F // E``'s next slot: ranks hold ``floor`` or ``ceil`` of E / F experts (for
        E % F == 0 exactly cam's default, ``e // (E / F)``)."""
        if E < 1 or F < 1:
            raise ValueError(f"placement: E and F must be >= 1, got E={E}, F={F}")
        used = [0] * F
        reps = []
        for e in range(E):
            f = e * F // E
            reps.append([(f, used[f])])
            used[f] += 1
        return Placement(reps, F)

    @staticmethod
    def replicate_hottest(popularity: np.ndarray, F: int, k: int) -> "Placement":
        """The contiguous placement plus one more replica for each of the k most popular experts, each on the rank
        with the least expected load at that point (ties: the lowest rank) among those not holding it yet; a hot
        expert's load counts half on each of its two replicas."""
        popularity = np.asarray(popularity, dtype=np.float64)
        E = len(popularity)
        if not 0 <= k <= E:
            raise ValueError(f"placement: k (hottest experts to replicate) must be in [0, {E}], got {k}")
        base = Placement.contiguous(E, F)
        reps = [list(r) for r in base.replicas]
        used = base.slots_per_rank.tolist()
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
        return Placement(reps, F)

    @staticmethod
    def from_json(path: str, E: int, F: int) -> "Placement":
        """``{"F": F, "experts": [[[rank, slot], ...] per expert]}`` (``to_dict``'s form), checked against the
        model's E and the topology's F."""
        with open(path) as fh:
            d = json.load(fh)
        if not isinstance(d, dict) or "experts" not in d:
            raise ValueError(f"placement {path!r}: expected an object with 'experts' (and 'F')")
        if int(d.get("F", F)) != F:
            raise ValueError(f"placement {path!r}: made for F={d['F']}, the topology has F={F}")
        if len(d["experts"]) != E:
            raise ValueError(f"placement {path!r}: {len(d['experts'])} experts, the model has {E}")
        return Placement(d["experts"], F)


def expected_fanout_of(E: int, K: int, distinct_per_rank: Sequence[int]) -> float:
    """Expected FFN ranks a token's K distinct uniformly chosen experts hit, rank f holding ``distinct_per_rank[f]``
    of them (a replicated expert counted on each rank that holds it: an upper bound)."""
    total = math.comb(E, K)
    return float(sum(1.0 - (math.comb(E - r, K) / total if E - r >= K else 0.0) for r in distinct_per_rank))


def parse_placement(spec: Optional[str], E: int, F: int, popularity_per_layer) -> Optional[list]:
    """``--placement``: None or "contiguous" (the default table), "hot:K" (replicate the K hottest experts of each
    layer), or a JSON file; returns one Placement per MoE layer, or None for the default."""
    if spec is None or spec == "contiguous":
        return None
    if spec.startswith("hot:"):
        try:
            k = int(spec[4:])
        except ValueError:
            raise ValueError(f"--placement {spec!r}: hot:K needs an integer K") from None
        return [Placement.replicate_hottest(p, F, k) for p in popularity_per_layer]
    table = Placement.from_json(spec, E, F)
    return [table] * len(popularity_per_layer)
