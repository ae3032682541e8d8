"""The mixed W2 kernel's units (docs/gmm.md §5, "The mixed W2 kernel", "Dealing"): the W2 tiling's tile sizes and the
units (row tile, n-tile) every AI core walks, from the code (tests/twin/gmm_row_tiles.cpp runs the tiling and the
kernel's walker, GmmTileUnits), against the rule derived on its own (tests/_tiling_program.py, launch_row_tiles): a
group of R rows is ceil(R / tm) row tiles whose heights differ by at most one row (the taller ones first, as W1's);
the launch's tiles (groups in order, tiles in row order) are dealt whole, tile i to AI core i mod cores, as long as a
whole round of cores is left; the units of the rest (tile by tile, n-tiles inner) are cut into `cores` consecutive
runs, run c of units [s·c/cores, s·(c+1)/cores) of those s units going to core c."""

import pytest
from _tiling_program import A3, TWIN, build_tiling_program, launch_row_tiles, run_gmm_tiles

pytestmark = [pytest.mark.slow]

# DeepSeek-V3's W2 (K = I = 2048, N = H = 7168) and the most loaded FFN rank's 32 groups of the predict benchmark's
# uniform 8192-token round (cam-bench predict: 8321 rows).
K, N = 2048, 7168
ROUND_8192 = [258, 245, 280, 259, 235, 236, 294, 276, 239, 271, 245, 282, 249, 272, 245, 268, 271, 272, 256, 289, 280,
              239, 236, 255, 284, 232, 286, 257, 265, 221, 270, 254]


def expected_units(counts, tm, n_tiles, cores):
    tiles = launch_row_tiles(counts, tm)
    whole = len(tiles) // cores * cores
    rest = (len(tiles) - whole) * n_tiles
    got = {}
    for c in range(cores):
        units = [(*tiles[i], nt, nt == 0) for i in range(c, whole, cores) for nt in range(n_tiles)]
        lo, hi = whole * n_tiles + rest * c // cores, whole * n_tiles + rest * (c + 1) // cores
        units += [(*tiles[u // n_tiles], u % n_tiles, u == lo or u % n_tiles == 0) for u in range(lo, hi)]
        if units:
            got[c] = units
    return got


@pytest.fixture(scope="module")
def w2_units(source_root, tmp_path_factory):
    return build_tiling_program(source_root, tmp_path_factory, "gmm_row_tiles", "gmm_tiling.cpp")


def run(binary, platform, m, k, n, counts):
    sizes, got = run_gmm_tiles(binary, "w2", platform, m, k, n, counts)
    return sizes, {c: [(*u[:4], bool(u[4])) for u in units] for c, units in got.items()}


def _covers_once(got, counts, n_tiles):
    units = sorted((row0, nt, rows) for us in got.values() for _, row0, rows, nt, _ in us)
    assert len(units) == len(set(units))
    tiles = sorted({(row0, rows) for row0, _, rows in units})
    assert sum(rows for _, rows in tiles) == sum(counts)
    assert all(a[0] + a[1] == b[0] for a, b in zip(tiles, tiles[1:]))
    assert len(units) == len(tiles) * n_tiles


@pytest.mark.parametrize("counts", [
    ROUND_8192,                        # 64 tiles: two whole rounds, then 16 tiles' units over the 24 cores
    [(r + 1) // 2 for r in ROUND_8192],  # about 130 rows a group (4096 tokens): one tile each, 24 whole, 8 split
    [0, 1, 16, 17, 0, 500],            # empty groups take no tile; fewer tiles than cores: every unit split
])
def test_units_per_core(w2_units, counts):
    m = max(sum(counts), 1)
    sizes, got = run(w2_units, A3, m, K, N, counts)
    assert (sizes["tm"], sizes["tn"], sizes["ntiles"]) == (min(160, -(-m // 16) * 16), 192, -(-N // 192))
    assert got == expected_units(counts, sizes["tm"], sizes["ntiles"], A3["aic"])
    _covers_once(got, counts, sizes["ntiles"])
    # Every core ends with the same number of units, give or take one.
    per_core = [len(got.get(c, [])) for c in range(A3["aic"])]
    assert max(per_core) - min(per_core) <= 1


def test_siblings_run_in_the_same_round(w2_units):
    # The 8192-token round: 64 tiles, two per expert. Experts 0-23 are the two whole rounds, each expert's two tiles
    # in the same round on neighbouring cores (each weight strip's second read follows its first closely); experts
    # 24-31 are the units split over every core.
    _, got = run(w2_units, A3, sum(ROUND_8192), K, N, ROUND_8192)
    where = {}
    for core, units in got.items():
        for i, (group, _, _, nt, first) in enumerate(units[:2 * 38]):
            if first:
                where.setdefault(group, []).append((i // 38, core))
    assert sorted(where) == list(range(24))
    for group, places in where.items():
        (r0, c0), (r1, c1) = sorted(places, key=lambda p: p[1])
        assert r0 == r1 == group // 12 and (c0, c1) == (2 * group % 24, 2 * group % 24 + 1)
    tail = {group for units in got.values() for group, *_ in units[2 * 38:]}
    assert tail == set(range(24, 32))


def test_two_cores_deal_whole_then_split(w2_units):
    # The twin's two AI cores, N = 500 (three n-tiles of up to 192 columns): four whole tiles in turn across group
    # boundaries (300 rows: 150 + 150, not 160 + 140), then the fifth tile's three units split one and two.
    counts = [150, 5, 0, 300, 20]
    _, got = run(w2_units, TWIN, sum(counts), 64, 500, counts)
    assert got == {
        0: [(0, 0, 150, 0, True), (0, 0, 150, 1, False), (0, 0, 150, 2, False),
            (3, 155, 150, 0, True), (3, 155, 150, 1, False), (3, 155, 150, 2, False),
            (4, 455, 20, 0, True)],
        1: [(1, 150, 5, 0, True), (1, 150, 5, 1, False), (1, 150, 5, 2, False),
            (3, 305, 150, 0, True), (3, 305, 150, 1, False), (3, 305, 150, 2, False),
            (4, 455, 20, 1, True), (4, 455, 20, 2, False)],
    }


@pytest.mark.parametrize("counts,tiles", [
    (ROUND_8192, (160, 192)),                         # 260 rows a group on average: two tiles of either height
    ([2 * r for r in ROUND_8192], (192, 160)),        # 520: three tiles of at most 192 rows, not four of 160
    ([130, 390], (160, 192)),                         # 260 on average: the tall form
    ([2 * r for r in ROUND_8192] + [0] * 32, (160, 192)),  # 260 on average over 64 groups (M over the groups)
])
def test_taller_tiles_when_they_save_a_weight_read(w2_units, counts, tiles):
    # Each row tile streams its expert's weight strip: the taller 192 x 160 form (within L0C, x still resident in
    # L1 at K = 2048) only when a group of the average size, M over the groups, takes fewer tiles of it.
    m = sum(counts)
    sizes, got = run(w2_units, A3, m, K, N, counts)
    assert (sizes["tm"], sizes["tn"]) == tiles
    assert got == expected_units(counts, sizes["tm"], sizes["ntiles"], A3["aic"])
    _covers_once(got, counts, sizes["ntiles"])
