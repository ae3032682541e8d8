"""cam.LayerWeights(format="int4"): int4 weights packed two to a byte in the int4 cube's ZN fractals (half the bytes
of int8 storage), the per-K-group column sums route (a)'s recombination adds, the refusals; and route (a) on the
twin's int4 cube fed by cam's packer: the split activations' two int4 products, recombined in int32, equal x·w
exactly (docs/gmm.md §9, docs/twin.md "int4 operands")."""

from __future__ import annotations

import os
import subprocess

import pytest
import torch

import cam
from cam.layer_weights import prepack_weights, prepack_weights_int4
from cam.reference import w4a8 as ref4


def _int4(g, *shape):
    return torch.randint(-8, 8, shape, generator=g, dtype=torch.int8)


def _unpacked_element(packed, lead, k, n):
    """Value (k, n) of a packed int4 ZN weight, read by the layout's definition, one element at a time."""
    byte = int(packed[lead + (k // 64, n // 16, n % 16, (k % 64) // 2)])
    nib = (byte >> (4 * (k % 2))) & 0xF
    return nib - 16 if nib >= 8 else nib


@pytest.mark.parametrize("k, n", [(100, 40), (64, 16), (1, 1), (130, 33)])
def test_int4_prepack_layout(k, n):
    g = torch.Generator().manual_seed(k * 1000 + n)
    w = _int4(g, 2, k, n)
    packed = prepack_weights_int4(w)
    k1, n1 = -(-k // 64), -(-n // 16)
    assert packed.dtype == torch.uint8 and tuple(packed.shape) == (2, k1, n1, 16, 32)
    for e in range(2):
        for kk in range(k1 * 64):
            for nn in range(n1 * 16):
                want = int(w[e, kk, nn]) if kk < k and nn < n else 0  # padding is zero
                assert _unpacked_element(packed, (e,), kk, nn) == want, (e, kk, nn)


def test_int4_storage_is_half_of_int8():
    g = torch.Generator().manual_seed(3)
    ws = [_int4(g, 4, 256, 512) for _ in range(2)]
    ss = [torch.rand(4, 512, generator=g) + 0.1 for _ in range(2)]
    w8 = cam.LayerWeights(ws, ss)
    w4 = cam.LayerWeights(ws, ss, format="int4")
    bytes8 = sum(t.numel() * t.element_size() for t in w8.weights)
    bytes4 = sum(t.numel() * t.element_size() for t in w4.weights)
    assert (w8.format, w4.format) == ("int8", "int4")
    assert bytes4 * 2 == bytes8 == 2 * 4 * 256 * 512
    assert w4.num_layers == 2 and w4.num_experts == 4 and w4.k == 256 and w4.n == 512
    assert w8.colsums is None


@pytest.mark.parametrize("groups", [1, 4])
def test_int4_colsums_per_k_group(groups):
    g = torch.Generator().manual_seed(groups)
    e, k, n = 3, 128, 24
    ws = [_int4(g, e, k, n) for _ in range(2)]
    shape = (e, n) if groups == 1 else (e, groups, n)
    ss = [torch.rand(*shape, generator=g) + 0.1 for _ in range(2)]
    lw = cam.LayerWeights(ws, ss, format="int4")
    for w, cs in zip(ws, lw.colsums):
        assert cs.dtype == torch.int32 and tuple(cs.shape) == (e, groups, n)
        for gi in range(groups):
            rows = slice(gi * k // groups, (gi + 1) * k // groups)
            want = w[:, rows, :].to(torch.int64).sum(dim=1)
            assert torch.equal(cs[:, gi, :].to(torch.int64), want)


def test_int4_refusals_name_the_argument():
    g = torch.Generator().manual_seed(5)
    w = _int4(g, 2, 64, 16)
    s = torch.rand(2, 16, generator=g) + 0.1
    bad = w.clone()
    bad[1, 7, 3] = 8
    with pytest.raises(ValueError, match=r"weight\[1, 7, 3\] = 8 is outside the int4 range"):
        cam.LayerWeights([bad], [s], format="int4")
    with pytest.raises(ValueError, match="format must be one of"):
        cam.LayerWeights([w], [s], format="int3")
    with pytest.raises(ValueError, match="format 'int4' takes ND weights"):
        cam.LayerWeights([prepack_weights(w)], [s], k=64, format="int4")
    with pytest.raises(TypeError, match="weight must be int8"):
        prepack_weights_int4(w.to(torch.int16))
    for value in (float("nan"), float("inf")):
        s_bad = s.clone()
        s_bad[1, 2] = value
        with pytest.raises(ValueError, match=rf"scales\[0\] must be finite and >= 0, got {value} at \[1, 2\]"):
            cam.LayerWeights([w], [s_bad], format="int4")


# ---- route (a) on the twin's int4 cube, with cam's packer (tests/twin/cube_int4.cpp, file mode) ----

@pytest.fixture(scope="module")
def int4_binary(source_root, tmp_path_factory):
    from _twin_build import build_twin_program
    return build_twin_program(source_root, str(tmp_path_factory.mktemp("twin") / "cube_int4"), "cube_int4.cpp")


def _pack_rows(q):
    """int4 values [R, K] (K even) -> ND bytes, two along K, the even one in the low nibble (docs/twin.md)."""
    nib = (q.to(torch.int16) & 0xF).to(torch.uint8)
    return nib[:, 0::2] | (nib[:, 1::2] << 4)


@pytest.mark.slow
@pytest.mark.parametrize("m, k, n, seed", [(16, 160, 48, 1), (8, 256, 32, 2)])
def test_route_a_on_the_twin_int4_cube_is_exact(int4_binary, tmp_path, m, k, n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    x[0, :4] = torch.tensor([-128, 127, -1, 0], dtype=torch.int8)  # the split's edges
    w = _int4(g, 1, k, n)
    w[0, :2, 0] = torch.tensor([-8, 7], dtype=torch.int8)
    lw = cam.LayerWeights([w], [torch.ones(1, n)], format="int4")
    hi, lo = ref4.msd_split(x)
    rows = 2 * m  # the cube's A: the hi rows, then the lo rows
    (tmp_path / "a.bin").write_bytes(_pack_rows(torch.cat([hi, lo])).numpy().tobytes())
    (tmp_path / "b.bin").write_bytes(lw.weights[0][0].numpy().tobytes())
    env = dict(os.environ, CAM_TWIN_PLATFORM="twin", CAM_TWIN_SYNC_TIMEOUT_S="20")
    result = subprocess.run([int4_binary, "file", str(tmp_path), str(rows), str(k), str(n)], capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    acc = torch.frombuffer(bytearray((tmp_path / "c.bin").read_bytes()), dtype=torch.int32).reshape(rows, n)
    got = ref4.msd_recombine(acc[:m], acc[m:], lw.colsums[0][0, 0].expand(m, n).contiguous())
    want = (x.to(torch.int64) @ w[0].to(torch.int64)).to(torch.int32)
    assert torch.equal(got, want)
    # Without the split's shift term the products are not x·w: the colsum is what makes it exact.
    assert not torch.equal(16 * acc[:m] + acc[m:], want)


def test_take_moves_packed_int4_experts_with_their_column_sums():
    """LayerWeights.take (what a placement's and a rebalance's slots are made of) keeps the format and copies each
    expert's packed weights, scales and column sums as they are: equal to packing the chosen experts afresh; an empty
    slot is zeros; an expert outside the set is refused naming held."""
    g = torch.Generator().manual_seed(17)
    ws = [torch.randint(-8, 8, (3, 128, 48), generator=g, dtype=torch.int8) for _ in range(2)]
    ss = [torch.rand(3, 2, 48, generator=g) + 0.1 for _ in range(2)]
    lw = cam.LayerWeights(ws, ss, format="int4")
    held = [[2, -1, 0], [1, 1, -1]]
    got = lw.take(held)
    assert got.format == "int4" and (got.k, got.n, got.num_experts) == (128, 48, 3)
    for l, ids in enumerate(held):
        pick = [max(e, 0) for e in ids]
        want = cam.LayerWeights([ws[l][pick]], [ss[l][pick]], format="int4")
        for j, e in enumerate(ids):
            for mine, fresh in ((got.weights[l], want.weights[0]), (got.scales[l], want.scales[0]),
                                (got.colsums[l], want.colsums[0])):
                assert torch.equal(mine[j], fresh[j] if e >= 0 else torch.zeros_like(fresh[j]))
    assert got.colsums[1].data_ptr() == got.colsums_all[1].data_ptr()  # the views the ops' tensor is made of
    assert [n for n, _ in got.named_tensors()] == ["weights[0]", "weights[1]", "scales[0]", "scales[1]",
                                                   "colsums[0]", "colsums[1]"]
    with pytest.raises(ValueError, match=r"LayerWeights.take: held\[1\] names expert 3, outside \[-1, 3\)"):
        lw.take([[0, 1, 2], [3, 0, 0]])
