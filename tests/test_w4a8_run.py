"""cam-run --checkpoint DIR --weights w4a8: a tiny random checkpoint's routed experts as per-channel int4 values
(run on today's kernels in int8 storage, docs/gmm.md §9.3), checked against the single-process reference and the
transformers model run natively with the same dequantized int4 experts."""

import pytest

from test_run_checkpoint import _cam_run, _checkpoint, _refused


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("family", ["deepseek_v3", "deepseek_v4"])
def test_cam_run_w4a8_on_a_checkpoint_matches_native(family, tmp_path):
    path = _checkpoint(family, tmp_path / family)
    proc, report = _cam_run(path, tmp_path, "--weights", "w4a8", python=("-m", "cam.run.cli"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["weights"] == "w4a8"
    check = report["check"]
    assert check["ok"] and check["reference_ok"], check
    native = check["native"]
    assert native["ok"] and native["requests"] == 4, native
    assert native["greedy_equal"] + native["greedy_near_ties"] == 4, native
    assert 0 < native["max_block_rel_diff"] < native["tolerance"]["max_block_rel_diff"]


def test_weights_flag_needs_a_checkpoint():
    _refused(["--weights", "w4a8"], "--weights w4a8 needs --checkpoint")
