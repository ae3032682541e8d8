"""W1 (gmm_swiglu_quant_multi_layer) with scale groups along K: the cube hands over units (row tile x one n-tile) in
compact slots and the vector cores add each unit's dequantized groups into their rows of the AI core's fp32 row tile
buffer before the SwiGLU and quant (docs/gmm.md §5, "The mixed W1 kernel"). Against the W4A8 golden
(cam.reference.w4a8, with the group size) under docs/gmm.md §6's W1 policy, for both weight formats (W8A8 runs
int4-valued int8 weights, as W4A8 checkpoints do on the W8A8 kernels, docs/gmm.md §9.3).

The shapes are chosen against the tiles (W8A8 at most 144 x 224-256, W4A8 64 x 256 on the twin's 2 AI cores): several
n-tiles, the last narrower than tn and one straddling the act | gate boundary; row tiles of different heights on the
same AI core, so each vector core's share of the row tile buffer moves from tile to tile (the buffer's rows are split
by the tile's rows, one vector core's rows must never be the other's); empty groups; a group table; a row longer than
one UB pass (the spill into the buffer)."""

from __future__ import annotations

import pytest
import torch

import cam
from cam.reference import gmm as ref8
from cam.reference import w4a8 as ref4
from test_gmm import W1Compare

pytestmark = pytest.mark.timeout(300)


def _problem(seed, m, k, n, experts, layers, group_size):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    xs = torch.rand(m, generator=g) * 1e-2 + 1e-3
    ws = [torch.randint(-8, 8, (experts, k, n), generator=g, dtype=torch.int8) for _ in range(layers)]
    ss = [torch.rand(experts, k // group_size, n, generator=g) * 2e-2 + 1e-3 for _ in range(layers)]
    return x, xs, ws, ss


def _run(x, xs, ws, ss, fmt, gl, li, glt, limit):
    m, n = x.shape[0], ws[0].shape[2]
    y = torch.full((m, n // 2), 77, dtype=torch.int8)
    ys = torch.full((m,), -1.5, dtype=torch.float32)
    cam.ops.gmm_swiglu_quant_multi_layer(x, xs, cam.LayerWeights(ws, ss, format=fmt), gl,
                                         None if li is None else torch.tensor([li]), glt, out=(y, ys),
                                         swiglu_limit=limit)
    return y, ys


def _check(got, x, xs, ws, ss, gl, li, glt, limit, group_size):
    want_y, want_ys, rows = ref4.gmm_swiglu_quant_multi_layer_w4a8(x, xs, ws, ss, gl, li, glt, swiglu_limit=limit,
                                                                   group_size=group_size)
    cmp = W1Compare()
    cmp.check(got, (want_y, want_ys), rows)
    cmp.finish()
    y, ys = got
    assert bool((y[rows:] == 77).all()) and bool((ys[rows:] == -1.5).all())
    return rows


@pytest.mark.parametrize("fmt", ["int8", "int4"])
@pytest.mark.parametrize("limit", [None, 0.05])
def test_w1_units_over_row_tiles_of_different_heights(fmt, limit):
    # W8A8: groups of 150 and 170 rows are two row tiles each (75 + 75, 85 + 85), so each AI core runs a 75-row tile
    # then an 85-row one; W4A8 (64-row tiles) three each. N = 600: n-tiles 256, 256, 88 (W4A8) or 224, 224, 152
    # (W8A8), the second across the act | gate boundary at 300.
    m, k, n, gs = 330, 256, 600, 64
    x, xs, ws, ss = _problem(1 if fmt == "int8" else 2, m, k, n, 3, 2, gs)
    gl = torch.tensor([150, 0, 170], dtype=torch.int64)
    got = _run(x, xs, ws, ss, fmt, gl, 1, ref8.GROUP_LIST_COUNTS, limit)
    assert _check(got, x, xs, ws, ss, gl, 1, ref8.GROUP_LIST_COUNTS, limit, gs) == 320


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_w1_units_over_a_group_table(fmt):
    k, n, gs = 256, 328, 64
    x, xs, ws, ss = _problem(3, 90, k, n, 2, 3, gs)
    table = torch.tensor([[2, 1, 7], [0, 0, 0], [1, 1, 70], [2, 0, 1]], dtype=torch.int64)
    got = _run(x, xs, ws, ss, fmt, table, None, ref8.GROUP_TABLE, None)
    assert _check(got, x, xs, ws, ss, table, None, ref8.GROUP_TABLE, None, gs) == 78


def test_w1_units_row_longer_than_one_ub_pass():
    # N / 2 = 4600 output columns take two epilogue passes: s spills into the row tile buffer's act half and is read
    # back for the quant; 70 rows are two 35-row W4A8 tiles.
    k, n, gs = 128, 9200, 64
    x, xs, ws, ss = _problem(4, 70, k, n, 1, 1, gs)
    gl = torch.tensor([70], dtype=torch.int64)
    got = _run(x, xs, ws, ss, "int4", gl, 0, ref8.GROUP_LIST_COUNTS, 1.0)
    assert _check(got, x, xs, ws, ss, gl, 0, ref8.GROUP_LIST_COUNTS, 1.0, gs) == 70


def test_w1_units_with_many_groups_in_narrower_pieces():
    # 128 K groups: every group's w_scale and colsum slices of a 256-column piece (256 KiB) do not fit UB beside the
    # epilogue, so the tiling narrows the pieces (unitCols) until one pass still holds N / 2.
    k, n, gs = 8192, 600, 64
    x, xs, ws, ss = _problem(5, 40, k, n, 2, 1, gs)
    gl = torch.tensor([25, 15], dtype=torch.int64)
    got = _run(x, xs, ws, ss, "int4", gl, 0, ref8.GROUP_LIST_COUNTS, None)
    assert _check(got, x, xs, ws, ss, gl, 0, ref8.GROUP_LIST_COUNTS, None, gs) == 40
