"""W1 and W2 over a group table (docs/gmm.md §2): groups of several layers in one launch, each group's weights
fetched by its own layer id. Checked against the golden (cam.reference.gmm, written independently), bit-identical to
serving each group alone with the one-layer call, and every word of the table bounded before anything is written."""

from __future__ import annotations

import pytest
import torch

import cam
from cam.reference import gmm as ref
from test_gmm import W1Compare, _bits, _problem

pytestmark = pytest.mark.timeout(120)

M, K, N, E, L = 40, 40, 72, 3, 2
TABLE = [(1, 0, 5), (0, 2, 7), (1, 2, 0), (0, 0, 9), (1, 1, 4), (0, 1, 3)]  # (layer, expert, rows), 28 rows < M


@pytest.fixture(scope="module")
def prob():
    x, xs, ws, ss = _problem(7, M, K, N, E, L)
    return x, xs, ws, ss, cam.LayerWeights(ws, ss)


def _table(rows=TABLE):
    return torch.tensor(rows, dtype=torch.int64).reshape(-1, 3)


def _w2(x, xs, lw, table, sentinel=-3.0):
    out = torch.full((x.shape[0], lw.n), sentinel, dtype=torch.bfloat16)
    assert cam.ops.gmm_multi_layer(x, xs, lw, table, None, cam.ops.gmm.GROUP_TABLE, out=out) is out
    return out


def _w1(x, xs, lw, table, y_sentinel=77, s_sentinel=-1.5):
    y = torch.full((x.shape[0], lw.n // 2), y_sentinel, dtype=torch.int8)
    ys = torch.full((x.shape[0],), s_sentinel, dtype=torch.float32)
    cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, table, None, cam.ops.gmm.GROUP_TABLE, out=(y, ys))
    return y, ys


def _alone(counts_at, e):
    c = torch.zeros(E, dtype=torch.int64)
    c[e] = counts_at
    return c


def test_w2_over_two_layers_is_the_golden_and_each_group_alone(prob):
    x, xs, ws, ss, lw = prob
    got = _w2(x, xs, lw, _table())
    want = ref.gmm_multi_layer(x, xs, ws, ss, _table(), None, ref.GROUP_TABLE,
                               out=torch.full((M, N), -3.0, dtype=torch.bfloat16))
    assert torch.equal(_bits(got), _bits(want))
    start = 0
    for layer, e, rows in TABLE:  # one by one: the one-layer call on the group's rows
        if rows:
            alone = cam.ops.gmm_multi_layer(x[start:start + rows], xs[start:start + rows], lw, _alone(rows, e),
                                            torch.tensor([layer]))
            assert torch.equal(_bits(got[start:start + rows]), _bits(alone)), (layer, e)
        start += rows


def test_w1_over_two_layers_matches_the_golden_and_is_bit_identical_to_each_group_alone(prob):
    x, xs, ws, ss, lw = prob
    y, ys = _w1(x, xs, lw, _table())
    ey = torch.full((M, N // 2), 77, dtype=torch.int8)
    eys = torch.full((M,), -1.5)
    ref.gmm_swiglu_quant_multi_layer(x, xs, ws, ss, _table(), None, ref.GROUP_TABLE, ey, eys)
    total = sum(r for _, _, r in TABLE)
    cmp = W1Compare()  # the golden's exp differs from the kernel's by an ulp at most (test_gmm.W1Compare)
    cmp.check((y, ys), (ey, eys), total)
    cmp.finish()
    assert bool((y[total:] == 77).all()) and bool((ys[total:] == -1.5).all()), "rows past the groups were written"
    start = 0
    for layer, e, rows in TABLE:  # the same kernel, one group at a time: bit for bit
        if rows:
            ay, ays = cam.ops.gmm_swiglu_quant_multi_layer(x[start:start + rows], xs[start:start + rows], lw,
                                                           _alone(rows, e), torch.tensor([layer]))
            assert torch.equal(y[start:start + rows], ay) and torch.equal(ys[start:start + rows], ays), (layer, e)
        start += rows


def test_the_one_layer_call_is_the_one_layer_table(prob):
    """group_list + layer_index and the table {(l, e, counts[e])} are the same groups: same bits."""
    x, xs, ws, ss, lw = prob
    counts = [6, 0, 11]
    table = _table([(1, e, c) for e, c in enumerate(counts)])
    one = cam.ops.gmm_multi_layer(x, xs, lw, torch.tensor(counts), torch.tensor([1]))
    assert torch.equal(_bits(one), _bits(_w2(x, xs, lw, table, sentinel=0.0)))
    y1 = cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, torch.tensor(counts), torch.tensor([1]))
    y2 = _w1(x, xs, lw, table, y_sentinel=0, s_sentinel=0.0)
    assert torch.equal(y1[0], y2[0]) and torch.equal(y1[1], y2[1])


def _bad_words():
    """(group, word, value, message) for every word of TABLE: each value breaks exactly that word's bound."""
    total = sum(r for _, _, r in TABLE)
    for g, (_, _, rows) in enumerate(TABLE):
        for v in (-1, L, 2**40):
            yield g, 0, v, rf"group_table layer of group\[{g}\] {v} outside \[0, {L}\)"
        for v in (-1, E):
            yield g, 1, v, rf"group_table expert of group\[{g}\] {v} outside \[0, {E}\)"
        yield g, 2, -1, rf"group_table rows of group\[{g}\] = -1: negative"
        yield g, 2, M - (total - rows) + 1, rf"group_table rows of group total {M + 1} exceeds M = {M}"
        yield g, 2, 2**62, r"group_table rows of group total .* exceeds M"


def test_every_tampered_word_is_refused_before_anything_is_written(prob):
    x, xs, ws, ss, lw = prob
    cases = list(_bad_words())
    assert len(cases) == 8 * len(TABLE)  # 3 layer, 2 expert, 3 rows values per group
    for g, w, v, match in cases:
        table = _table()
        table[g, w] = v
        with pytest.raises(ValueError):  # the golden refuses it too (same rule, independent code)
            ref.group_table_bounds(table, L, E, M)
        out = torch.full((M, N), 7.0, dtype=torch.bfloat16)
        with pytest.raises(cam.DeviceArgumentError, match=match):
            cam.ops.gmm_multi_layer(x, xs, lw, table, None, cam.ops.gmm.GROUP_TABLE, out=out)
        assert bool((out == 7.0).all()), (g, w, v)
        y = torch.full((M, N // 2), 9, dtype=torch.int8)
        ys = torch.full((M,), 2.0)
        with pytest.raises(cam.DeviceArgumentError, match=match):
            cam.ops.gmm_swiglu_quant_multi_layer(x, xs, lw, table, None, cam.ops.gmm.GROUP_TABLE, out=(y, ys))
        assert bool((y == 9).all()) and bool((ys == 2.0).all()), (g, w, v)
    # usable afterwards
    assert torch.equal(_bits(_w2(x, xs, lw, _table())), _bits(ref.gmm_multi_layer(
        x, xs, ws, ss, _table(), None, ref.GROUP_TABLE, out=torch.full((M, N), -3.0, dtype=torch.bfloat16))))


def test_host_checks_of_the_table(prob):
    x, xs, ws, ss, lw = prob
    with pytest.raises(cam.InvalidArgumentError, match=r"must be \[G, 3\] \{layer, expert, rows\}, got shape \[4, 2\]"):
        cam.ops.gmm_multi_layer(x, xs, lw, torch.zeros(4, 2, dtype=torch.int64), None, cam.ops.gmm.GROUP_TABLE)
    with pytest.raises(cam.InvalidArgumentError, match="at least one group"):
        cam.ops.gmm_multi_layer(x, xs, lw, torch.zeros(0, 3, dtype=torch.int64), None, cam.ops.gmm.GROUP_TABLE)
    with pytest.raises(TypeError, match="layer_index must be a torch.Tensor"):
        cam.ops.gmm_multi_layer(x, xs, lw, torch.tensor([1, 2, 3]), None)
