"""cam.ops.gmm_swiglu_quant_multi_layer (W1) and cam.ops.gmm_multi_layer (W2) on the current backend against the
independent goldens in cam.reference.gmm (docs/gmm.md §6 tolerance policy).

Shapes are small so the file runs in well under a minute on 2 CPUs; K, N and M are chosen to cross the cube tile
sizes (tk = 256, tn = 128, tm = 128 on the twin) and to leave partial fractals (K not a multiple of 16/32, N not a
multiple of 32)."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import cam
from cam.reference import gmm as ref

pytestmark = pytest.mark.timeout(120)

COUNTS, CUMSUM = ref.GROUP_LIST_COUNTS, ref.GROUP_LIST_CUMSUM


def _problem(seed, m, k, n, e_local, layers, scale_mag=1e-2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    xs = (torch.rand(m, generator=g) * scale_mag + scale_mag / 10).float()
    ws = [torch.randint(-128, 128, (e_local, k, n), generator=g, dtype=torch.int8) for _ in range(layers)]
    ss = [(torch.rand(e_local, n, generator=g) * scale_mag + scale_mag / 10).float() for _ in range(layers)]
    return x, xs, ws, ss


def _gl(counts, group_list_type=COUNTS):
    t = torch.tensor(counts, dtype=torch.int64)
    return t if group_list_type == COUNTS else torch.cumsum(t, 0)


def _li(layer):
    return torch.tensor([layer], dtype=torch.int64)


def _bits(t):
    return t.view(torch.int16)


def _w2(x, xs, lw, gl, layer, glt, sentinel=-3.0):
    out = torch.full((x.shape[0], lw.n), sentinel, dtype=torch.bfloat16)
    res = cam.ops.gmm_multi_layer(x, xs, lw, gl, _li(layer), glt, out=out)
    assert res is out
    return out


def _w2_golden(x, xs, ws, ss, gl, layer, glt, sentinel=-3.0):
    out = torch.full((x.shape[0], ws[0].shape[2]), sentinel, dtype=torch.bfloat16)
    return ref.gmm_multi_layer(x, xs, ws, ss, gl, layer, glt, out=out)


def _w1(x, xs, lw, gl, layer, glt, y_sentinel=77, s_sentinel=-1.5):
    y = torch.full((x.shape[0], lw.n // 2), y_sentinel, dtype=torch.int8)
    ys = torch.full((x.shape[0],), s_sentinel, dtype=torch.float32)
    ry, rys = cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, gl, _li(layer), glt, out=(y, ys))
    assert ry is y and rys is ys
    return y, ys


def _w1_golden(x, xs, ws, ss, gl, layer, glt, y_sentinel=77, s_sentinel=-1.5):
    y = torch.full((x.shape[0], ws[0].shape[2] // 2), y_sentinel, dtype=torch.int8)
    ys = torch.full((x.shape[0],), s_sentinel, dtype=torch.float32)
    ref.gmm_swiglu_quant_multi_layer(x, xs, ws, ss, gl, layer, glt, y, ys)
    return y, ys


# W1 tolerance (docs/gmm.md §6). The golden's exp is float64 rounded once to fp32 (correctly rounded in effect);
# the kernel's Exp is the backend's fp32 exp (the twin: std::exp on float; Ascend: the vector unit's Exp). They can
# differ by an ulp or two, which moves s by a few ulps: rint(s * inv) can then flip across a .5 boundary (±1 in y)
# and amax can move by a few ulps (y_scale relative error ~1e-7 per ulp; 1e-6 allows ~8 ulps).
W1_MAX_ABS_DIFF = 1
W1_MAX_MISMATCH_RATE = 1e-3
W1_SCALE_RTOL = 1e-6


class W1Compare:
    """Accumulates W1 mismatches over a test so the rate is judged over every element it checked."""

    def __init__(self):
        self.elements = 0
        self.mismatches = 0

    def check(self, got, want, rows):
        y, ys = got
        ey, eys = want
        if rows == 0:
            return
        d = (y[:rows].to(torch.int32) - ey[:rows].to(torch.int32)).abs()
        assert int(d.max()) <= W1_MAX_ABS_DIFF, f"y differs by {int(d.max())} > {W1_MAX_ABS_DIFF}"
        self.elements += d.numel()
        self.mismatches += int((d != 0).sum())
        a, b = ys[:rows].double(), eys[:rows].double()
        both_zero = (a == 0) & (b == 0)
        rel = ((a - b).abs() / b.abs().clamp_min(1e-300)).masked_fill(both_zero, 0.0)
        assert float(rel.max()) <= W1_SCALE_RTOL, f"y_scale relative error {float(rel.max())}"

    def finish(self):
        rate = self.mismatches / max(self.elements, 1)
        print(f"W1: {self.mismatches} of {self.elements} int8 outputs differ from the golden (by 1)")
        assert rate <= W1_MAX_MISMATCH_RATE, f"{self.mismatches}/{self.elements} int8 outputs differ by 1"
        return rate


def _assert_tail_untouched(t, rows, sentinel):
    tail = t[rows:]
    if tail.dtype == torch.bfloat16:
        assert torch.equal(_bits(tail), _bits(torch.full_like(tail, sentinel))), "rows past the groups were written"
    else:
        assert bool((tail == sentinel).all()), "rows past the groups were written"


M, K, N, E, L = 12, 40, 72, 4, 3
COUNT_CASES = {
    "partial_tail": [3, 0, 5, 2],
    "one_group_all": [0, 0, 12, 0],
    "first_group_all": [12, 0, 0, 0],
    "all_empty": [0, 0, 0, 0],
    "skewed": [1, 1, 1, 9],
    "balanced_full": [3, 3, 3, 3],
}


@pytest.fixture(scope="module")
def small():
    x, xs, ws, ss = _problem(1, M, K, N, E, L)
    return x, xs, ws, ss, cam.LayerWeights(ws, ss)


# ----------------------------------------------------------------------------- int32 accumulation


def test_int32_accumulation_exact_small_values():
    # x, w in {-1, 0, 1} and K = 200: |acc| <= 200 is exact in bf16, so with unit scales out == acc for every
    # (row, column) of several units (two n tiles, an expert spanning a partial m tile, an empty expert).
    g = torch.Generator().manual_seed(5)
    m, k, n, e = 40, 200, 150, 3
    x = torch.randint(-1, 2, (m, k), generator=g, dtype=torch.int8)
    w = torch.randint(-1, 2, (e, k, n), generator=g, dtype=torch.int8)
    lw = cam.LayerWeights([w], [torch.ones(e, n)])
    counts = [7, 0, 33]
    out = cam.ops.gmm_multi_layer(x, torch.ones(m), lw, _gl(counts), _li(0))
    acc = ref.gmm_int32_reference(x, w, _gl(counts))
    assert torch.equal(out.float(), acc.float())
    assert int(acc.abs().max()) > 10  # the check is not vacuous


@pytest.mark.parametrize("k", [4096, 8192 + 16])
def test_int32_accumulation_exact_at_the_extremes(k):
    # All -128: acc = K * 2^14 (a power of two times K) in many 256-deep k steps; alternating 127/-128 weights give a
    # small exact result from huge cancelling partial sums. Both are exactly representable in bf16 for these K.
    x = torch.full((3, k), -128, dtype=torch.int8)
    w = torch.full((1, k, 40), -128, dtype=torch.int8)
    w[0, 1::2, 1] = 127
    lw = cam.LayerWeights([w], [torch.ones(1, 40)])
    out = cam.ops.gmm_multi_layer(x, torch.ones(3), lw, _gl([3]), _li(0))
    acc = ref.gmm_int32_reference(x, w, _gl([3]))
    assert acc[0, 0].item() == k * 16384
    assert torch.equal(_bits(out), _bits(acc.float().to(torch.bfloat16)))
    golden = ref.gmm_multi_layer(x, torch.ones(3), [w], [torch.ones(1, 40)], _gl([3]), 0)
    assert torch.equal(_bits(out), _bits(golden))


# ----------------------------------------------------------------------------- W2


@pytest.mark.parametrize("case", sorted(COUNT_CASES))
@pytest.mark.parametrize("glt", [CUMSUM, COUNTS])
def test_w2_bit_exact(small, case, glt):
    x, xs, ws, ss, lw = small
    counts = COUNT_CASES[case]
    gl = _gl(counts, glt)
    out = _w2(x, xs, lw, gl, 2, glt)
    want = _w2_golden(x, xs, ws, ss, gl, 2, glt)
    assert torch.equal(_bits(out), _bits(want))
    _assert_tail_untouched(out, sum(counts), -3.0)


@pytest.mark.parametrize(
    "m,k,n,counts",
    [
        (150, 300, 200, [0, 140, 10]),  # one expert spans two m tiles; K: two k steps, partial; N: two n tiles
        (45, 17, 31, [20, 0, 25]),  # K = 17 (odd number of 16-row NZ blocks), N inside one 32-column block
        (33, 256, 129, [11, 11, 11]),  # K exactly one k step; N one column past a tile
    ],
)
def test_w2_tile_edges(m, k, n, counts):
    x, xs, ws, ss = _problem(m * 7 + k, m, k, n, len(counts), 2)
    lw = cam.LayerWeights(ws, ss)
    out = _w2(x, xs, lw, _gl(counts), 1, COUNTS)
    assert torch.equal(_bits(out), _bits(_w2_golden(x, xs, ws, ss, _gl(counts), 1, COUNTS)))


def test_w2_x_streamed_when_k_is_too_long_for_resident_l1():
    # tm = 128 rows x K = 3900 (3904 padded to 32) = 499 712 bytes of resident A plus two 256 x 64 B tiles is more
    # than the twin's L1 (524 288 minus 128 reserved bytes), so tiling streams A one k step at a time.
    counts = [0, 140, 10]
    x, xs, ws, ss = _problem(29, 150, 3900, 40, len(counts), 1)
    lw = cam.LayerWeights(ws, ss)
    out = _w2(x, xs, lw, _gl(counts), 0, COUNTS)
    assert torch.equal(_bits(out), _bits(_w2_golden(x, xs, ws, ss, _gl(counts), 0, COUNTS)))


def test_w2_rounding_and_overflow():
    y = torch.tensor([[1], [1], [127]], dtype=torch.int8)
    ys = torch.tensor([1.0, 1.0, 3e38], dtype=torch.float32)
    w = [torch.ones(1, 1, 3, dtype=torch.int8)]
    s = [torch.tensor([[1.00390625, 1.01171875, 1.0]], dtype=torch.float32)]  # ties to even down / up
    out = cam.ops.gmm_multi_layer(y, ys, cam.LayerWeights(w, s), _gl([3]), _li(0))
    assert out[0, 0].item() == 1.0 and out[0, 1].item() == 1.015625 and math.isinf(out[2, 2].item())
    assert torch.equal(_bits(out), _bits(ref.gmm_multi_layer(y, ys, w, s, _gl([3]), 0)))


def test_w2_layer_selection_reads_the_device_index(small):
    # One LayerWeights, one layer_index tensor whose *contents* change between calls: the host passes the same
    # arguments every time; only the device value picks the layer.
    x, xs, ws, ss, lw = small
    gl = _gl([4, 2, 3, 3])
    li = _li(0)
    outs = []
    for layer in range(L):
        li.fill_(layer)
        out = torch.zeros(M, N, dtype=torch.bfloat16)
        cam.ops.gmm_multi_layer(x, xs, lw, gl, li, out=out)
        assert torch.equal(_bits(out), _bits(_w2_golden(x, xs, ws, ss, gl, layer, COUNTS, sentinel=0.0)))
        outs.append(out)
    for i in range(L):
        for j in range(i + 1, L):
            assert not torch.equal(outs[i], outs[j])


def test_w2_m_zero():
    x, xs, ws, ss = _problem(13, 0, 16, 8, E, 2)
    out = cam.ops.gmm_multi_layer(x, xs, cam.LayerWeights(ws, ss), _gl([0] * E), _li(1))
    assert tuple(out.shape) == (0, 8) and out.dtype == torch.bfloat16


# ----------------------------------------------------------------------------- W1


@pytest.mark.parametrize("glt", [CUMSUM, COUNTS])
def test_w1_matches_golden(small, glt):
    x, xs, ws, ss, lw = small
    cmp = W1Compare()
    for case in sorted(COUNT_CASES):
        counts = COUNT_CASES[case]
        gl = _gl(counts, glt)
        got = _w1(x, xs, lw, gl, 1, glt)
        want = _w1_golden(x, xs, ws, ss, gl, 1, glt)
        rows = sum(counts)
        cmp.check(got, want, rows)
        _assert_tail_untouched(got[0], rows, 77)
        _assert_tail_untouched(got[1], rows, -1.5)
    cmp.finish()


# DeepSeek-V4's clamped SwiGLU (swiglu_limit). With scale_mag 0.05 the dequantized halves reach the tens, so a limit
# of 3 clamps most elements of both halves and 0.5 nearly all; inf and the default clamp nothing.
@pytest.mark.parametrize("limit", [3.0, 0.5, 0.0, float("inf")])
def test_w1_swiglu_limit_matches_golden(limit):
    x, xs, ws, ss = _problem(7, 24, 64, 96, 2, 2, scale_mag=5e-2)
    lw = cam.LayerWeights(ws, ss)
    gl = _gl([10, 14])
    y = torch.full((24, 48), 77, dtype=torch.int8)
    ys = torch.full((24,), -1.5, dtype=torch.float32)
    cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, gl, _li(1), out=(y, ys), swiglu_limit=limit)
    want = ref.gmm_swiglu_quant_multi_layer(x, xs, ws, ss, gl, 1, COUNTS, swiglu_limit=limit)[:2]
    cmp = W1Compare()
    cmp.check((y, ys), want, 24)
    cmp.finish()
    plain = ref.gmm_swiglu_quant_multi_layer(x, xs, ws, ss, gl, 1, COUNTS)[:2]
    # The clamp has to matter at finite limits (else this would not test it) and change nothing at inf.
    assert torch.equal(want[0], plain[0]) == (limit == float("inf"))


def test_w1_swiglu_limit_none_is_the_plain_swiglu(small):
    x, xs, ws, ss, lw = small
    gl = _gl(COUNT_CASES["skewed"])
    y0, ys0 = cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, gl, _li(2))
    y1, ys1 = cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, gl, _li(2), swiglu_limit=None)
    assert torch.equal(y0, y1) and torch.equal(ys0.view(torch.int32), ys1.view(torch.int32))


@pytest.mark.parametrize("limit, error", [(float("nan"), ValueError), (-1.0, ValueError), ("3", TypeError)])
def test_w1_swiglu_limit_refused_before_anything_is_written(small, limit, error):
    x, xs, ws, ss, lw = small
    y = torch.full((M, N // 2), 77, dtype=torch.int8)
    ys = torch.full((M,), -1.5, dtype=torch.float32)
    with pytest.raises(error, match="swiglu_limit"):
        cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, _gl([3, 3, 3, 3]), _li(0), out=(y, ys), swiglu_limit=limit)
    assert bool((y == 77).all()) and bool((ys == -1.5).all())


def test_w1_tile_edges_and_extremes():
    cmp = W1Compare()
    for m, k, n, counts in [(150, 300, 200, [0, 140, 10]), (45, 17, 62, [20, 0, 25]), (20, 40, 2, [5, 15])]:
        x, xs, ws, ss = _problem(m + k + n, m, k, n, len(counts), 2)
        lw = cam.LayerWeights(ws, ss)
        if m == 20:
            x[0].zero_()  # amax = 0 -> y = 0, scale = 0
            xs[1] = 1.0  # |act| ~ 1e2: exp(-act) overflows to inf or underflows to 0
            xs[2] = 1e-22  # s lands in / below the subnormal range -> zero row
        got = _w1(x, xs, lw, _gl(counts), 0, COUNTS)
        want = _w1_golden(x, xs, ws, ss, _gl(counts), 0, COUNTS)
        cmp.check(got, want, sum(counts))
        if m == 20:
            assert bool((got[0][0] == 0).all()) and got[1][0].item() == 0.0 and got[1][2].item() == 0.0
    cmp.finish()


def test_w1_row_tiles_sized_to_the_group():
    # The mixed kernel's row tiles (docs/gmm.md §5; the split itself: tests/test_gmm_row_tiles.py): 260 rows are two
    # tiles of 130 where fixed 128-row tiles take three, 300 three of 100, and groups of 0, 1,
    # 16 and 17 rows one tile or none, all dealt over the twin's two AI cores across group boundaries. N = 520 takes
    # the 144 x 224 C tile that fills L0C, in three n-tiles (224, 224, 72). Rows past the groups stay untouched.
    counts = [260, 0, 1, 16, 17, 300, 0]
    rows = sum(counts)
    x, xs, ws, ss = _problem(38, rows + 5, 64, 520, len(counts), 2)
    lw = cam.LayerWeights(ws, ss)
    cmp = W1Compare()
    for glt in (COUNTS, CUMSUM):
        got = _w1(x, xs, lw, _gl(counts, glt), 1, glt)
        cmp.check(got, _w1_golden(x, xs, ws, ss, _gl(counts, glt), 1, glt), rows)
        _assert_tail_untouched(got[0], rows, 77)
        _assert_tail_untouched(got[1], rows, -1.5)
    cmp.finish()


def test_w1_x_streamed_in_a_chunks_longer_than_b_chunks():
    # 64 rows x K = 10000 of x do not fit L1 (twin: 524 160 bytes), so x streams (docs/gmm.md §5): B in chunks of
    # 512 (four 128-deep steps), A in chunks of 2176 (17 steps), so A chunks start inside B chunks; the last A chunk
    # is 1296 long and the last B chunk 272 (two steps and a 16-deep one, one partial 32-deep fractal). N = 200 is one
    # n-tile of seven 32-column blocks, the last partial. L0 loads run over the shorter side: A per m-block (4), but
    # per k-block in the 16-deep last step; B per k-block (4 of them, or 1, against 7 column blocks).
    counts = [37, 0, 19]
    x, xs, ws, ss = _problem(41, 56, 10000, 200, len(counts), 1)
    lw = cam.LayerWeights(ws, ss)
    cmp = W1Compare()
    got = _w1(x, xs, lw, _gl(counts), 0, COUNTS)
    cmp.check(got, _w1_golden(x, xs, ws, ss, _gl(counts), 0, COUNTS), sum(counts))
    cmp.finish()


_W1_READS = """
import sys, torch, cam
g = torch.Generator().manual_seed(3)
m, k, n = 56, 10000, 768
x = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
xs = torch.rand(m, generator=g) * 1e-2 + 1e-3
w = [torch.randint(-128, 128, (1, k, n), generator=g, dtype=torch.int8)]
s = [torch.rand(1, n, generator=g) * 1e-2 + 1e-3]
cam.ops.gmm_swiglu_quant_multi_layer(x, xs, cam.LayerWeights(w, s), torch.tensor([m]), torch.tensor([0]))
"""


def test_w1_n_tiles_walk_k_both_ways_and_reuse_the_a_chunk(tmp_path):
    # The bytes the mixed W1 launch reads from GM (the timing record's gm_read_bytes) at 56 rows x K = 10000 x N =
    # 768: one row tile of three n-tiles of 256 (tm 64), x streamed in A chunks of 1920 (2 x 64 x 1920 + 2 x 512 x
    # 256 bytes fit L1, 2048 would not), so the chunks are 5 x 1920 + 400. The n-tiles walk K forward, backward,
    # forward (docs/gmm.md §5), each starting on the chunk the one before ended on: x is read 10000 + 9600 + 8080
    # columns of its 56 rows, where a forward-only walk reads 3 x 10000.
    path = tmp_path / "timing.jsonl"
    env = dict(os.environ, CAM_TWIN_TIMING=str(path))
    subprocess.run([sys.executable, "-c", _W1_READS], env=env, check=True, timeout=300)
    reads = {json.loads(line)["gm_read_bytes"] for line in path.read_text().splitlines()
             if json.loads(line).get("kernel") == "cam_gmm_swiglu_quant_multi_layer"}
    m, k, n = 56, 10000, 768
    weights = k * n  # NZ, K already a multiple of 16: each n-tile's column blocks over all of K, once
    x = m * (10000 + 9600 + 8080)
    slot = m * n * 4  # the vector cores read the int32 accumulator once
    w_scale = 2 * n * 4  # each of the two vector cores reads the act and gate scale slices once
    assert reads == {weights + x + slot + w_scale}


def test_w1_k_walked_both_ways_with_scale_groups():
    # Scale groups along K (two of 5120 rows; int4-valued int8 weights, as W4A8 checkpoints run on the W8A8 kernels,
    # docs/gmm.md §9.3) with x streamed: the middle n-tile of three walks K backwards, so each group's partial starts
    # at the group's last step and is stored after its first.
    from cam.reference import w4a8 as ref4

    m, k, n, group = 56, 10240, 768, 5120
    x, xs, ws, _ = _problem(43, m, k, n, 1, 1)
    g = torch.Generator().manual_seed(44)
    ws = [w.div(16, rounding_mode="floor") for w in ws]
    ss = [torch.rand(1, k // group, n, generator=g) * 1e-2 + 1e-3]
    counts = torch.tensor([m], dtype=torch.int64)
    got = _w1(x, xs, cam.LayerWeights(ws, ss), counts, 0, COUNTS)
    want_y, want_ys, rows = ref4.gmm_swiglu_quant_multi_layer_w4a8(x, xs, ws, ss, counts, 0, group_size=group)
    assert rows == m
    cmp = W1Compare()
    cmp.check(got, (want_y, want_ys), m)
    cmp.finish()


def test_w1_row_longer_than_one_ub_pass():
    # N/2 = 5000 output columns do not fit one epilogue pass in 192 KiB of UB: s is spilled to the workspace and
    # re-read for the quant (two passes), with the row's amax combined across passes.
    x, xs, ws, ss = _problem(17, 5, 16, 10000, 2, 1)
    lw = cam.LayerWeights(ws, ss)
    cmp = W1Compare()
    cmp.check(_w1(x, xs, lw, _gl([2, 2]), 0, COUNTS), _w1_golden(x, xs, ws, ss, _gl([2, 2]), 0, COUNTS), 4)
    cmp.finish()


def test_w1_layer_selection_reads_the_device_index():
    x, xs, ws, ss = _problem(3, M, K, N, E, 4)
    lw = cam.LayerWeights(ws, ss)
    gl, li = _gl([4, 2, 3, 3]), _li(0)
    outs = []
    cmp = W1Compare()
    for layer in range(4):
        li.fill_(layer)
        y, ys = cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, gl, li)
        cmp.check((y, ys), _w1_golden(x, xs, ws, ss, gl, layer, COUNTS, y_sentinel=0, s_sentinel=0.0), M)
        outs.append(y)
    cmp.finish()
    for i in range(4):
        for j in range(i + 1, 4):
            assert not torch.equal(outs[i], outs[j])


def test_w1_m_zero():
    x, xs, ws, ss = _problem(4, 0, K, N, E, L)
    y, ys = cam.ops.gmm_swiglu_quant_multi_layer(x, xs, cam.LayerWeights(ws, ss), _gl([0] * E), _li(2))
    assert tuple(y.shape) == (0, N // 2) and tuple(ys.shape) == (0,)


def test_ffn_chain_w1_then_w2(small):
    # The FFN pair as the work loop runs it: W1's outputs feed W2 directly, same group_list and layer_index.
    x, xs, ws, ss, lw1 = small
    g = torch.Generator().manual_seed(9)
    w2 = [torch.randint(-128, 128, (E, N // 2, 24), generator=g, dtype=torch.int8) for _ in range(L)]
    s2 = [torch.rand(E, 24, generator=g) * 1e-2 for _ in range(L)]
    lw2 = cam.LayerWeights(w2, s2)
    gl, li = _gl([2, 5, 0, 4]), _li(1)
    y, ys = cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw1, gl, li)
    out = cam.ops.gmm_multi_layer(y, ys, lw2, gl, li)
    assert torch.equal(_bits(out), _bits(ref.gmm_multi_layer(y, ys, w2, s2, gl, li, COUNTS)))


# ----------------------------------------------------------------------------- generated shapes


@settings(max_examples=12, deadline=None)
@given(
    m=st.integers(0, 40),
    k=st.integers(1, 300),
    n=st.integers(1, 160),
    e_local=st.integers(1, 4),
    layers=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_w2_generated_shapes(m, k, n, e_local, layers, seed, data):
    x, xs, ws, ss = _problem(seed, m, k, n, e_local, layers)
    counts = data.draw(st.lists(st.integers(0, m), min_size=e_local, max_size=e_local))
    if sum(counts) > m:
        counts = [0] * e_local
        counts[data.draw(st.integers(0, e_local - 1))] = m - data.draw(st.integers(0, m))
    layer = data.draw(st.integers(0, layers - 1))
    glt = data.draw(st.sampled_from([CUMSUM, COUNTS]))
    gl = _gl(counts, glt)
    out = _w2(x, xs, cam.LayerWeights(ws, ss), gl, layer, glt)
    assert torch.equal(_bits(out), _bits(_w2_golden(x, xs, ws, ss, gl, layer, glt)))


_W1_GENERATED = W1Compare()


@settings(max_examples=12, deadline=None)
@given(
    m=st.integers(0, 40),
    k=st.integers(1, 300),
    half=st.integers(1, 80),
    e_local=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_w1_generated_shapes(m, k, half, e_local, seed, data):
    x, xs, ws, ss = _problem(seed, m, k, 2 * half, e_local, 2)
    counts = data.draw(st.lists(st.integers(0, m), min_size=e_local, max_size=e_local))
    if sum(counts) > m:
        counts = [0] * e_local
        counts[-1] = m
    glt = data.draw(st.sampled_from([CUMSUM, COUNTS]))
    gl = _gl(counts, glt)
    got = _w1(x, xs, cam.LayerWeights(ws, ss), gl, 1, glt)
    want = _w1_golden(x, xs, ws, ss, gl, 1, glt)
    _W1_GENERATED.check(got, want, sum(counts))
    _assert_tail_untouched(got[0], sum(counts), 77)
    _W1_GENERATED.finish()


def test_real_core_counts_ascend910b():
    # Tiling and launches at the A2 description (24 AIC, 48 AIV): more cores than units, units spread thin.
    x, xs, ws, ss = _problem(23, 70, 100, 96, 3, 2)
    lw = cam.LayerWeights(ws, ss)
    cam._C.set_twin_platform("ascend910b")
    try:
        out = _w2(x, xs, lw, _gl([0, 60, 10]), 1, COUNTS)
        y, ys = _w1(x, xs, lw, _gl([0, 60, 10]), 1, COUNTS)
    finally:
        cam._C.set_twin_platform("twin")
    assert torch.equal(_bits(out), _bits(_w2_golden(x, xs, ws, ss, _gl([0, 60, 10]), 1, COUNTS)))
    cmp = W1Compare()
    cmp.check((y, ys), _w1_golden(x, xs, ws, ss, _gl([0, 60, 10]), 1, COUNTS), 70)
    cmp.finish()


# ----------------------------------------------------------------------------- device-detected errors


@pytest.mark.parametrize(
    "layer,values,glt,match",
    [
        (3, [3, 3, 3, 3], COUNTS, r"layer_index 3 outside \[0, 3\)"),
        (-1, [3, 3, 3, 3], COUNTS, r"layer_index -1 outside"),
        (0, [3, 3, 3, 4], COUNTS, r"group_list total 13 exceeds M = 12"),
        (0, [3, -1, 3, 3], COUNTS, r"group_list\[1\] = -1: negative"),
        (0, [2**62, 2**62, 2**62, 0], COUNTS, r"group_list total .* exceeds M = 12"),
        (0, [4, 8, 6, 12], CUMSUM, r"group_list\[2\] = 6: cumsum decreases"),
        (0, [4, 8, 13, 13], CUMSUM, r"group_list total 13 exceeds M = 12"),
    ],
)
def test_device_errors_write_nothing(small, layer, values, glt, match):
    x, xs, ws, ss, lw = small
    gl = torch.tensor(values, dtype=torch.int64)
    out = torch.full((M, N), 7.0, dtype=torch.bfloat16)
    with pytest.raises(cam.DeviceArgumentError, match=match) as info:
        cam.ops.gmm_multi_layer(x, xs, lw, gl, _li(layer), glt, out=out)
    assert "gmm_multi_layer" in str(info.value)
    assert bool((out == 7.0).all())
    y = torch.full((M, N // 2), 9, dtype=torch.int8)
    ys = torch.full((M,), 2.0)
    with pytest.raises(cam.DeviceArgumentError, match=match):
        cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, gl, _li(layer), glt, out=(y, ys))
    assert bool((y == 9).all()) and bool((ys == 2.0).all())
    # The golden refuses the same inputs (same rule, independent code).
    with pytest.raises(ValueError):
        ref.gmm_multi_layer(x, xs, ws, ss, gl, layer, glt)
    # The stream is usable again after the error was reported.
    ok = cam.ops.gmm_multi_layer(x, xs, lw, _gl([3, 3, 3, 3]), _li(0))
    assert torch.equal(_bits(ok), _bits(ref.gmm_multi_layer(x, xs, ws, ss, _gl([3, 3, 3, 3]), 0)))


def test_device_error_with_zero_capacity():
    # M = 0 still launches the pre-pass: a group_list that claims rows is refused, not ignored.
    x, xs, ws, ss = _problem(4, 0, K, N, E, 1)
    with pytest.raises(cam.DeviceArgumentError, match="exceeds M = 0"):
        cam.ops.gmm_multi_layer(x, xs, cam.LayerWeights(ws, ss), _gl([0, 1, 0, 0]), _li(0))


# ----------------------------------------------------------------------------- host-detected errors


def test_host_errors_before_launch(small):
    x, xs, ws, ss, lw = small
    gl, li = _gl([3, 3, 3, 3]), _li(0)
    w2 = cam.ops.gmm_multi_layer
    w1 = cam.ops.gmm_swiglu_quant_multi_layer
    with pytest.raises(TypeError, match="y must be int8"):
        w2(x.float(), xs, lw, gl, li)
    with pytest.raises(TypeError, match="x must be int8"):
        w1(x.to(torch.int32), xs, lw, gl, li)
    with pytest.raises(ValueError, match="x must be 2-D"):
        w1(x.reshape(2, 6, K), xs, lw, gl, li)
    with pytest.raises(ValueError, match="x has K = 39"):
        w1(x[:, :39].contiguous(), xs, lw, gl, li)
    with pytest.raises(ValueError, match=r"y_scale must have shape \[12\]"):
        w2(x, xs[:5], lw, gl, li)
    with pytest.raises(TypeError, match="x_scale must be float32"):
        w1(x, xs.double(), lw, gl, li)
    with pytest.raises(TypeError, match="group_list must be int64"):
        w2(x, xs, lw, gl.int(), li)
    with pytest.raises(ValueError, match=r"group_list must have shape \[4\]"):
        w2(x, xs, lw, gl[:3], li)
    with pytest.raises(TypeError, match="layer_index must be int64"):
        w2(x, xs, lw, gl, li.int())
    with pytest.raises(ValueError, match="layer_index must hold exactly one element"):
        w2(x, xs, lw, gl, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"group_list_type must be 0 \(cumsum\), 1 \(counts\) or 2 \(group table\), got 3"):
        w2(x, xs, lw, gl, li, 3)
    with pytest.raises(ValueError, match=r"group_list \(a group table, group_list_type 2\) must be \[G, 3\]"):
        w2(x, xs, lw, gl, li, 2)
    with pytest.raises(TypeError, match="weights must be a cam.LayerWeights"):
        w2(x, xs, ws, gl, li)
    with pytest.raises(ValueError, match=r"out must have shape \[12, 72\]"):
        w2(x, xs, lw, gl, li, out=torch.zeros(12, 70, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="out must be bfloat16"):
        w2(x, xs, lw, gl, li, out=torch.zeros(12, 72))
    with pytest.raises(ValueError, match="contiguous"):
        w2(x, xs, lw, gl, li, out=torch.zeros(72, 12, dtype=torch.bfloat16).t())
    odd = cam.LayerWeights([w[:, :, :71].contiguous() for w in ws], [s[:, :71].contiguous() for s in ss])
    with pytest.raises(ValueError, match="N = 71 must be even"):
        w1(x, xs, odd, gl, li)


def test_layer_lists_must_agree(small):
    x, xs, ws, ss, lw = small
    with pytest.raises(ValueError, match="3 weights but 2 scales"):
        cam.LayerWeights(ws, ss[:2])
    with pytest.raises(ValueError, match=r"weights\[1\] has shape"):
        cam.LayerWeights([ws[0], ws[1][:, :, :10]], ss[:2])
    with pytest.raises(ValueError, match=r"scales\[2\] has shape"):
        cam.LayerWeights(ws, [ss[0], ss[1], ss[2][:2]])
    with pytest.raises(TypeError, match="must be int8"):
        cam.LayerWeights([w.float() for w in ws], ss)
    # The torch op itself (what torch.compile sees) checks the raw lists too.
    gl, li = _gl([3, 3, 3, 3]), _li(0)
    out = torch.zeros(M, N, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="must match"):
        torch.ops.cam.gmm_multi_layer(x, xs, list(lw.weights), list(lw.scales[:2]), gl, li, 1, out)
    with pytest.raises(ValueError, match=r"weights\[0\] must be FRACTAL_NZ"):
        torch.ops.cam.gmm_multi_layer(x, xs, list(ws), list(lw.scales), gl, li, 1, out)


def test_c_api_refuses_what_python_does_not_check():
    # K beyond what the ND->NZ copy can address is refused by the C layer (InvalidArgumentError, a ValueError).
    k = 70000
    x = torch.zeros(1, k, dtype=torch.int8)
    w = torch.zeros(1, k, 1, dtype=torch.int8)
    lw = cam.LayerWeights([w], [torch.ones(1, 1)])
    with pytest.raises(cam.InvalidArgumentError, match="K = 70000"):
        cam.ops.gmm_multi_layer(x, torch.ones(1), lw, _gl([1]), _li(0))


# ----------------------------------------------------------------------------- layout and tracing


@pytest.mark.parametrize("k,n", [(1, 1), (17, 33), (40, 72)])
def test_prepack_matches_the_documented_layout(k, n):
    w = torch.randint(-128, 128, (3, k, n), dtype=torch.int8)
    assert torch.equal(cam.ops.prepack_weights(w), ref.prepack_nz_reference(w))
    assert tuple(cam.ops.prepack_weights(w[0]).shape) == ref.nz_shape(k, n)


def test_prepacked_weights_are_accepted_as_is(small):
    x, xs, ws, ss, lw = small
    nz = cam.LayerWeights([ref.prepack_nz_reference(w) for w in ws], ss, k=K)
    gl = _gl([3, 3, 3, 3])
    a = cam.ops.gmm_multi_layer(x, xs, nz, gl, _li(1))
    b = cam.ops.gmm_multi_layer(x, xs, lw, gl, _li(1))
    assert torch.equal(_bits(a), _bits(b))


def test_fake_impls_trace():
    from torch._subclasses.fake_tensor import FakeTensorMode

    x, xs, ws, ss = _problem(2, M, K, N, E, 2)
    lw = cam.LayerWeights(ws, ss)
    odd_scales = [s[:, :71].contiguous() for s in lw.scales]
    with FakeTensorMode() as mode:
        fx, fxs = mode.from_tensor(x), mode.from_tensor(xs)
        fw = [mode.from_tensor(w) for w in lw.weights]
        fs = [mode.from_tensor(s) for s in lw.scales]
        gl, li = mode.from_tensor(_gl([3, 3, 3, 3])), mode.from_tensor(_li(0))
        y = torch.empty(M, N // 2, dtype=torch.int8)
        ys = torch.empty(M, dtype=torch.float32)
        out = torch.empty(M, N, dtype=torch.bfloat16)
        torch.ops.cam.gmm_swiglu_quant_multi_layer(fx, fxs, fw, fs, gl, li, 1, y, ys)
        torch.ops.cam.gmm_multi_layer(fx, fxs, fw, fs, gl, li, 1, out)
        with pytest.raises(ValueError, match="N = 71 must be even"):
            torch.ops.cam.gmm_swiglu_quant_multi_layer(
                fx, fxs, fw, [mode.from_tensor(s) for s in odd_scales], gl, li, 1, y, ys
            )


def test_torch_compile_ffn_chain(small):
    # The W1 -> W2 chain traces as one graph (fake impls, mutated outputs); the compiled graph takes the layer from
    # the device tensor, so changing its contents switches layers without the host learning which one.
    x, xs, ws, ss, lw1 = small
    g = torch.Generator().manual_seed(19)
    w2 = [torch.randint(-128, 128, (E, N // 2, 24), generator=g, dtype=torch.int8) for _ in range(L)]
    s2 = [torch.rand(E, 24, generator=g) * 1e-2 for _ in range(L)]
    lw2 = cam.LayerWeights(w2, s2)

    def ffn(x, xs, gl, li):
        y, ys = cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw1, gl, li)
        return cam.ops.gmm_multi_layer(y, ys, lw2, gl, li)

    compiled = torch.compile(ffn, fullgraph=True, backend="aot_eager")
    gl, li = _gl([2, 5, 0, 4]), _li(0)
    outs = []
    for layer in (0, 2):
        li.fill_(layer)
        got = compiled(x, xs, gl, li)
        y, ys = cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw1, gl, li)  # eager W1, its W2 from the golden
        assert torch.equal(_bits(got), _bits(ref.gmm_multi_layer(y, ys, w2, s2, gl, layer, COUNTS)))
        outs.append(got)
    assert not torch.equal(outs[0], outs[1])
