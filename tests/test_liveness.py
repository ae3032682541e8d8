"""On an shm plane a dead peer (FFN or Attention rank) is found by the survivors' liveness
watchdogs, independent of timeout_s. A dead FFN rank aborts the plane and every survivor's error names it (not
"aborted by rank 0"); a dead Attention rank, under the default replica isolation, loses only its replica.
Runs the detection benchmark's plane (benchmarks/dead_peer_detection.py), one process for both victim roles; the latency it
measures is reported there, never asserted here."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _detection_runs(tmp_path, *flags) -> dict:
    """One benchmark process, one plane per victim role it is given: {role: that plane's record}."""
    out = tmp_path / "r.json"
    # timeout_s of the plane is 120 s; the run must end far sooner, by detection, not by a device timeout
    result = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "dead_peer_detection.py"),
                             "--runs", "1", "--json", str(out), *flags],
                            capture_output=True, text=True, timeout=360, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    runs = json.loads(out.read_text())["runs"]
    assert len({r["role"] for r in runs}) == len(runs), runs
    return {r["role"]: r for r in runs}


def _detection_run(tmp_path, *flags) -> dict:
    (run,) = _detection_runs(tmp_path, *flags).values()
    return run


@pytest.fixture(scope="module")
def default_runs(tmp_path_factory):
    """Both victim roles under the default isolation, in one benchmark process (one start-up for the two tests)."""
    return _detection_runs(tmp_path_factory.mktemp("liveness"), "--victims", "ffn", "attention")


def assert_plane_aborted_naming(run, victim_is_ffn: bool):
    victim = run["victim"]
    assert (victim >= 2) == victim_is_ffn
    assert sorted(int(r) for r in run["errors"]) == sorted(r for r in range(4) if r != victim)
    for rank, err in run["errors"].items():
        assert err and f"rank {victim} died" in err, (rank, err)
        assert "aborted by rank" not in err, (rank, err)
    assert run["watchdog_found_s"], "no survivor's watchdog found the death"


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_dead_ffn_rank_aborts_the_plane_and_every_survivor_names_it(default_runs):
    """Replica isolation is on by default, but an FFN rank's experts are gone: the whole plane ends."""
    assert_plane_aborted_naming(default_runs["ffn"], victim_is_ffn=True)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_dead_attention_rank_loses_only_its_replica_by_default(default_runs):
    """The default (replica isolation): the dead Attention rank's replica is fenced; the other replica and both FFN
    ranks go on with golden-checked rounds (checked inside the workers), every survivor reports the fence, and each
    FFN rank reports the lost replica with the rounds of it that it dropped."""
    run = default_runs["attention"]
    victim = run["victim"]
    assert victim < 2 and run["isolated"] and run["ok"]
    assert run["watchdog_found_s"], "no survivor's watchdog found the death"
    for r, s in run["survivors"].items():
        assert s["error"] is None, (r, s)
        assert s["fenced"] == {str(victim): victim}, (r, s)
        assert s["rounds_after"] > 0, (r, s)
        if int(r) >= 2:
            assert set(s["dropped"]) == {str(victim)} and s["dropped"][str(victim)] >= 0, (r, s)
            (lost,) = s["lost"]
            assert lost.startswith(f"replica {victim} lost: Attention rank {victim} died; FFN rank {r} dropped "), s
        else:
            assert s["dropped"] == {}, (r, s)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(os.environ.get("CAM_LONG_TESTS") != "1",
                    reason="4,000 rounds (47 s loaded): runs with CAM_LONG_TESTS=1 (CI's long-tests stage)")
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
