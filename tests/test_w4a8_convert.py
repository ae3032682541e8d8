"""W4A8 weights in (cam.w4a8, cam.quantize_weight(bits=4), docs/gmm.md §9.4): the int4 quantizer's round-trip
bound, the consumer's packed int4-in-int32 layout, the int64 scale encoding of aclnnTransQuantParamV2 and the
assist-matrix check, each with its bad input refused by name."""

from __future__ import annotations

import struct

import pytest
import torch

import cam
from cam import w4a8

LAYOUT = w4a8.LOW_NIBBLE_FIRST


def _weight(seed, e=3, k=64, n=40):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(e, k, n, generator=g, dtype=torch.float32)
    w[0, :, 1] = 0.0  # an all-zero channel
    return w


# ----------------------------------------------------------------------------- quantizer


@pytest.mark.parametrize("group_size", [None, 8, 16, 64])
def test_int4_quantizer_round_trip_bound(group_size):
    w = _weight(1)
    q, s = cam.quantize_weight(w, bits=4, group_size=group_size)
    assert q.dtype == torch.int8 and tuple(q.shape) == tuple(w.shape)
    assert int(q.min()) >= -7 and int(q.max()) <= 7
    e, k, n = w.shape
    assert tuple(s.shape) == ((e, n) if group_size is None else (e, k // group_size, n))
    deq = w4a8.dequantize_weight_int4(q, s, group_size)
    step = s if group_size is None else s.repeat_interleave(group_size, dim=1)
    step = step[:, None, :] if group_size is None else step
    assert bool(((deq - w).abs() <= step / 2 * (1 + 1e-6) + 1e-12).all())
    # Each channel (group) reaches its amax exactly at q = +-7: the scale is amax / 7, not larger.
    assert int(q.abs().max()) == 7
    assert bool((q[0, :, 1] == 0).all()) and bool((s[0, ..., 1] == 0).all())


def test_int4_quantizer_rounds_half_to_even():
    w = torch.tensor([[[7.0], [2.5], [-0.5], [1.5]]])  # amax 7 -> scale 1
    q, s = cam.quantize_weight(w, bits=4)
    assert float(s[0, 0]) == 1.0
    assert q.flatten().tolist() == [7, 2, 0, 2]


def test_per_group_scales_follow_each_group():
    w = torch.zeros(1, 4, 1)
    w[0, :2, 0] = torch.tensor([7.0, -3.5])
    w[0, 2:, 0] = torch.tensor([0.875, 0.4375])
    q, s = cam.quantize_weight(w, bits=4, group_size=2)
    assert s.flatten().tolist() == [1.0, 0.125]
    assert q.flatten().tolist() == [7, -4, 7, 4]  # -3.5 -> -4 and 3.5 -> 4: half to even


@pytest.mark.parametrize("kwargs,match", [
    (dict(bits=4, group_size=5), "group_size 5 does not divide K = 64"),
    (dict(bits=4, group_size=0), "group_size must be a positive int"),
    (dict(bits=5), "bits must be 8"),
    (dict(bits=8, group_size=8), "group_size 8 is only for bits=4"),
])
def test_quantizer_bad_arguments_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cam.quantize_weight(_weight(2), **kwargs)


def test_int8_quantizer_is_unchanged_by_default():
    w = _weight(3)
    q, s = cam.quantize_weight(w)
    q8, s8 = cam.quantize_weight(w, bits=8)
    assert torch.equal(q, q8) and torch.equal(s, s8) and int(q.abs().max()) == 127


# ----------------------------------------------------------------------------- packed layout


def test_pack_known_word():
    q = torch.tensor([[[1, 2, 3, 4, 5, 6, 7, -8]]], dtype=torch.int8)
    packed = w4a8.pack_int4(q, layout=LAYOUT)
    assert packed.dtype == torch.int32 and tuple(packed.shape) == (1, 1, 1)
    assert int(packed) & 0xFFFFFFFF == 0x87654321


def test_pack_unpack_round_trip():
    g = torch.Generator().manual_seed(4)
    q = torch.randint(-8, 8, (2, 5, 24), generator=g, dtype=torch.int8)
    assert torch.equal(w4a8.unpack_int4(w4a8.pack_int4(q, layout=LAYOUT), layout=LAYOUT), q)


def test_layout_must_be_named():
    q = torch.zeros(1, 1, 8, dtype=torch.int8)
    with pytest.raises(ValueError, match="layout must name the nibble order"):
        w4a8.pack_int4(q, layout="interleaved")
    with pytest.raises(ValueError, match="layout must name the nibble order"):
        w4a8.unpack_int4(torch.zeros(1, 1, 1, dtype=torch.int32), layout=None)


def test_int4_value_outside_range_in_an_unpacked_source_is_refused():
    q = torch.zeros(1, 2, 8, dtype=torch.int8)
    q[0, 1, 3] = 9
    with pytest.raises(ValueError, match=r"q\[0, 1, 3\] = 9 is outside the int4 range"):
        w4a8.pack_int4(q, layout=LAYOUT)


def test_pack_needs_n_multiple_of_eight():
    with pytest.raises(ValueError, match="N = 12 of q must be a multiple of 8"):
        w4a8.pack_int4(torch.zeros(1, 1, 12, dtype=torch.int8), layout=LAYOUT)


# ----------------------------------------------------------------------------- int64 scales


def _f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def test_scale_encoding_matches_the_documented_formula():
    s = torch.tensor([0.1, 1.0, -3.25e-3, 0.0], dtype=torch.float32)
    enc = w4a8.encode_scale_int64(s)
    for v, word in zip(s.tolist(), enc.tolist()):
        assert word == (_f32_bits(v) & 0xFFFFE000) | (1 << 46)


def test_scale_round_trip_truncates_the_low_13_bits():
    g = torch.Generator().manual_seed(5)
    s = torch.rand(4, 33, generator=g, dtype=torch.float32) * 0.1
    dec = w4a8.decode_scale_int64(w4a8.encode_scale_int64(s))
    assert torch.equal(dec.view(torch.int32) & 0x1FFF, torch.zeros_like(dec.view(torch.int32)))
    assert torch.equal(dec.view(torch.int32), s.view(torch.int32) & ~0x1FFF)
    assert bool((dec <= s).all()) and bool(((s - dec) / s <= 2.0**-10).all())  # truncation toward zero
    assert torch.equal(w4a8.encode_scale_int64(dec), w4a8.encode_scale_int64(s))


@pytest.mark.parametrize("word,match", [
    (_f32_bits(0.5) & 0xFFFFE000, "bit 46 .* is clear"),
    ((_f32_bits(0.5) & 0xFFFFE000) | (1 << 46) | (5 << 37), "an offset"),
    ((_f32_bits(0.5) & 0xFFFFE000) | (1 << 46) | 1, "an offset, or not an encoded scale"),
    ((0x7F800000) | (1 << 46), "not a finite scale"),
])
def test_bad_scale_words_are_refused_by_name(word, match):
    with pytest.raises(ValueError, match=r"scale\[1\] = |scale\[1\] encodes"):
        w4a8.decode_scale_int64(torch.tensor([(1 << 46), word], dtype=torch.int64))
    with pytest.raises(ValueError, match=match):
        w4a8.decode_scale_int64(torch.tensor([word], dtype=torch.int64))


def test_nan_scales_are_not_encoded():
    with pytest.raises(ValueError, match="scale holds inf or nan"):
        w4a8.encode_scale_int64(torch.tensor([float("nan")]))


# ----------------------------------------------------------------------------- the consumer's format


def _consumer(seed, group_size=None):
    q, s = cam.quantize_weight(_weight(seed), bits=4, group_size=group_size)
    s = w4a8.decode_scale_int64(w4a8.encode_scale_int64(s))  # what the consumer's int64 holds
    return q, s, w4a8.pack_int4(q, layout=LAYOUT), w4a8.encode_scale_int64(s), w4a8.assist_matrix(q, s, group_size)


@pytest.mark.parametrize("group_size", [None, 16])
def test_from_consumer_round_trip(group_size):
    q, s, packed, enc, assist = _consumer(6, group_size)
    q2, s2 = w4a8.from_consumer(packed, enc, assist, layout=LAYOUT, group_size=group_size)
    assert torch.equal(q2, q) and torch.equal(s2, s)


def test_assist_matrix_is_eight_times_the_scaled_column_sum():
    q = torch.tensor([[[1, -2], [3, 4]]], dtype=torch.int8)
    s = torch.tensor([[0.5, 0.25]])
    assert w4a8.assist_matrix(q, s).tolist() == [[8 * 4 * 0.5, 8 * 2 * 0.25]]


def test_assist_matrix_refuses_a_non_finite_scale():
    q = torch.zeros(1, 2, 2, dtype=torch.int8)
    with pytest.raises(ValueError, match=r"scale\[0, 1\] = nan is not finite"):
        w4a8.assist_matrix(q, torch.tensor([[1.0, float("nan")]]))


def test_an_assist_matrix_rounded_differently_is_accepted():
    q, s, packed, enc, assist = _consumer(7)
    nudged = (assist.to(torch.float64) * (1 + 2e-7)).to(torch.float32)
    w4a8.from_consumer(packed, enc, nudged, layout=LAYOUT)


def test_an_inconsistent_assist_matrix_is_refused_by_name():
    q, s, packed, enc, assist = _consumer(8)
    bad = assist.clone()
    bad[2, 5] += 0.01 * float(bad[2, 5].abs()) + 1e-3
    with pytest.raises(ValueError, match=r"assist\[2, 5\] = .* inconsistent with the weights and scales"):
        w4a8.from_consumer(packed, enc, bad, layout=LAYOUT)


@pytest.mark.parametrize("what,match", [
    ("assist_experts", r"assist must be \[E, N\] = \[3, 40\]"),
    ("assist_nan", r"assist\[0, 0\] = nan is not finite"),
    ("assist_dtype", "assist must be an fp32 tensor"),
    ("scale_shape", r"weight \[3, 64, 5\] packs E = 3 experts of N = 40 columns .* scale \[3, 8\] has E = 3, N = 8"),
    ("weight_n", r"weight \[3, 64, 4\] packs E = 3 experts of N = 32 columns"),
    ("scale_1d", r"scale must be \[E, N\] = \[3, 40\]"),
    ("scale_dtype", "scale must be int64"),
    ("weight_dtype", "weight must be int32"),
    ("weight_k", r"scale must be \[E, K / group_size, N\]"),
    ("group_size", "group_size 7 does not divide K = 64"),
    ("layout", "layout must name the nibble order"),
])
def test_from_consumer_bad_input_is_refused_by_name(what, match):
    q, s, packed, enc, assist = _consumer(9)
    kw = dict(layout=LAYOUT)
    if what == "assist_experts":
        assist = assist[:2]
    elif what == "assist_nan":
        assist = assist.clone()
        assist[0, 0] = float("nan")
    elif what == "assist_dtype":
        assist = assist.double()
    elif what == "scale_shape":
        enc = enc[:, :8]
    elif what == "weight_n":
        packed = packed[..., :4]
    elif what == "scale_1d":
        enc = enc[0]
    elif what == "scale_dtype":
        enc = s
    elif what == "weight_dtype":
        packed = q
    elif what == "weight_k":
        kw["group_size"] = 16
    elif what == "group_size":
        kw["group_size"] = 7
    elif what == "layout":
        kw["layout"] = "int32"
    with pytest.raises((ValueError, TypeError), match=match):
        w4a8.from_consumer(packed, enc, assist, **kw)


# ----------------------------------------------------------------------------- an FFN through the kernels


def _hf_layer(seed, e=4, h=64, i=32):
    g = torch.Generator().manual_seed(seed)
    gate_up = torch.randn(e, 2 * i, h, generator=g) / h ** 0.5  # nn.Linear orientation, gate rows first
    down = torch.randn(e, h, i, generator=g) / i ** 0.5
    return cam.convert.from_hf_experts(gate_up, down)


def _native(layer, x, expert):
    """The float expert on x: silu(x @ w1_gate) * (x @ w1_up) @ w2 in float64 (cam's orientation)."""
    w1, w2 = layer.w1[expert].double(), layer.w2[expert].double()
    c = x.double() @ w1
    half = c.shape[1] // 2
    return (torch.nn.functional.silu(c[:, :half]) * c[:, half:]) @ w2


@pytest.mark.parametrize("bits,group_size", [(8, None), (4, None), (4, 64)])
def test_w4a8_ffn_through_the_kernels_matches_native_with_the_same_dequantized_weights(bits, group_size):
    # int4 scale groups are multiples of 64 K rows (the int4 cube's K step), so I = 64 for the grouped case
    layers = [_hf_layer(20 + j, i=64 if group_size else 32) for j in range(2)]
    w1, w2 = cam.convert.layer_weights(layers, bits=bits, group_size=group_size)
    assert w1.scales[0].dim() == (2 if group_size is None else 3)
    # bits=4: held packed (two int4 values a byte, with their column sums), the int4 kernels' storage
    assert w1.format == w2.format == ("int4" if bits == 4 else "int8")
    assert (w1.colsums is not None) == (bits == 4)
    if bits == 8:
        assert int(w1.weights[0].abs().max()) > 7
    x = torch.randn(12, 64, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    q, scale = cam.ops.dynamic_quant(x)
    counts = torch.tensor([4, 0, 6, 2], dtype=torch.int64)
    for j, layer in enumerate(layers):
        idx = torch.tensor([j], dtype=torch.int64)
        y, ys = cam.ops.gmm_swiglu_quant_multi_layer(q, scale, w1, counts, idx)
        out = cam.ops.gmm_multi_layer(y, ys, w2, counts, idx).double()
        deq = cam.convert.dequantized(layer, bits=bits, group_size=group_size)
        start = 0
        for e, n in enumerate(counts.tolist()):
            if n:
                rows = slice(start, start + n)
                want = _native(deq, x[rows].float(), e)
                # Only the activations' int8 quantization separates cam from this native run (docs/numerics.md).
                assert float((out[rows] - want).norm() / want.norm()) < 0.05
                # The weights' int4 rounding is what separates both from the float model, far above int8's.
                far = float((_native(layer, x[rows].float(), e) - want).norm() / want.norm())
                assert (far > 0.03) == (bits == 4)
                start += n


@pytest.mark.parametrize("group_size", [32, 96, 0])
def test_layer_weights_refuses_int4_groups_that_are_not_multiples_of_64(group_size):
    with pytest.raises(ValueError, match=rf"layer_weights: group_size must be a positive multiple of 64 with bits=4 "
                                         rf"\(the int4 kernels' K step\), got {group_size}"):
        cam.convert.layer_weights([_hf_layer(20, i=64)], bits=4, group_size=group_size)


def test_the_consumers_format_through_the_kernels():
    """A layer's experts in the consumer's W4A8 format (packed int4-in-int32, int64 scales, assist matrix), converted
    by cam.w4a8.from_consumer and run by W1 and W2 with its routed_scaling_factor on the FFN side, against the float
    expert with the decoded weights."""
    layer = _hf_layer(30)
    decoded, intended = [], []
    for w in (layer.w1, layer.w2):
        q, s = cam.quantize_weight(w, bits=4)
        enc = w4a8.encode_scale_int64(s)
        assist = w4a8.assist_matrix(q, w4a8.decode_scale_int64(enc))
        decoded.append(w4a8.from_consumer(w4a8.pack_int4(q, layout=LAYOUT), enc, assist, layout=LAYOUT))
        intended.append(w4a8.dequantize_weight_int4(q, s))  # the consumer's weights before its encoding
    (q1, s1), (q2, s2) = decoded
    w1, w2 = cam.LayerWeights([q1], [s1]), cam.LayerWeights([q2], [s2])
    native = cam.convert.ExpertFFN(*intended)
    x = torch.randn(10, 64, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    q, scale = cam.ops.dynamic_quant(x)
    counts = torch.tensor([3, 3, 0, 4], dtype=torch.int64)
    idx = torch.zeros(1, dtype=torch.int64)
    y, ys = cam.ops.gmm_swiglu_quant_multi_layer(q, scale, w1, counts, idx)
    rsf = 2.5
    out = cam.ops.gmm_multi_layer(y, ys, w2, counts, idx, out_scale=rsf).double()
    start = 0
    for e, n in enumerate(counts.tolist()):
        if n:
            want = rsf * _native(native, x[start:start + n].float(), e)
            assert float((out[start:start + n] - want).norm() / want.norm()) < 0.05
            start += n
