"""Expert placement as data (docs/protocol.md §15): per MoE layer, every routed expert has one or more replicas,
each a (FFN index, local slot) pair; any E and F, any number of replicas per expert. The row of (token ``t``, top-k
index ``k``) routed to expert ``e`` goes to ``replicas(e)[(t + k0) % len(replicas(e))]``, ``k0`` the smallest top-k
index of token ``t`` whose id is ``e`` (``k0 = k`` unless the token names ``e`` twice): deterministic, spread over the
replicas by token and by a token's experts, and all of a token's rows for one expert go to one replica. Every FFN rank
has the same fixed number of local slots (``slots_per_rank``), chosen when the table is made, so a rebalance only
changes which expert a slot holds.

This module is the table, its checks, the replica rule and the per-FFN-rank weight layout. ``dispatch_send`` reads
the table from device memory (``device_tables``: int64 ``[L, E, 1 + 2F]``, after an epoch line in the Comm's
``placement_buffer``; bounded word by word by the kernel before it writes anything, docs/protocol.md §15); a Comm
given no table routes by the contiguous placement (``Placement.contiguous``), which is what a topology with
``E % F == 0`` and one replica per expert means; for any other E >= F the same layout is a table
(``Placement.contiguous`` with ``slots_per_rank = ceil(E / F)``).
"""

from __future__ import annotations

import hashlib
import operator
import sys
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    import torch

__all__ = ["ExpertsLostError", "Placement", "PlacementError", "contiguous_slots"]

Replica = Tuple[int, int]  # (FFN index f in [0, F), local slot in [0, slots_per_rank))


class PlacementError(ValueError):
    """A placement table that cannot be served; the message names the layer, the expert and the bad entry."""


class ExpertsLostError(PlacementError):
    """An FFN rank left the plane holding the last replica of some experts (:meth:`Placement.without`): no table
    without it can serve them. ``lost`` is ``{layer: (experts...)}``, ``ffn_index`` the rank that left."""

    def __init__(self, ffn_index: int, lost: Dict[int, Tuple[int, ...]]):
        self.ffn_index, self.lost = ffn_index, lost
        self.named = "; ".join(f"layer {l}: expert(s) {', '.join(map(str, es))}" for l, es in sorted(lost.items()))
        super().__init__(f"FFN index {ffn_index} held the last replica of {self.named}: no surviving replica serves "
                         f"them")


def _deal(experts: int, ffn_ranks: int, slots: int, extra: Sequence[int]) -> List[List[Replica]]:
    """Placement.balanced's table for one layer: expert ``e`` first on rank ``e % F``, then one more replica of each
    expert in ``extra`` on the least-used rank with a free slot that does not hold it yet (ties: lowest rank)."""
    used = [0] * ffn_ranks
    reps: List[List[Replica]] = [[] for _ in range(experts)]

    def put(e: int, f: int) -> None:
        reps[e].append((f, used[f]))
        used[f] += 1

    for e in range(experts):
        if used[e % ffn_ranks] >= slots:
            raise PlacementError(f"Placement.balanced: {slots} slots per rank cannot hold E = {experts} experts "
                                 f"on F = {ffn_ranks} ranks")
        put(e, e % ffn_ranks)
    for e in extra:
        held = {f for f, _ in reps[e]}
        if len(held) == ffn_ranks:
            raise PlacementError(f"Placement.balanced: expert {e} is already on every FFN rank")
        free = [f for f in sorted(range(ffn_ranks), key=lambda f: (used[f], f)) if f not in held and used[f] < slots]
        if not free:
            raise PlacementError(f"Placement.balanced: {slots} slots per rank cannot hold E = {experts} experts "
                                 f"and {len(extra)} replicas on F = {ffn_ranks} ranks (no free slot for expert {e} "
                                 "on a rank without it)")
        put(e, free[0])
    return reps


def _index(v, what: str, layer: int, expert: int) -> int:
    """A replica's FFN index or slot as an int: an integer (Python, numpy or a one-element integer tensor), never a
    bool or a float (truncating 1.7 to 1 would place the expert where nobody asked)."""
    torch = sys.modules.get("torch")  # no torch imported: v is no tensor (the simulator uses the table without it)
    if isinstance(v, bool) or (torch is not None and isinstance(v, torch.Tensor) and v.dtype == torch.bool):
        raise PlacementError(f"Placement: layer {layer} expert {expert} has a replica whose {what} is the bool {v!r}, "
                             f"not an int")
    try:
        return operator.index(v)
    except TypeError:
        raise PlacementError(f"Placement: layer {layer} expert {expert} has a replica whose {what} is {v!r} "
                             f"({type(v).__name__}), not an int") from None


def _check_counts(who: str, **counts) -> None:
    for name, v in counts.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise PlacementError(f"{who}: {name} must be an int >= 1, got {v!r}")


def contiguous_slots(experts, ffn_ranks) -> Optional[int]:
    """The ``expert_slots`` of a :class:`cam.Topology` served by the contiguous placement: None (``E / F`` slots,
    no table) when F divides E, else ``ceil(E / F)``, the slots of :meth:`Placement.contiguous`'s table. Counts that
    are not positive ints give None, for the Topology to refuse by name."""
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in (experts, ffn_ranks)):
        return None
    return None if experts % ffn_ranks == 0 else -(-experts // ffn_ranks)


class Placement:
    """Per-layer expert -> replicas table.

    Args:
        experts: E, the routed experts of every layer.
        ffn_ranks: F, the FFN ranks (indices ``[0, F)``, i.e. global ranks ``A + f``).
        slots_per_rank: local expert slots on every FFN rank (the same on all, fixed for the plane's life).
        layers: one entry per layer, ``layers[l][e]`` = the replicas of expert ``e`` (a non-empty sequence of
            ``(f, slot)``); no two experts of a layer may share a slot.

    Raises:
        PlacementError: a replica on a rank outside ``[0, F)`` or a slot outside ``[0, slots_per_rank)``, an expert
            with zero replicas, a slot holding two experts, a layer without exactly E experts; checked here, before
            any table or weight is built from it.
    """

    def __init__(self, experts: int, ffn_ranks: int, slots_per_rank: int,
                 layers: Sequence[Sequence[Sequence[Replica]]]):
        _check_counts("Placement", experts=experts, ffn_ranks=ffn_ranks, slots_per_rank=slots_per_rank)
        if not layers:
            raise PlacementError("Placement: layers must hold at least one layer")
        self.experts, self.ffn_ranks, self.slots_per_rank = experts, ffn_ranks, slots_per_rank
        table: List[List[Tuple[Replica, ...]]] = []
        for l, layer in enumerate(layers):
            if len(layer) != experts:
                raise PlacementError(f"Placement: layer {l} places {len(layer)} experts, expected E = {experts}")
            owner: Dict[Replica, int] = {}
            rows = []
            for e, reps in enumerate(layer):
                reps = tuple((_index(f, "FFN index", l, e), _index(j, "slot", l, e)) for f, j in reps)
                if not reps:
                    raise PlacementError(f"Placement: layer {l} expert {e} has zero replicas")
                for f, j in reps:
                    if not 0 <= f < ffn_ranks:
                        raise PlacementError(f"Placement: layer {l} expert {e} has a replica on FFN index {f}, "
                                             f"outside the FFN set [0, {ffn_ranks})")
                    if not 0 <= j < slots_per_rank:
                        raise PlacementError(f"Placement: layer {l} expert {e} has a replica in slot {j} of FFN "
                                             f"index {f}, outside [0, {slots_per_rank})")
                    if (f, j) in owner:
                        raise PlacementError(f"Placement: layer {l} slot {j} of FFN index {f} holds expert "
                                             f"{owner[(f, j)]} and expert {e}")
                    owner[(f, j)] = e
                rows.append(reps)
            table.append(rows)
        self._table = table

    # ------------------------------------------------------------------ construction

    @classmethod
    def contiguous(cls, experts: int, ffn_ranks: int, layers: int) -> "Placement":
        """The contiguous placement, any E >= F: expert ``e`` on FFN index ``f = e * F // E``, in slot
        ``e - first(f)``, ``first(f) = ceil(f * E / F)``. FFN index ``f`` holds experts ``[first(f), first(f + 1))``:
        ``ceil(E / F)`` of them on ``E % F`` indices spread evenly from index 0, ``floor(E / F)`` on the others
        (E = 8, F = 3: 3, 3, 2; E = 10, F = 4: 3, 2, 3, 2). Every rank has ``ceil(E / F)`` slots, so a floor
        rank's last slot is empty. When F divides E this is exactly ``e // R, e % R`` with ``R = E / F``: the
        layout a Comm without a table routes by."""
        _check_counts("Placement.contiguous", experts=experts, ffn_ranks=ffn_ranks, layers=layers)
        if experts < ffn_ranks:
            raise PlacementError(f"Placement.contiguous: E = {experts} experts cannot fill F = {ffn_ranks} FFN ranks "
                                 f"(a rank would hold none); use fewer FFN ranks")
        slots = contiguous_slots(experts, ffn_ranks) or experts // ffn_ranks
        first = [-(-f * experts // ffn_ranks) for f in range(ffn_ranks)]
        one = [[(e * ffn_ranks // experts, e - first[e * ffn_ranks // experts])] for e in range(experts)]
        return cls(experts, ffn_ranks, slots, [one] * layers)

    @classmethod
    def balanced(cls, experts: int, ffn_ranks: int, layers: int, *, replicate: Sequence[int] = (),
                 slots_per_rank: Optional[int] = None) -> "Placement":
        """Any E and F: experts dealt round robin over the FFN ranks (expert ``e`` first on rank ``e % F``), then one
        extra replica of each expert in ``replicate`` (e.g. the k hottest), each on the next rank that has a free
        slot and does not hold it yet. ``slots_per_rank`` defaults to the fewest with which this dealing fits."""
        _check_counts("Placement.balanced", experts=experts, ffn_ranks=ffn_ranks, layers=layers)
        if slots_per_rank is not None:
            _check_counts("Placement.balanced", slots_per_rank=slots_per_rank)
        for e in replicate:
            if isinstance(e, bool) or not isinstance(e, int):
                raise PlacementError(f"Placement.balanced: replicate must hold expert ids (ints), got {e!r}")
        extra = list(dict.fromkeys(replicate))
        for e in extra:
            if not 0 <= e < experts:
                raise PlacementError(f"Placement.balanced: replicate names expert {e}, outside [0, {experts})")
        if slots_per_rank is not None:
            return cls(experts, ffn_ranks, slots_per_rank, [_deal(experts, ffn_ranks, slots_per_rank, extra)] * layers)
        # The fewest slots that hold E + replicas can still be too few: the last free slot may be on the one rank
        # that already holds the expert to replicate. One more slot per rank is tried then, up to one per expert.
        slots = -(-(experts + len(extra)) // ffn_ranks)
        while True:
            try:
                return cls(experts, ffn_ranks, slots, [_deal(experts, ffn_ranks, slots, extra)] * layers)
            except PlacementError:
                if slots >= experts + len(extra):
                    raise
                slots += 1

    def without(self, ffn_index: int) -> "Placement":
        """The table of the plane once FFN index ``ffn_index`` left it (elastic serving, docs/protocol.md §18):
        every replica on it dropped, the indices above it one lower (the survivors keep their order), every other
        replica in its slot, so each survivor serves the new table with the slot weights it holds. Raises
        :class:`ExpertsLostError` naming every expert (by layer) whose only replicas were on ``ffn_index``."""
        if isinstance(ffn_index, bool) or not isinstance(ffn_index, int) or not 0 <= ffn_index < self.ffn_ranks:
            raise ValueError(f"Placement.without: ffn_index must be an int in [0, {self.ffn_ranks}), got "
                             f"{ffn_index!r}")
        if self.ffn_ranks == 1:
            raise ExpertsLostError(ffn_index, {l: tuple(range(self.experts)) for l in range(self.layers)})
        layers, lost = [], {}
        for l, layer in enumerate(self._table):
            rows = [tuple((f - 1 if f > ffn_index else f, j) for f, j in reps if f != ffn_index) for reps in layer]
            gone = tuple(e for e, reps in enumerate(rows) if not reps)
            if gone:
                lost[l] = gone
            layers.append(rows)
        if lost:
            raise ExpertsLostError(ffn_index, lost)
        return Placement(self.experts, self.ffn_ranks - 1, self.slots_per_rank, layers)

    def with_rank(self, held: Sequence[Sequence[int]]) -> "Placement":
        """The table once a new FFN rank joins the plane as index ``F`` (the last, a rejoin, docs/protocol.md §18):
        every replica kept where it is, and slot ``j`` of the new rank holding expert ``held[l][j]`` of layer ``l``
        (-1: empty), a replica more of that expert. ``without(F)`` of the result is this table again."""
        if len(held) != self.layers or any(len(h) != self.slots_per_rank for h in held):
            raise PlacementError(f"Placement.with_rank: held must give {self.slots_per_rank} slot(s) for each of "
                                 f"{self.layers} layer(s)")
        layers = []
        for l, layer in enumerate(self._table):
            rows = [list(reps) for reps in layer]
            for j, e in enumerate(held[l]):
                if e == -1:
                    continue
                if isinstance(e, bool) or not isinstance(e, int) or not 0 <= e < self.experts:
                    raise PlacementError(f"Placement.with_rank: layer {l} slot {j} names expert {e!r}, not one in "
                                         f"[0, {self.experts})")
                rows[e].append((self.ffn_ranks, j))
            layers.append(rows)
        return Placement(self.experts, self.ffn_ranks + 1, self.slots_per_rank, layers)

    def as_dict(self) -> dict:
        """The table as JSON: ``layers[l][e]`` lists expert e's ``[f, slot]`` (:meth:`from_dict` reads it)."""
        return {"experts": self.experts, "ffn_ranks": self.ffn_ranks, "slots_per_rank": self.slots_per_rank,
                "layers": [[[list(r) for r in reps] for reps in layer] for layer in self._table]}

    @classmethod
    def from_dict(cls, d: dict) -> "Placement":
        return cls(d["experts"], d["ffn_ranks"], d["slots_per_rank"], d["layers"])

    # ------------------------------------------------------------------ queries

    @property
    def layers(self) -> int:
        return len(self._table)

    def _check_layer(self, who: str, layer) -> None:
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.layers:
            raise ValueError(f"Placement.{who}: layer must be an int in [0, {self.layers}), got {layer!r}")

    def replicas(self, layer: int, expert: int) -> Tuple[Replica, ...]:
        return self._table[layer][expert]

    def replica(self, layer: int, row: Sequence[int], token: int, k: int) -> Replica:
        """Where the row of (token slot ``token``, top-k index ``k``) goes, ``row`` being that token's top-k ids
        (its expert is ``row[k]``): the documented rule ``replicas(e)[(t + k0) % len(replicas(e))]`` with ``k0``
        the first index of ``e`` in ``row``, so a token's rows for one expert share one replica."""
        row = [int(e) for e in row]
        if not 0 <= k < len(row) or not 0 <= row[k] < self.experts:
            raise ValueError(f"Placement.replica: top-k index {k} of the row {row} names no expert in [0, "
                             f"{self.experts})")
        reps = self._table[layer][row[k]]
        return reps[(token + row.index(row[k])) % len(reps)]

    def slot_experts(self, layer: int, ffn_index: int) -> List[int]:
        """Expert held by each local slot of FFN index ``ffn_index`` in ``layer`` (-1: an empty slot)."""
        self._check_layer("slot_experts", layer)
        if isinstance(ffn_index, bool) or not isinstance(ffn_index, int) or not 0 <= ffn_index < self.ffn_ranks:
            raise ValueError(f"Placement.slot_experts: ffn_index must be an int in [0, {self.ffn_ranks}), got "
                             f"{ffn_index!r}")
        out = [-1] * self.slots_per_rank
        for e, reps in enumerate(self._table[layer]):
            for f, j in reps:
                if f == ffn_index:
                    out[j] = e
        return out

    def route(self, layer: int, topk_ids: torch.Tensor) -> torch.Tensor:
        """``[B, K, 2]`` int64 (FFN index, local slot) of every (token, k) of ``topk_ids`` (-1 entries give
        (-1, -1)): the rule above applied to a whole round, for goldens and simulators."""
        import torch

        ids = topk_ids.tolist()
        out = torch.full((len(ids), len(ids[0]) if ids else 0, 2), -1, dtype=torch.int64)
        for t, row in enumerate(ids):
            for k, e in enumerate(row):
                if e >= 0:
                    out[t, k, 0], out[t, k, 1] = self.replica(layer, row, t, k)
        return out

    def device_table(self, layer: int) -> torch.Tensor:
        """The layer's table as int64 ``[E, 1 + 2*max_replicas]``: ``count, f0, slot0, f1, slot1, ...`` (unused
        pairs -1), the form a kernel bounds word by word before use."""
        import torch

        out = torch.full((self.experts, 1 + 2 * max(len(r) for r in self._table[layer])), -1, dtype=torch.int64)
        self._fill(out, layer)
        return out

    def device_tables(self, width: Optional[int] = None) -> torch.Tensor:
        """Every layer's table as int64 ``[L, E, width]`` in the form ``dispatch_send`` reads (docs/protocol.md §15),
        rows as in ``device_table``. ``width`` defaults to ``1 + 2 * F``, the plane's fixed width (at most F
        replicas per expert), so a rebalance rewrites the same tensor in place."""
        import torch

        width = 1 + 2 * self.ffn_ranks if width is None else width
        most = max(len(r) for layer in self._table for r in layer)
        if width < 1 + 2 * most:
            raise PlacementError(f"Placement.device_tables: an expert has {most} replicas, more than a width of "
                                 f"{width} words holds ({(width - 1) // 2})")
        out = torch.full((self.layers, self.experts, width), -1, dtype=torch.int64)
        for l in range(self.layers):
            self._fill(out[l], l)
        return out

    def _fill(self, out: torch.Tensor, layer: int) -> None:
        for e, reps in enumerate(self._table[layer]):
            out[e, 0] = len(reps)
            for i, (f, j) in enumerate(reps):
                out[e, 1 + 2 * i], out[e, 2 + 2 * i] = f, j

    def digest(self) -> str:
        """A digest of the whole table: ranks compare it to refuse tables that disagree across ranks."""
        h = hashlib.sha256(f"{self.experts},{self.ffn_ranks},{self.slots_per_rank}".encode())
        for layer in self._table:
            for reps in layer:
                h.update(repr(reps).encode())
        return h.hexdigest()

    def require_same(self, other: "Placement", who: str = "placement") -> None:
        """Refuses two tables that disagree (two ranks must serve one table), naming the first difference."""
        if (self.experts, self.ffn_ranks, self.slots_per_rank, self.layers) != (
                other.experts, other.ffn_ranks, other.slots_per_rank, other.layers):
            raise PlacementError(f"{who}: tables differ in shape: (E, F, slots, L) = "
                                 f"{(self.experts, self.ffn_ranks, self.slots_per_rank, self.layers)} vs "
                                 f"{(other.experts, other.ffn_ranks, other.slots_per_rank, other.layers)}")
        for l in range(self.layers):
            for e in range(self.experts):
                if self._table[l][e] != other._table[l][e]:
                    raise PlacementError(f"{who}: tables differ at layer {l} expert {e}: {self._table[l][e]} vs "
                                         f"{other._table[l][e]}")

    def __repr__(self) -> str:
        reps = sum(len(r) for layer in self._table for r in layer)
        return (f"Placement(E={self.experts}, F={self.ffn_ranks}, slots_per_rank={self.slots_per_rank}, "
                f"L={self.layers}, replicas={reps})")
