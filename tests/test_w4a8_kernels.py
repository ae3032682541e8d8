"""The W4A8 kernels (docs/gmm.md §9, route (a)): ``cam.LayerWeights(format="int4")`` reaches W1 and W2 packed (half
the bytes), x is split into int4 halves on the vector cores, the cube multiplies int4 by int4 and the epilogues
recombine ``16·hi + lo + 8·colsum`` exactly before the dequant. Checked against ``cam.reference.w4a8`` (written from
the contract with a direct int64 product, not through the split): W2 bit for bit, W1 within docs/gmm.md §6's
tolerance; single-layer and group-table forms, per channel and per K group, eager and captured."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import cam
from cam.reference import gmm as ref8
from cam.reference import w4a8 as ref4

TABLE = cam.ops.gmm.GROUP_TABLE


def _bits(t):
    return t.view(torch.int16)


def _problem(seed, m, k, n, experts, layers, group_size=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    xs = torch.rand(m, generator=g) * 1e-2 + 1e-3
    ws = [torch.randint(-8, 8, (experts, k, n), generator=g, dtype=torch.int8) for _ in range(layers)]
    shape = (experts, n) if group_size is None else (experts, k // group_size, n)
    ss = [torch.rand(*shape, generator=g) * 1e-2 + 1e-3 for _ in range(layers)]
    return g, x, xs, ws, ss


def _counts(g, m, experts):
    """Random counts over `experts` whose total is at most m (some rows past it, some experts empty)."""
    cuts = sorted(int(v) for v in torch.randint(0, m + 1, (experts,), generator=g))
    counts = [cuts[0]] + [b - a for a, b in zip(cuts, cuts[1:])]
    return torch.tensor(counts, dtype=torch.int64)


def _max_diff(a, b):
    """Largest |a - b| of two int8 tensors (0 for empty ones)."""
    d = (a.to(torch.int16) - b.to(torch.int16)).abs()
    return int(d.max()) if d.numel() else 0


def _table(g, m, experts, layers, groups):
    rows = _counts(g, m, groups)
    lay = torch.randint(0, layers, (groups,), generator=g)
    exp = torch.randint(0, experts, (groups,), generator=g)
    return torch.stack([lay, exp, rows], dim=1).to(torch.int64)


def test_the_ops_take_the_packed_int4_storage():
    _, x, xs, ws, ss = _problem(1, 8, 256, 128, 2, 1)
    w4, w8 = cam.LayerWeights(ws, ss, format="int4"), cam.LayerWeights(ws, ss)
    assert w4.weights[0].dtype == torch.uint8
    assert w4.weights[0].numel() * 2 == w8.weights[0].numel()
    # The int8 kernels refuse uint8 weights, so a correct W2 result here is the int4 path's.
    gl = torch.tensor([3, 5], dtype=torch.int64)
    got = cam.ops.gmm_multi_layer(x, xs, w4, gl, torch.tensor([0]))
    assert torch.equal(_bits(got), _bits(ref4.gmm_multi_layer_w4a8(x, xs, ws, ss, gl, 0)))


@pytest.mark.parametrize("seed", range(6))
def test_w2_int4_matches_the_golden_over_random_shapes(seed):
    """Per channel (any K: the split pads K to 64) and per K group (multiples of 64), counts or cumsum, random layer,
    an output scale or none: bit-exact, rows past the groups untouched, and equal to the int8 kernels on the same
    integer weights (the recombination is exact)."""
    g = torch.Generator().manual_seed(900 + seed)
    m = int(torch.randint(1, 150, (1,), generator=g))
    n = int(torch.randint(1, 300, (1,), generator=g))
    experts, layers = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 4, (1,), generator=g))
    if seed % 2:
        group_size = 64 * int(torch.randint(1, 4, (1,), generator=g))
        k = group_size * int(torch.randint(1, 5, (1,), generator=g))
    else:
        group_size, k = None, int(torch.randint(1, 700, (1,), generator=g))
    g, x, xs, ws, ss = _problem(seed, m, k, n, experts, layers, group_size)
    counts = _counts(g, m, experts)
    glt = seed % 3 == 1 and ref8.GROUP_LIST_CUMSUM or ref8.GROUP_LIST_COUNTS
    gl = counts.cumsum(0) if glt == ref8.GROUP_LIST_CUMSUM else counts
    layer = int(torch.randint(0, layers, (1,), generator=g))
    out_scale = None if seed % 3 == 0 else 0.5 + seed
    out = torch.full((m, n), 9.0, dtype=torch.bfloat16)
    cam.ops.gmm_multi_layer(x, xs, cam.LayerWeights(ws, ss, format="int4"), gl, torch.tensor([layer]), glt, out=out,
                            out_scale=out_scale)
    want = ref4.gmm_multi_layer_w4a8(x, xs, ws, ss, gl, layer, glt, out=torch.full((m, n), 9.0, dtype=torch.bfloat16),
                                     group_size=group_size, out_scale=out_scale)
    assert torch.equal(_bits(out), _bits(want))
    total = int(counts.sum())
    assert bool((out[total:].float() == 9.0).all())
    int8 = cam.ops.gmm_multi_layer(x, xs, cam.LayerWeights(ws, ss), gl, torch.tensor([layer]), glt,
                                   out_scale=out_scale)
    assert torch.equal(_bits(out[:total]), _bits(int8[:total]))


@pytest.mark.parametrize("seed", range(4))
def test_w1_int4_matches_the_golden_over_random_shapes(seed):
    g = torch.Generator().manual_seed(700 + seed)
    m = int(torch.randint(1, 130, (1,), generator=g))
    n = 2 * int(torch.randint(1, 160, (1,), generator=g))
    experts, layers = int(torch.randint(1, 4, (1,), generator=g)), int(torch.randint(1, 4, (1,), generator=g))
    if seed % 2:
        group_size = 64 * int(torch.randint(1, 3, (1,), generator=g))
        k = group_size * int(torch.randint(1, 5, (1,), generator=g))
    else:
        group_size, k = None, int(torch.randint(1, 600, (1,), generator=g))
    g, x, xs, ws, ss = _problem(seed + 40, m, k, n, experts, layers, group_size)
    counts = _counts(g, m, experts)
    layer = int(torch.randint(0, layers, (1,), generator=g))
    limit = 0.02 if seed == 3 else None
    y = torch.full((m, n // 2), 77, dtype=torch.int8)
    ys = torch.full((m,), -1.5, dtype=torch.float32)
    cam.ops.gmm_swiglu_quant_multi_layer(x, xs, cam.LayerWeights(ws, ss, format="int4"), counts,
                                         torch.tensor([layer]), out=(y, ys), swiglu_limit=limit)
    want_y, want_ys, rows = ref4.gmm_swiglu_quant_multi_layer_w4a8(x, xs, ws, ss, counts, layer,
                                                                   group_size=group_size, swiglu_limit=limit)
    assert rows == int(counts.sum())
    # docs/gmm.md §6: y within ±1 (the device exp), y_scale within 1e-6 relative; rows past the groups untouched.
    assert _max_diff(y[:rows], want_y[:rows]) <= 1
    assert float((y[:rows] != want_y[:rows]).float().mean().nan_to_num(0)) <= 1e-2
    assert torch.allclose(ys[:rows], want_ys[:rows], rtol=1e-6, atol=0)
    assert bool((y[rows:] == 77).all()) and bool((ys[rows:] == -1.5).all())


@pytest.mark.parametrize("group_size", [None, 64, 128])
def test_group_table_batches_equal_the_golden_and_one_group_calls(group_size):
    """A batch of groups from several layers in one launch of each op: W2 bit-exact against the golden and against
    serving each group alone; W1 against the golden within §6."""
    m, k, n, experts, layers = 90, 256, 96, 3, 3
    g, x, xs, ws, ss = _problem(11, m, k, n, experts, layers, group_size)
    table = _table(g, m, experts, layers, 6)
    lw = cam.LayerWeights(ws, ss, format="int4")
    out = cam.ops.gmm_multi_layer(x, xs, lw, table, None, TABLE)
    assert torch.equal(_bits(out), _bits(ref4.gmm_multi_layer_w4a8(x, xs, ws, ss, table, None, ref8.GROUP_TABLE,
                                                                    group_size=group_size)))
    start = 0
    for layer, expert, rows in table.tolist():
        if rows:
            one = cam.ops.gmm_multi_layer(x[start:start + rows].contiguous(), xs[start:start + rows].contiguous(), lw,
                                          torch.tensor([[layer, expert, rows]]), None, TABLE)
            assert torch.equal(_bits(one), _bits(out[start:start + rows]))
        start += rows
    y, ys = cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, table, None, TABLE)
    want_y, want_ys, rows = ref4.gmm_swiglu_quant_multi_layer_w4a8(x, xs, ws, ss, table, None, ref8.GROUP_TABLE,
                                                                   group_size=group_size)
    assert _max_diff(y[:rows], want_y[:rows]) <= 1
    assert torch.allclose(ys[:rows], want_ys[:rows], rtol=1e-6, atol=0)


def test_w1_long_rows_spill_and_long_k_streams():
    """N/2 past one UB pass (the spill over the hi plane) and a 128-row tile over K = 4096, too long for a resident
    A (the streamed split A tiles)."""
    for m, k, n in ((6, 128, 9000), (130, 4096, 64)):
        _, x, xs, ws, ss = _problem(m + k, m, k, n, 2, 1, 64)
        gl = torch.tensor([m // 2, m - m // 2], dtype=torch.int64)
        y, ys = cam.ops.gmm_swiglu_quant_multi_layer(x, xs, cam.LayerWeights(ws, ss, format="int4"), gl,
                                                     torch.tensor([0]))
        want_y, want_ys, rows = ref4.gmm_swiglu_quant_multi_layer_w4a8(x, xs, ws, ss, gl, 0, group_size=64)
        assert int((y.to(torch.int16) - want_y.to(torch.int16)).abs().max()) <= 1
        assert torch.allclose(ys, want_ys, rtol=1e-6, atol=0)


def test_int4_chain_replay_equals_eager():
    """W1 then W2 on int4 weights inside a captured graph, replayed over new static inputs (layer, counts, x),
    equals the eager calls bit for bit."""
    m, k, i, h, gs = 24, 128, 128, 96, 64
    g, x, xs, w1s, s1 = _problem(9, m, k, 2 * i, 2, 2, gs)
    w2s = [torch.randint(-8, 8, (2, i, h), generator=g, dtype=torch.int8) for _ in range(2)]
    s2 = [torch.rand(2, h, generator=g) * 2e-2 + 1e-3 for _ in w2s]
    lw1, lw2 = cam.LayerWeights(w1s, s1, format="int4"), cam.LayerWeights(w2s, s2, format="int4")
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
        w_y, w_ys, _ = ref4.gmm_swiglu_quant_multi_layer_w4a8(x, xs, w1s, s1, gl, seed % 2, group_size=gs)
        assert int((y2[:20].to(torch.int16) - w_y[:20].to(torch.int16)).abs().max()) <= 1
    graph.reset()


def test_bad_int4_input_is_refused_by_name_before_anything_is_written():
    _, x, xs, ws, _ = _problem(6, 8, 96, 32, 1, 1)
    out = torch.full((8, 32), 9.0, dtype=torch.bfloat16)
    gl, li = torch.tensor([8]), torch.tensor([0])
    # Groups of 32 rows: fine for int8 storage, not for int4 (an int4 fractal holds 64 K values).
    lw = cam.LayerWeights(ws, [torch.ones(1, 3, 32)], format="int4")
    with pytest.raises(ValueError, match=r"weight_scales\[0\] splits K = 96 into 3 groups of 32 rows: with int4"):
        cam.ops.gmm_multi_layer(x, xs, lw, gl, li, out=out)
    with pytest.raises(ValueError, match=r"weight_scales\[0\] splits K = 96 into 3 groups of 32 rows: with int4"):
        cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, gl, li)
    lw = cam.LayerWeights(ws, [torch.ones(1, 32)], format="int4")
    op = torch.ops.cam.gmm_multi_layer
    cs = lw.colsums_all
    with pytest.raises(ValueError, match=r"weight_colsums\[0\]"):
        op(x, xs, list(lw.weights), list(lw.scales), gl, li, 1, out, None, torch.zeros(1, 2, 1, 32, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"weight_colsums\[0\]"):
        op(x, xs, list(lw.weights), list(lw.scales), gl, li, 1, out, None, cs.float())
    with pytest.raises(ValueError, match=r"weight_colsums \(2 layers\)"):
        op(x, xs, list(lw.weights), list(lw.scales), gl, li, 1, out, None, torch.cat([cs, cs]))
    with pytest.raises(ValueError, match=r"weights\[0\] must be packed int4"):
        op(x, xs, [lw.weights[0][:, :1].contiguous()], list(lw.scales), gl, li, 1, out, None, cs)
    with pytest.raises(TypeError, match=r"weights\[0\]"):
        op(x, xs, [lw.weights[0].view(torch.int8)], list(lw.scales), gl, li, 1, out, None, cs)
    assert bool((out.float() == 9.0).all())


def test_device_detected_errors_write_nothing():
    _, x, xs, ws, ss = _problem(7, 16, 128, 32, 2, 2)
    lw = cam.LayerWeights(ws, ss, format="int4")
    out = torch.full((16, 32), 9.0, dtype=torch.bfloat16)
    with pytest.raises(cam.DeviceArgumentError, match="layer_index"):
        cam.ops.gmm_multi_layer(x, xs, lw, torch.tensor([4, 4]), torch.tensor([2]), out=out)
    with pytest.raises(cam.DeviceArgumentError, match="group_table"):
        cam.ops.gmm_multi_layer(x, xs, lw, torch.tensor([[0, 0, 4], [1, 2, 3]]), None, TABLE, out=out)
    assert bool((out.float() == 9.0).all())


@pytest.mark.parametrize("group_size", [None, 64])
def test_consumer_layout_experts_through_the_int4_kernels(group_size):
    """A tiny DeepSeek-V3-shaped MoE layer's float experts in the consumer's W4A8 layout (int4 packed eight to an
    int32 [E, K, N/8], int64-encoded scales, the fp32 assist matrix), decoded by cam.w4a8.from_consumer into
    LayerWeights(format="int4"): W1 -> W2 through the int4 kernels equals the goldens on the decoded weights (W2 bit
    for bit from W1's output), and stays within the activation-quantization bound of the float FFN run with the same
    dequantized weights."""
    from cam import w4a8

    layout = "int32_low_nibble_first"
    g = torch.Generator().manual_seed(36)
    e, h, i, layers, m = 4, 256, 128, 2, 40
    floats = [(torch.randn(e, h, 2 * i, generator=g) * 0.05, torch.randn(e, i, h, generator=g) * 0.05)
              for _ in range(layers)]

    def consumer(w):
        q, s = cam.quantize_weight(w, bits=4, group_size=group_size)
        s = w4a8.decode_scale_int64(w4a8.encode_scale_int64(s))
        return w4a8.pack_int4(q, layout=layout), w4a8.encode_scale_int64(s), w4a8.assist_matrix(q, s, group_size)

    decoded = [[w4a8.from_consumer(*consumer(w), layout=layout, group_size=group_size) for w in pair]
               for pair in floats]
    q1, s1 = [d[0][0] for d in decoded], [d[0][1] for d in decoded]
    q2, s2 = [d[1][0] for d in decoded], [d[1][1] for d in decoded]
    lw1, lw2 = cam.LayerWeights(q1, s1, format="int4"), cam.LayerWeights(q2, s2, format="int4")
    x = torch.randn(m, h, generator=g)
    xq, xs = cam.reference.dynamic_quant(x)
    counts = torch.tensor([12, 0, 20, 8], dtype=torch.int64)
    for layer in range(layers):
        li = torch.tensor([layer])
        y, ys = cam.ops.gmm_swiglu_quant_multi_layer(xq, xs, lw1, counts, li)
        want_y, want_ys, _ = ref4.gmm_swiglu_quant_multi_layer_w4a8(xq, xs, q1, s1, counts, layer,
                                                                    group_size=group_size)
        assert _max_diff(y, want_y) <= 1 and torch.allclose(ys, want_ys, rtol=1e-6, atol=0)
        out = cam.ops.gmm_multi_layer(y, ys, lw2, counts, li)
        assert torch.equal(_bits(out), _bits(ref4.gmm_multi_layer_w4a8(y, ys, q2, s2, counts, layer,
                                                                        group_size=group_size)))
        # The float FFN with the same dequantized weights, per row of its expert.
        deq1 = w4a8.dequantize_weight_int4(q1[layer], s1[layer], group_size)
        deq2 = w4a8.dequantize_weight_int4(q2[layer], s2[layer], group_size)
        start, worst = 0, 0.0
        for ex, rows in enumerate(counts.tolist()):
            if rows:
                c = x[start:start + rows] @ deq1[ex]
                act, gate = c[:, :i], c[:, i:]
                want = (torch.nn.functional.silu(act) * gate) @ deq2[ex]
                got = out[start:start + rows].float()
                worst = max(worst, float((got - want).norm() / want.norm()))
            start += rows
        assert worst < 0.05, worst


_LAUNCHES = """
import sys
import torch
import cam
g = torch.Generator().manual_seed(5)
x = torch.randint(-128, 128, (40, 256), generator=g, dtype=torch.int8)
ws = [torch.randint(-8, 8, (2, 256, 128), generator=g, dtype=torch.int8)]
ss = [torch.rand(2, *([2] if sys.argv[2] == "grouped" else []), 128, generator=g) + 0.5]
lw = cam.LayerWeights(ws, ss, format="int4")
if sys.argv[1] == "w2":
    cam.ops.gmm_multi_layer(x, torch.rand(40) + 0.5, lw, torch.tensor([30, 10]), torch.tensor([0]))
else:
    cam.ops.gmm_swiglu_quant_multi_layer(x, torch.rand(40) + 0.5, lw, torch.tensor([30, 10]), torch.tensor([0]))
"""


def _launched(tmp_path, op, scales):
    """The kernels one W4A8 call launches, as the twin's timing record names them."""
    path = tmp_path / f"{op}-{scales}.jsonl"
    env = dict(os.environ, CAM_TWIN_TIMING=str(path))
    subprocess.run([sys.executable, "-c", _LAUNCHES, op, scales], env=env, check=True, timeout=300)
    kernels = {json.loads(line).get("kernel") for line in path.read_text().splitlines() if line.startswith("{")}
    kernels.discard(None)
    return kernels


@pytest.mark.parametrize("scales", ["channel", "grouped"])
def test_w2_w4a8_is_the_split_then_one_mixed_launch(tmp_path, scales):
    # W4A8 W2, per channel and per K group: the activation split, then the mixed kernel whose vector cores recombine
    # and dequantize each unit from the ring (docs/gmm.md §9); no cube-only launch writing a full int32 accumulator
    # and no epilogue launch reading it back.
    assert _launched(tmp_path, "w2", scales) == {"cam_gmm_split_int4", "cam_gmm_multi_layer"}


@pytest.mark.parametrize("scales", ["channel", "grouped"])
def test_w1_w4a8_is_the_split_then_one_mixed_launch(tmp_path, scales):
    # W4A8 W1 likewise: the split, then the mixed kernel whose vector cores recombine each row tile from the ring and
    # run SwiGLU and the per-token quant; no cube-only launch and no separate epilogue launch.
    assert _launched(tmp_path, "w1", scales) == {"cam_gmm_split_int4", "cam_gmm_swiglu_quant_multi_layer"}
