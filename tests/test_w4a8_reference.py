"""Tests of the W4A8 goldens (cam.reference.w4a8, docs/gmm.md §9).

The goldens are checked against a slow model written from the docs here (python-int partial sums, numpy float32
operations one at a time in the documented order), against the W8A8 goldens (per-channel int4 is W8A8 with small
integer weights) and against float64 dequantized math.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cam.reference import gmm as ref8
from cam.reference import w4a8 as ref4

F32 = np.float32


def _int4(g, *shape):
    return torch.randint(-8, 8, shape, generator=g, dtype=torch.int8)


def _int8(g, *shape):
    return torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)


def _scales(g, *shape):
    return (torch.rand(shape, generator=g, dtype=torch.float32) * 0.02 + 1e-3).contiguous()


def _counts(g, experts, m):
    cuts = sorted(torch.randint(0, m + 1, (experts - 1,), generator=g).tolist())
    bounds = [0] + cuts + [int(torch.randint(cuts[-1] if cuts else 0, m + 1, (1,), generator=g))]
    return torch.tensor([b - a for a, b in zip(bounds, bounds[1:])], dtype=torch.int64)


def _table(g, layers, experts, m):
    rows, out = m, []
    for _ in range(int(torch.randint(1, 6, (1,), generator=g))):
        r = int(torch.randint(0, rows + 1, (1,), generator=g)) if rows else 0
        out.append([int(torch.randint(0, layers, (1,), generator=g)), int(torch.randint(0, experts, (1,), generator=g)),
                    r])
        rows -= r
    return torch.tensor(out, dtype=torch.int64)


# ----------------------------------------------------------------------------- the activation split


def test_msd_split_recombines_exactly_for_every_int8_and_int4_value():
    x = torch.arange(-128, 128, dtype=torch.int16).to(torch.int8)
    hi, lo = ref4.msd_split(x)
    assert int(hi.min()) >= -8 and int(hi.max()) <= 7 and int(lo.min()) >= -8 and int(lo.max()) <= 7
    assert torch.equal(16 * hi.to(torch.int32) + lo.to(torch.int32) + 8, x.to(torch.int32))
    w = torch.arange(-8, 8, dtype=torch.int32)
    prod = (16 * hi.to(torch.int32)[:, None] + lo.to(torch.int32)[:, None]) * w[None, :] + 8 * w[None, :]
    assert torch.equal(prod, x.to(torch.int32)[:, None] * w[None, :])


@pytest.mark.parametrize("seed", range(4))
def test_msd_split_recombines_exactly_on_random_matrices(seed):
    g = torch.Generator().manual_seed(seed)
    m, k, n = (int(v) for v in torch.randint(1, 300, (3,), generator=g))
    x, w = _int8(g, m, k), _int4(g, k, n)
    hi, lo = ref4.msd_split(x)
    mm = lambda a, b: (a.to(torch.float64) @ b.to(torch.float64)).to(torch.int32)  # noqa: E731 (exact here)
    colsum = w.to(torch.int32).sum(dim=0, dtype=torch.int32)[None, :].expand(m, n).contiguous()
    got = ref4.msd_recombine(mm(hi, w), mm(lo, w), colsum)
    assert torch.equal(got, mm(x, w))


# ----------------------------------------------------------------------------- against W8A8 and a slow model


@pytest.mark.parametrize("seed", range(6))
def test_per_channel_w4a8_is_w8a8_with_int4_values(seed):
    g = torch.Generator().manual_seed(100 + seed)
    layers, experts = int(torch.randint(1, 4, (1,), generator=g)), int(torch.randint(1, 5, (1,), generator=g))
    m, k = int(torch.randint(1, 40, (1,), generator=g)), int(torch.randint(1, 200, (1,), generator=g))
    n = 2 * int(torch.randint(1, 60, (1,), generator=g))
    w = [_int4(g, experts, k, n) for _ in range(layers)]
    s = [_scales(g, experts, n) for _ in range(layers)]
    x, xs = _int8(g, m, k), _scales(g, m)
    table = seed % 2 == 1
    gl = _table(g, layers, experts, m) if table else _counts(g, experts, m)
    glt, li = (ref8.GROUP_TABLE, None) if table else (ref8.GROUP_LIST_COUNTS, seed % layers)
    y4, ys4, r4 = ref4.gmm_swiglu_quant_multi_layer_w4a8(x, xs, w, s, gl, li, glt)
    y8, ys8, r8 = ref8.gmm_swiglu_quant_multi_layer(x, xs, w, s, gl, li, glt)
    assert r4 == r8 and torch.equal(y4, y8) and torch.equal(ys4, ys8)
    yy = _int8(g, m, n)
    w2 = [_int4(g, experts, n, k) for _ in range(layers)]
    s2 = [_scales(g, experts, k) for _ in range(layers)]
    o4 = ref4.gmm_multi_layer_w4a8(yy, xs, w2, s2, gl, li, glt)
    o8 = ref8.gmm_multi_layer(yy, xs, w2, s2, gl, li, glt)
    assert torch.equal(o4.view(torch.int16), o8.view(torch.int16))


def _slow_w2(y, ys, w_e, s_e, group_size, out_scale):
    """Python-int partials, numpy float32 one operation at a time, in the order of docs/gmm.md §9.2."""
    m, k = y.shape
    n = w_e.shape[1]
    out = np.zeros((m, n), dtype=F32)
    for r in range(m):
        for c in range(n):
            acc = None
            for g0 in range(0, k, group_size):
                part = sum(int(y[r, kk]) * int(w_e[kk, c]) for kk in range(g0, g0 + group_size))
                t = F32(F32(part) * F32(ys[r])) * F32(s_e[g0 // group_size, c])
                acc = t if acc is None else F32(acc + t)
            if out_scale is not None:
                acc = F32(acc * F32(out_scale))
            out[r, c] = acc
    return torch.from_numpy(out).to(torch.bfloat16)


@pytest.mark.parametrize("group_size,out_scale", [(8, None), (16, 2.5), (4, 0.7), (48, None)])
def test_w2_per_group_against_the_slow_model(group_size, out_scale):
    g = torch.Generator().manual_seed(group_size)
    m, k, n, experts = 7, 48, 9, 2
    y, ys = _int8(g, m, k), _scales(g, m)
    w = _int4(g, experts, k, n)
    s = _scales(g, experts, k // group_size, n)
    gl = torch.tensor([3, 4], dtype=torch.int64)
    got = ref4.gmm_multi_layer_w4a8(y, ys, [w], [s], gl, 0, group_size=group_size, out_scale=out_scale)
    want = torch.cat([_slow_w2(y[:3], ys[:3], w[0], s[0], group_size, out_scale),
                      _slow_w2(y[3:], ys[3:], w[1], s[1], group_size, out_scale)])
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_group_order_is_the_documented_one():
    # Group terms 2^24, 1, -2^24: in group order (2^24 + 1) rounds to 2^24 and the sum is 0; reversed it is 1.
    y = torch.tensor([[1, 1, 1]], dtype=torch.int8)
    w = torch.tensor([[[1], [1], [-1]]], dtype=torch.int8)
    s = torch.tensor([[[2.0**24], [1.0], [2.0**24]]], dtype=torch.float32)
    ys = torch.ones(1, dtype=torch.float32)
    out = ref4.gmm_multi_layer_w4a8(y, ys, [w], [s], torch.tensor([1]), 0, group_size=1)
    assert float(out[0, 0]) == 0.0
    assert float((F32(-(2.0**24)) + F32(1.0)) + F32(2.0**24)) == 1.0  # the order matters for these terms


def test_one_group_is_per_channel_bit_for_bit_signed_zeros_included():
    g = torch.Generator().manual_seed(7)
    y, ys = _int8(g, 5, 32), _scales(g, 5)
    w = _int4(g, 1, 32, 16)
    w[0, :, 3] = 0  # a zero column: acc = 0, with a negative scale -0.0
    s = _scales(g, 1, 16)
    s[0, 3] = -0.5
    gl = torch.tensor([5])
    a = ref4.gmm_multi_layer_w4a8(y, ys, [w], [s], gl, 0)
    b = ref4.gmm_multi_layer_w4a8(y, ys, [w], [s[:, None, :].contiguous()], gl, 0, group_size=32)
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    assert a[0, 3].view(torch.int16) == torch.tensor(-0.0, dtype=torch.bfloat16).view(torch.int16)


def test_out_scale_one_changes_nothing_and_two_doubles():
    g = torch.Generator().manual_seed(8)
    y, ys = _int8(g, 6, 64), _scales(g, 6)
    w, s = _int4(g, 2, 64, 24), _scales(g, 2, 24)
    gl = torch.tensor([2, 4])
    base = ref4.gmm_multi_layer_w4a8(y, ys, [w], [s], gl, 0)
    one = ref4.gmm_multi_layer_w4a8(y, ys, [w], [s], gl, 0, out_scale=1.0)
    two = ref4.gmm_multi_layer_w4a8(y, ys, [w], [s], gl, 0, out_scale=2.0)
    assert torch.equal(base.view(torch.int16), one.view(torch.int16))
    assert torch.equal((base.float() * 2).to(torch.bfloat16).view(torch.int16), two.view(torch.int16))


@pytest.mark.parametrize("seed", range(6))
def test_per_group_w1_and_w2_against_float64_dequantized_math(seed):
    g = torch.Generator().manual_seed(200 + seed)
    layers, experts = 2, 3
    gsz = [8, 16, 32][seed % 3]
    m, k, n = int(torch.randint(1, 30, (1,), generator=g)), gsz * int(torch.randint(1, 6, (1,), generator=g)), 2 * 20
    w = [_int4(g, experts, k, n) for _ in range(layers)]
    s = [_scales(g, experts, k // gsz, n) for _ in range(layers)]
    x, xs = _int8(g, m, k), _scales(g, m)
    gl = _table(g, layers, experts, m)
    o = ref4.gmm_multi_layer_w4a8(x, xs, w, s, gl, None, ref8.GROUP_TABLE, group_size=gsz, out_scale=0.5)
    y, ys, rows = ref4.gmm_swiglu_quant_multi_layer_w4a8(x, xs, w, s, gl, None, ref8.GROUP_TABLE, group_size=gsz)
    start = 0
    for layer, e, r in gl.tolist():
        deq = (w[layer][e].to(torch.float64).reshape(k // gsz, gsz, n) * s[layer][e].to(torch.float64)[:, None, :])
        c = (x[start:start + r].to(torch.float64) * xs[start:start + r, None].to(torch.float64)) @ deq.reshape(k, n)
        got = o[start:start + r].to(torch.float64)
        assert torch.allclose(got, (c * 0.5).to(torch.bfloat16).to(torch.float64), rtol=2**-7, atol=1e-4)
        act, gate = c[:, : n // 2], c[:, n // 2:]
        sw = act / (1 + torch.exp(-act)) * gate
        deq_y = y[start:start + r].to(torch.float64) * ys[start:start + r, None].to(torch.float64)
        assert torch.allclose(deq_y, sw, atol=float(sw.abs().max()) / 127 * 0.51 + 1e-9 if r else 0)
        start += r
    assert rows == start


def test_group_size_that_does_not_divide_k_is_refused():
    w, s = torch.zeros(1, 12, 4, dtype=torch.int8), torch.ones(1, 2, 4)
    with pytest.raises(ValueError, match="group_size 5 does not divide K = 12"):
        ref4.gmm_multi_layer_w4a8(torch.zeros(1, 12, dtype=torch.int8), torch.ones(1), [w], [s], torch.tensor([1]),
                                  0, group_size=5)


def test_device_errors_keep_the_output_untouched():
    w, s = torch.zeros(2, 16, 4, dtype=torch.int8), torch.ones(2, 4)
    out = torch.full((3, 4), 7.0, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="layer_index 1 outside"):
        ref4.gmm_multi_layer_w4a8(torch.ones(3, 16, dtype=torch.int8), torch.ones(3), [w], [s],
                                  torch.tensor([1, 1]), 1, out=out)
    with pytest.raises(ValueError, match="exceeds M"):
        ref4.gmm_multi_layer_w4a8(torch.ones(3, 16, dtype=torch.int8), torch.ones(3), [w], [s],
                                  torch.tensor([2, 2]), 0, out=out)
    assert bool((out.float() == 7.0).all())
