"""cam-qualify: --dry-run lists the very Step objects the real mode executes; the op checks are
real comparisons with the goldens (run here on the twin with device "cpu", and caught when the golden disagrees);
the real mode writes a support matrix with one record per step."""

import json
import re

import pytest

from cam import qualify

pytestmark = pytest.mark.timeout(300)


def test_real_mode_executes_exactly_the_planned_steps(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(qualify, "prerequisites", lambda env: [("everything", True, "stubbed")])
    ran = []

    def runner(step):
        ran.append(step)
        return True, "", 0.0

    out = tmp_path / "matrix.json"
    assert qualify.main(["--source", str(tmp_path), "--json", str(out)], runner=runner) == 0
    planned = qualify.plan(qualify.detect(str(tmp_path)))
    assert ran == planned
    matrix = json.loads(out.read_text())
    assert [r["name"] for r in matrix["steps"]] == [s.name for s in planned] and matrix["passed"]

    capsys.readouterr()
    assert qualify.main(["--dry-run", "--source", str(tmp_path)], runner=runner) == 0
    listed = [line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert listed == [s.name for s in planned]
    assert len(ran) == len(planned), "dry-run ran nothing"


def test_plan_covers_the_layout_shapes():
    steps = qualify.plan(qualify.Environment(source="/src", python="python", mssanitizer="/bin/mssanitizer"))
    kinds = [s.kind for s in steps]
    assert kinds[0] == "build" and kinds[-2:] == ["dataplane", "e2e"]
    ops = [s for s in steps if s.kind == "op"]
    assert len(ops) == len(qualify.OPS) * 4 * 3
    for op in qualify.OPS:
        argvs = [s.argv for s in ops if s.argv[s.argv.index("--op") + 1] == op]
        rows = {int(a[a.index("--m") + 1]) for a in argvs}
        ks = {int(a[a.index("--k") + 1]) % 32 for a in argvs}
        assert rows == {1, 15, 16, 17} and ks == {0, 16, 17}, op
        if op != "dynamic_quant":
            assert all(int(a[a.index("--n") + 1]) % 16 != 0 for a in argvs), op
    assert {s.argv[1] for s in steps if s.kind == "sanitizer"} == {"--tool=memcheck", "--tool=racecheck"}
    without = qualify.plan(qualify.Environment(source="/src", python="python", mssanitizer=None))
    assert not [s for s in without if s.kind == "sanitizer"]


def test_missing_prerequisites_refuse_the_real_mode(tmp_path, capsys):
    ran = []
    rc = qualify.main(["--source", str(tmp_path), "--json", str(tmp_path / "m.json")],
                      runner=lambda s: ran.append(s) or (True, "", 0.0))
    assert rc == 2 and ran == [] and not (tmp_path / "m.json").exists()
    assert "missing" in capsys.readouterr().err


def test_dry_run_outside_a_checkout_says_it_is_not_one(tmp_path, capsys, source_root):
    assert qualify.main(["--dry-run", "--source", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"MISSING cam checkout (--source): {tmp_path} is not a cam checkout" in out, out
    # the control: the checkout the tests run from is one
    assert qualify.main(["--dry-run", "--source", source_root]) == 0
    assert f"ok      cam checkout (--source): {source_root}" in capsys.readouterr().out


@pytest.mark.parametrize("op,m,k,n", [("dynamic_quant", 17, 273, 0), ("gmm_multi_layer", 15, 272, 200),
                                      ("gmm_swiglu_quant_multi_layer", 17, 273, 104)])
def test_op_checks_pass_on_the_twin(op, m, k, n):
    qualify.check_op(op, m, k, n, "cpu")


def test_op_check_catches_a_wrong_result(monkeypatch):
    # Negative control: a golden that disagrees by one element must fail the step.
    from cam.reference import gmm as gref

    real = gref.gmm_multi_layer

    def off_by_one(*args, **kwargs):
        out = real(*args, **kwargs).clone()
        out[0, 0] = float("nan")  # differs from every value, whatever the golden holds
        return out

    monkeypatch.setattr(gref, "gmm_multi_layer", off_by_one)
    with pytest.raises(AssertionError, match="out: 1 elements differ"):
        qualify.check_op("gmm_multi_layer", 16, 256, 200, "cpu")


def test_dataplane_round_trip_passes_on_the_twin():
    # The step's own check, here on the twin (threads as ranks, in-process windows): every round exact, every
    # payload's checksum equal to the golden dispatch's.
    qualify.check_dataplane(12, "cpu", seed=5)


def test_dataplane_round_trip_catches_a_wrong_output(monkeypatch):
    # Negative control: one element of one round's combine output off must fail the step, naming the round.
    import cam

    real = cam.ops.combine_recv
    calls = []

    def corrupt(comm, ids, w):
        out = real(comm, ids, w)
        calls.append(comm.rank)
        if len(calls) >= 3 and out.numel() and not corrupt.done:
            corrupt.done = True
            out.view(-1)[0] = float("nan")
        return out

    corrupt.done = False

    monkeypatch.setattr(cam.ops, "combine_recv", corrupt)
    with pytest.raises(AssertionError, match=r"rank \d failed: round \d+: Attention rank \d's combine output differs"):
        qualify.check_dataplane(6, "cpu", seed=7)


def _shift_golden_payload(monkeypatch):
    """The golden round trip with the first received row of every FFN rank off by one: a payload check must fail."""
    from cam.reference import dispatch_combine

    real = dispatch_combine.round_trip_plane

    def shifted(*args, **kwargs):
        res = real(*args, **kwargs)
        for gd in res["dispatch"].values():
            if gd["rows"].numel():
                gd["rows"] = gd["rows"].clone()
                gd["rows"].view(-1)[0] += 1
        return res

    monkeypatch.setattr(dispatch_combine, "round_trip_plane", shifted)


def test_dataplane_round_trip_catches_a_wrong_payload(monkeypatch):
    # Negative control for the checksums: a golden dispatch whose rows differ must fail, naming the FFN rank.
    _shift_golden_payload(monkeypatch)
    with pytest.raises(AssertionError, match=r"payload FFN rank \d+ received from replica \d has the wrong checksum"):
        qualify.check_dataplane(4, "cpu", seed=9)


def test_dataplane_round_trip_under_load_passes_on_the_twin():
    # The ordering step's check on the twin: the rounds run while a load thread does matmuls, and the load ran.
    plane = qualify.check_dataplane(6, "cpu", seed=3, load=True)
    assert re.search(r"load [1-9]\d* matmuls", plane), plane


def test_dataplane_round_trip_under_load_names_the_ordering(monkeypatch):
    # Negative control: under load a payload checksum that differs is named as the round's writes not all visible
    # at its ready word.
    _shift_golden_payload(monkeypatch)
    with pytest.raises(AssertionError, match=r"wrong checksum \(read after the round's ready word, under load: the "
                                             r"round's writes were not all visible"):
        qualify.check_dataplane(3, "cpu", seed=9, load=True)


def test_the_load_that_never_runs_fails_the_step(monkeypatch):
    # A load that did no work proves nothing about ordering under load: the step refuses to pass.
    monkeypatch.setattr(qualify._DeviceLoad, "_run", lambda self: None)
    with pytest.raises(AssertionError, match="the load never ran a matmul"):
        qualify.check_dataplane(2, "cpu", seed=1, load=True)


def test_dataplane_step_on_npu_names_what_is_missing():
    # Without torch_npu there are no NPU tensors (the step itself runs against the stub in test_ascend_npu.py).
    with pytest.raises(RuntimeError, match="needs torch_npu"):
        qualify.check_dataplane(1, "npu")


def test_dry_run_lists_and_real_mode_runs_the_planned_step_objects(tmp_path, monkeypatch, capsys):
    # Both modes take their steps from one plan() call and act on those very objects: --dry-run describes each
    # object plan returned (the NPU data-plane step among them), the real mode hands each to the runner.
    monkeypatch.setattr(qualify, "prerequisites", lambda env: [("everything", True, "stubbed")])
    planned, described, ran = [], [], []
    real_plan, real_describe = qualify.plan, qualify.describe
    monkeypatch.setattr(qualify, "plan", lambda env: planned.append(real_plan(env)) or planned[-1])
    monkeypatch.setattr(qualify, "describe", lambda step: described.append(step) or real_describe(step))
    assert qualify.main(["--dry-run", "--source", str(tmp_path)]) == 0
    assert len(planned) == 1 and len(described) == len(planned[0])
    assert all(d is p for d, p in zip(described, planned[0]))
    dataplane = [s for s in planned[0] if s.kind == "dataplane"]
    assert [s.name for s in dataplane] == ["dataplane_round_trip[transport=npu]",
                                           "dataplane_order_under_load[transport=npu]"]
    assert "--dataplane-load" in dataplane[1].argv and "--dataplane-load" not in dataplane[0].argv
    assert dataplane[0].argv[dataplane[0].argv.index("--device") + 1] == "npu"
    assert "dataplane_round_trip[transport=npu]" in capsys.readouterr().out
    assert qualify.main(["--source", str(tmp_path), "--json", str(tmp_path / "m.json")],
                        runner=lambda step: ran.append(step) or (True, "", 0.0)) == 0
    assert len(planned) == 2 and len(ran) == len(planned[1]) and all(r is p for r, p in zip(ran, planned[1]))


@pytest.mark.slow  # a subprocess that imports torch and cam
def test_the_planned_dataplane_step_runs_as_a_subprocess(tmp_path):
    # The real mode's own Step (its argv, through the CLI) on the twin, with fewer rounds: the wiring works.
    env = qualify.detect(str(tmp_path), device="cpu")
    step = next(s for s in qualify.plan(env) if s.kind == "dataplane")
    argv = list(step.argv)
    argv[argv.index("--dataplane-rounds") + 1] = "6"
    ok, detail, _ = qualify.run_subprocess(qualify.Step(step.name, step.kind, tuple(argv), timeout_s=240))
    assert ok and "data-plane round trip: 6 rounds on cpu (transport in_process, 4 threads as ranks): ok" in detail, \
        detail
