"""Layer-select grouped matmuls of the FFN side (docs/gmm.md): W1 ``gmm_swiglu_quant_multi_layer`` and W2
``gmm_multi_layer``. Both take every layer's weights at once (:class:`cam.LayerWeights`) and a device-resident
``layer_index``; the kernels pick the layer on the device."""

from __future__ import annotations

from typing import Optional

import torch

from .. import _C, _runtime
from .._tensor import desc
from ..layer_weights import LayerWeights

GROUP_LIST_CUMSUM = 0
GROUP_LIST_COUNTS = 1


def _tensor(op: str, name: str, t, dtype: torch.dtype) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{op}: {name} must be {dtype}, got {t.dtype}")
    if t.device.type != "cpu":
        raise ValueError(f"{op}: the twin backend runs on CPU tensors, {name} is on {t.device}")
    if not t.is_contiguous():
        raise ValueError(f"{op}: {name} must be contiguous (row-major); call .contiguous() first")


def _check_common(op, xn, x, xsn, x_scale, weights, scales, group_list, layer_index, group_list_type):
    """Host-visible checks shared by both ops; returns (M, K, N, E_local)."""
    _tensor(op, xn, x, torch.int8)
    if x.dim() != 2:
        raise ValueError(f"{op}: {xn} must be 2-D [M, K], got shape {tuple(x.shape)}")
    m, k = x.shape
    if k < 1:
        raise ValueError(f"{op}: {xn} must have at least one column, got shape {tuple(x.shape)}")
    _tensor(op, xsn, x_scale, torch.float32)
    if tuple(x_scale.shape) != (m,):
        raise ValueError(f"{op}: {xsn} must have shape [{m}] (one scale per row of {xn}), got {tuple(x_scale.shape)}")
    if len(weights) < 1 or len(weights) != len(scales):
        raise ValueError(f"{op}: weights ({len(weights)} layers) and weight_scales ({len(scales)}) must match, >= 1")
    for i, s in enumerate(scales):
        _tensor(op, f"weight_scales[{i}]", s, torch.float32)
    if scales[0].dim() != 2:
        raise ValueError(f"{op}: weight_scales[0] must be 2-D [E_local, N], got shape {tuple(scales[0].shape)}")
    e, n = scales[0].shape
    nz = (e, -(-n // 32), -(-k // 16), 16, 32)
    for i, w in enumerate(weights):
        _tensor(op, f"weights[{i}]", w, torch.int8)
        if tuple(w.shape) != nz:
            raise ValueError(
                f"{op}: weights[{i}] must be FRACTAL_NZ {list(nz)} for K = {k} (from {xn}) and N = {n}, got "
                f"{tuple(w.shape)} (build the weights with cam.LayerWeights / cam.ops.prepack_weights)"
            )
    for i, s in enumerate(scales):
        if tuple(s.shape) != (e, n):
            raise ValueError(f"{op}: weight_scales[{i}] must have shape [{e}, {n}], got {tuple(s.shape)}")
    _tensor(op, "group_list", group_list, torch.int64)
    if tuple(group_list.shape) != (e,):
        raise ValueError(f"{op}: group_list must have shape [{e}] (one entry per local expert), got {tuple(group_list.shape)}")
    _tensor(op, "layer_index", layer_index, torch.int64)
    if layer_index.numel() != 1:
        raise ValueError(f"{op}: layer_index must hold exactly one element, got shape {tuple(layer_index.shape)}")
    if isinstance(group_list_type, bool) or group_list_type not in (GROUP_LIST_CUMSUM, GROUP_LIST_COUNTS):
        raise ValueError(f"{op}: group_list_type must be 0 (cumsum) or 1 (counts), got {group_list_type!r}")
    return m, k, n, e


def _check_w1(x, x_scale, weights, weight_scales, group_list, layer_index, group_list_type, y, y_scale):
    op = "gmm_swiglu_quant_multi_layer"
    m, _, n, _ = _check_common(op, "x", x, "x_scale", x_scale, weights, weight_scales, group_list, layer_index,
                               group_list_type)
    if n % 2:
        raise ValueError(f"{op}: N = {n} must be even (the matmul output splits into act | gate halves)")
    _tensor(op, "y", y, torch.int8)
    if tuple(y.shape) != (m, n // 2):
        raise ValueError(f"{op}: y must have shape [{m}, {n // 2}], got {tuple(y.shape)}")
    _tensor(op, "y_scale", y_scale, torch.float32)
    if tuple(y_scale.shape) != (m,):
        raise ValueError(f"{op}: y_scale must have shape [{m}], got {tuple(y_scale.shape)}")


def _check_w2(y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type, out):
    op = "gmm_multi_layer"
    m, _, n, _ = _check_common(op, "y", y, "y_scale", y_scale, weights, weight_scales, group_list, layer_index,
                               group_list_type)
    _tensor(op, "out", out, torch.bfloat16)
    if tuple(out.shape) != (m, n):
        raise ValueError(f"{op}: out must have shape [{m}, {n}], got {tuple(out.shape)}")


@torch.library.custom_op("cam::gmm_swiglu_quant_multi_layer", mutates_args=("y", "y_scale"))
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
) -> None:
    _check_w1(x, x_scale, weights, weight_scales, group_list, layer_index, group_list_type, y, y_scale)
    _runtime.run(
        lambda stream, allocate: _C.gmm_swiglu_quant_multi_layer(
            desc(x), desc(x_scale), [desc(w) for w in weights], [desc(s) for s in weight_scales], desc(group_list),
            desc(layer_index), group_list_type, desc(y), desc(y_scale), stream, allocate,
        )
    )


@_gmm_swiglu_quant_multi_layer.register_fake
def _(x, x_scale, weights, weight_scales, group_list, layer_index, group_list_type, y, y_scale) -> None:
    _check_w1(x, x_scale, weights, weight_scales, group_list, layer_index, group_list_type, y, y_scale)


@torch.library.custom_op("cam::gmm_multi_layer", mutates_args=("out",))
def _gmm_multi_layer(
    y: torch.Tensor,
    y_scale: torch.Tensor,
    weights: list[torch.Tensor],
    weight_scales: list[torch.Tensor],
    group_list: torch.Tensor,
    layer_index: torch.Tensor,
    group_list_type: int,
    out: torch.Tensor,
) -> None:
    _check_w2(y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type, out)
    _runtime.run(
        lambda stream, allocate: _C.gmm_multi_layer(
            desc(y), desc(y_scale), [desc(w) for w in weights], [desc(s) for s in weight_scales], desc(group_list),
            desc(layer_index), group_list_type, desc(out), stream, allocate,
        )
    )


@_gmm_multi_layer.register_fake
def _(y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type, out) -> None:
    _check_w2(y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type, out)


def _layer_weights(op: str, weights) -> LayerWeights:
    if not isinstance(weights, LayerWeights):
        raise TypeError(f"{op}: weights must be a cam.LayerWeights, got {type(weights).__name__}")
    return weights


def gmm_swiglu_quant_multi_layer(
    x: torch.Tensor,
    x_scale: torch.Tensor,
    weights: LayerWeights,
    group_list: torch.Tensor,
    layer_index: torch.Tensor,
    group_list_type: int = GROUP_LIST_COUNTS,
    y: Optional[torch.Tensor] = None,
    y_scale: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """W1: grouped int8 matmul with the layer picked on the device, dequant, SwiGLU, per-row int8 quant.

    For every row ``m`` of local expert ``e`` (rows are contiguous per expert, in expert order) and ``l =
    layer_index[0]``, in fp32 evaluated left to right (docs/gmm.md §1)::

        c = (float(x[m] . W[l][e]) * x_scale[m]) * w_scale[l][e]        # int32 accumulation, exact
        act, gate = c[:N/2], c[N/2:]
        s = act / (1 + exp(-act)) * gate
        y[m] = clamp(rint(s * (127 / max|s|)), -127, 127);  y_scale[m] = max|s| / 127   (0 for a zero row)

    Args:
        x: int8 ``[M, K]`` activations (the dispatch receive buffer); ``M`` is the row capacity, ``M >= 0``.
        x_scale: fp32 ``[M]`` per-row dequant scale of ``x``.
        weights: :class:`cam.LayerWeights` over ``[E_local, K, N]`` weights (``N`` even, first half act) and
            ``[E_local, N]`` fp32 scales for every layer.
        group_list: int64 ``[E_local]`` on the device: rows per expert (``group_list_type`` 1, what dispatch_recv
            emits) or their running sum (0). Its total may be below ``M``.
        layer_index: int64 tensor with one element, on the device (may be a view into a work item).
        group_list_type: 1 counts (default) or 0 cumsum.
        y: optional int8 ``[M, N/2]`` output buffer; y_scale: optional fp32 ``[M]``. Rows past the groups' total
            are not written (allocated here as zeros when not given).

    Returns:
        ``(y, y_scale)``.

    Raises:
        TypeError / ValueError: dtype, rank, shape, layout or list mismatches, before anything runs.
        cam.DeviceArgumentError: ``layer_index`` outside ``[0, L)``, a negative count / decreasing cumsum, or a
            total above ``M``, detected by the kernels before they write anything (outputs untouched).
    """
    op = "gmm_swiglu_quant_multi_layer"
    lw = _layer_weights(op, weights)
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        _tensor(op, "x", x, torch.int8)
        raise ValueError(f"{op}: x must be 2-D [M, K], got shape {tuple(x.shape)}")
    if lw.k is not None and x.shape[1] != lw.k:
        raise ValueError(f"{op}: x has K = {x.shape[1]} columns, the weights K = {lw.k}")
    m = x.shape[0]
    if y is None:
        y = torch.zeros(m, lw.n // 2, dtype=torch.int8)
    if y_scale is None:
        y_scale = torch.zeros(m, dtype=torch.float32)
    torch.ops.cam.gmm_swiglu_quant_multi_layer(
        x, x_scale, list(lw.weights), list(lw.scales), group_list, layer_index, group_list_type, y, y_scale
    )
    return y, y_scale


def gmm_multi_layer(
    y: torch.Tensor,
    y_scale: torch.Tensor,
    weights: LayerWeights,
    group_list: torch.Tensor,
    layer_index: torch.Tensor,
    group_list_type: int = GROUP_LIST_COUNTS,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """W2: grouped int8 matmul with the layer picked on the device, dequant to bf16.

    ``out[m] = bf16((float(y[m] . W[l][e]) * y_scale[m]) * w_scale[l][e])``: exact int32 accumulation, fp32 products
    left to right, one round-to-nearest-even to bf16 (overflow gives inf).

    Args:
        y: int8 ``[M, I]`` (W1's output); ``M`` is the row capacity.
        y_scale: fp32 ``[M]``.
        weights: :class:`cam.LayerWeights` over ``[E_local, I, H]`` weights and ``[E_local, H]`` scales per layer.
        group_list, layer_index, group_list_type: as for :func:`gmm_swiglu_quant_multi_layer`.
        out: optional bf16 ``[M, H]`` output buffer; rows past the groups' total are not written (allocated here as
            zeros when not given).

    Returns:
        ``out``.

    Raises:
        TypeError / ValueError before launch; cam.DeviceArgumentError for bad device-resident arguments (nothing
        written), as for :func:`gmm_swiglu_quant_multi_layer`.
    """
    op = "gmm_multi_layer"
    lw = _layer_weights(op, weights)
    if not isinstance(y, torch.Tensor) or y.dim() != 2:
        _tensor(op, "y", y, torch.int8)
        raise ValueError(f"{op}: y must be 2-D [M, I], got shape {tuple(y.shape)}")
    if lw.k is not None and y.shape[1] != lw.k:
        raise ValueError(f"{op}: y has I = {y.shape[1]} columns, the weights I = {lw.k}")
    if out is None:
        out = torch.zeros(y.shape[0], lw.n, dtype=torch.bfloat16)
    torch.ops.cam.gmm_multi_layer(
        y, y_scale, list(lw.weights), list(lw.scales), group_list, layer_index, group_list_type, out
    )
    return out
