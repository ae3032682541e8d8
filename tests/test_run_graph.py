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


def test_graph_run_passes_check_bit_identical_to_eager(tmp_path):
    outputs = {}
    for name, extra in (("eager", ()), ("graph", ("--graph",))):
        keep = tmp_path / name
        result = cam_run(*extra, "--check", "--quiet", "--json", str(tmp_path / f"{name}.json"), "--keep", str(keep),
                         cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads((tmp_path / f"{name}.json").read_text())
        assert report["graph"] == (name == "graph")
        assert report["check"]["ok"], report["check"]
        assert report["requests"] == 12
        outputs[name] = load_outputs(keep)
    assert "FFN by graph replay" in result.stdout
    assert outputs["eager"].keys() == outputs["graph"].keys() and outputs["eager"]
    for rid in outputs["eager"]:
        # Same items, same kernels: replaying the captured iteration must not change a single bit.
        assert torch.equal(outputs["eager"][rid], outputs["graph"][rid]), rid


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
