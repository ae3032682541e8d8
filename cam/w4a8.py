"""W4A8 weights: the symmetric int4 quantizer, the consumer's packed int4-in-int32 layout, the hardware's int64
scale encoding and the assist matrix (docs/gmm.md §9).

int4 values are held one per int8 element (``[E, K, N]``, values in [-8, 7]); scales are fp32 ``[E, N]`` (per
output channel) or ``[E, K / G, N]`` (per group of ``G`` consecutive K rows). Every function checks its input and
raises an error naming the argument before it returns anything.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

__all__ = [
    "INT4_MIN",
    "INT4_MAX",
    "LOW_NIBBLE_FIRST",
    "LAYOUTS",
    "quantize_weight_int4",
    "dequantize_weight_int4",
    "check_int4",
    "pack_int4",
    "unpack_int4",
    "encode_scale_int64",
    "decode_scale_int64",
    "assist_matrix",
    "check_assist",
    "from_consumer",
]

INT4_MIN, INT4_MAX = -8, 7
# The symmetric quantizer uses [-7, 7] so that -q is representable for every q (docs/gmm.md §9.4).
_QMAX = 7

# Value 8j + i of a row lives in bits 4i .. 4i+3 of word j (two's complement nibble).
LOW_NIBBLE_FIRST = "int32_low_nibble_first"
LAYOUTS = (LOW_NIBBLE_FIRST,)

# aclnnTransQuantParamV2: the fp32 scale's upper 19 bits in the low word, bit 46 set, offset in bits 37..45.
_SCALE_MASK = 0xFFFFE000
_SCALE_FLAG = 1 << 46

# A recomputed assist value may differ from the consumer's by fp32 rounding of its own summation order.
_ASSIST_RTOL = 1e-5


def _check_group_size(who: str, k: int, group_size: Optional[int]) -> int:
    """The number of K groups (1 for per-channel)."""
    if group_size is None:
        return 1
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"{who}: group_size must be a positive int or None, got {group_size!r}")
    if k % group_size != 0:
        raise ValueError(f"{who}: group_size {group_size} does not divide K = {k}")
    return k // group_size


def _check_scale_shape(who: str, name: str, scale: torch.Tensor, e: int, k: int, n: int,
                       group_size: Optional[int]) -> int:
    groups = _check_group_size(who, k, group_size)
    want = (e, n) if group_size is None else (e, groups, n)
    if tuple(scale.shape) != want:
        form = "[E, N]" if group_size is None else f"[E, K / group_size, N] (group_size {group_size})"
        raise ValueError(f"{who}: {name} must be {form} = {list(want)}, got {list(scale.shape)}")
    return groups


def _grouped(scale: torch.Tensor) -> torch.Tensor:
    """Per-channel scales as one group: every scale as [E, groups, N]."""
    return scale[:, None, :] if scale.dim() == 2 else scale


def check_int4(q: torch.Tensor, name: str = "q", who: str = "cam.w4a8") -> None:
    """``q`` is int8 ``[E, K, N]`` holding int4 values in [-8, 7]; raises naming ``name`` otherwise."""
    if not isinstance(q, torch.Tensor) or q.dtype != torch.int8 or q.dim() != 3:
        got = f"{q.dtype} {list(q.shape)}" if isinstance(q, torch.Tensor) else type(q).__name__
        raise TypeError(f"{who}: {name} must be int8 [E, K, N] holding int4 values, got {got}")
    bad = (q < INT4_MIN) | (q > INT4_MAX)
    if bool(bad.any()):
        idx = [int(i) for i in bad.nonzero()[0]]
        raise ValueError(f"{who}: {name}{idx} = {int(q[tuple(idx)])} is outside the int4 range "
                         f"[{INT4_MIN}, {INT4_MAX}]")


def quantize_weight_int4(weight: torch.Tensor, group_size: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int4 of a ``[E, K, N]`` weight in ``x @ W`` orientation, per output channel or per group of
    ``group_size`` consecutive K rows of a channel.

    In fp32, per channel (group): ``amax = max |w|``, ``scale = amax / 7``, ``q = clamp(round_half_even(w / scale),
    -7, 7)``; an all-zero channel (group) gets ``scale = 0`` and ``q = 0``. ``q * scale`` is within ``scale / 2`` of
    ``w`` element-wise.

    Returns ``(q int8 [E, K, N] with values in [-7, 7], scale fp32 [E, N] or [E, K / group_size, N])``.
    """
    who = "quantize_weight"
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
        raise TypeError(f"{who}: weight must be a floating-point torch.Tensor")
    if weight.dim() != 3:
        raise ValueError(f"{who}: weight must be [E, K, N], got shape {tuple(weight.shape)}")
    e, k, n = weight.shape
    groups = _check_group_size(who, k, group_size)
    w = weight.detach().to(torch.float32)
    if not torch.isfinite(w).all():
        raise ValueError(f"{who}: weight holds inf or nan")
    wg = w.reshape(e, groups, k // groups, n)
    scale = wg.abs().amax(dim=2) / float(_QMAX)  # [E, groups, N]
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(wg / safe[:, :, None, :]).clamp_(-_QMAX, _QMAX)  # torch.round: half to even
    q = torch.where(scale[:, :, None, :] > 0, q, torch.zeros_like(q)).to(torch.int8).reshape(e, k, n)
    scale = scale[:, 0, :] if group_size is None else scale
    return q.contiguous(), scale.contiguous()


def dequantize_weight_int4(q: torch.Tensor, scale: torch.Tensor, group_size: Optional[int] = None) -> torch.Tensor:
    """``q * scale`` in fp32 (the scale of each element's channel or group)."""
    who = "dequantize_weight"
    check_int4(q, "q", who)
    e, k, n = q.shape
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        raise TypeError(f"{who}: scale must be an fp32 torch.Tensor")
    groups = _check_scale_shape(who, "scale", scale, e, k, n, group_size)
    qg = q.to(torch.float32).reshape(e, groups, k // groups, n)
    return (qg * _grouped(scale)[:, :, None, :]).reshape(e, k, n)


# ----------------------------------------------------------------------------- packed int4 in int32


def _check_layout(who: str, layout) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"{who}: layout must name the nibble order, one of {list(LAYOUTS)}, got {layout!r}")


def pack_int4(q: torch.Tensor, *, layout: str) -> torch.Tensor:
    """int4 values ``[E, K, N]`` (int8 storage) -> int32 ``[E, K, N / 8]`` in ``layout``."""
    who = "pack_int4"
    _check_layout(who, layout)
    check_int4(q, "q", who)
    e, k, n = q.shape
    if n % 8 != 0:
        raise ValueError(f"{who}: N = {n} of q must be a multiple of 8 (eight int4 per int32)")
    nib = (q.to(torch.int64) & 0xF).reshape(e, k, n // 8, 8)
    word = torch.zeros(e, k, n // 8, dtype=torch.int64)
    for i in range(8):
        word |= nib[..., i] << (4 * i)
    word = torch.where(word >= 2**31, word - 2**32, word)
    return word.to(torch.int32)


def unpack_int4(packed: torch.Tensor, *, layout: str, name: str = "weight", who: str = "unpack_int4") -> torch.Tensor:
    """int32 ``[E, K, N / 8]`` in ``layout`` -> int4 values ``[E, K, N]`` (int8 storage)."""
    _check_layout(who, layout)
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.int32 or packed.dim() != 3:
        got = f"{packed.dtype} {list(packed.shape)}" if isinstance(packed, torch.Tensor) else type(packed).__name__
        raise TypeError(f"{who}: {name} must be int32 [E, K, N / 8] (eight int4 per int32), got {got}")
    e, k, w = packed.shape
    word = packed.to(torch.int64) & 0xFFFFFFFF
    nib = torch.stack([(word >> (4 * i)) & 0xF for i in range(8)], dim=-1)
    nib = torch.where(nib >= 8, nib - 16, nib)
    return nib.reshape(e, k, w * 8).to(torch.int8)


# ----------------------------------------------------------------------------- int64 scale encoding


def encode_scale_int64(scale: torch.Tensor) -> torch.Tensor:
    """fp32 scales -> the hardware's int64 quant parameter (no offset): ``(bits & 0xFFFFE000) | (1 << 46)``."""
    who = "encode_scale_int64"
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        raise TypeError(f"{who}: scale must be an fp32 torch.Tensor")
    if not bool(torch.isfinite(scale).all()):
        raise ValueError(f"{who}: scale holds inf or nan")
    bits = scale.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    return (bits & _SCALE_MASK) | _SCALE_FLAG


def decode_scale_int64(word: torch.Tensor, name: str = "scale", who: str = "decode_scale_int64") -> torch.Tensor:
    """The hardware's int64 quant parameter -> the fp32 scale it applies (the encoded fp32 with its low 13 bits
    clear). Refuses a word that is not a plain encoded scale: bit 46 clear, offset bits (37..45) or any other bit
    outside the scale's 19 set, or a scale that is inf or NaN."""
    if not isinstance(word, torch.Tensor) or word.dtype not in (torch.int64, torch.uint64):
        got = word.dtype if isinstance(word, torch.Tensor) else type(word).__name__
        raise TypeError(f"{who}: {name} must be an int64 tensor (the encoded quant parameter), got {got}")
    w = word.to(torch.int64)
    stray = (w & ~(_SCALE_MASK | _SCALE_FLAG)) != 0
    flag = (w & _SCALE_FLAG) != 0
    bad = stray | ~flag
    if bool(bad.any()):
        idx = [int(i) for i in bad.nonzero()[0]]
        v = int(w[tuple(idx)])
        why = "bit 46 (the scale flag) is clear" if not bool(flag[tuple(idx)]) else (
            "bits outside the scale's upper 19 and the flag are set (an offset, or not an encoded scale)")
        raise ValueError(f"{who}: {name}{idx} = {v:#x}: {why}")
    low = w & 0xFFFFFFFF
    f = torch.where(low >= 2**31, low - 2**32, low).to(torch.int32).view(torch.float32)
    if not bool(torch.isfinite(f).all()):
        idx = [int(i) for i in (~torch.isfinite(f)).nonzero()[0]]
        raise ValueError(f"{who}: {name}{idx} encodes {float(f[tuple(idx)])}, not a finite scale")
    return f.clone()


# ----------------------------------------------------------------------------- assist matrix


def assist_matrix(q: torch.Tensor, scale: torch.Tensor, group_size: Optional[int] = None) -> torch.Tensor:
    """The consumer's fp32 ``[E, N]`` assist term ``8 · Σ_k q[e, k, n] · scale(e, k, n)``: each group's exact
    column sum times its scale, summed in float64, rounded once to fp32."""
    who = "assist_matrix"
    check_int4(q, "q", who)
    e, k, n = q.shape
    groups = _check_scale_shape(who, "scale", scale, e, k, n, group_size)
    if not bool(torch.isfinite(scale).all()):
        idx = [int(i) for i in (~torch.isfinite(scale)).nonzero()[0]]
        raise ValueError(f"{who}: scale{idx} = {float(scale[tuple(idx)])} is not finite")
    colsum = q.to(torch.float64).reshape(e, groups, k // groups, n).sum(dim=2)  # exact integers
    return (8.0 * (colsum * _grouped(scale).to(torch.float64)).sum(dim=1)).to(torch.float32)


def check_assist(assist: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, group_size: Optional[int] = None,
                 name: str = "assist", who: str = "cam.w4a8") -> None:
    """Refuses an ``assist`` that is not ``assist_matrix(q, scale)`` within fp32 summation error, naming ``name``
    and the first element that differs (relative to ``8 · Σ_k |q| · |scale|``, tolerance 1e-5)."""
    e, k, n = q.shape
    if not isinstance(assist, torch.Tensor) or assist.dtype != torch.float32:
        got = assist.dtype if isinstance(assist, torch.Tensor) else type(assist).__name__
        raise TypeError(f"{who}: {name} must be an fp32 tensor [E, N], got {got}")
    if tuple(assist.shape) != (e, n):
        raise ValueError(f"{who}: {name} must be [E, N] = {[e, n]} (E experts and N columns of the weight), got "
                         f"{list(assist.shape)}")
    if not bool(torch.isfinite(assist).all()):
        idx = [int(i) for i in (~torch.isfinite(assist)).nonzero()[0]]
        raise ValueError(f"{who}: {name}{idx} = {float(assist[tuple(idx)])} is not finite")
    groups = k // (group_size or k)
    want = assist_matrix(q, scale, group_size).to(torch.float64)
    mag = 8.0 * (q.abs().to(torch.float64).reshape(e, groups, k // groups, n).sum(dim=2)
                 * _grouped(scale).abs().to(torch.float64)).sum(dim=1)
    bad = (assist.to(torch.float64) - want).abs() > _ASSIST_RTOL * mag
    if bool(bad.any()):
        idx = [int(i) for i in bad.nonzero()[0]]
        raise ValueError(f"{who}: {name}{idx} = {float(assist[tuple(idx)])} is inconsistent with the weights and "
                         f"scales (8·Σ_k w·scale = {float(want[tuple(idx)])})")


# ----------------------------------------------------------------------------- the consumer's format


def from_consumer(weight: torch.Tensor, scale: torch.Tensor, assist: torch.Tensor, *, layout: str,
                  group_size: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """The consumer's W4A8 expert weights -> cam's int4 values and fp32 scales.

    ``weight`` int32 ``[E, K, N / 8]`` packed in ``layout`` (required: the nibble order is not guessed);
    ``scale`` int64 ``[E, N]`` (per channel) or ``[E, K / group_size, N]`` (per group) in the hardware's encoding;
    ``assist`` fp32 ``[E, N]``, checked against the decoded weights and scales. Everything is checked before
    anything is returned; each error names the argument.

    Returns ``(q int8 [E, K, N] holding int4 values, scale fp32)``, the scales as the hardware applies them.
    """
    who = "cam.w4a8.from_consumer"
    _check_layout(who, layout)
    q = unpack_int4(weight, layout=layout, name="weight", who=who)
    e, k, n = q.shape
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.int64:
        got = scale.dtype if isinstance(scale, torch.Tensor) else type(scale).__name__
        raise TypeError(f"{who}: scale must be int64 (the encoded quant parameter), got {got}")
    if scale.dim() >= 2 and (scale.shape[0] != e or scale.shape[-1] != n):
        raise ValueError(f"{who}: weight {list(weight.shape)} packs E = {e} experts of N = {n} columns (eight per "
                         f"int32), scale {list(scale.shape)} has E = {scale.shape[0]}, N = {scale.shape[-1]}")
    _check_scale_shape(who, "scale", scale, e, k, n, group_size)
    s = decode_scale_int64(scale, "scale", who)
    check_assist(assist, q, s, group_size, "assist", who)
    return q, s
