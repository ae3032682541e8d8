"""Layer-select grouped matmuls of the FFN side (docs/gmm.md): W1 ``gmm_swiglu_quant_multi_layer`` and W2
``gmm_multi_layer``. Both take every layer's weights at once (:class:`cam.LayerWeights`) and either a
device-resident ``layer_index`` with a per-expert ``group_list``, or a group table whose groups name their own
layer (a batched dispatch_recv's); the kernels pick each group's layer on the device."""

from __future__ import annotations

from typing import Optional

import torch

from .. import _C, _runtime
from ..layer_weights import LayerWeights
from . import _library
from ._kinds import Args

GROUP_LIST_CUMSUM = 0
GROUP_LIST_COUNTS = 1
GROUP_TABLE = 2  # group_list is a [G, 3] int64 group table {layer, local expert, rows}; layer_index is not read


@_library.op("gmm_swiglu_quant_multi_layer", mutates_args=("y", "y_scale"))
def _gmm_swiglu_quant_multi_layer(
    x: torch.Tensor,
    x_scale: torch.Tensor,
    weights: list[torch.Tensor],
    weight_scales: list[torch.Tensor],
    group_list: torch.Tensor,
    layer_index: torch.Tensor,
    group_list_type: int,
    y: torch.Tensor,
    y_scale: torch.Tensor,
    swiglu_limit: Optional[float] = None,
    weight_colsums: Optional[torch.Tensor] = None,
) -> None:
    _runtime.run(_C.gmm_swiglu_quant_multi_layer, x, x_scale, weights, weight_scales, group_list, layer_index,
                 group_list_type, y, y_scale, swiglu_limit, weight_colsums, tensor=x)


@_gmm_swiglu_quant_multi_layer.register_fake
def _(x, x_scale, weights, weight_scales, group_list, layer_index, group_list_type, y, y_scale,
      swiglu_limit=None, weight_colsums=None) -> None:
    _runtime.check(_C.gmm_swiglu_quant_multi_layer, x, x_scale, weights, weight_scales, group_list, layer_index,
                   group_list_type, y, y_scale, swiglu_limit, weight_colsums)


@_library.op("gmm_multi_layer", mutates_args=("out",))
def _gmm_multi_layer(
    y: torch.Tensor,
    y_scale: torch.Tensor,
    weights: list[torch.Tensor],
    weight_scales: list[torch.Tensor],
    group_list: torch.Tensor,
    layer_index: torch.Tensor,
    group_list_type: int,
    out: torch.Tensor,
    out_scale: Optional[float] = None,
    weight_colsums: Optional[torch.Tensor] = None,
) -> None:
    _runtime.run(_C.gmm_multi_layer, y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type,
                 out, out_scale, weight_colsums, tensor=y)


@_gmm_multi_layer.register_fake
def _(y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type, out, out_scale=None,
      weight_colsums=None) -> None:
    _runtime.check(_C.gmm_multi_layer, y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type,
                   out, out_scale, weight_colsums)


def _gate(op: str, x_name: str, x, x_scale_name: str, x_scale, weights, group_list, layer_index,
          group_list_type) -> LayerWeights:
    """The arguments' kinds, before the op schema sees them (the op's C API checks everything else)."""
    args = Args(op)
    if not isinstance(weights, LayerWeights):
        raise TypeError(f"{op}: weights must be a cam.LayerWeights, got {type(weights).__name__}")
    args.gate(**{x_name: (x, torch.Tensor), x_scale_name: (x_scale, torch.Tensor)},
              group_list=(group_list, torch.Tensor), group_list_type=(group_list_type, int))
    if not (layer_index is None and group_list_type == GROUP_TABLE):
        args.gate(layer_index=(layer_index, torch.Tensor))
    weights.require_k(op, x_name, x)  # the one rule no tensor carries to the C API
    return weights


def _colsums_arg(lw: LayerWeights) -> Optional[torch.Tensor]:
    """The schema's weight_colsums: the W4A8 recombination's per-column sums of every layer, int32 [L, E, G, N]
    (their presence selects the int4 kernels, docs/gmm.md §9; the C API takes them as one list entry per layer),
    None for int8 FRACTAL_NZ weights."""
    return lw.colsums_all if lw.format == "int4" else None


def _layer_index_arg(group_list: torch.Tensor, layer_index: Optional[torch.Tensor]) -> torch.Tensor:
    """The schema's layer_index: with a group table it is not read, so the table itself stands in (no allocation,
    nothing new for a capture to hold)."""
    return group_list if layer_index is None else layer_index


def gmm_swiglu_quant_multi_layer(
    x: torch.Tensor,
    x_scale: torch.Tensor,
    weights: LayerWeights,
    group_list: torch.Tensor,
    layer_index: Optional[torch.Tensor],
    group_list_type: int = GROUP_LIST_COUNTS,
    *,
    out=None,
    swiglu_limit: Optional[float] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """W1: grouped int8 matmul with the layer picked on the device, dequant, SwiGLU, per-row int8 quant.

    For every row ``m`` of local expert ``e`` (rows are contiguous per expert, in expert order) and ``l =
    layer_index[0]``, in fp32 evaluated left to right (docs/gmm.md §1)::

        c = (float(x[m] . W[l][e]) * x_scale[m]) * w_scale[l][e]        # int32 accumulation, exact
        act, gate = c[:N/2], c[N/2:]
        s = act / (1 + exp(-act)) * gate          # with swiglu_limit L, first: act = min(act, L),
                                                   #   gate = max(min(gate, L), -L)   (fp32, L rounded to fp32)
        y[m] = clamp(rint(s * (127 / max|s|)), -127, 127);  y_scale[m] = max|s| / 127   (0 for a zero row)

    Args:
        x: int8 ``[M, K]`` activations (the dispatch receive buffer); ``M`` is the row capacity, ``M >= 0``.
        x_scale: fp32 ``[M]`` per-row dequant scale of ``x``.
        weights: :class:`cam.LayerWeights` over ``[E_local, K, N]`` weights (``N`` even, first half act) and
            ``[E_local, N]`` fp32 scales for every layer, or ``[E_local, G, N]`` per group of ``K / G`` rows (a
            multiple of 32; of 64 with int4 weights) along K: each group's int32 partial dequantized with its
            scales, summed in fp32 in group order (docs/gmm.md §9.2). ``format="int4"`` weights (W4A8) run the int4
            kernels: x split into two int4 halves, int4 x int4 on the cube, recombined exactly in int32
            (docs/gmm.md §9.1), so the result equals the int8 path's for the same integer weights.
        group_list: int64 ``[E_local]`` on the device: rows per expert (``group_list_type`` 1, what dispatch_recv
            emits) or their running sum (0). Its total may be below ``M``. With ``group_list_type`` 2
            (:data:`GROUP_TABLE`) a ``[G, 3]`` group table: group ``g``'s rows follow group ``g-1``'s and are
            computed with layer ``group_list[g, 0]``'s weights of local expert ``group_list[g, 1]``
            (a batched dispatch_recv's ``group_table``: one launch serves every item, whatever its layer).
        layer_index: int64 tensor with one element, on the device (may be a view into a work item); ``None`` (not
            read) with a group table.
        group_list_type: 1 counts (default), 0 cumsum, or 2 group table.
        out: optional ``(y, y_scale)`` to write into: int8 ``[M, N/2]`` and fp32 ``[M]`` (static buffers of a
            captured loop). Rows past the groups' total are not written; when ``out`` is not given they are
            allocated here as zeros.
        swiglu_limit: ``None`` (default): the plain SwiGLU above. A float ``L >= 0`` (or ``inf``): DeepSeek-V4's
            clamped SwiGLU, as its reference ``DeepseekV4Experts._apply_gate`` (transformers' ``deepseek_v4``)
            clamps its halves: the silu'd half (cam's act, HF's gate) to at most ``L``, the other (cam's gate, HF's
            up) to ``[-L, L]``. NaN or a negative value is refused (``ValueError`` naming ``swiglu_limit``).
            GPT-OSS's activation is a different function and is not offered.

    Returns:
        ``(y, y_scale)``.

    Raises:
        TypeError / ValueError: dtype, rank, shape, layout or list mismatches, naming the argument, before anything
            runs.
        cam.DeviceArgumentError: ``layer_index`` outside ``[0, L)``, a negative count / decreasing cumsum, or a
            total above ``M``; in a group table a layer outside ``[0, L)``, an expert outside ``[0, E_local)``,
            negative rows or a total above ``M``: detected by the kernels before they write anything (outputs
            untouched).
    """
    op = "gmm_swiglu_quant_multi_layer"
    lw = _gate(op, "x", x, "x_scale", x_scale, weights, group_list, layer_index, group_list_type)
    given = Args(op).outputs("out", out, 2)
    if given is None:
        rows = x.shape[0] if x.dim() else 0  # a 0-d x is refused by the op, naming it
        given = (torch.zeros(rows, lw.n // 2, dtype=torch.int8, device=x.device),
                 torch.zeros(rows, dtype=torch.float32, device=x.device))
    y, y_scale = given
    _gmm_swiglu_quant_multi_layer(
        x, x_scale, list(lw.weights), list(lw.scales), group_list, _layer_index_arg(group_list, layer_index),
        group_list_type, y, y_scale, _swiglu_limit_arg(swiglu_limit), _colsums_arg(lw)
    )
    return y, y_scale


def _swiglu_limit_arg(limit) -> Optional[float]:
    # The op's schema takes a float: anything else is refused here by name (the value itself is the C API's check).
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, (int, float)):
        raise TypeError(f"gmm_swiglu_quant_multi_layer: swiglu_limit must be a float or None, got {limit!r}")
    return float(limit)


def gmm_multi_layer(
    y: torch.Tensor,
    y_scale: torch.Tensor,
    weights: LayerWeights,
    group_list: torch.Tensor,
    layer_index: Optional[torch.Tensor],
    group_list_type: int = GROUP_LIST_COUNTS,
    *,
    out=None,
    out_scale: Optional[float] = None,
) -> torch.Tensor:
    """W2: grouped int8 matmul with the layer picked on the device, dequant to bf16.

    ``out[m] = bf16((float(y[m] . W[l][e]) * y_scale[m]) * w_scale[l][e])``: exact int32 accumulation, fp32 products
    left to right, one round-to-nearest-even to bf16 (overflow gives inf). With ``out_scale`` s:
    ``bf16(((float(acc) * y_scale[m]) * w_scale[l][e]) * s)``, s rounded to fp32 (docs/gmm.md §9.2).

    Args:
        y: int8 ``[M, I]`` (W1's output); ``M`` is the row capacity.
        y_scale: fp32 ``[M]``.
        weights: :class:`cam.LayerWeights` over ``[E_local, I, H]`` weights and ``[E_local, H]`` scales per layer,
            or ``[E_local, G, H]`` scales per group of ``I / G`` rows (a multiple of 32; of 64 with int4 weights)
            along I: each group's int32 partial dequantized with its scales, the groups summed in fp32 in order
            (docs/gmm.md §9.2). ``format="int4"`` weights run the W4A8 kernels (docs/gmm.md §9.1).
        group_list, layer_index, group_list_type: as for :func:`gmm_swiglu_quant_multi_layer`.
        out: optional bf16 ``[M, H]`` to write into; rows past the groups' total are not written (allocated here
            as zeros when not given).
        out_scale: ``None`` (default) or a float applied to every output before the bf16 rounding, such as
            ``routed_scaling_factor`` when the FFN side scales routed output; it must be finite in fp32
            (``ValueError`` naming ``out_scale``).

    Returns:
        ``out``.

    Raises:
        TypeError / ValueError before launch; cam.DeviceArgumentError for bad device-resident arguments (nothing
        written), as for :func:`gmm_swiglu_quant_multi_layer`.
    """
    op = "gmm_multi_layer"
    lw = _gate(op, "y", y, "y_scale", y_scale, weights, group_list, layer_index, group_list_type)
    given = Args(op).outputs("out", out, 1)
    rows = y.shape[0] if y.dim() else 0  # a 0-d y is refused by the op, naming it
    result = given[0] if given else torch.zeros(rows, lw.n, dtype=torch.bfloat16, device=y.device)
    if out_scale is not None and (isinstance(out_scale, bool) or not isinstance(out_scale, (int, float))):
        raise TypeError(f"gmm_multi_layer: out_scale must be a float or None, got {out_scale!r}")
    _gmm_multi_layer(
        y, y_scale, list(lw.weights), list(lw.scales), group_list, _layer_index_arg(group_list, layer_index),
        group_list_type, result, None if out_scale is None else float(out_scale), _colsums_arg(lw)
    )
    return result
