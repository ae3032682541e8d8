"""The afd-a3 study's scripts (benchmarks/sim/afd_a3.py, sensitivity.py): the deployment table and held-out verdicts
from a recorded study, and the sensitivity of the headline figures on a tiny setting."""

import importlib.util
import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SIM = ROOT / "benchmarks" / "sim"
RECORD = SIM / "results" / "afd-a3.json"


def _load(name):
    if str(SIM) not in sys.path:
        sys.path.insert(0, str(SIM))  # sensitivity.py imports afd_a3 beside it
    spec = importlib.util.spec_from_file_location(name, SIM / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(mode, load, rate, p50, p99, slo, tok_s, P=2):
    return {"mode": mode, "load": load, "rate": rate, "topology": {"P": P}, "throughput_tok_s": tok_s,
            "ttft_s": {"p50": p50, "p99": p99}, "slo": {"compliant_fraction": slo, "goodput_tok_s": tok_s * slo}}


def test_headline_pairs_afd_with_the_colocated_degree_the_study_chose_and_checks_the_bands():
    t = _load("afd_a3")
    study = {"runs": [_run("async", 1.0, 3.0, 2.0, 10.0, 0.85, 33000.0),
                      _run("colocated", 1.0, 3.0, 4.0, 20.0, 0.65, 31000.0, P=8),
                      _run("colocated", 1.0, 3.0, 1.0, 5.0, 0.99, 1000.0, P=4)],  # not the chosen degree
             "summary": {"afd_over_colocated": [{"rate": 3.0, "mode": "async", "colocated_tp": 8}]},
             "load_axis": {"sustain": 0.65, "slo_s": 10.0, "rate_req_s": 3.0, "baseline": "colocated N=16 DP2xTP8"}}
    (row,) = t.headline(study)
    assert row["colocated_tp"] == 8 and row["colocated_tok_s"] == 31000.0
    assert row["ttft_p50_afd_over_colocated"] == pytest.approx(0.5)
    assert row["slo_gain_points"] == pytest.approx(20.0)
    v = {(x["figure"], x["load"]): x for x in t.verdicts([row])}
    assert v[("afd_tok_s", 1.0)]["in_band"] is True  # 33,000 within 16,400 - 65,700
    assert v[("ttft_p50_afd_over_colocated", 1.0)]["in_band"] is True  # 0.5 within 0.45 - 0.88
    assert v[("afd_ttft_p99_s", 1.0)]["in_band"] is True  # 10 s within 7.8 - 31.2
    assert v[("tok_s_afd_over_colocated", 1.5)]["in_band"] is None  # no row at 1.5x: not judged
    row["ttft_p50_afd_over_colocated"] = 0.19  # the several-fold gain the bands exist to catch
    assert not {(x["figure"], x["load"]): x for x in t.verdicts([row])}[("ttft_p50_afd_over_colocated", 1.0)]["in_band"]


def test_the_readme_table_is_rendered_from_the_recorded_study(tmp_path):
    t = _load("afd_a3")
    rec = json.loads(RECORD.read_text())
    rows = t.headline(rec["study"])
    assert [r["load"] for r in rows] == [0.5, 0.75, 1.0, 1.25, 1.5]
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{t.BEGIN}\nstale\n{t.END}\nafter\n")
    assert t.main(["--from-json", str(RECORD), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "stale" not in text
    one = next(r for r in rows if r["load"] == 1.0)
    assert f"| 1x | {one['afd_tok_s']:,.0f} | {one['colocated_tok_s']:,.0f} (TP{one['colocated_tp']})" in text
    # the shipped README carries the same table
    assert t.markdown_table(rows, rec["study"]) in (ROOT / "README.md").read_text()


def test_a_readme_without_the_markers_is_refused_before_anything_is_written(tmp_path):
    t = _load("afd_a3")
    readme = tmp_path / "README.md"
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="--readme"):
        t.write_readme(str(readme), "table")
    assert readme.read_text() == "no markers\n"


TINY = ["--requests", "32", "--mean-len", "4000", "--max-len", "16000", "--slo", "1", "--colocated-tp", "8"]


def test_sensitivity_halving_and_doubling_a_used_constant_move_figures_opposite_ways_and_an_unused_one_says_why(
        tmp_path):
    s = _load("sensitivity")
    chosen = [c for c in s.CONSTANTS if c[0] in ("attention TFLOPS", "dense MLP TFLOPS", "cam op per-token/row terms")]
    assert len(chosen) == 3
    sens = s.run([1.0], TINY, str(tmp_path), constants=chosen, log=lambda *_: None)
    by = {c["name"]: c for c in sens["constants"]}
    for name in ("attention TFLOPS", "cam op per-token/row terms"):
        assert by[name]["moved"] and by[name]["opposite"], by[name]
        assert by[name]["why_not"] is None
    dense = by["dense MLP TFLOPS"]
    assert not dense["moved"] and "no dense layer" in dense["why_not"]
    table = s.markdown(sens)
    assert "| attention TFLOPS |" in table and "no dense layer" in table


def test_every_sensitivity_constant_names_a_term_the_device_file_has():
    s = _load("sensitivity")
    dev = s.load_device("ascend-a3-like")
    for name, where, _ in s.CONSTANTS:
        if where[0] == "op":
            assert where[2] in dev["ops"][where[1]], name
        elif where[0] == "ops":
            assert any(t in dev["ops"][op] for op in where[1] for t in where[2]), name
    with pytest.raises(ValueError, match="no attention.per_row_s"):
        s.scaled_device(dev, "attention", "per_row_s", 2.0)
