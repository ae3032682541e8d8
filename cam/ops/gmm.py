"""Layer-select grouped matmuls of the FFN side (docs/gmm.md): W1 ``gmm_swiglu_quant_multi_layer`` and W2
``gmm_multi_layer``. Both take every layer's weights at once (:class:`cam.LayerWeights`) and a device-resident
``layer_index``; the kernels pick the layer on the device."""

from __future__ import annotations

from typing import Optional

import torch

from .. import _C, _runtime
from ..errors import InvalidArgumentError
from ..layer_weights import LayerWeights
from . import _library
from ._checks import Args

GROUP_LIST_CUMSUM = 0
GROUP_LIST_COUNTS = 1


def _check_common(args: Args, xn, x, xsn, x_scale, weights, scales, group_list, layer_index, group_list_type):
    """Host-visible checks shared by both ops; returns (M, K, N, E_local)."""
    args.tensor(xn, x, torch.int8, ndim=2, layout="[M, K]")
    m, k = x.shape
    if k < 1:
        raise args.fail(xn, f"must have at least one column, got shape {tuple(x.shape)}")
    args.tensor(xsn, x_scale, torch.float32, shape=(m,), layout=f"(one scale per row of {xn})")
    args.tensor_list("weights", weights)
    args.tensor_list("weight_scales", scales)
    if len(weights) < 1 or len(weights) != len(scales):
        raise args.fail("weights", f"({len(weights)} layers) and weight_scales ({len(scales)}) must match, >= 1")
    args.tensor("weight_scales[0]", scales[0], torch.float32, ndim=2, layout="[E_local, N]")
    e, n = scales[0].shape
    if e < 1 or n < 1:
        raise args.fail("weight_scales[0]", f"must be [E_local >= 1, N >= 1], got shape {tuple(scales[0].shape)}")
    nz = (e, -(-n // 32), -(-k // 16), 16, 32)
    for i, w in enumerate(weights):
        args.tensor(f"weights[{i}]", w, torch.int8)
        if tuple(w.shape) != nz:
            raise args.fail(f"weights[{i}]", f"must be FRACTAL_NZ {list(nz)} for K = {k} (from {xn}) and N = {n}, got "
                                           f"{tuple(w.shape)} (build the weights with cam.LayerWeights / "
                                           f"cam.ops.prepack_weights)")
    for i, sc in enumerate(scales):
        args.tensor(f"weight_scales[{i}]", sc, torch.float32, shape=(e, n))
    args.tensor("group_list", group_list, torch.int64, shape=(e,), layout="(one entry per local expert)")
    args.tensor("layer_index", layer_index, torch.int64)
    if layer_index.numel() != 1:
        raise args.fail("layer_index", f"must hold exactly one element, got shape {tuple(layer_index.shape)}")
    if isinstance(group_list_type, bool) or group_list_type not in (GROUP_LIST_CUMSUM, GROUP_LIST_COUNTS):
        raise args.fail("group_list_type", f"must be 0 (cumsum) or 1 (counts), got {group_list_type!r}")
    return m, k, n, e


def _check_w1(x, x_scale, weights, weight_scales, group_list, layer_index, group_list_type, y, y_scale):
    args = Args("gmm_swiglu_quant_multi_layer")
    m, _, n, _ = _check_common(args, "x", x, "x_scale", x_scale, weights, weight_scales, group_list, layer_index,
                               group_list_type)
    if n % 2:
        raise args.fail("weights", f"N = {n} must be even (the matmul output splits into act | gate halves)")
    args.tensor("out[0] (y)", y, torch.int8, shape=(m, n // 2))
    args.tensor("out[1] (y_scale)", y_scale, torch.float32, shape=(m,))


def _check_w2(y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type, out):
    args = Args("gmm_multi_layer")
    m, _, n, _ = _check_common(args, "y", y, "y_scale", y_scale, weights, weight_scales, group_list, layer_index,
                               group_list_type)
    args.tensor("out", out, torch.bfloat16, shape=(m, n))


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
) -> None:
    _check_w1(x, x_scale, weights, weight_scales, group_list, layer_index, group_list_type, y, y_scale)
    _runtime.run(_C.gmm_swiglu_quant_multi_layer, x, x_scale, weights, weight_scales, group_list, layer_index,
                 group_list_type, y, y_scale)


@_gmm_swiglu_quant_multi_layer.register_direct
def _(x, x_scale, weights, weight_scales, group_list, layer_index, group_list_type, y, y_scale) -> None:
    # Validation once per call, as dynamic_quant: the C API's checks (gmm_common.cpp, then N even, y, y_scale)
    # refuse everything _check_w1 refuses for plain CPU tensors, before anything is written, and more (K above the
    # kernel's limit, tiling). After a refusal _check_w1 runs to raise the documented message naming the argument;
    # where only the C API refuses, its error stands.
    try:
        _runtime.run(_C.gmm_swiglu_quant_multi_layer, x, x_scale, weights, weight_scales, group_list, layer_index,
                     group_list_type, y, y_scale)
    except InvalidArgumentError:
        _check_w1(x, x_scale, weights, weight_scales, group_list, layer_index, group_list_type, y, y_scale)
        raise


@_gmm_swiglu_quant_multi_layer.register_fake
def _(x, x_scale, weights, weight_scales, group_list, layer_index, group_list_type, y, y_scale) -> None:
    _check_w1(x, x_scale, weights, weight_scales, group_list, layer_index, group_list_type, y, y_scale)


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
) -> None:
    _check_w2(y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type, out)
    _runtime.run(_C.gmm_multi_layer, y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type,
                 out)


@_gmm_multi_layer.register_direct
def _(y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type, out) -> None:
    # Validation once per call, as for W1 above.
    try:
        _runtime.run(_C.gmm_multi_layer, y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type,
                     out)
    except InvalidArgumentError:
        _check_w2(y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type, out)
        raise


@_gmm_multi_layer.register_fake
def _(y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type, out) -> None:
    _check_w2(y, y_scale, weights, weight_scales, group_list, layer_index, group_list_type, out)


def _gate(op: str, x_name: str, x, x_scale_name: str, x_scale, weights, group_list, layer_index,
          group_list_type) -> LayerWeights:
    """What must hold before the op schema sees the arguments (the op itself checks the rest)."""
    args = Args(op)
    if not isinstance(weights, LayerWeights):
        raise TypeError(f"{op}: weights must be a cam.LayerWeights, got {type(weights).__name__}")
    args.gate(**{x_name: (x, torch.Tensor), x_scale_name: (x_scale, torch.Tensor)},
              group_list=(group_list, torch.Tensor), layer_index=(layer_index, torch.Tensor),
              group_list_type=(group_list_type, int))
    # The op checks x in full (once); here only what names the weights in the message.
    if weights.k is not None and x.dim() == 2 and x.shape[1] != weights.k:
        raise args.fail(x_name, f"has K = {x.shape[1]} columns, the weights K = {weights.k}")
    return weights


def gmm_swiglu_quant_multi_layer(
    x: torch.Tensor,
    x_scale: torch.Tensor,
    weights: LayerWeights,
    group_list: torch.Tensor,
    layer_index: torch.Tensor,
    group_list_type: int = GROUP_LIST_COUNTS,
    *,
    out=None,
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
        out: optional ``(y, y_scale)`` to write into: int8 ``[M, N/2]`` and fp32 ``[M]`` (static buffers of a
            captured loop). Rows past the groups' total are not written; when ``out`` is not given they are
            allocated here as zeros.

    Returns:
        ``(y, y_scale)``.

    Raises:
        TypeError / ValueError: dtype, rank, shape, layout or list mismatches, naming the argument, before anything
            runs.
        cam.DeviceArgumentError: ``layer_index`` outside ``[0, L)``, a negative count / decreasing cumsum, or a
            total above ``M``, detected by the kernels before they write anything (outputs untouched).
    """
    op = "gmm_swiglu_quant_multi_layer"
    lw = _gate(op, "x", x, "x_scale", x_scale, weights, group_list, layer_index, group_list_type)
    given = Args(op).outputs("out", out, 2)
    if given is None:
        given = (torch.zeros(x.shape[0], lw.n // 2, dtype=torch.int8), torch.zeros(x.shape[0], dtype=torch.float32))
    y, y_scale = given
    _gmm_swiglu_quant_multi_layer(
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
    *,
    out=None,
) -> torch.Tensor:
    """W2: grouped int8 matmul with the layer picked on the device, dequant to bf16.

    ``out[m] = bf16((float(y[m] . W[l][e]) * y_scale[m]) * w_scale[l][e])``: exact int32 accumulation, fp32 products
    left to right, one round-to-nearest-even to bf16 (overflow gives inf).

    Args:
        y: int8 ``[M, I]`` (W1's output); ``M`` is the row capacity.
        y_scale: fp32 ``[M]``.
        weights: :class:`cam.LayerWeights` over ``[E_local, I, H]`` weights and ``[E_local, H]`` scales per layer.
        group_list, layer_index, group_list_type: as for :func:`gmm_swiglu_quant_multi_layer`.
        out: optional bf16 ``[M, H]`` to write into; rows past the groups' total are not written (allocated here
            as zeros when not given).

    Returns:
        ``out``.

    Raises:
        TypeError / ValueError before launch; cam.DeviceArgumentError for bad device-resident arguments (nothing
        written), as for :func:`gmm_swiglu_quant_multi_layer`.
    """
    op = "gmm_multi_layer"
    lw = _gate(op, "y", y, "y_scale", y_scale, weights, group_list, layer_index, group_list_type)
    given = Args(op).outputs("out", out, 1)
    result = given[0] if given else torch.zeros(y.shape[0], lw.n, dtype=torch.bfloat16)
    _gmm_multi_layer(
        y, y_scale, list(lw.weights), list(lw.scales), group_list, layer_index, group_list_type, result
    )
    return result
