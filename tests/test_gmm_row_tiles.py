"""The mixed W1 kernel's row tiles (docs/gmm.md §5, "Row tiles sized to the group"): the W1 tiling's tile sizes and
the tiles every AI core walks, from the code (tests/twin/gmm_row_tiles.cpp runs the tiling and the kernel's walker),
against the rule derived on its own (tests/_tiling_program.py, launch_row_tiles): a group of R rows is ceil(R / tm)
tiles whose heights differ by at most one row (the taller ones first), and the launch's i-th tile (groups in order,
tiles in row order) is AI core i mod cores' next."""

import pytest
from _tiling_program import A3, TWIN, build_tiling_program, launch_row_tiles, run_gmm_tiles

pytestmark = [pytest.mark.slow]

# The tallest row tile (docs/gmm.md §5); with it, an int32 C tile of tm x tn within L0C's 128 KiB leaves
# tn = 224 (the widest multiple of 32 at most 256).
TM_MAX = 144


def expected_tiles(counts, tm, cores):
    launch = launch_row_tiles(counts, tm)
    return {c: [t for i, t in enumerate(launch) if i % cores == c] for c in range(cores)}


@pytest.fixture(scope="module")
def row_tiles(source_root, tmp_path_factory):
    return build_tiling_program(source_root, tmp_path_factory, "gmm_row_tiles", "gmm_tiling.cpp")


def run(binary, platform, m, k, n, counts):
    return run_gmm_tiles(binary, "w1", platform, m, k, n, counts)


def test_tile_sizes_fill_l0c(row_tiles):
    # DeepSeek-V3's W1 on an A3 die (K = H = 7168, N = 2·I = 4096).
    sizes, _ = run(row_tiles, A3, 8321, 7168, 4096, [8321])
    assert sizes["tm"] == TM_MAX and sizes["tn"] == 224
    assert sizes["tm"] * sizes["tn"] * 4 <= A3["l0c"] < sizes["tm"] * (sizes["tn"] + 32) * 4
    # Fewer rows than one tile: the tile shrinks to them (rounded to 16), and the width grows into L0C up to 256.
    sizes, _ = run(row_tiles, A3, 40, 7168, 4096, [40])
    assert sizes["tm"] == 48 and sizes["tn"] == 256


def l1_chunks(l1, tm, tn, tk, k, tk1b=512):
    """The W1 L1 chunks when x streams (docs/gmm.md §5): B in chunks of tk1b, A in the longest multiple of tk that
    fits beside them (K rounded up to tk at most), each double buffered."""
    k_steps = -(-k // tk) * tk
    kb = min(tk1b, k_steps)
    fits = [ka for ka in range(tk, k_steps + 1, tk) if 2 * tm * ka + 2 * tn * kb <= l1]
    return kb, max(fits)


def test_l1_chunks_of_a_longer_than_of_b(row_tiles):
    # At K = 7168 a 144-row x tile (1 MiB) does not fit L1, so x streams: B in chunks of 512, A in chunks of 896
    # (144 x 896 x 2 + 512 x 224 x 2 = 487 424 bytes of the 524 160; one step more of A would be 524 288).
    sizes, _ = run(row_tiles, A3, 8321, 7168, 4096, [8321])
    assert sizes["resident"] == 0
    assert (sizes["tk1"], sizes["tk1a"]) == l1_chunks(A3["l1"], 144, 224, 128, 7168) == (512, 896)
    # K = 10000 at 64 rows x 224 columns: A chunks of 2176, not a multiple of B's, the last A chunk 1296 long.
    sizes, _ = run(row_tiles, A3, 56, 10000, 200, [56])
    assert (sizes["tm"], sizes["tn"], sizes["resident"]) == (64, 224, 0)
    assert (sizes["tk1"], sizes["tk1a"]) == l1_chunks(A3["l1"], 64, 224, 128, 10000) == (512, 2176)
    # x resident in L1 (144 rows x K = 1000): no A chunks; B chunks as before (the longest that fits, up to 1024).
    sizes, _ = run(row_tiles, A3, 8321, 1000, 4096, [8321])
    assert sizes["resident"] == 1 and sizes["tk1a"] == sizes["tk1"] == 768  # 144 x 1024 + 2 x 768 x 224 bytes


@pytest.mark.parametrize("counts", [
    [260],                    # 130 + 130 where fixed 128-row tiles take three (128, 128, 4)
    [0, 1, 16, 17, 0],        # empty groups take no tile; 1, 16 and 17 rows one tile each
    [300, 289, 288, 145],     # three tiles of 100; 289: 97, 96, 96; 288: 144 + 144; 145: 73 + 72
    [260] * 32 + [0] * 3,     # the uniform 8192-token round: expert-major, siblings on neighbouring cores
])
def test_tiles_per_group_and_heights(row_tiles, counts):
    m = max(sum(counts), 1)
    sizes, got = run(row_tiles, A3, m, 7168, 4096, counts)
    assert sizes["tm"] == (TM_MAX if m >= TM_MAX else -(-m // 16) * 16)
    want = expected_tiles(counts, sizes["tm"], A3["aic"])
    assert {c: t for c, t in want.items() if t} == got
    # The rows are covered exactly once.
    rows = sorted((r0, n) for tiles in got.values() for _, r0, n in tiles)
    assert sum(n for _, n in rows) == sum(counts)
    assert all(a[0] + a[1] == b[0] for a, b in zip(rows, rows[1:]))


def test_260_rows_take_two_tiles_not_three(row_tiles):
    # Two equal tiles (a tile's copies of x scale with its rows, docs/gmm.md §5), not 144 + 116.
    _, got = run(row_tiles, A3, 260, 7168, 4096, [260])
    assert got == {0: [(0, 0, 130)], 1: [(0, 130, 130)]}
    _, got = run(row_tiles, A3, 517, 7168, 4096, [517])
    assert got == {0: [(0, 0, 130)], 1: [(0, 130, 129)], 2: [(0, 259, 129)], 3: [(0, 388, 129)]}


def test_two_cores_deal_alternately(row_tiles):
    # The twin's two AI cores: tile i on core i mod 2 across group boundaries.
    counts = [150, 5, 0, 300]
    _, got = run(row_tiles, TWIN, sum(counts), 64, 512, counts)
    assert got == {0: [(0, 0, 75), (1, 150, 5), (3, 255, 100)], 1: [(0, 75, 75), (3, 155, 100), (3, 355, 100)]}
