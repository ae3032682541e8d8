"""cam-bench predict --k-group: the GMMs' weight scales in groups along K (cam/bench/predict.py), refused by name when
the group does not divide W1's K (H) and W2's K (I) or is not a multiple of the weights' fractal K."""

import pytest

from cam.bench import main as bench_main
from cam.bench import predict


@pytest.mark.parametrize("weights,bad", [("w4a8", "100"), ("w4a8", "96"), ("w8a8", "48"), ("w8a8", "-256"),
                                         ("w4a8", "4096")])
def test_bad_k_group_is_refused_naming_the_flag(weights, bad):
    # DeepSeek-V3: H 7168, I 2048; 96 divides neither, 48 is not a multiple of 32, 4096 does not divide I.
    with pytest.raises(SystemExit, match="--k-group"):
        bench_main(["predict", "--rounds", "8", "--weights", weights, "--k-group", bad])


def test_scale_groups_shape_the_scales():
    assert predict._scale_groups(7168, 256) == (28,)
    assert predict._scale_groups(2048, 128) == (16,)
    assert predict._scale_groups(7168, 0) == ()  # per output channel: [E, N]
    assert predict._k_group({"k_group": 256}) == ", scales in groups of 256 K rows"
    assert predict._k_group({}) == ""
