"""How cam-run starts its ranks (cam/run/start.py, docs/run.md §4): a forked rank reports its exit code as Popen would
(-9 for SIGKILL), waits for the launcher's go (bounded) and leaves when the launcher goes away first, and the exec
start still runs a whole world. The fork scenarios run in a fresh interpreter, so the fork happens in a process with
no other thread (as in the launcher), never in pytest's."""

import json
import os
import subprocess
import sys
import time

import pytest

_SCENARIOS = r"""
import json, os, signal, subprocess, sys, time
from cam.run import start

out = {}
# A rank whose config cannot be read: it got its go, so worker.main ran and failed (exit 3, as an exec'd worker).
procs, go = start._fork_ranks("/nonexistent-cam-dir/config.json", 2, timeout_s=30)
go()
out["bad_config"] = [procs[r].wait(timeout=60) for r in range(2)]
# No go: the launcher gave up (or died) before its store was up: the ranks leave at once.
procs, go = start._fork_ranks("/nonexistent-cam-dir/config.json", 1, timeout_s=30)
t = time.monotonic()
go(False)
out["no_go"] = procs[0].wait(timeout=60)
out["no_go_s"] = time.monotonic() - t
# No go within the bound: the rank does not wait forever.
procs, go = start._fork_ranks("/nonexistent-cam-dir/config.json", 1, timeout_s=0.5)
t = time.monotonic()
out["timeout"] = procs[0].wait(timeout=60)
out["timeout_s"] = time.monotonic() - t
go()
# A SIGKILLed rank reads -9, as Popen reports it; wait() on a live rank is bounded.
procs, go = start._fork_ranks("/nonexistent-cam-dir/config.json", 1, timeout_s=60)
try:
    procs[0].wait(timeout=0.2)
    out["wait_bounded"] = False
except subprocess.TimeoutExpired:
    out["wait_bounded"] = True
procs[0].kill()
out["killed"] = procs[0].wait(timeout=60)
out["poll_again"] = procs[0].poll()
go()
print(json.dumps(out))
"""


def test_forked_ranks_exit_codes_go_and_bounds(tmp_path):
    r = subprocess.run([sys.executable, "-c", _SCENARIOS], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["bad_config"] == [3, 3], (out, r.stderr)
    assert out["no_go"] == 1 and out["no_go_s"] < 20, out
    assert "never started the run (it gave up or is gone)" in r.stderr, r.stderr
    assert out["timeout"] == 1 and out["timeout_s"] < 20, out
    assert "no go within 0.5 s" in r.stderr, r.stderr
    assert out["wait_bounded"] and out["killed"] == -9 and out["poll_again"] == -9, out


def test_bad_start_method_is_refused_at_start(tmp_path):
    r = subprocess.run([sys.executable, "-m", "cam.run.cli", "--quiet"], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env=dict(os.environ, CAM_RUN_START="spawn"))
    assert r.returncode == 2 and "CAM_RUN_START must be 'fork' or 'exec'" in r.stderr, r.stdout + r.stderr


# The exec start's world (CAM_RUN_START=exec) is the sync run of
# tests/test_run.py::test_async_and_sync_match_the_reference_and_each_other.
