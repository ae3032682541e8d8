"""``cam.LayerWeights``: the routed-expert weights of every MoE layer for one grouped matmul (W1 or W2), built once
at load time. The layer-select GMM ops take it whole and pick the layer on the device from ``layer_index``, so the
FFN loop never tells the host which layer it is on (docs/protocol.md §0 rule 4)."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

__all__ = ["LayerWeights", "prepack_weights", "prepack_weights_int4", "FORMATS", "INT4_K_STEP", "weight_format"]

_NZ_K0 = 16  # int8 FRACTAL_NZ fractal: 16 rows (K) ...
_NZ_N0 = 32  # ... by 32 columns (one 32-byte C0 block)
_ZN4_K0 = 64  # int4 ZN fractal (what L0B holds for an int4 Mmad): 64 K values of a column in 32 bytes ...
_ZN4_N0 = 16  # ... by 16 columns, 512 bytes

# What LayerWeights.weights hold: "int8" FRACTAL_NZ int8 (W8A8, and int4 values in int8 storage), "int4" packed
# int4 in the int4 cube's ZN fractals (half the bytes; docs/gmm.md §9.3).
FORMATS = ("int8", "int4")
# The int4 cube's K step: a scale group of int4 weights along K is a multiple of it (docs/gmm.md §9.5).
INT4_K_STEP = _ZN4_K0


def weight_format(bits: int) -> str:
    """The LayerWeights format that serves experts quantized to ``bits`` (``cam.quantize_weight``): 8 -> "int8",
    4 -> "int4" (packed, half the bytes)."""
    formats = {8: "int8", 4: "int4"}
    if isinstance(bits, bool) or bits not in formats:
        raise ValueError(f"weight_format: bits must be 8 (W8A8) or 4 (W4A8), got {bits!r}")
    return formats[bits]


def prepack_weights(weight: torch.Tensor) -> torch.Tensor:
    """ND int8 weight ``[..., K, N]`` -> FRACTAL_NZ ``[..., ceil(N/32), ceil(K/16), 16, 32]`` (docs/gmm.md §4).

    The layout torch_npu's int8 grouped matmul reads after ``npu_format_cast(w, 29)``: the matrix is zero-padded to
    K = 16·k1, N = 32·n1; 32-column blocks are outermost and inside a block the K rows follow one another, 32 bytes
    each. The padding is zeros and part of the layout. Runs once at load; the kernels read it as is.

    Args:
        weight: int8, at least 2-D, the last two dims ``[K, N]`` (``x @ weight`` orientation).

    Returns:
        A new contiguous int8 tensor.
    """
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"prepack_weights: weight must be a torch.Tensor, got {type(weight).__name__}")
    if weight.dtype != torch.int8:
        raise TypeError(f"prepack_weights: weight must be int8, got {weight.dtype}")
    if weight.dim() < 2:
        raise ValueError(f"prepack_weights: weight must be at least 2-D [..., K, N], got shape {tuple(weight.shape)}")
    *lead, k, n = weight.shape
    if k < 1 or n < 1:
        raise ValueError(f"prepack_weights: weight must have K >= 1 and N >= 1, got shape {tuple(weight.shape)}")
    k1, n1 = -(-k // _NZ_K0), -(-n // _NZ_N0)
    padded = torch.zeros(*lead, k1 * _NZ_K0, n1 * _NZ_N0, dtype=torch.int8, device=weight.device)
    padded[..., :k, :n] = weight
    # [..., K1*16, N1, 32] -> [..., N1, K1*16, 32]: column blocks outermost.
    nz = padded.reshape(*lead, k1 * _NZ_K0, n1, _NZ_N0).movedim(-2, -3)
    return nz.reshape(*lead, n1, k1, _NZ_K0, _NZ_N0).contiguous()


def _check_scale_values(i: int, s: torch.Tensor) -> None:
    """A dequant scale is finite and >= 0 (0: an empty slot or an all-zero column): a NaN, inf or negative one
    would flow through every product of the kernels' epilogue unnoticed."""
    bad = ~torch.isfinite(s) | (s < 0)
    if bool(bad.any()):
        at = tuple(int(v) for v in bad.nonzero()[0])
        raise ValueError(f"LayerWeights: scales[{i}] must be finite and >= 0, got {float(s[at])} at {list(at)}")


def prepack_weights_int4(weight: torch.Tensor) -> torch.Tensor:
    """ND int4 values ``[..., K, N]`` (int8 storage, each in [-8, 7]) -> packed int4 ZN fractals, uint8
    ``[..., ceil(K/64), ceil(N/16), 16, 32]`` (docs/gmm.md §9.3).

    The layout an int4 ``Mmad`` reads from L0B (docs/twin.md, "int4 operands"), so the kernel moves it with burst
    copies and ``LoadData`` and never transposes int4: fractal ``(kb, nb)`` holds columns ``16·nb .. 16·nb + 15``,
    each as its 64 K values ``64·kb ..`` in 32 bytes, value ``k`` in byte ``(k % 64) // 2``, the low nibble for
    even ``k``. K is zero-padded to 64 and N to 16; the padding is part of the layout. Half the bytes of
    :func:`prepack_weights` (up to the padding).

    Args:
        weight: int8, at least 2-D, the last two dims ``[K, N]``, every value in [-8, 7].

    Returns:
        A new contiguous uint8 tensor.
    """
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"prepack_weights_int4: weight must be a torch.Tensor, got {type(weight).__name__}")
    if weight.dtype != torch.int8:
        raise TypeError(f"prepack_weights_int4: weight must be int8 (int4 values), got {weight.dtype}")
    if weight.dim() < 2:
        raise ValueError(f"prepack_weights_int4: weight must be at least 2-D [..., K, N], got shape "
                         f"{tuple(weight.shape)}")
    *lead, k, n = weight.shape
    if k < 1 or n < 1:
        raise ValueError(f"prepack_weights_int4: weight must have K >= 1 and N >= 1, got shape {tuple(weight.shape)}")
    bad = (weight < -8) | (weight > 7)
    if bool(bad.any()):
        idx = [int(i) for i in bad.nonzero()[0]]
        raise ValueError(f"prepack_weights_int4: weight{idx} = {int(weight[tuple(idx)])} is outside the int4 range "
                         "[-8, 7]")
    k1, n1 = -(-k // _ZN4_K0), -(-n // _ZN4_N0)
    padded = torch.zeros(*lead, k1 * _ZN4_K0, n1 * _ZN4_N0, dtype=torch.int8, device=weight.device)
    padded[..., :k, :n] = weight
    # [..., K1, 64, N1, 16] -> [..., K1, N1, 16 columns, 64 k]: each column's K values contiguous.
    zn = padded.reshape(*lead, k1, _ZN4_K0, n1, _ZN4_N0).permute(*range(len(lead)), -4, -2, -1, -3)
    nibbles = (zn.to(torch.int16) & 0xF).to(torch.uint8)
    return (nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)).contiguous()


class LayerWeights:
    """Per-layer routed-expert weights and scales of one GMM, prepacked once, kept alive for the ops.

    Args:
        weights: one int8 tensor per layer, all the same shape: ND ``[E_local, K, N]`` (prepacked here with
            :func:`prepack_weights`, or :func:`prepack_weights_int4` with ``format="int4"``) or already FRACTAL_NZ
            ``[E_local, ceil(N/32), ceil(K/16), 16, 32]`` (then pass ``k``; ``format="int8"`` only).
        scales: one fp32 ``[E_local, N]`` per-output-channel scale per layer.
        k: the logical K when ``weights`` are already prepacked (NZ keeps only ``ceil(K/16)``); optional, checked
            against the activations at every call when given.
        format: ``"int8"`` (default): int8 FRACTAL_NZ, what today's kernels read (W8A8, or int4 values in int8
            storage). ``"int4"``: the ND weights must hold int4 values in [-8, 7] and are stored packed two to a
            byte in the int4 cube's ZN fractals, half the bytes; with ``colsums``, the per-column sums route (a)'s
            recombination adds (docs/gmm.md §9). The grouped-matmul ops run their W4A8 kernels on it (scale groups
            along K then a multiple of 64 rows).

    Attributes:
        weights: tuple of L contiguous NZ int8 tensors (what the kernels read; their addresses go to the device), or
            with ``format="int4"`` L uint8 ``[E_local, ceil(K/64), ceil(N/16), 16, 32]`` packed int4 tensors.
        format: ``"int8"`` or ``"int4"``.
        colsums: ``format="int4"``: L int32 ``[E_local, G, N]`` tensors, ``Σ_k w[k, n]`` over each of the G K groups
            of the scales (G = 1 per channel); None for ``"int8"``.
        colsums_all: the same as one int32 ``[L, E_local, G, N]`` tensor (``colsums`` are its layers); None for
            ``"int8"``.
        scales: tuple of L contiguous fp32 ``[E_local, N]`` tensors.
        num_layers, num_experts, k, n: the common shape (``k`` may be None for prepacked input without ``k``).

    The tensors must not be modified in place while an op that uses them runs.
    """

    def __init__(self, weights: Sequence[torch.Tensor], scales: Sequence[torch.Tensor], *, k: Optional[int] = None,
                 format: str = "int8"):
        if format not in FORMATS:
            raise ValueError(f"LayerWeights: format must be one of {FORMATS}, got {format!r}")
        weights, scales = list(weights), list(scales)
        if not weights:
            raise ValueError("LayerWeights: weights must hold at least one layer")
        if len(weights) != len(scales):
            raise ValueError(f"LayerWeights: {len(weights)} weights but {len(scales)} scales (one of each per layer)")
        for i, (w, s) in enumerate(zip(weights, scales)):
            if not isinstance(w, torch.Tensor) or not isinstance(s, torch.Tensor):
                raise TypeError(f"LayerWeights: weights[{i}] and scales[{i}] must be torch.Tensors")
            if w.dtype != torch.int8:
                raise TypeError(f"LayerWeights: weights[{i}] must be int8, got {w.dtype}")
            if s.dtype != torch.float32:
                raise TypeError(f"LayerWeights: scales[{i}] must be float32, got {s.dtype}")
        shape0 = tuple(weights[0].shape)
        for i, w in enumerate(weights):
            if tuple(w.shape) != shape0:
                raise ValueError(f"LayerWeights: weights[{i}] has shape {tuple(w.shape)}, weights[0] {shape0}")
        if len(shape0) == 3:
            e, kk, n = shape0
            if e < 1 or kk < 1 or n < 1:
                raise ValueError(f"LayerWeights: weights must be [E_local >= 1, K >= 1, N >= 1], got shape {shape0}")
            if k is not None and k != kk:
                raise ValueError(f"LayerWeights: k = {k} but the ND weights have K = {kk}")
            k = kk
            packed = [(prepack_weights_int4 if format == "int4" else prepack_weights)(w) for w in weights]
        elif format == "int4":
            raise ValueError(f"LayerWeights: format 'int4' takes ND weights [E_local, K, N] of int4 values, got "
                             f"shape {shape0}")
        elif len(shape0) == 5 and shape0[3:] == (_NZ_K0, _NZ_N0):
            e, n1, k1 = shape0[:3]
            if e < 1 or n1 < 1 or k1 < 1:
                raise ValueError(f"LayerWeights: FRACTAL_NZ weights must have E_local, N1, K1 >= 1, got shape {shape0}")
            if k is not None and k < 1:
                raise ValueError(f"LayerWeights: k = {k} must be >= 1")
            if k is not None and -(-k // _NZ_K0) != k1:
                raise ValueError(f"LayerWeights: k = {k} does not fit the NZ weights' ceil(K/16) = {k1}")
            n = None
            packed = [w.contiguous() for w in weights]
        else:
            raise ValueError(
                "LayerWeights: weights must be ND [E_local, K, N] or FRACTAL_NZ [E_local, N1, K1, 16, 32], "
                f"got shape {shape0}"
            )
        s0 = tuple(scales[0].shape)
        # [E, N] per output channel, or [E, G, N] per group of K / G rows along K (docs/gmm.md §9.2).
        if len(s0) not in (2, 3) or s0[0] != e or (n is not None and s0[-1] != n):
            want = f"[{e}, {n}]" if n is not None else f"[{e}, N]"
            raise ValueError(f"LayerWeights: scales[0] must have shape {want} (or [{e}, G, N] per K group), got {s0}")
        if len(s0) == 3 and (s0[1] < 1 or (k is not None and k % s0[1] != 0)):
            raise ValueError(f"LayerWeights: scales[0] {s0} has {s0[1]} K groups, which must divide K = {k}")
        n = s0[-1]
        if len(shape0) == 5 and -(-n // _NZ_N0) != shape0[1]:
            raise ValueError(f"LayerWeights: scales say N = {n} but the NZ weights hold ceil(N/32) = {shape0[1]}")
        for i, s in enumerate(scales):
            if tuple(s.shape) != s0:
                raise ValueError(f"LayerWeights: scales[{i}] has shape {tuple(s.shape)}, scales[0] {s0}")
            _check_scale_values(i, s)
        colsums_all = None
        if format == "int4":
            groups = s0[1] if len(s0) == 3 else 1
            # The recombination's int32 term, per K group of the scales: computed from the int4 values at load.
            colsums_all = torch.stack([w.to(torch.int32).reshape(e, groups, k // groups, n)
                                       .sum(dim=2, dtype=torch.int32) for w in weights])
        self._hold(packed, scales, colsums_all, format, k, n)

    def _hold(self, packed, scales, colsums_all, format: str, k, n) -> None:
        self.weights = tuple(w.contiguous() for w in packed)
        self.scales = tuple(s.contiguous() for s in scales)
        self.format = format
        self.colsums = None
        self.colsums_all = None
        if colsums_all is not None:
            # One [L, E, G, N] tensor (what the ops pass), its layers the per-layer views (what a rebalance writes).
            self.colsums_all = colsums_all.contiguous()
            self.colsums = tuple(self.colsums_all.unbind(0))
        self.num_layers = len(self.weights)
        self.num_experts = self.weights[0].shape[0]
        self.k = k
        self.n = n

    def named_tensors(self) -> Tuple[Tuple[str, torch.Tensor], ...]:
        """Every tensor this set holds per layer, named: ``weights[l]``, ``scales[l]`` and, with ``format="int4"``,
        ``colsums[l]``. What a rebalance copies into (in place: the addresses the ops were given stay); the
        ``colsums`` are views of ``colsums_all``."""
        parts = [("weights", self.weights), ("scales", self.scales)]
        if self.colsums is not None:
            parts.append(("colsums", self.colsums))
        return tuple((f"{name}[{l}]", t) for name, ts in parts for l, t in enumerate(ts))

    def take(self, held: Sequence[Sequence[int]]) -> "LayerWeights":
        """New tensors holding experts ``held[l]`` of each layer ``l`` in its slots (-1: an empty slot, zero weights,
        scales and column sums), in this set's format. The expert is the first dimension of the packed weights, the
        scales and the column sums, so they are copied as they are, never re-packed."""
        held = [list(ids) for ids in held]
        if len(held) != self.num_layers or len({len(ids) for ids in held}) != 1:
            raise ValueError(f"LayerWeights.take: held must list the same number of slots for each of the "
                             f"{self.num_layers} layers, got {[len(ids) for ids in held]}")
        for l, ids in enumerate(held):
            for e in ids:
                if not -1 <= e < self.num_experts:
                    raise ValueError(f"LayerWeights.take: held[{l}] names expert {e}, outside [-1, "
                                     f"{self.num_experts})")

        def pick(t: torch.Tensor, ids) -> torch.Tensor:
            out = torch.zeros((len(ids),) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
            for j, e in enumerate(ids):
                if e >= 0:
                    out[j] = t[e]
            return out

        out = object.__new__(type(self))
        colsums = None if self.colsums is None else torch.stack([pick(c, ids) for c, ids in zip(self.colsums, held)])
        out._hold([pick(w, ids) for w, ids in zip(self.weights, held)],
                  [pick(s, ids) for s, ids in zip(self.scales, held)], colsums, self.format, self.k, self.n)
        return out

    @classmethod
    def random(cls, experts: int, layers: int, k: int, n: int, generator: torch.Generator,
               scale: float = 1e-2) -> "LayerWeights":
        """Synthetic weights for tests and benchmarks: int8 uniform in [-128, 128) ``[experts, k, n]`` and fp32
        scales uniform in [scale/10, scale*1.1) ``[experts, n]`` per layer, drawn from ``generator``."""
        ws = [torch.randint(-128, 128, (experts, k, n), generator=generator, dtype=torch.int8) for _ in range(layers)]
        ss = [(torch.rand(experts, n, generator=generator) * scale + scale / 10).float() for _ in range(layers)]
        return cls(ws, ss)

    @classmethod
    def from_placement(cls, placement, ffn_index: int, weights: Sequence[torch.Tensor],
                       scales: Sequence[torch.Tensor], *, format: str = "int8") -> "LayerWeights":
        """The weights FFN index ``ffn_index`` serves under a :class:`cam.placement.Placement`: per layer ``l``,
        local slot ``j`` holds expert ``placement.slot_experts(l, ffn_index)[j]`` of ``weights[l]`` (ND ``[E, K,
        N]`` int8, every routed expert; int4 values with ``format="int4"``) and ``scales[l]`` (``[E, N]`` fp32); an
        empty slot is zeros. A replicated expert's weights are on every rank that holds a replica."""
        if not 0 <= ffn_index < placement.ffn_ranks:
            raise ValueError(f"LayerWeights.from_placement: ffn_index {ffn_index} outside [0, {placement.ffn_ranks})")
        if len(weights) != placement.layers or len(scales) != placement.layers:
            raise ValueError(f"LayerWeights.from_placement: {len(weights)} weights and {len(scales)} scales for a "
                             f"placement of {placement.layers} layers")
        per_w, per_s = [], []
        for l, (w, s) in enumerate(zip(weights, scales)):
            if w.dim() != 3 or w.shape[0] != placement.experts or s.shape != (placement.experts, w.shape[2]):
                raise ValueError(f"LayerWeights.from_placement: layer {l} needs weights [E={placement.experts}, K, N] "
                                 f"and scales [E, N], got {tuple(w.shape)} and {tuple(s.shape)}")
            slots = placement.slot_experts(l, ffn_index)
            lw = torch.zeros((len(slots), w.shape[1], w.shape[2]), dtype=w.dtype)
            ls = torch.zeros((len(slots), w.shape[2]), dtype=s.dtype)
            for j, e in enumerate(slots):
                if e >= 0:
                    lw[j], ls[j] = w[e], s[e]
            per_w.append(lw)
            per_s.append(ls)
        return cls(per_w, per_s, format=format)

    def require_k(self, op: str, name: str, x: torch.Tensor) -> None:
        """Refuses an activation whose columns are not this weight set's logical K. The op's C API cannot: the NZ
        layout keeps only ceil(K/16) row blocks, so K = 39 activations fit K = 40 weights' shape while the weights'
        last row would meet the activations' zero padding. Only this object knows K (when it is known at all)."""
        if self.k is not None and x.dim() == 2 and x.shape[1] != self.k:
            raise ValueError(f"{op}: {name} has K = {x.shape[1]} columns, the weights K = {self.k}")

    def __repr__(self) -> str:
        return (
            f"LayerWeights(num_layers={self.num_layers}, num_experts={self.num_experts}, k={self.k}, n={self.n}, "
            f"format={self.format!r}, layout={'ZN int4' if self.format == 'int4' else 'FRACTAL_NZ'})"
        )
