"""Golden (oracle) implementations of the layer-select grouped matmuls.

Written in plain torch, independently of the kernels: nothing here is shared with
the kernel path, so a bug on one side cannot hide in both. See docs/gmm.md for the
contract these functions pin down (docs/numerics.md).

* ``gmm_swiglu_quant_multi_layer`` - W1: int8 GMM, dequant, SwiGLU, per-row quant.
* ``gmm_multi_layer``              - W2: int8 GMM, dequant, cast to bf16.
* ``gmm_int32_reference``          - the exact int32 accumulator both ops start from.
* ``prepack_nz_reference`` / ``unpack_nz_reference`` / ``nz_offset`` - the
  FRACTAL_NZ weight layout (int8: 16 x 32 fractals) the Ascend kernel reads.

Validation is deliberately thin (asserts): this is an oracle, not an API. The two
conditions the real ops detect *on device* (``layer_index`` out of range, a
``group_list`` that is malformed or sums past M) raise ``ValueError`` naming the
argument, before anything is written, so op tests can check "error status and
output untouched" against the same rule.
"""

from __future__ import annotations

import importlib
from typing import List, Optional, Sequence, Tuple, Union

import torch

__all__ = [
    "GROUP_LIST_CUMSUM",
    "GROUP_LIST_COUNTS",
    "GROUP_TABLE",
    "group_table_bounds",
    "NZ_K0",
    "NZ_N0",
    "group_bounds",
    "gmm_int32_reference",
    "gmm_swiglu_quant_multi_layer",
    "gmm_multi_layer",
    "nz_shape",
    "nz_offset",
    "prepack_nz_reference",
    "unpack_nz_reference",
]

GROUP_LIST_CUMSUM = 0  # torch_npu v2 convention: group_list[e] = end row of expert e
GROUP_LIST_COUNTS = 1  # group_list[e] = rows of expert e (what dispatch_recv emits)
GROUP_TABLE = 2        # group_list[g] = (layer, local expert, rows): a batched dispatch_recv's group table

# int8 FRACTAL_NZ fractal: 16 rows (K) x 32 columns (N); 32 = one 32-byte C0 block.
NZ_K0 = 16
NZ_N0 = 32

# |int8 * int8| <= 128 * 128, so K below this keeps every partial sum inside int32.
_MAX_K = (2**31 - 1) // (128 * 128)

LayerIndex = Union[int, torch.Tensor]


# ----------------------------------------------------------------------------- helpers


def group_table_bounds(table: torch.Tensor, layers: int, experts: int, m: int) -> List[Tuple[int, int, int, int]]:
    """(layer, local expert, start, end) of every group of a ``[G, 3]`` group table, rows consecutive in table
    order. Raises ValueError (the device-detected class) for a layer outside [0, layers), an expert outside
    [0, experts), negative rows or a total above ``m``, naming the group."""
    assert table.dim() == 2 and table.shape[1] == 3 and table.dtype == torch.int64, "group table must be int64 [G, 3]"
    out = []
    start = 0
    for g, (layer, expert, rows) in enumerate(table.tolist()):
        if not 0 <= layer < layers:
            raise ValueError(f"group_table layer of group[{g}] {layer} outside [0, {layers})")
        if not 0 <= expert < experts:
            raise ValueError(f"group_table expert of group[{g}] {expert} outside [0, {experts})")
        if rows < 0:
            raise ValueError(f"group_table rows of group[{g}] = {rows}: negative")
        if start + rows > m:
            raise ValueError(f"group_table total {start + rows} exceeds M = {m} (at group {g})")
        out.append((layer, expert, start, start + rows))
        start += rows
    return out


def _groups(group_list: torch.Tensor, group_list_type: int, layer_index: Optional[LayerIndex], layers: int,
            experts: int, m: int) -> List[Tuple[int, int, int, int]]:
    """(layer, local expert, start, end) of every group, for either form of the group argument."""
    if group_list_type == GROUP_TABLE:
        return group_table_bounds(group_list, layers, experts, m)
    assert group_list.numel() == experts, "group_list has one entry per local expert"
    layer = _layer(layer_index, layers)
    return [(layer, e, s, t) for e, (s, t) in enumerate(group_bounds(group_list, group_list_type, m))]


def _layer(layer_index: LayerIndex, num_layers: int) -> int:
    if isinstance(layer_index, torch.Tensor):
        assert layer_index.dtype == torch.int64 and layer_index.numel() == 1, (
            "layer_index must be an int64 tensor with one element"
        )
        layer = int(layer_index.reshape(-1)[0].item())
    else:
        layer = int(layer_index)
    if not 0 <= layer < num_layers:
        raise ValueError(f"layer_index {layer} outside [0, {num_layers})")
    return layer


def group_bounds(group_list: torch.Tensor, group_list_type: int, m: int) -> List[Tuple[int, int]]:
    """Row range [start, end) of every local expert.

    Raises ValueError (the device-detected class of error) when counts are negative,
    a cumsum decreases, or the total exceeds the capacity ``m``.
    """
    assert group_list.dim() == 1, "group_list must be 1-D [E_local]"
    assert group_list.dtype == torch.int64, "group_list must be int64"
    assert group_list_type in (GROUP_LIST_CUMSUM, GROUP_LIST_COUNTS), "group_list_type must be 0 or 1"
    values = [int(v) for v in group_list.tolist()]
    bounds = []
    start = 0
    for e, v in enumerate(values):
        if group_list_type == GROUP_LIST_COUNTS:
            if v < 0:
                raise ValueError(f"group_list[{e}] = {v}: negative count")
            end = start + v
        else:
            if v < start:
                raise ValueError(f"group_list[{e}] = {v}: cumsum decreases (previous end {start})")
            end = v
        if end > m:
            raise ValueError(f"group_list total {end} exceeds M = {m} (at expert {e})")
        bounds.append((start, end))
        start = end
    return bounds


def _check_layer_lists(weights: Sequence[torch.Tensor], weight_scales: Sequence[torch.Tensor]) -> None:
    assert len(weights) >= 1 and len(weights) == len(weight_scales), "one weight and one scale per layer"
    shape = tuple(weights[0].shape)
    for w, s in zip(weights, weight_scales):
        assert w.dtype == torch.int8 and w.dim() == 3, "weights are int8 [E_local, K, N] (ND, not prepacked)"
        assert tuple(w.shape) == shape, "every layer has the same weight shape"
        assert s.dtype == torch.float32 and tuple(s.shape) == (shape[0], shape[2]), "scales are fp32 [E_local, N]"


def _acc_rows(x: torch.Tensor, w_e: torch.Tensor, start: int, end: int) -> torch.Tensor:
    # Integer products summed in float64 are exact while |partial sum| < 2**53, which
    # _MAX_K guarantees with a huge margin, so BLAS order and FMA cannot change it.
    acc = x[start:end].to(torch.float64) @ w_e.to(torch.float64)
    return acc.to(torch.int32)


def _exp_f32(a: torch.Tensor) -> torch.Tensor:
    # exp evaluated in float64 then rounded once to fp32: effectively correctly rounded
    # and independent of which SIMD path torch's fp32 exp would take on this CPU, so
    # the oracle does not change between machines.
    return torch.exp(a.to(torch.float64)).to(torch.float32)


def _dynamic_quant(s: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    # Lazy: the shared quant golden lives in its own module (docs/numerics.md, bit-exact).
    mod = importlib.import_module("cam.reference.dynamic_quant")
    q, scale = mod.dynamic_quant(s)
    assert q.dtype == torch.int8 and tuple(q.shape) == tuple(s.shape)
    assert scale.dtype == torch.float32 and scale.numel() == s.shape[0]
    return q, scale.reshape(-1)


def _check_activations(x: torch.Tensor, x_scale: torch.Tensor, k: int) -> int:
    assert x.dtype == torch.int8 and x.dim() == 2, "activations are int8 [M, K]"
    assert x.shape[1] == k, f"activation K {x.shape[1]} != weight K {k}"
    assert k <= _MAX_K, f"K = {k} could overflow the int32 accumulator"
    m = x.shape[0]
    assert x_scale.dtype == torch.float32 and tuple(x_scale.shape) == (m,), "scale is fp32 [M]"
    return m


# ----------------------------------------------------------------------------- GMM goldens


def gmm_int32_reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    group_list: torch.Tensor,
    group_list_type: int = GROUP_LIST_COUNTS,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """acc[m, n] = sum_k x[m, k] * weight[e(m), k, n], exact int32, for one layer.

    Rows past the last group keep whatever ``out`` held (zeros if allocated here).
    """
    assert weight.dtype == torch.int8 and weight.dim() == 3
    e_local, k, n = weight.shape
    m = x.shape[0]
    assert x.dtype == torch.int8 and tuple(x.shape) == (m, k) and k <= _MAX_K
    assert group_list.numel() == e_local, "group_list has one entry per local expert"
    bounds = group_bounds(group_list, group_list_type, m)
    if out is None:
        out = torch.zeros(m, n, dtype=torch.int32)
    assert out.dtype == torch.int32 and tuple(out.shape) == (m, n)
    for e, (start, end) in enumerate(bounds):
        if end > start:
            out[start:end] = _acc_rows(x, weight[e], start, end)
    return out


def _swiglu(c: torch.Tensor, swiglu_limit: Optional[float]) -> torch.Tensor:
    """W1's epilogue before the quant, on fp32 ``c [rows, N]`` (act | gate halves): the clamps of ``swiglu_limit``
    (when given), then ``silu(act) * gate``, every step in fp32 as docs/numerics.md states it."""
    half = c.shape[1] // 2
    act, gate = c[:, :half], c[:, half:]
    if swiglu_limit is not None:
        lim = torch.tensor(swiglu_limit, dtype=torch.float32)
        act = torch.minimum(act, lim)
        gate = torch.maximum(torch.minimum(gate, lim), -lim)
    silu = act / (1.0 + _exp_f32(-act))
    return silu * gate


def gmm_swiglu_quant_multi_layer(
    x: torch.Tensor,
    x_scale: torch.Tensor,
    weights: Sequence[torch.Tensor],
    weight_scales: Sequence[torch.Tensor],
    group_list: torch.Tensor,
    layer_index: LayerIndex,
    group_list_type: int = GROUP_LIST_COUNTS,
    y_out: Optional[torch.Tensor] = None,
    y_scale_out: Optional[torch.Tensor] = None,
    swiglu_limit: Optional[float] = None,
) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """W1 golden. Returns (y int8 [M, N/2], y_scale fp32 [M], rows_written).

    Per row m of group (layer l, expert e) (l = layer_index, or the group table's), all fp32, unfused:
        acc  = x[m] . W[l][e]                      (int32, exact)
        c    = (float(acc) * x_scale[m]) * w_scale[l][e]
        act, gate = c[:N/2], c[N/2:]
        s    = (act / (1 + exp(-act))) * gate
        y[m], y_scale[m] = dynamic_quant(s)        (shared per-row quant rule)
    With ``swiglu_limit`` L (DeepSeek-V4's clamped SwiGLU, transformers' ``DeepseekV4Experts._apply_gate``:
    ``gate.clamp(max=L)``, ``up.clamp(-L, L)``, HF's gate being the silu'd half, cam's act) the halves are clamped
    before the SiLU, in fp32 with L rounded to fp32, NaN kept: act = min(act, L), gate = max(min(gate, L), -L).
    Rows >= rows_written are left exactly as they were in ``y_out`` / ``y_scale_out``
    (zero-filled when the buffers are allocated here).
    """
    _check_layer_lists(weights, weight_scales)
    e_local, k, n = weights[0].shape
    assert n % 2 == 0, "W1 output width N must be even (act | gate halves)"
    m = _check_activations(x, x_scale, k)
    # The device-checked arguments are validated before any write (ValueError).
    groups = _groups(group_list, group_list_type, layer_index, len(weights), e_local, m)

    half = n // 2
    if y_out is None:
        y_out = torch.zeros(m, half, dtype=torch.int8)
    if y_scale_out is None:
        y_scale_out = torch.zeros(m, dtype=torch.float32)
    assert y_out.dtype == torch.int8 and tuple(y_out.shape) == (m, half)
    assert y_scale_out.dtype == torch.float32 and tuple(y_scale_out.shape) == (m,)

    rows_written = groups[-1][3] if groups else 0
    if rows_written == 0:
        return y_out, y_scale_out, 0

    s = torch.empty(rows_written, half, dtype=torch.float32)
    for layer, e, start, end in groups:
        if end == start:
            continue
        acc = _acc_rows(x, weights[layer][e], start, end)
        c = acc.to(torch.float32) * x_scale[start:end, None]
        c = c * weight_scales[layer][e][None, :]
        s[start:end] = _swiglu(c, swiglu_limit)

    q, q_scale = _dynamic_quant(s)
    y_out[:rows_written] = q
    y_scale_out[:rows_written] = q_scale
    return y_out, y_scale_out, rows_written


def gmm_multi_layer(
    y: torch.Tensor,
    y_scale: torch.Tensor,
    weights: Sequence[torch.Tensor],
    weight_scales: Sequence[torch.Tensor],
    group_list: torch.Tensor,
    layer_index: LayerIndex,
    group_list_type: int = GROUP_LIST_COUNTS,
    out: Optional[torch.Tensor] = None,
    out_scale: Optional[float] = None,
) -> torch.Tensor:
    """W2 golden. Returns out bf16 [M, H].

    Per row m of expert e: out[m] = bf16((float(acc) * y_scale[m]) * w_scale[l][e]),
    fp32 products left to right, one round-to-nearest-even to bf16 (overflow -> inf).
    With ``out_scale`` s (rounded to fp32): one more fp32 multiply by s before the bf16 rounding.
    Rows past the last group keep what ``out`` held (zeros if allocated here).
    """
    _check_layer_lists(weights, weight_scales)
    e_local, i_dim, h = weights[0].shape
    m = _check_activations(y, y_scale, i_dim)
    groups = _groups(group_list, group_list_type, layer_index, len(weights), e_local, m)

    if out is None:
        out = torch.zeros(m, h, dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (m, h)

    for layer, e, start, end in groups:
        if end == start:
            continue
        acc = _acc_rows(y, weights[layer][e], start, end)
        c = acc.to(torch.float32) * y_scale[start:end, None]
        c = c * weight_scales[layer][e][None, :]
        if out_scale is not None:
            c = c * torch.tensor(out_scale, dtype=torch.float32)
        out[start:end] = c.to(torch.bfloat16)
    return out


# ----------------------------------------------------------------------------- FRACTAL_NZ


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def nz_shape(k: int, n: int) -> Tuple[int, int, int, int]:
    """NZ storage shape of one int8 [K, N] matrix: (ceil(N/32), ceil(K/16), 16, 32)."""
    return (_ceil_div(n, NZ_N0), _ceil_div(k, NZ_K0), NZ_K0, NZ_N0)


def nz_offset(e: int, k: int, n: int, K: int, N: int) -> int:
    """Byte offset of element (k, n) of expert e in a prepacked [E, N1, K1, 16, 32] tensor.

    Column block n // 32 is outermost; inside it the K rows (padded to 16) follow one
    another, each a 32-byte run of columns, so the offset is linear in k.
    """
    k_pad = _ceil_div(K, NZ_K0) * NZ_K0
    n_blocks = _ceil_div(N, NZ_N0)
    expert_bytes = n_blocks * k_pad * NZ_N0
    return e * expert_bytes + (n // NZ_N0) * (k_pad * NZ_N0) + k * NZ_N0 + (n % NZ_N0)


def prepack_nz_reference(w: torch.Tensor) -> torch.Tensor:
    """int8 [..., K, N] (ND) -> int8 [..., ceil(N/32), ceil(K/16), 16, 32] (FRACTAL_NZ).

    K is zero-padded to a multiple of 16 and N to a multiple of 32; the padding is
    part of the layout (the cube reads whole fractals), not garbage.
    """
    assert w.dtype == torch.int8 and w.dim() >= 2
    *lead, k, n = w.shape
    n1, k1, k0, n0 = nz_shape(k, n)
    padded = torch.zeros(*lead, k1 * k0, n1 * n0, dtype=torch.int8)
    padded[..., :k, :n] = w
    blocks = padded.reshape(*lead, k1, k0, n1, n0)
    nd = len(lead)
    # (k1, k0, n1, n0) -> (n1, k1, k0, n0): column blocks outermost, fractal rows inner.
    perm = list(range(nd)) + [nd + 2, nd + 0, nd + 1, nd + 3]
    return blocks.permute(*perm).contiguous()


def unpack_nz_reference(nz: torch.Tensor, k: int, n: int) -> torch.Tensor:
    """Inverse of prepack_nz_reference: drop the padding, return int8 [..., K, N]."""
    assert nz.dtype == torch.int8 and nz.dim() >= 4
    *lead, n1, k1, k0, n0 = nz.shape
    assert (n1, k1, k0, n0) == nz_shape(k, n), f"NZ shape {tuple(nz.shape)} does not hold a [{k}, {n}] matrix"
    nd = len(lead)
    perm = list(range(nd)) + [nd + 1, nd + 2, nd + 0, nd + 3]
    nd_padded = nz.permute(*perm).reshape(*lead, k1 * k0, n1 * n0)
    return nd_padded[..., :k, :n].contiguous()
