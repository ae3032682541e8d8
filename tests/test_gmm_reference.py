"""Tests of the GMM goldens themselves (cam.reference.gmm).

The goldens are checked against a deliberately slow formulation: python-int dot
products, numpy float32 *scalar* arithmetic one operation at a time, a hand-written
bf16 rounding and a per-row quant written from docs/numerics.md. The two share no code, so
agreement is bit-exact evidence that the vectorized golden does what docs/gmm.md says.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cam.reference import gmm as ref

F32 = np.float32
FLT_MIN = np.finfo(np.float32).tiny


# ----------------------------------------------------------------------------- slow model


def _counts(group_list, group_list_type):
    vals = [int(v) for v in group_list]
    if group_list_type == ref.GROUP_LIST_COUNTS:
        return vals
    return [b - a for a, b in zip([0] + vals[:-1], vals)]


def _row_expert(counts, m):
    """Expert owning row m, or None for rows past the last group."""
    end = 0
    for e, c in enumerate(counts):
        end += c
        if m < end:
            return e
    return None


def _dot(x, w, m, e, n):
    return sum(int(x[m, k]) * int(w[e, k, n]) for k in range(x.shape[1]))


def _dequant_row(x, xs, w, ws, m, e):
    cols = w.shape[2]
    return [F32(F32(_dot(x, w, m, e, n)) * F32(xs[m])) * F32(ws[e, n]) for n in range(cols)]


def _exp32(v):
    try:
        return F32(math.exp(float(v)))
    except OverflowError:
        return F32(np.inf)


def _quant_row(s):
    amax = F32(0)
    for v in s:
        amax = max(amax, F32(abs(v)))
    if amax == 0 or amax < FLT_MIN:
        return [0] * len(s), F32(0)
    inv = F32(127) / amax
    q = [int(min(max(np.rint(F32(v * inv)), -127), 127)) for v in s]
    return q, F32(amax / F32(127))


def slow_w1(x, xs, w, ws, group_list, group_list_type):
    """Returns {row: (q list, scale)} for every written row."""
    x, xs, w, ws = x.numpy(), xs.numpy(), w.numpy(), ws.numpy()
    counts = _counts(group_list.tolist(), group_list_type)
    half = w.shape[2] // 2
    rows = {}
    with np.errstate(over="ignore"):
        for m in range(x.shape[0]):
            e = _row_expert(counts, m)
            if e is None:
                continue
            c = _dequant_row(x, xs, w, ws, m, e)
            s = []
            for j in range(half):
                a, g = c[j], c[half + j]
                silu = F32(a / F32(F32(1) + _exp32(-a)))
                s.append(F32(silu * g))
            rows[m] = _quant_row(s)
    return rows


def _bf16_bits(v):
    """fp32 -> bf16 bit pattern, round to nearest even, written out by hand."""
    u = int(np.array([v], dtype=np.float32).view(np.uint32)[0])
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x7FFFFF):
        return (u >> 16) | 0x40
    u += 0x7FFF + ((u >> 16) & 1)
    return (u >> 16) & 0xFFFF


def slow_w2(y, ys, w, ws, group_list, group_list_type):
    """Returns {row: [bf16 bit patterns]} for every written row."""
    y, ys, w, ws = y.numpy(), ys.numpy(), w.numpy(), ws.numpy()
    counts = _counts(group_list.tolist(), group_list_type)
    rows = {}
    with np.errstate(over="ignore"):
        for m in range(y.shape[0]):
            e = _row_expert(counts, m)
            if e is None:
                continue
            rows[m] = [_bf16_bits(c) for c in _dequant_row(y, ys, w, ws, m, e)]
    return rows


def _bits(t_bf16):
    return (t_bf16.view(torch.int16).to(torch.int32) & 0xFFFF).tolist()


# ----------------------------------------------------------------------------- fixtures


def _problem(seed, m, k, n, e_local, layers, scale_mag=1e-2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    xs = (torch.rand(m, generator=g) * scale_mag + scale_mag / 10).float()
    ws_ = [torch.randint(-128, 128, (e_local, k, n), generator=g, dtype=torch.int8) for _ in range(layers)]
    ss = [(torch.rand(e_local, n, generator=g) * scale_mag + scale_mag / 10).float() for _ in range(layers)]
    return x, xs, ws_, ss


def _gl(values, group_list_type=ref.GROUP_LIST_COUNTS):
    t = torch.tensor(values, dtype=torch.int64)
    return t if group_list_type == ref.GROUP_LIST_COUNTS else torch.cumsum(t, 0)


M, K, N, E, L = 12, 40, 24, 4, 3
COUNT_CASES = {
    "partial_tail": [3, 0, 5, 2],
    "one_group_all": [0, 0, 12, 0],
    "first_group_all": [12, 0, 0, 0],
    "all_empty": [0, 0, 0, 0],
    "skewed": [1, 1, 1, 9],
    "balanced_full": [3, 3, 3, 3],
}


def _check_w1(y, ysc, rows_written, slow, counts, m, y_sentinel=None, s_sentinel=None):
    assert rows_written == sum(counts)
    for r in range(m):
        if r in slow:
            q, sc = slow[r]
            assert y[r].tolist() == q, f"row {r}"
            assert np.float32(ysc[r].item()).tobytes() == F32(sc).tobytes(), f"row {r} scale bits"
        else:
            assert r >= rows_written
            if y_sentinel is not None:
                assert (y[r] == y_sentinel).all(), f"tail row {r} was written"
                assert ysc[r].item() == s_sentinel, f"tail scale {r} was written"


# ----------------------------------------------------------------------------- W1


@pytest.mark.parametrize("case", sorted(COUNT_CASES))
@pytest.mark.parametrize("group_list_type", [ref.GROUP_LIST_CUMSUM, ref.GROUP_LIST_COUNTS])
def test_w1_matches_slow_model(case, group_list_type):
    counts = COUNT_CASES[case]
    x, xs, ws_, ss = _problem(1, M, K, N, E, L)
    gl = _gl(counts, group_list_type)
    y_out = torch.full((M, N // 2), 77, dtype=torch.int8)
    s_out = torch.full((M,), -1.5, dtype=torch.float32)
    y, ysc, rows = ref.gmm_swiglu_quant_multi_layer(x, xs, ws_, ss, gl, 1, group_list_type, y_out, s_out)
    assert y is y_out and ysc is s_out
    slow = slow_w1(x, xs, ws_[1], ss[1], gl, group_list_type)
    _check_w1(y, ysc, rows, slow, counts, M, y_sentinel=77, s_sentinel=-1.5)


def test_w1_counts_and_cumsum_agree():
    x, xs, ws_, ss = _problem(2, M, K, N, E, L)
    a = ref.gmm_swiglu_quant_multi_layer(x, xs, ws_, ss, _gl([2, 4, 0, 5], 1), 0, 1)
    b = ref.gmm_swiglu_quant_multi_layer(x, xs, ws_, ss, _gl([2, 4, 0, 5], 0), 0, 0)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2] == b[2] == 11


def test_w1_layer_selection():
    x, xs, ws_, ss = _problem(3, M, K, N, E, 4)
    gl = _gl([4, 2, 3, 3])
    outs = []
    for layer in range(4):
        li = torch.tensor([layer], dtype=torch.int64)  # device-style int64[1]
        y, ysc, rows = ref.gmm_swiglu_quant_multi_layer(x, xs, ws_, ss, gl, li, 1)
        _check_w1(y, ysc, rows, slow_w1(x, xs, ws_[layer], ss[layer], gl, 1), [4, 2, 3, 3], M)
        outs.append(y.clone())
    for i in range(4):
        for j in range(i + 1, 4):
            assert not torch.equal(outs[i], outs[j]), f"layers {i} and {j} gave the same output"


def test_w1_m_zero():
    x, xs, ws_, ss = _problem(4, 0, K, N, E, L)
    y, ysc, rows = ref.gmm_swiglu_quant_multi_layer(x, xs, ws_, ss, _gl([0] * E), 2, 1)
    assert rows == 0 and tuple(y.shape) == (0, N // 2) and tuple(ysc.shape) == (0,)


def test_w1_zero_row_and_extreme_activations():
    x, xs, ws_, ss = _problem(5, 6, K, N, 2, 1)
    x[0].zero_()  # amax = 0 -> q = 0, scale = 0
    xs[1] = 1.0  # |act| ~ 1e2: exp(-act) overflows fp32 to inf or underflows to 0
    xs[2] = 1e-22  # s ~ act * gate lands in or below the subnormal range
    gl = _gl([3, 3])
    y, ysc, rows = ref.gmm_swiglu_quant_multi_layer(x, xs, ws_, ss, gl, 0, 1)
    assert rows == 6
    assert (y[0] == 0).all() and ysc[0].item() == 0.0
    assert not torch.isnan(ysc).any()
    _check_w1(y, ysc, rows, slow_w1(x, xs, ws_[0], ss[0], gl, 1), [3, 3], 6)


# ----------------------------------------------------------------------------- W2


def _check_w2(out, slow, m, rows_written, sentinel_bits=None):
    bits = _bits(out)
    for r in range(m):
        if r in slow:
            assert bits[r] == slow[r], f"row {r}"
        else:
            assert r >= rows_written
            if sentinel_bits is not None:
                assert all(b == sentinel_bits for b in bits[r]), f"tail row {r} was written"


@pytest.mark.parametrize("case", sorted(COUNT_CASES))
@pytest.mark.parametrize("group_list_type", [ref.GROUP_LIST_CUMSUM, ref.GROUP_LIST_COUNTS])
def test_w2_matches_slow_model(case, group_list_type):
    counts = COUNT_CASES[case]
    i_dim, h = 36, 20
    y, ys, ws_, ss = _problem(11, M, i_dim, h, E, L)
    gl = _gl(counts, group_list_type)
    out = torch.full((M, h), -3.0, dtype=torch.bfloat16)
    sentinel = _bits(out[:1, :1])[0][0]
    res = ref.gmm_multi_layer(y, ys, ws_, ss, gl, 2, group_list_type, out=out)
    assert res is out
    _check_w2(out, slow_w2(y, ys, ws_[2], ss[2], gl, group_list_type), M, sum(counts), sentinel)


def test_w2_layer_selection_and_counts_vs_cumsum():
    y, ys, ws_, ss = _problem(12, M, 33, 17, E, 3)
    outs = []
    for layer in range(3):
        li = torch.tensor([layer], dtype=torch.int64)
        a = ref.gmm_multi_layer(y, ys, ws_, ss, _gl([5, 0, 6, 1], 1), li, 1)
        b = ref.gmm_multi_layer(y, ys, ws_, ss, _gl([5, 0, 6, 1], 0), li, 0)
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))
        _check_w2(a, slow_w2(y, ys, ws_[layer], ss[layer], _gl([5, 0, 6, 1]), 1), M, 12)
        outs.append(a)
    for i in range(3):
        for j in range(i + 1, 3):
            assert not torch.equal(outs[i], outs[j])


def test_w2_m_zero():
    y, ys, ws_, ss = _problem(13, 0, 16, 8, E, 2)
    out = ref.gmm_multi_layer(y, ys, ws_, ss, _gl([0] * E), 1, 1)
    assert tuple(out.shape) == (0, 8) and out.dtype == torch.bfloat16


def test_w2_rounding_and_overflow():
    # Scales chosen so products land on bf16 ties and past the bf16 range.
    y = torch.tensor([[1], [1], [127]], dtype=torch.int8)
    ys = torch.tensor([1.0, 1.0, 3e38], dtype=torch.float32)
    w = [torch.ones(1, 1, 3, dtype=torch.int8)]
    ws = [torch.tensor([[1.00390625, 1.01171875, 1.0]], dtype=torch.float32)]  # 1+2^-8, 1+3*2^-8
    out = ref.gmm_multi_layer(y, ys, w, ws, _gl([3]), 0, 1)
    assert out[0, 0].item() == 1.0  # tie -> even (down)
    assert out[0, 1].item() == 1.015625  # tie -> even (up)
    assert math.isinf(out[2, 2].item())  # 127 * 3e38 overflows fp32 -> inf
    _check_w2(out, slow_w2(y, ys, w[0], ws[0], _gl([3]), 1), 3, 3)


# ----------------------------------------------------------------------------- int32 accumulator


def test_int32_accumulator_exact_at_the_extremes():
    k = ref._MAX_K  # largest K whose worst case still fits int32
    x = torch.full((2, k), -128, dtype=torch.int8)
    x[1, ::2] = 127
    w = torch.full((1, k, 2), -128, dtype=torch.int8)
    w[0, 1::3, 1] = 127
    acc = ref.gmm_int32_reference(x, w, _gl([2]))
    xs, wn = x.to(torch.int64), w[0].to(torch.int64)
    expect = [[int((xs[r] * wn[:, c]).sum()) for c in range(2)] for r in range(2)]
    assert acc.tolist() == expect
    assert acc[0, 0].item() == k * 16384


def test_int32_accumulator_random_vs_python_ints():
    x, _, ws_, _ = _problem(21, 9, 70, 5, 3, 1)
    gl = _gl([2, 0, 6])
    out = torch.full((9, 5), 12345, dtype=torch.int32)
    ref.gmm_int32_reference(x, ws_[0], gl, 1, out=out)
    counts = [2, 0, 6]
    for m in range(9):
        e = _row_expert(counts, m)
        for n in range(5):
            want = 12345 if e is None else _dot(x.numpy(), ws_[0].numpy(), m, e, n)
            assert out[m, n].item() == want


# ----------------------------------------------------------------------------- device-detected errors


@pytest.mark.parametrize(
    "layer_index,counts,match",
    [
        (3, [3, 3, 3, 3], "layer_index"),
        (-1, [3, 3, 3, 3], "layer_index"),
        (0, [3, 3, 3, 4], "exceeds M"),
        (0, [3, -1, 3, 3], "negative"),
    ],
)
def test_device_checked_errors_write_nothing(layer_index, counts, match):
    x, xs, ws_, ss = _problem(31, M, 16, 8, E, L)
    gl = torch.tensor(counts, dtype=torch.int64)
    out = torch.full((M, 8), 7.0, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=match):
        ref.gmm_multi_layer(x, xs, ws_, ss, gl, layer_index, 1, out=out)
    assert (out == 7.0).all()
    y_out = torch.full((M, 4), 9, dtype=torch.int8)
    s_out = torch.full((M,), 2.0)
    with pytest.raises(ValueError, match=match):
        ref.gmm_swiglu_quant_multi_layer(x, xs, ws_, ss, gl, layer_index, 1, y_out, s_out)
    assert (y_out == 9).all() and (s_out == 2.0).all()


def test_decreasing_cumsum_is_an_error():
    x, xs, ws_, ss = _problem(32, M, 16, 8, E, 1)
    with pytest.raises(ValueError, match="decreases"):
        ref.gmm_multi_layer(x, xs, ws_, ss, torch.tensor([4, 8, 6, 12]), 0, 0)


# ----------------------------------------------------------------------------- FRACTAL_NZ


@pytest.mark.parametrize("k", [1, 15, 16, 17, 33, 40])
@pytest.mark.parametrize("n", [1, 31, 32, 33, 72])
def test_nz_round_trip_and_offsets(k, n):
    g = torch.Generator().manual_seed(k * 100 + n)
    w = torch.randint(-128, 128, (3, k, n), generator=g, dtype=torch.int8)
    nz = ref.prepack_nz_reference(w)
    n1, k1 = -(-n // 32), -(-k // 16)
    assert tuple(nz.shape) == (3, n1, k1, 16, 32) and nz.is_contiguous()
    assert torch.equal(ref.unpack_nz_reference(nz, k, n), w)
    flat = nz.reshape(-1).tolist()
    assert len(flat) == 3 * n1 * 32 * k1 * 16
    # Every element sits where the explicit fractal decomposition says ...
    seen = set()
    for e in range(3):
        for kk in range(k):
            for nn in range(n):
                fr_col, fr_row, r, c = nn // 32, kk // 16, kk % 16, nn % 32
                off = (((e * n1 + fr_col) * k1 + fr_row) * 16 + r) * 32 + c
                assert ref.nz_offset(e, kk, nn, k, n) == off
                assert flat[off] == int(w[e, kk, nn])
                seen.add(off)
    # ... and every other byte is zero padding.
    assert all(v == 0 for i, v in enumerate(flat) if i not in seen)


def test_nz_two_dim_input_and_documented_examples():
    w = torch.randint(-128, 128, (100, 30), dtype=torch.int8)
    nz = ref.prepack_nz_reference(w)
    # Transdata convention [n1, m1m0, n0] for an int8 [100, 30] matrix: [1, 112, 32].
    assert tuple(nz.shape) == (1, 7, 16, 32)
    assert tuple(nz.reshape(1, 112, 32).shape) == (1, 112, 32)
    assert torch.equal(ref.unpack_nz_reference(nz, 100, 30), w)
    # Worked example of docs/gmm.md: K=40, N=72, expert 1, (k=17, n=45) -> byte 6701.
    assert ref.nz_offset(1, 17, 45, 40, 72) == 6701


def test_nz_rejects_wrong_logical_shape():
    nz = ref.prepack_nz_reference(torch.zeros(2, 40, 72, dtype=torch.int8))
    with pytest.raises(AssertionError):
        ref.unpack_nz_reference(nz, 40, 100)


# ----------------------------------------------------------------------------- generated shapes

@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(0, 10),
    k=st.integers(1, 24),
    h=st.integers(1, 9),
    e_local=st.integers(1, 4),
    layers=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_w2_generated_shapes(m, k, h, e_local, layers, seed, data):
    y, ys, ws_, ss = _problem(seed, m, k, h, e_local, layers)
    counts = data.draw(st.lists(st.integers(0, m), min_size=e_local, max_size=e_local))
    if sum(counts) > m:  # keep total <= M; the error path has its own test
        counts = [0] * e_local
        counts[data.draw(st.integers(0, e_local - 1))] = m
    layer = data.draw(st.integers(0, layers - 1))
    glt = data.draw(st.sampled_from([0, 1]))
    gl = _gl(counts, glt)
    out = ref.gmm_multi_layer(y, ys, ws_, ss, gl, layer, glt)
    _check_w2(out, slow_w2(y, ys, ws_[layer], ss[layer], gl, glt), m, sum(counts))


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(0, 8),
    k=st.integers(1, 20),
    half=st.integers(1, 6),
    e_local=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_w1_generated_shapes(m, k, half, e_local, seed, data):
    x, xs, ws_, ss = _problem(seed, m, k, 2 * half, e_local, 2)
    counts = data.draw(st.lists(st.integers(0, m), min_size=e_local, max_size=e_local))
    if sum(counts) > m:
        counts = [0] * e_local
        counts[-1] = m
    glt = data.draw(st.sampled_from([0, 1]))
    gl = _gl(counts, glt)
    y, ysc, rows = ref.gmm_swiglu_quant_multi_layer(x, xs, ws_, ss, gl, 1, glt)
    _check_w1(y, ysc, rows, slow_w1(x, xs, ws_[1], ss[1], gl, glt), counts, m)
