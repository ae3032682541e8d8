"""Issue 9, item 8: on an shm plane a dead peer (FFN or Attention rank) is found by the survivors' liveness
watchdogs, independent of timeout_s, and every survivor's error names the dead rank (not "aborted by rank 0").
Runs the detection benchmark's plane (benchmarks/dead_peer_detection.py) once per victim role; the latency it
measures is reported there, never asserted here."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("role", ["ffn", "attention"])
def test_every_survivor_names_the_dead_peer(tmp_path, role):
    out = tmp_path / "r.json"
    # timeout_s of the plane is 120 s; the run must end far sooner, by detection, not by a device timeout
    result = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "dead_peer_detection.py"),
                             "--runs", "1", "--victims", role, "--json", str(out)],
                            capture_output=True, text=True, timeout=360, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    (run,) = report["runs"]
    victim = run["victim"]
    assert (victim >= 2) == (role == "ffn")
    assert sorted(int(r) for r in run["errors"]) == sorted(r for r in range(4) if r != victim)
    for rank, err in run["errors"].items():
        assert err and f"rank {victim} died" in err, (rank, err)
        assert "aborted by rank" not in err, (rank, err)
    assert run["watchdog_found_s"], "no survivor's watchdog found the death"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_soak_keeps_memory_threads_and_fds_flat(tmp_path):
    """benchmarks/soak.py with fewer rounds: random shapes including B = 0, golden-checked samples; RSS, threads
    and fds at the end equal the start (RSS within 16 MiB: allocator noise, not growth per round)."""
    out = tmp_path / "soak.json"
    result = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "soak.py"), "--rounds", "2000",
                             "--warmup", "100", "--check-every", "100", "--json", str(out)],
                            capture_output=True, text=True, timeout=540, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    r = json.loads(out.read_text())
    assert r["rounds_total"] == 2000 * 2 and not r["errors"] and not r["mismatches"]
    assert r["end"]["threads"] == r["start"]["threads"] and r["end"]["fds"] == r["start"]["fds"], r
    assert r["rss_growth_bytes"] < 16 << 20, r
