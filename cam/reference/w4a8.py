"""Golden W4A8 grouped matmuls (docs/gmm.md §9), written from the docs and independent of the kernels.

Weights are int4 values held one per int8 element (``[E_local, K, N]``, values in [-8, 7]); scales are fp32
``[E_local, N]`` (per output channel) or ``[E_local, K / G, N]`` (per group of ``G`` K rows). The products are taken
directly (int8 x int4 summed exactly), not through the activation split the kernels use; the split has its own
helpers here (``msd_split`` / ``msd_recombine``) so the identity is tested on its own.

The group forms (one-layer ``group_list`` or a ``[G, 3]`` group table), the device-detected errors and the W1
epilogue (SwiGLU, optional clamp, per-row quant) are those of ``cam.reference.gmm``; only the accumulator and its
dequantization differ.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

from .gmm import GROUP_LIST_COUNTS, LayerIndex, _check_activations, _dynamic_quant, _groups, _swiglu

__all__ = [
    "msd_split",
    "msd_recombine",
    "gmm_w4a8_partials",
    "gmm_swiglu_quant_multi_layer_w4a8",
    "gmm_multi_layer_w4a8",
]


def msd_split(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """int8 ``x`` -> int4 halves ``(hi, lo)``, both in [-8, 7], with ``x = 16·hi + lo + 8``."""
    assert x.dtype == torch.int8
    v = x.to(torch.int16)
    hi = torch.div(v, 16, rounding_mode="floor")  # arithmetic shift right by 4
    lo = (v - 16 * hi) - 8                          # the low nibble, shifted into [-8, 7]
    return hi.to(torch.int8), lo.to(torch.int8)


def msd_recombine(acc_hi: torch.Tensor, acc_lo: torch.Tensor, colsum: torch.Tensor) -> torch.Tensor:
    """``16·acc_hi + acc_lo + 8·colsum`` in int32: the exact ``x·w`` from the two int4 products."""
    assert acc_hi.dtype == acc_lo.dtype == colsum.dtype == torch.int32
    return 16 * acc_hi + acc_lo + 8 * colsum


def _check_w4_lists(weights: Sequence[torch.Tensor], weight_scales: Sequence[torch.Tensor],
                    group_size: Optional[int]) -> int:
    """Returns the number of K groups (1 for per-channel scales)."""
    assert len(weights) >= 1 and len(weights) == len(weight_scales), "one weight and one scale per layer"
    e, k, n = weights[0].shape
    if group_size is None:
        groups, want = 1, (e, n)
    else:
        if group_size < 1 or k % group_size != 0:
            raise ValueError(f"group_size {group_size} does not divide K = {k}")
        groups, want = k // group_size, (e, k // group_size, n)
    for w, s in zip(weights, weight_scales):
        assert w.dtype == torch.int8 and tuple(w.shape) == (e, k, n), "weights are int8 [E_local, K, N] (int4 values)"
        assert int(w.min()) >= -8 and int(w.max()) <= 7, "weights hold int4 values in [-8, 7]"
        assert s.dtype == torch.float32 and tuple(s.shape) == want, f"scales are fp32 {list(want)}"
    return groups


def gmm_w4a8_partials(x: torch.Tensor, w_e: torch.Tensor, start: int, end: int, groups: int) -> torch.Tensor:
    """int32 ``[groups, end - start, N]``: the exact sum of each K group of ``x[start:end] @ w_e``."""
    k = w_e.shape[0]
    g = k // groups
    xs = x[start:end].to(torch.float64)
    # Integer products summed in float64 are exact far beyond any K these shapes reach (|x·w| <= 1024).
    parts = [xs[:, i * g:(i + 1) * g] @ w_e[i * g:(i + 1) * g].to(torch.float64) for i in range(groups)]
    return torch.stack(parts).to(torch.int32)


def _dequant(x: torch.Tensor, x_scale: torch.Tensor, w_e: torch.Tensor, s_e: torch.Tensor, start: int, end: int,
             groups: int) -> torch.Tensor:
    """fp32 ``c``: t_g = (float(acc_g) * x_scale) * w_scale[g]; c = t_0, then c = c + t_g in group order."""
    acc = gmm_w4a8_partials(x, w_e, start, end, groups)
    scales = s_e[None, :] if s_e.dim() == 1 else s_e  # [groups, N]
    c: Optional[torch.Tensor] = None
    for g in range(groups):
        t = acc[g].to(torch.float32) * x_scale[start:end, None]
        t = t * scales[g][None, :]
        c = t if c is None else c + t
    assert c is not None
    return c


def gmm_swiglu_quant_multi_layer_w4a8(
    x: torch.Tensor,
    x_scale: torch.Tensor,
    weights: Sequence[torch.Tensor],
    weight_scales: Sequence[torch.Tensor],
    group_list: torch.Tensor,
    layer_index: Optional[LayerIndex],
    group_list_type: int = GROUP_LIST_COUNTS,
    y_out: Optional[torch.Tensor] = None,
    y_scale_out: Optional[torch.Tensor] = None,
    swiglu_limit: Optional[float] = None,
    group_size: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """W1 golden with int4 weights. Returns ``(y int8 [M, N/2], y_scale fp32 [M], rows_written)``; rows past the
    last group keep what ``y_out`` / ``y_scale_out`` held."""
    groups_k = _check_w4_lists(weights, weight_scales, group_size)
    e_local, k, n = weights[0].shape
    assert n % 2 == 0, "W1 output width N must be even (act | gate halves)"
    m = _check_activations(x, x_scale, k)
    groups = _groups(group_list, group_list_type, layer_index, len(weights), e_local, m)
    half = n // 2
    if y_out is None:
        y_out = torch.zeros(m, half, dtype=torch.int8)
    if y_scale_out is None:
        y_scale_out = torch.zeros(m, dtype=torch.float32)
    rows = groups[-1][3] if groups else 0
    if rows == 0:
        return y_out, y_scale_out, 0
    s = torch.empty(rows, half, dtype=torch.float32)
    for layer, e, start, end in groups:
        if end == start:
            continue
        c = _dequant(x, x_scale, weights[layer][e], weight_scales[layer][e], start, end, groups_k)
        s[start:end] = _swiglu(c, swiglu_limit)
    q, q_scale = _dynamic_quant(s)
    y_out[:rows] = q
    y_scale_out[:rows] = q_scale
    return y_out, y_scale_out, rows


def gmm_multi_layer_w4a8(
    y: torch.Tensor,
    y_scale: torch.Tensor,
    weights: Sequence[torch.Tensor],
    weight_scales: Sequence[torch.Tensor],
    group_list: torch.Tensor,
    layer_index: Optional[LayerIndex],
    group_list_type: int = GROUP_LIST_COUNTS,
    out: Optional[torch.Tensor] = None,
    group_size: Optional[int] = None,
    out_scale: Optional[float] = None,
) -> torch.Tensor:
    """W2 golden with int4 weights: ``out = bf16(c)``, or ``bf16(c * out_scale)`` (one fp32 multiply, the scale
    rounded to fp32) with an output scale such as ``routed_scaling_factor``. Rows past the last group keep what
    ``out`` held."""
    groups_k = _check_w4_lists(weights, weight_scales, group_size)
    e_local, i_dim, h = weights[0].shape
    m = _check_activations(y, y_scale, i_dim)
    groups = _groups(group_list, group_list_type, layer_index, len(weights), e_local, m)
    if out_scale is not None and not torch.isfinite(torch.tensor(float(out_scale))):
        raise ValueError(f"out_scale {out_scale} is not finite")
    if out is None:
        out = torch.zeros(m, h, dtype=torch.bfloat16)
    for layer, e, start, end in groups:
        if end == start:
            continue
        c = _dequant(y, y_scale, weights[layer][e], weight_scales[layer][e], start, end, groups_k)
        if out_scale is not None:
            c = c * torch.tensor(out_scale, dtype=torch.float32)
        out[start:end] = c.to(torch.bfloat16)
    return out
