"""cam-run --graph: every FFN rank runs its iteration by replaying one captured graph (docs/graph.md). The run
passes --check with outputs bit-identical to the eager run, and a rank killed mid-run still ends every process
within the timeout, naming the dead rank. Every wait here is bounded."""

import json
import os
import signal
import sys
import time

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from test_run import Launcher, alive, cam_run, leftover_windows, load_outputs  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_graph_and_batched_runs_pass_check_bit_identical_to_eager(tmp_path):
    """Also --batch-items, eager and replayed: one receive serves every ready item up to the row budget with one W1
    and one W2 launch; and --placement: experts on FFN ranks by a table, hot ones replicated. The schedule changes,
    not one bit of any output, and every routed row is served once."""
    outputs, reports = {}, {}
    runs = (("eager", ()), ("graph", ("--graph",)), ("batched", ("--batch-items",)),
            ("graph-batched", ("--graph", "--batch-items")),
            # 8 experts on 3 FFN ranks (no E % F), the 2 most-routed experts on two ranks each
            ("placed", ("--ffn", "3", "--placement", "hot:2")))
    for name, extra in runs:
        keep = tmp_path / name
        result = cam_run(*extra, "--check", "--quiet", "--json", str(tmp_path / f"{name}.json"), "--keep", str(keep),
                         cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        report = reports[name] = json.loads((tmp_path / f"{name}.json").read_text())
        assert report["graph"] == ("graph" in name)
        assert (report["batch_rows"] is not None) == ("batched" in name)
        assert report["check"]["ok"], report["check"]
        assert report["requests"] == 12
        outputs[name] = load_outputs(keep)
        if name == "graph":
            assert "FFN by graph replay" in result.stdout
        if name == "batched":
            assert "batched FFN receive" in result.stdout
    placed = reports["placed"]
    assert placed["placement"]["slots_per_rank"] == 4 and placed["topology"]["F"] == 3
    assert all(len(hot) == 2 for hot in placed["placement"]["replicated"]), placed["placement"]
    assert reports["eager"]["placement"] == {"kind": "contiguous"}
    topo = reports["batched"]["topology"]
    assert reports["batched"]["batch_rows"] > 0 and topo["D"] == 2
    rows = {name: sum(f["rows"] for f in r["ffn"]) for name, r in reports.items()}
    assert len(set(rows.values())) == 1 and rows["eager"] > 0, rows
    for name in ("eager", "batched"):  # eager loops count their W1 + W2 launches: two per receive, served or idle
        launches = [f["gmm_launches"] for f in reports[name]["ffn"]]
        assert all(n > 0 and n % 2 == 0 for n in launches), (name, launches)
    assert all(f["gmm_launches"] is None for f in reports["graph"]["ffn"])
    assert outputs["eager"].keys() == outputs["graph"].keys() and outputs["eager"]
    for name in ("graph", "batched", "graph-batched", "placed"):
        assert outputs[name].keys() == outputs["eager"].keys(), name
        for rid in outputs["eager"]:
            # Same items, same kernels: replaying or batching the iteration must not change a single bit.
            assert torch.equal(outputs["eager"][rid], outputs[name][rid]), (name, rid)


def test_killed_rank_under_graph_replay_ends_every_process_naming_it(tmp_path):
    run = Launcher("--graph", "--cost-model", "--preset", "imbalanced", "--timeout", "60", cwd=tmp_path)
    run.wait_for("step 1/")  # mid-run: the FFN ranks are replaying
    pids = run.pids()
    victim = 3  # an FFN rank, killed inside a replay or between two
    os.kill(pids[victim], signal.SIGKILL)
    start = time.monotonic()
    code, out, err = run.finish()
    assert code == 1, out + err
    assert time.monotonic() - start < 60, "the world must end well within the timeout"
    assert f"rank {victim} was killed by signal 9" in err, err
    for r in (r for r in pids if r != victim):
        assert f"[rank {r}]" in err, err
    assert not any(alive(pid) for pid in pids.values()), "no process may be left behind"
    assert leftover_windows(run.proc.pid) == [], "no shm window may be left behind"
