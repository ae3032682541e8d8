"""benchmarks/fit_sim_devices.py: cam-sim's A3 / A2 device files are the fit of the predict record that ships beside
them (a stale file, or one edited by hand, differs from a fresh fit), and the line fit is checked on points worked by
hand."""

import importlib.util
import json
import os

import pytest


@pytest.fixture(scope="module")
def fit(source_root):
    spec = importlib.util.spec_from_file_location("fit_sim_devices",
                                                  os.path.join(source_root, "benchmarks", "fit_sim_devices.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_line_fit_by_hand(fit):
    # y = 3 + 2x exactly: intercept 3, slope 2, no residual.
    assert fit.fit_line([1, 2, 4], [5, 7, 11]) == pytest.approx((3.0, 2.0, 0.0))
    # A least-squares intercept below 0 (y = 2x - 1) is refitted through the origin: slope (x.y)/(x.x) = 22/14.
    icept, slope, _ = fit.fit_line([1, 2, 3], [1, 3, 5])
    assert icept == 0.0 and slope == pytest.approx(22 / 14)
    with pytest.raises(ValueError, match="two distinct x"):
        fit.fit_line([2, 2], [1, 1])


def test_shipped_device_files_are_the_fit_of_the_shipped_record(fit, source_root, tmp_path):
    devices = os.path.join(source_root, "cam", "sim", "devices")
    assert fit.main(["--predict", os.path.join(source_root, "benchmarks", "results", "predict.json"),
                     "--out", str(tmp_path), "--base", os.path.join(devices, "ascend-a3-like.json")]) == 0
    for name in ("ascend-a3-like", "ascend-a2-like"):
        with open(os.path.join(devices, name + ".json")) as f:
            shipped = json.load(f)
        with open(tmp_path / (name + ".json")) as f:
            fresh = json.load(f)
        assert fresh == shipped, name
        assert "MODELLED from cam's kernels" in shipped["meta"]["status"]
        for op in ("attention", "dense_mlp", "shared"):  # what cam does not compute stays an assumption
            assert op in shipped["meta"]["assumptions"]["applies_to"] and "tflops" in shipped["ops"][op]
