"""cam-bench expert-bytes (cam/bench/expert_bytes.py): the capacity case for W4A8 at DeepSeek-V3 shapes."""

import json

import pytest

from cam.bench import main
from cam.bench.expert_bytes import DIE_HBM_BYTES, expert_bytes, rank_bytes
from cam.sim.shapes import DEEPSEEK_V3

# Written out from the DeepSeek-V3 config (hidden 7168, moe_intermediate 2048, 256 experts, 61 layers of which the
# first 3 are dense): per expert 3·7168·2048 weight bytes, fp32 scales of 2·2048 + 7168 channels.
_W8_EXPERT = 3 * 7168 * 2048 + 4 * (2 * 2048 + 7168)
_W4_EXPERT = 3 * 7168 * 2048 // 2 + 2 * 4 * (2 * 2048 + 7168)


def test_deepseek_v3_on_8_ffn_ranks_fits_a_die_only_at_w4a8():
    w8 = rank_bytes(DEEPSEEK_V3, 8, "w8a8")
    w4 = rank_bytes(DEEPSEEK_V3, 8, "w4a8")
    assert w8 == 32 * 58 * _W8_EXPERT and w4 == 32 * 58 * _W4_EXPERT
    assert 81e9 < w8 < 82e9 and 40e9 < w4 < 41.5e9
    assert w8 > DIE_HBM_BYTES > w4


def test_group_scales_cost_what_their_count_says():
    g = 128
    extra = 4 * ((7168 // g) * 2 * 2048 + (2048 // g) * 7168) - 4 * (2 * 2048 + 7168)
    assert expert_bytes(7168, 2048, "w4a8", g) == _W4_EXPERT + extra


@pytest.mark.parametrize("kwargs", [dict(fmt="w8a4"), dict(fmt="w8a8", group_size=128), dict(fmt="w4a8", group_size=100)])
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError, match="fmt must be one of|group_size"):
        expert_bytes(7168, 2048, **kwargs)


def test_the_command_prints_and_writes_json(tmp_path, capsys):
    path = tmp_path / "eb.json"
    assert main(["expert-bytes", "--ffn-ranks", "8", "16", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "w8a8" in out and "w4a8" in out
    rows = json.loads(path.read_text())["results"]
    assert [(r["ffn_ranks"], r["format"], r["below_die_hbm"]) for r in rows] == [
        (8, "w8a8", False), (8, "w4a8", True), (16, "w8a8", True), (16, "w4a8", True)]
