"""W2 (gmm_multi_layer) with W8A8 weights as one mixed kernel: the cube's tm x tn units go through a per-AI-core GM
ring to the vector cores' block epilogue (one strided copy in, the dequant in UB, one strided copy out; docs/gmm.md
§5). The edges of the block epilogue, bit for bit against the golden (cam.reference.gmm, written from docs/gmm.md
§1, not from the kernel): row tiles that are not a multiple of tm, a last n-tile narrower than tn, empty groups, a
single row (the second vector core gets no rows), more rows per vector core than one UB block holds, K groups, the
output scale and a single n-tile. On the twin's default platform (2 AI cores, 184 KiB of usable UB): W8A8 tiles are
the tall form, tm = 160, tn = 192, so a vector core's half of a unit is up to 80 rows and a block holds 60 of them (48
with K groups)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import cam
from cam.reference import gmm as ref
from cam.reference import w4a8 as ref4

COUNTS = ref.GROUP_LIST_COUNTS


def _problem(seed, m, k, n, e_local, layers=2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    xs = (torch.rand(m, generator=g) * 1e-2 + 1e-3).float()
    ws = [torch.randint(-128, 128, (e_local, k, n), generator=g, dtype=torch.int8) for _ in range(layers)]
    ss = [(torch.rand(e_local, n, generator=g) * 1e-2 + 1e-3).float() for _ in range(layers)]
    return x, xs, ws, ss


def _bits(t):
    return t.view(torch.int16)


def _run(m, k, n, counts, layer=1, seed=0):
    x, xs, ws, ss = _problem(seed or m * 31 + k * 7 + n, m, k, n, len(counts))
    gl = torch.tensor(counts, dtype=torch.int64)
    out = torch.full((m, n), -3.0, dtype=torch.bfloat16)
    cam.ops.gmm_multi_layer(x, xs, cam.LayerWeights(ws, ss), gl, torch.tensor([layer]), COUNTS, out=out)
    want = ref.gmm_multi_layer(x, xs, ws, ss, gl, layer, COUNTS, out=torch.full((m, n), -3.0, dtype=torch.bfloat16))
    return out, want


@pytest.mark.parametrize(
    "m,k,n,counts",
    [
        # 257 rows: a full 160-row tile (80 rows per vector core: a 60-row block, then 20) and one of 97; N = 300: a
        # 192-wide n-tile, then a 108-wide one; empty groups first and between
        (310, 64, 300, [0, 257, 0, 40]),
        # rows not a multiple of 16 or of tm in every group, N one column past a tile
        (140, 96, 257, [37, 0, 90, 13]),
        # a single row in all (vector core 1 has nothing), and a one-row tile after a full one (161 rows)
        (4, 40, 300, [0, 0, 1, 0]),
        (170, 40, 200, [161, 1, 0]),
        # a single n-tile (N = 40, tn = 64): many units per core, each its slot's whole width
        (300, 32, 40, [100, 150, 3, 47]),
        # N = 1 and N = 16: the narrowest rows (4-byte and 32-byte int32 rows, 2- and 32-byte bf16 rows)
        (50, 33, 1, [20, 30]),
        (50, 33, 16, [25, 0, 25]),
        # every group empty: nothing is written
        (20, 64, 300, [0, 0, 0]),
        # 350 rows in one group: the taller 192 x 160 tiles (two row tiles, 176 + 174, where 160-row ones take three),
        # n-tiles of 160 and 140 columns
        (350, 64, 300, [350]),
    ],
)
def test_w2_block_epilogue_edges_are_bit_exact(m, k, n, counts):
    out, want = _run(m, k, n, counts)
    assert torch.equal(_bits(out), _bits(want))
    assert bool((out[sum(counts):].float() == -3.0).all())  # rows past the groups untouched


def test_w2_block_epilogue_with_k_groups_and_out_scale_is_bit_exact():
    # Per-group scales along K (two groups of 64 rows; int4-valued int8 weights, as W4A8 checkpoints run on the
    # W8A8 kernels, docs/gmm.md §9.3): each group's partial dequantized block by block and added in
    # group order, then the output scale; 150 rows of one expert, one row tile (75 per vector core: blocks of 48 and
    # 27 rows).
    m, k, n, group_size = 170, 128, 280, 64
    x, xs, ws, _ = _problem(5, m, k, n, 2)
    g = torch.Generator().manual_seed(6)
    ws = [w.div(16, rounding_mode="floor") for w in ws]  # int4 values (the per-group golden's domain), int8 storage
    ss = [torch.rand(2, k // group_size, n, generator=g) * 1e-2 + 1e-3 for _ in ws]
    gl = torch.tensor([150, 15], dtype=torch.int64)
    out = torch.full((m, n), 9.0, dtype=torch.bfloat16)
    cam.ops.gmm_multi_layer(x, xs, cam.LayerWeights(ws, ss), gl, torch.tensor([0]), out=out, out_scale=0.25)
    want = ref4.gmm_multi_layer_w4a8(x, xs, ws, ss, gl, 0, out=torch.full((m, n), 9.0, dtype=torch.bfloat16),
                                     group_size=group_size, out_scale=0.25)
    assert torch.equal(_bits(out), _bits(want))


def test_w2_block_epilogue_over_a_group_table_is_bit_exact():
    # A batch of groups of several layers (group_list_type 2): the units follow each group's layer and expert.
    m, k, n = 200, 64, 300
    x, xs, ws, ss = _problem(8, m, k, n, 3, layers=3)
    table = torch.tensor([[2, 1, 70], [0, 1, 0], [0, 2, 129], [1, 0, 1]], dtype=torch.int64)
    out = torch.full((m, n), -3.0, dtype=torch.bfloat16)
    cam.ops.gmm_multi_layer(x, xs, cam.LayerWeights(ws, ss), table, None, cam.ops.gmm.GROUP_TABLE, out=out)
    want = ref.gmm_multi_layer(x, xs, ws, ss, table, None, ref.GROUP_TABLE,
                               out=torch.full((m, n), -3.0, dtype=torch.bfloat16))
    assert torch.equal(_bits(out), _bits(want))


_LAUNCHES = """
import torch, cam
g = torch.Generator().manual_seed(1)
x = torch.randint(-128, 128, (40, 64), generator=g, dtype=torch.int8)
w = [torch.randint(-128, 128, (2, 64, 300), generator=g, dtype=torch.int8)]
s = [torch.rand(2, 300, generator=g) + 0.5]
cam.ops.gmm_multi_layer(x, torch.rand(40) + 0.5, cam.LayerWeights(w, s), torch.tensor([30, 10]), torch.tensor([0]))
"""


def test_w2_w8a8_is_one_mixed_launch(tmp_path):
    # The timing record names every launch: W2 with int8 weights is the mixed kernel alone, no cube-only launch and
    # no epilogue launch reading a full int32 accumulator back.
    path = tmp_path / "timing.jsonl"
    env = dict(os.environ, CAM_TWIN_TIMING=str(path))
    subprocess.run([sys.executable, "-c", _LAUNCHES], env=env, check=True, timeout=300)
    kernels = {json.loads(line).get("kernel") for line in path.read_text().splitlines() if line.startswith("{")}
    kernels.discard(None)
    assert kernels == {"cam_gmm_multi_layer"}


_RING = """
import torch, cam
g = torch.Generator().manual_seed(2)
x = torch.randint(-128, 128, (320, 64), generator=g, dtype=torch.int8)
w = [torch.randint(-128, 128, (1, 64, 1920), generator=g, dtype=torch.int8)]
s = [torch.rand(1, 1920, generator=g) + 0.5]
cam.ops.gmm_multi_layer(x, torch.rand(320) + 0.5, cam.LayerWeights(w, s), torch.tensor([320]), torch.tensor([0]))
"""


def test_w2_ring_units_reuse_their_slot_lines(tmp_path):
    # A slot holds one unit, rows tn apart (docs/gmm.md §5, "Ring"), so a vector core reads the same lines of a slot
    # unit after unit and the timing model's L2 (docs/twin.md, "L2 policy") serves those reads from the third unit
    # on. 320 rows of one expert, N = 1920: a 160-row tile on each of the twin's two AI cores, ten 192-wide units
    # each; the ring's int32 reads are nearly all of the launch's reads (x and the weights are 84 KiB and 240 KiB).
    # With each unit at its own columns no ring read repeats and the hits are the weights' second reads alone.
    path = tmp_path / "timing.jsonl"
    env = dict(os.environ, CAM_TWIN_TIMING=str(path))
    subprocess.run([sys.executable, "-c", _RING], env=env, check=True, timeout=300)
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    rec = next(r for r in recs if r.get("kernel") == "cam_gmm_multi_layer" and r["device"] == "a3" and r["l2"] == "lo")
    assert rec["l2_hit_fraction"] > 0.6, rec
