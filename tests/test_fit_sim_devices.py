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
    for name in ("ascend-a3-like", "ascend-a2-like", "ascend-a3-like-v4-flash"):
        with open(os.path.join(devices, name + ".json")) as f:
            shipped = json.load(f)
        with open(tmp_path / (name + ".json")) as f:
            fresh = json.load(f)
        assert fresh == shipped, name
        assert "MODELLED from cam's kernels" in shipped["meta"]["status"]
        for op in ("attention", "dense_mlp", "shared"):  # what cam does not compute stays an assumption
            assert op in shipped["meta"]["assumptions"]["applies_to"] and "tflops" in shipped["ops"][op]


def _round(tokens, rows, ops, item_rows=None):
    lo = {op: {"l2_lo": {"predicted_s": t}, "bound": {"link_bytes": 1000.0 * tokens}} for op, t in ops.items()}
    out = {"tokens": tokens, "ffn_rank_rows": rows, "devices": {"a3": {"ops": lo}}}
    if item_rows is not None:
        out["item_rows"] = item_rows
    return out


def test_runs_with_several_attention_ranks_give_combine_send_at_a_spread_ingress_apart(fit, source_root):
    # Worked by hand: one Attention rank (all 8 FFN ranks into its ingress) gives every op its point; a run with 4
    # Attention ranks gives only `combine_send_spread`, x its largest work item's rows (here 40 and 90).
    ops = {"dispatch_send": 1.0, "combine_recv": 2.0, "dispatch_recv": 3.5, "gmm_swiglu_quant_multi_layer": 4.0,
           "gmm_multi_layer": 5.0, "combine_send": 6.0}
    one = {"routing": "uniform", "attention_ranks": 1, "shape": {}, "rounds": [_round(100, 80, ops)]}
    spread = {"routing": "uniform", "attention_ranks": 4, "shape": {},
              "rounds": [_round(100, 80, dict(ops, combine_send=0.5), [[10, 40], [20, 30]]),
                         _round(200, 160, dict(ops, combine_send=0.9), [[90, 10], [5, 5]])]}
    pts = fit.points({"runs": [one, spread]}, "a3")
    assert pts["combine_send_spread"] == [(40, 0.5), (90, 0.9)] and pts["combine_send"] == [(80, 6.0)]
    assert pts["w1"] == [(80, 4.0)] and pts["dispatch_recv"] == [(80, 2.5)] and pts["dispatch_send"] == [(100, 1.0)]
    assert "combine_send_spread" not in fit.points({"runs": [one]}, "a3")
    with open(os.path.join(source_root, "cam", "sim", "devices", "ascend-a3-like-v4-flash.json")) as f:
        study = json.load(f)
    assert study["meta"]["fitted_at"]["shape"] == "deepseek-v4-flash" and study["meta"]["fitted_at"]["K"] == 6
    assert study["meta"]["fitted_at"]["attention_ranks"] == [1, 4]
    # The spread line (0.5 -> 0.9 s over 40 -> 90 rows in the hand record) is kept beside, not used.
    assert study["ops"]["combine_send"]["per_row_s"] > 2 * study["meta"]["ingress"]["combine_send_spread"]["per_row_s"]


def test_record_reruns_every_prediction_niced_into_one_record(fit, tmp_path, monkeypatch):
    """`--record`: one cam-bench predict per RECORDS entry, niced, one after the other, merged into --predict."""
    calls = []

    def fake_run(argv, check, stdout):
        calls.append(argv)
        out = argv[argv.index("--json") + 1]
        with open(out, "w") as f:
            json.dump({"runs": [{"n": len(calls)}]}, f)

    monkeypatch.setattr(fit.subprocess, "run", fake_run)
    path = tmp_path / "predict.json"
    fit.record(str(path))
    assert [c[:3] for c in calls] == [["nice", "-n", "5"]] * 2
    assert "--shape" not in calls[0] and calls[1][calls[1].index("--shape") + 1] == "deepseek-v4-flash"
    assert calls[1][calls[1].index("--attention") + 1:calls[1].index("--attention") + 3] == ["1", "4"]
    rec = json.loads(path.read_text())
    assert rec["runs"] == [{"n": 1}, {"n": 2}] and "not a measurement" in rec["label"]
