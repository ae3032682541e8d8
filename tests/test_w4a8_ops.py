"""W2's output scale (routed_scaling_factor on the FFN side) and W4A8 per-channel weights through today's grouped
matmul kernels, against the goldens (docs/gmm.md §9.2: per-channel W4A8 is W8A8 with int4-valued weights)."""

from __future__ import annotations

import pytest
import torch

import cam
from cam.reference import gmm as ref8
from cam.reference import w4a8 as ref4


def _problem(seed, m, k, n, experts, layers, int4=False):
    g = torch.Generator().manual_seed(seed)
    lo, hi = (-8, 8) if int4 else (-128, 128)
    x = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    xs = torch.rand(m, generator=g) * 1e-2 + 1e-3
    ws = [torch.randint(lo, hi, (experts, k, n), generator=g, dtype=torch.int8) for _ in range(layers)]
    ss = [torch.rand(experts, n, generator=g) * 1e-2 + 1e-3 for _ in range(layers)]
    return x, xs, ws, ss


def _bits(t):
    return t.view(torch.int16)


@pytest.mark.parametrize("out_scale", [2.5, 0.7071067811865476, 1.0, -3.0])
def test_w2_out_scale_matches_the_golden(out_scale):
    x, xs, ws, ss = _problem(1, 40, 96, 72, 3, 2)
    lw = cam.LayerWeights(ws, ss)
    gl = torch.tensor([11, 0, 20], dtype=torch.int64)
    out = torch.full((40, 72), 9.0, dtype=torch.bfloat16)
    cam.ops.gmm_multi_layer(x, xs, lw, gl, torch.tensor([1]), out=out, out_scale=out_scale)
    want = ref8.gmm_multi_layer(x, xs, ws, ss, gl, 1, out=torch.full((40, 72), 9.0, dtype=torch.bfloat16),
                                out_scale=out_scale)
    assert torch.equal(_bits(out), _bits(want))
    plain = ref8.gmm_multi_layer(x, xs, ws, ss, gl, 1)
    assert torch.equal(_bits(out[:31]), _bits(plain[:31])) == (out_scale == 1.0)
    assert bool((out[31:].float() == 9.0).all())


def test_w2_out_scale_over_a_group_table():
    x, xs, ws, ss = _problem(2, 50, 64, 40, 2, 3)
    lw = cam.LayerWeights(ws, ss)
    table = torch.tensor([[2, 1, 7], [0, 0, 13], [2, 0, 0], [1, 1, 20]], dtype=torch.int64)
    got = cam.ops.gmm_multi_layer(x, xs, lw, table, None, cam.ops.gmm.GROUP_TABLE, out_scale=2.5)
    want = ref8.gmm_multi_layer(x, xs, ws, ss, table, None, ref8.GROUP_TABLE, out_scale=2.5)
    assert torch.equal(_bits(got), _bits(want))


def test_w2_without_out_scale_is_unchanged():
    x, xs, ws, ss = _problem(3, 20, 32, 48, 2, 1)
    lw = cam.LayerWeights(ws, ss)
    gl = torch.tensor([5, 15], dtype=torch.int64)
    a = cam.ops.gmm_multi_layer(x, xs, lw, gl, torch.tensor([0]))
    b = cam.ops.gmm_multi_layer(x, xs, lw, gl, torch.tensor([0]), out_scale=None)
    assert torch.equal(_bits(a), _bits(b))
    assert torch.equal(_bits(a), _bits(ref8.gmm_multi_layer(x, xs, ws, ss, gl, 0)))


@pytest.mark.parametrize("value, error", [(float("nan"), ValueError), (float("inf"), ValueError),
                                          (1e40, ValueError), ("2.5", TypeError), (True, TypeError)])
def test_bad_out_scale_is_refused_by_name_before_anything_is_written(value, error):
    x, xs, ws, ss = _problem(4, 8, 32, 32, 1, 1)
    lw = cam.LayerWeights(ws, ss)
    out = torch.full((8, 32), 9.0, dtype=torch.bfloat16)
    with pytest.raises(error, match="out_scale"):
        cam.ops.gmm_multi_layer(x, xs, lw, torch.tensor([8]), torch.tensor([0]), out=out, out_scale=value)
    assert bool((out.float() == 9.0).all())


@pytest.mark.parametrize("seed", range(3))
def test_per_channel_w4a8_through_todays_kernels(seed):
    g = torch.Generator().manual_seed(50 + seed)
    m, k, n = (int(v) for v in torch.randint(1, 120, (3,), generator=g))
    n = 2 * n
    x, xs, ws, ss = _problem(60 + seed, m, k, n, 3, 2, int4=True)
    table = torch.tensor([[1, 2, m // 3], [0, 0, m // 4], [1, 0, m - m // 3 - m // 4]], dtype=torch.int64)
    lw = cam.LayerWeights(ws, ss)
    w2 = [w.transpose(1, 2).contiguous() for w in ws]  # [E, N, K]: W2 of the same shapes
    s2 = [torch.rand(3, k, generator=g) * 1e-2 + 1e-3 for _ in ws]
    y, ys = cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, table, None, cam.ops.gmm.GROUP_TABLE)
    want_y, want_ys, rows = ref4.gmm_swiglu_quant_multi_layer_w4a8(x, xs, ws, ss, table, None, ref8.GROUP_TABLE)
    assert rows == m
    # docs/gmm.md §6: y within ±1 (the device exp), y_scale within 1e-6 relative.
    assert int((y.to(torch.int16) - want_y.to(torch.int16)).abs().max()) <= 1
    assert torch.allclose(ys, want_ys, rtol=1e-6, atol=0)
    yy = torch.randint(-128, 128, (m, n), generator=g, dtype=torch.int8)
    out = cam.ops.gmm_multi_layer(yy, xs, cam.LayerWeights(w2, s2), table, None, cam.ops.gmm.GROUP_TABLE,
                                  out_scale=2.5)
    want = ref4.gmm_multi_layer_w4a8(yy, xs, w2, s2, table, None, ref8.GROUP_TABLE, out_scale=2.5)
    assert torch.equal(_bits(out), _bits(want))


# ----------------------------------------------------------------------------- per-group scales along K (W2)


@pytest.mark.parametrize("m,k,n,group_size", [(40, 256, 72, 64), (23, 96, 40, 32), (9, 512, 48, 256),
                                              (30, 384, 136, 128)])
def test_w2_per_group_scales_match_the_golden(m, k, n, group_size):
    g = torch.Generator().manual_seed(k + group_size)
    x, xs, ws, _ = _problem(k, m, k, n, 3, 2, int4=True)
    ss = [torch.rand(3, k // group_size, n, generator=g) * 1e-2 + 1e-3 for _ in ws]
    lw = cam.LayerWeights(ws, ss)
    gl = torch.tensor([m // 3, 0, m - m // 3 - 1], dtype=torch.int64)
    out = torch.full((m, n), 9.0, dtype=torch.bfloat16)
    cam.ops.gmm_multi_layer(x, xs, lw, gl, torch.tensor([1]), out=out, out_scale=0.5)
    want = ref4.gmm_multi_layer_w4a8(x, xs, ws, ss, gl, 1, out=torch.full((m, n), 9.0, dtype=torch.bfloat16),
                                     group_size=group_size, out_scale=0.5)
    assert torch.equal(_bits(out), _bits(want))
    assert bool((out[m - 1:].float() == 9.0).all())


def test_w2_per_group_scales_over_a_group_table():
    k, n, gs = 128, 64, 32
    g = torch.Generator().manual_seed(5)
    x, xs, ws, _ = _problem(5, 50, k, n, 2, 3, int4=True)
    ss = [torch.rand(2, k // gs, n, generator=g) * 1e-2 + 1e-3 for _ in ws]
    table = torch.tensor([[2, 1, 7], [0, 0, 13], [2, 0, 0], [1, 1, 20]], dtype=torch.int64)
    got = cam.ops.gmm_multi_layer(x, xs, cam.LayerWeights(ws, ss), table, None, cam.ops.gmm.GROUP_TABLE)
    want = ref4.gmm_multi_layer_w4a8(x, xs, ws, ss, table, None, ref8.GROUP_TABLE, group_size=gs)
    assert torch.equal(_bits(got), _bits(want))
    # The groups' scales matter: the per-channel result with group 0's scales is a different output.
    other = ref4.gmm_multi_layer_w4a8(x, xs, ws, [s[:, 0, :].contiguous() for s in ss], table, None,
                                      ref8.GROUP_TABLE)
    assert not torch.equal(_bits(got), _bits(other))


def test_per_group_scales_refused_by_name():
    x, xs, ws, _ = _problem(6, 8, 96, 32, 1, 1, int4=True)
    with pytest.raises(ValueError, match=r"weight_scales\[0\] .* splits K = 96 into 2 groups"):
        cam.ops.gmm_multi_layer(x, xs, cam.LayerWeights(ws, [torch.ones(1, 2, 32)]), torch.tensor([8]),
                                torch.tensor([0]))
    w1 = cam.LayerWeights(ws, [torch.ones(1, 4, 32)])  # groups of 24 rows: not a multiple of 32
    with pytest.raises(ValueError, match=r"weight_scales\[0\] .* splits K = 96 into 4 groups"):
        cam.ops.gmm_swiglu_quant_multi_layer(x, xs, w1, torch.tensor([8]), torch.tensor([0]))
    with pytest.raises(ValueError, match="5 K groups, which must divide K = 96"):
        cam.LayerWeights(ws, [torch.ones(1, 5, 32)])


@pytest.mark.parametrize("m,k,n,group_size,table", [(40, 256, 72, 64, False), (23, 96, 40, 32, True),
                                                    (30, 384, 136, 128, False), (5, 64, 9000, 32, False)])
def test_w1_per_group_scales_match_the_golden(m, k, n, group_size, table):
    # The last shape's N / 2 = 4500 output columns need two epilogue passes with the extra UB row: the spill path.
    g = torch.Generator().manual_seed(k + n)
    x, xs, ws, _ = _problem(k + 1, m, k, n, 3, 2, int4=True)
    ss = [torch.rand(3, k // group_size, n, generator=g) * 2e-2 + 1e-3 for _ in ws]
    lw = cam.LayerWeights(ws, ss)
    if table:
        gl, li, glt = torch.tensor([[1, 2, 9], [0, 0, 4], [1, 0, 10]], dtype=torch.int64), None, ref8.GROUP_TABLE
    else:
        gl, li, glt = torch.tensor([m // 3, 0, m - m // 3 - 1], dtype=torch.int64), 1, ref8.GROUP_LIST_COUNTS
    y = torch.full((m, n // 2), 77, dtype=torch.int8)
    ys = torch.full((m,), -1.5, dtype=torch.float32)
    cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, gl, None if table else torch.tensor([li]), glt, out=(y, ys))
    want_y, want_ys, rows = ref4.gmm_swiglu_quant_multi_layer_w4a8(x, xs, ws, ss, gl, li, glt, group_size=group_size)
    # docs/gmm.md §6: y within ±1 (the device exp), y_scale within 1e-6 relative; rows past the groups untouched.
    assert int((y[:rows].to(torch.int16) - want_y[:rows].to(torch.int16)).abs().max()) <= 1
    assert float((y[:rows] != want_y[:rows]).float().mean()) <= 1e-2
    assert torch.allclose(ys[:rows], want_ys[:rows], rtol=1e-6, atol=0)
    assert bool((y[rows:] == 77).all()) and bool((ys[rows:] == -1.5).all())


def test_per_group_w1_w2_with_out_scale_replay_equals_eager():
    """The W4A8 forms inside a captured graph: per-group scales in both ops and W2's output scale, replayed over new
    static inputs, equal the eager calls bit for bit."""
    m, k, i, h, gs = 24, 128, 64, 96, 32
    g = torch.Generator().manual_seed(9)
    x, xs, w1s, _ = _problem(9, m, k, 2 * i, 2, 2, int4=True)
    s1 = [torch.rand(2, k // gs, 2 * i, generator=g) * 2e-2 + 1e-3 for _ in w1s]
    w2s = [torch.randint(-8, 8, (2, i, h), generator=g, dtype=torch.int8) for _ in range(2)]
    s2 = [torch.rand(2, i // gs, h, generator=g) * 2e-2 + 1e-3 for _ in w2s]
    lw1, lw2 = cam.LayerWeights(w1s, s1), cam.LayerWeights(w2s, s2)
    gl, li = torch.tensor([10, 9], dtype=torch.int64), torch.tensor([1], dtype=torch.int64)
    y, ys = torch.zeros(m, i, dtype=torch.int8), torch.zeros(m)
    out = torch.zeros(m, h, dtype=torch.bfloat16)

    def chain():
        cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw1, gl, li, out=(y, ys))
        cam.ops.gmm_multi_layer(y, ys, lw2, gl, li, out=out, out_scale=2.5)

    chain()  # eager warm-up: the persistent address tables exist before the capture
    graph = cam.Graph()
    with graph.capture():
        chain()
    for seed in range(3):
        g2 = torch.Generator().manual_seed(100 + seed)
        x.copy_(torch.randint(-128, 128, x.shape, generator=g2, dtype=torch.int8))
        gl.copy_(torch.tensor([seed * 5, 20 - seed * 5]))
        li.fill_(seed % 2)
        out.fill_(0)
        graph.replay()
        got = out.clone()
        y2, ys2 = cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw1, gl, li)
        want = cam.ops.gmm_multi_layer(y2, ys2, lw2, gl, li, out_scale=2.5)
        assert torch.equal(_bits(got[:20]), _bits(want[:20]))
    graph.reset()
