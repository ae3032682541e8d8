"""dispatch_send's UB decision (tiling/src/dispatch_send_tiling.cpp, docs/protocol.md §6.1): at DeepSeek-V3 shapes
with a placement table of 36 slots per FFN rank (256 experts and the 32 most-loaded replicated over 8 ranks), the
layer's placement rows stay resident in UB and every block routes its own tokens, the quant pass narrowed into
equal passes to make room; where the widest pass leaves room, it is kept (tests/twin/dispatch_send_tiling.cpp runs
the tiling)."""

import pytest
from _tiling_program import build_tiling_program, run_tiling_program

pytestmark = [pytest.mark.slow]

# One A3 die: 48 vector cores, UB 192 KiB less the 8 KiB the Ascend C API keeps as its scratch (docs/twin.md,
# "Core kinds and memories").
AIV, UB = 48, 196608 - 8192
H, E, F, K = 7168, 256, 8, 8
SLOTS_32 = (E + 32) // F     # 36 local slots: 256 experts and 32 second replicas over 8 FFN ranks
TABLE_WORDS = E * (1 + 2 * F)  # the layer's placement rows: {n, f0, j0, ...} of 1 + 2F int64 words per expert
WIDEST = 4096                  # kDispatchSendMaxCols
NARROWEST = 1024               # kDispatchSendMinCols


@pytest.fixture(scope="module")
def tiling(source_root, tmp_path_factory):
    return build_tiling_program(source_root, tmp_path_factory, "dispatch_send_tiling", "dispatch_send_tiling.cpp",
                                tiling_private=True)


def run(binary, tokens, *, E=E, slots=SLOTS_32, placed=True, ub=UB):
    words = " ".join(run_tiling_program(binary, [AIV, ub, H, E, F, K, slots, tokens, int(placed)], timeout=60)).split()
    return dict(zip(words[0:8:2], map(int, words[1:8:2])))


def equal_passes(cols):
    """cols is a row of H split into p passes of equal width, rounded up to 32 elements, for some p."""
    p = -(-H // cols)
    return cols == -(-(-(-H // p)) // 32) * 32


@pytest.mark.parametrize("tokens", [8192, 16384])
def test_placement_rows_stay_resident_with_32_replicas(tiling, tokens):
    t = run(tiling, tokens)
    assert t["tables_in_ub"] == 1 and t["place_ub_words"] == TABLE_WORDS, t
    assert NARROWEST <= t["cols"] < WIDEST and equal_passes(t["cols"]), t
    # 8192 tokens: two equal passes of 3584 (the widest pass's count, narrower); 16384, more tables: one pass more.
    assert -(-H // t["cols"]) == {8192: 2, 16384: 3}[tokens], t


def test_the_widest_pass_is_kept_where_it_fits(tiling):
    # No table, or a small round: nothing to make room for.
    assert run(tiling, 8192, slots=0, placed=False)["cols"] == WIDEST
    t = run(tiling, 1024)
    assert (t["cols"], t["tables_in_ub"], t["place_ub_words"]) == (WIDEST, 1, TABLE_WORDS)


def test_a_table_too_large_for_any_pass_is_windowed_at_the_widest_pass(tiling):
    # 4096 experts: 557 KiB of rows, more than UB whatever the pass; a window of them, the pass as wide as ever.
    t = run(tiling, 8192, E=4096, slots=(4096 + 32) // F)
    assert t["place_ub_words"] < 4096 * (1 + 2 * F) and t["cols"] == WIDEST, t
