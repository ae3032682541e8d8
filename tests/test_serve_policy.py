"""One row-budget rule, compared in C only and asked by Python; one ``--row-budget`` flag on every tool; the help of
cam-ffn and cam-run without torch; cam.WorkItem's words from window_layout.h."""

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT_S = 120


def _topo(**kw):
    import cam

    base = dict(D=2, P=1, F=1, E=4, K=2, H=32, Bmax=4, L=2)
    base.update(kw)
    return cam.Topology(**base)


# ----------------------------------------------------------------------------- the rule lives in C


def _names(node) -> set:
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
            if isinstance(n, (ast.Name, ast.Attribute))}


def test_the_row_budget_comparison_is_only_in_c():
    """No Python file under cam/ compares a row budget with a work item's rows; the C host does, once."""
    budget = {"row_budget", "batch_rows", "requested", "budget"}
    found = []
    for path in sorted((ROOT / "cam").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE))
                                                     for op in node.ops):
                names = _names(node)
                if names & budget and names & {"recv_rows", "chunk", "largest_batch", "top_k"}:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    # The simulator's own rule (one token's rows, top-k) is over its modelled shape, not a cam.Topology.
    assert [f for f in found if not f.startswith("cam/sim/")] == []
    c = (ROOT / "host/src/dispatch_recv.cpp").read_text()
    assert c.count("rowBudget < chunk") == 1
    # The control: the scan does find a comparison of that form.
    probe = ast.parse("if row_budget < topology.recv_rows: pass")
    assert any(isinstance(n, ast.Compare) and _names(n) >= {"row_budget", "recv_rows"} for n in ast.walk(probe))


def test_python_asks_c_for_the_refusal(monkeypatch):
    import cam
    from cam import _C

    t = _topo()
    with pytest.raises(ValueError, match=r"row_budget = 1 is below one work item's rows: dispatch_recv: row_budget 1 "
                                         r"is smaller than one work item's rows \(8 = "):
        cam.ServePolicy(row_budget=1).validated(t)
    # With C's answer replaced, Python accepts what C accepts: it never compares on its own.
    monkeypatch.setattr(_C, "dispatch_recv_check_row_budget", lambda fields, budget: 1000)
    assert cam.ServePolicy(row_budget=1).validated(t).batch_rows == 1


def test_the_budget_is_bounded_by_the_largest_useful_batch():
    import cam

    t = _topo(D=3)
    largest = min(t.D, 64) * t.recv_rows
    for budget in (t.recv_rows, largest):
        assert cam.ServePolicy(row_budget=budget).validated(t).batch_rows == budget
    for budget in (largest + 1, 10 ** 9, 2 ** 62):  # an allocation this large was tried before: now never
        p = cam.ServePolicy(row_budget=budget).validated(t)
        assert p.row_budget == budget and p.batch_rows == largest
    assert cam.ServePolicy().validated(t).batch_rows is None
    with pytest.raises(TypeError, match="row_budget must be an int"):
        cam.ServePolicy(row_budget=2.0)
    with pytest.raises(ValueError, match="weights must be one of"):
        cam.ServePolicy(weights="fp8")
    with pytest.raises(ValueError, match="items_per_check"):
        cam.ServePolicy(items_per_check=0)
    with pytest.raises(ValueError, match="swiglu_limit"):
        cam.ServePolicy(swiglu_limit=-1.0)


# ----------------------------------------------------------------------------- one flag


@pytest.mark.parametrize("module", ["cam.run.cli", "cam.sim.cli"])
def test_row_budget_and_its_old_spelling(module, capsys):
    import importlib

    cli = importlib.import_module(module)
    dest = "row_budget" if module == "cam.run.cli" else "batch_rows"
    args = cli._parse(["--row-budget", "64"])
    assert getattr(args, dest) == 64 and "deprecated" not in capsys.readouterr().err
    args = cli._parse(["--batch-rows", "48"])
    assert getattr(args, dest) == 48
    err = capsys.readouterr().err
    assert "--batch-rows is deprecated: use --row-budget" in err


def test_cam_run_refuses_a_budget_below_one_item_naming_the_spelling_used(capsys):
    from cam.run import cli

    for flag in ("--row-budget", "--batch-rows"):
        assert cli.run(cli._parse(["--batch-items", flag, "1", "--quiet"])) == 2
        err = capsys.readouterr().err
        assert f"{flag} 1 is below one work item's rows: dispatch_recv: row_budget 1 is smaller" in err, err


# ----------------------------------------------------------------------------- help without torch


@pytest.mark.parametrize("module", ["cam.ffn_server", "cam.run.cli"])
def test_help_answers_without_importing_torch(module, tmp_path):
    probe = (f"import sys\nfrom {module} import main\ntry:\n    main(['--help'])\nexcept SystemExit as e:\n"
             f"    code = e.code\nprint('IMPORTED', 'torch' in sys.modules, code)\n")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=TIMEOUT_S,
                       cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "IMPORTED False 0", r.stdout
    assert "--row-budget" in r.stdout


def test_cam_ffn_help_shows_its_defaults(capsys):
    from cam import ffn_server

    with pytest.raises(SystemExit):
        ffn_server.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for needle in ("Attention DP replicas D (default: 1)", "(default: 29555)", "(default: 300.0)",
                   "(default: w8a8)", "(default: 0.05)"):
        assert needle in out, needle


# ----------------------------------------------------------------------------- cam.WorkItem


def test_work_item_words_are_window_layout_h_s():
    import re

    import torch

    import cam

    header = (ROOT / "kernels/common/window_layout.h").read_text()
    words = {m.group(1): int(m.group(2)) for m in re.finditer(r"constexpr int64_t kWi(\w+) = (\d+);", header)}
    names = {"Kind": "kind", "Replica": "replica", "Layer": "layer", "Seq": "seq", "Slot": "slot", "Rows": "rows",
             "FfnRank": "ffn_rank", "Fingerprint": "fingerprint", "Counts": "counts"}
    assert {names[k]: v for k, v in words.items() if k in names} == cam.WorkItem.WORDS
    record = torch.arange(40, dtype=torch.int64)
    item = cam.WorkItem(record)
    assert (item.kind, item.replica, item.layer, item.seq, item.slot, item.rows, item.ffn_rank) == \
        tuple(words[k] for k in ("Kind", "Replica", "Layer", "Seq", "Slot", "Rows", "FfnRank"))
    assert item.layer_index.data_ptr() == record[words["Layer"]:].data_ptr() and item.layer_index.numel() == 1
    assert torch.equal(item.counts(3), record[words["Counts"]:words["Counts"] + 3])
    assert [w.replica for w in cam.WorkItem.table(torch.stack([record, record + 100]))] == \
        [words["Replica"], words["Replica"] + 100]
    with pytest.raises(TypeError, match="1-D int64"):
        cam.WorkItem(record.float())
