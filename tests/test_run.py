"""cam-run end to end: processes as ranks over shm windows, async and sync, correctness against the single-process
reference, and the failure paths (a killed rank, SIGTERM, bad configuration). Every wait here is bounded."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

RUN_TIMEOUT_S = 240


def cam_run(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "cam.run.cli", *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, cwd=cwd, env=env)


def load_outputs(directory):
    """Each request's rows, stitched from the (request, first token, rows) pieces every Attention rank saved; a
    token missing or delivered twice fails here."""
    pieces = {}
    for name in os.listdir(directory):
        if name.startswith("outputs-"):
            for rid, first, rows in torch.load(os.path.join(directory, name)):
                pieces.setdefault(rid, []).append((first, rows))
    outputs = {}
    for rid, parts in pieces.items():
        parts.sort(key=lambda p: p[0])
        expect = 0
        for first, rows in parts:
            assert first == expect, f"request {rid}: piece at token {first}, expected {expect}"
            expect += rows.shape[0]
        outputs[rid] = torch.cat([rows for _, rows in parts])
    return outputs


def test_async_and_sync_match_the_reference_and_each_other(tmp_path):
    """Also the exec start (CAM_RUN_START=exec, every rank a fresh interpreter: the path for platforms without
    fork), on the sync run: it runs and checks, and its wall profile says where the time went (an exec'd rank pays
    its own interpreter start and imports). No extra world for it. The colocated mode (two processes, each an
    Attention and an FFN rank of one plane) computes the same batches with the same ops: bit-identical too."""
    reports, outputs = {}, {}
    draw = _has_matplotlib() or bool(os.environ.get("CI"))  # CI installs the viz extra: there it must draw
    for mode in ("async", "sync", "colocated"):
        keep = tmp_path / mode
        # The async run also draws its --timeline (the same process: no extra world for the plot).
        timeline = ["--timeline", str(tmp_path / "timeline.png")] if mode == "async" and draw else []
        env = dict(os.environ, CAM_RUN_START="exec") if mode == "sync" else None
        result = cam_run("--mode", mode, "--check", "--quiet", "--json", str(tmp_path / f"{mode}.json"),
                         "--keep", str(keep), *timeline, cwd=tmp_path, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"cam-run --mode {mode}" in result.stdout
        reports[mode] = json.loads((tmp_path / f"{mode}.json").read_text())
        outputs[mode] = load_outputs(keep)
    for mode, report in reports.items():
        assert report["mode"] == mode
        assert report["check"]["ok"], report["check"]
        assert report["makespan_s"] > 0 and report["throughput_tok_s"] > 0
        assert set(report["ttft_s"]) >= {"mean", "p50", "p90", "p99"}
        assert 0.0 <= report["ffn_idle_fraction"] <= 1.0
        assert len(report["ttft_per_request_s"]) == report["requests"] == 12
    ranks = reports["sync"]["wall_s"]["ranks"]
    assert set(ranks) == {"0", "1", "2", "3"} and all(v["start"] > 0 for v in ranks.values()), ranks
    assert reports["colocated"]["devices"] == 2 and reports["sync"]["devices"] == 4
    assert sorted(f["rank"] for f in reports["colocated"]["ffn"]) == [2, 3]
    assert all(f["items"] > 0 for f in reports["colocated"]["ffn"])
    assert outputs["async"].keys() == outputs["sync"].keys() == outputs["colocated"].keys()
    for rid in outputs["async"]:
        # Same batches, same ops, same numerics: the schedule must not change a single bit.
        assert torch.equal(outputs["async"][rid], outputs["sync"][rid]), rid
        assert torch.equal(outputs["async"][rid], outputs["colocated"][rid]), rid
    if draw:
        png = (tmp_path / "timeline.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 10_000, len(png)  # a drawn figure, not an empty file


def test_three_ffn_ranks_serve_eight_experts_by_the_contiguous_table(tmp_path):
    """cam-run --ffn 3 on the default model's 8 experts: the contiguous placement as a table of 3 slots per FFN
    rank (3, 3 and 2 experts), every FFN rank serving, the outputs equal to the single-process golden (--check)."""
    result = cam_run("--ffn", "3", "--requests", "6", "--check", "--quiet", "--json", str(tmp_path / "r.json"),
                     cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["check"]["ok"], report["check"]
    assert report["placement"]["kind"] == "table" and report["placement"]["slots_per_rank"] == 3
    assert not any(report["placement"]["replicated"])
    assert sorted(f["rank"] for f in report["ffn"]) == [2, 3, 4] and all(f["items"] > 0 for f in report["ffn"])


class Launcher:
    """cam-run in the background, its output collected by reader threads so nothing blocks."""

    def __init__(self, *args, cwd):
        self.proc = subprocess.Popen([sys.executable, "-m", "cam.run.cli", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=cwd)
        self.out, self.err = [], []
        self.readers = [threading.Thread(target=self._read, args=(s, b), daemon=True)
                        for s, b in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for r in self.readers:
            r.start()

    @staticmethod
    def _read(stream, buf):
        for line in stream:
            buf.append(line)

    def wait_for(self, needle, timeout_s=RUN_TIMEOUT_S):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(needle in line for line in self.out + self.err):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} never appeared:\n{''.join(self.out + self.err)}")

    def pids(self):
        found = {}
        for line in self.out:
            parts = line.split()
            # "rank 3 (ffn) pid 1234"
            if len(parts) == 5 and parts[0] == "rank" and parts[3] == "pid" and parts[4].isdigit():
                found[int(parts[1])] = int(parts[4])
        return found

    def finish(self, timeout_s=RUN_TIMEOUT_S):
        code = self.proc.wait(timeout=timeout_s)
        for r in self.readers:
            r.join(10)
        return code, "".join(self.out), "".join(self.err)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose; only a running process counts.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def leftover_windows(launcher_pid):
    if not os.path.isdir("/dev/shm"):
        return []
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"cam-run-{launcher_pid}-")]


@pytest.mark.parametrize("victim_role", ["ffn", "attention"])
def test_killed_rank_ends_every_process_naming_it(tmp_path, victim_role):
    run = Launcher("--cost-model", "--preset", "imbalanced", "--timeout", "60", cwd=tmp_path)
    run.wait_for("step 1/")  # mid-run: a batch is done, others are in flight
    pids = run.pids()
    victim = 3 if victim_role == "ffn" else 1
    os.kill(pids[victim], signal.SIGKILL)
    start = time.monotonic()
    code, out, err = run.finish()
    assert code == 1, out + err
    assert time.monotonic() - start < 60, "the world must end well within the timeout"
    assert f"rank {victim} was killed by signal 9" in err, err
    survivors = [r for r in pids if r != victim]
    for r in survivors:
        assert f"[rank {r}]" in err and f"rank {victim} was killed" in err, err
    assert not any(alive(pid) for pid in pids.values()), "no process may be left behind"
    assert leftover_windows(run.proc.pid) == [], "no shm window may be left behind"


def test_sigterm_is_clean(tmp_path):
    run = Launcher("--cost-model", "--preset", "imbalanced", "--timeout", "60", cwd=tmp_path)
    run.wait_for("step 1/")
    pids = run.pids()
    run.proc.send_signal(signal.SIGTERM)
    code, out, err = run.finish()
    assert code == 130, out + err
    assert "launcher got signal" in err
    assert not any(alive(pid) for pid in pids.values())
    assert leftover_windows(run.proc.pid) == []


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--ffn", "9"], "--ffn 9: more FFN ranks than the model's E = 8 experts"),
        (["--participants", "0"], "--participants"),
        (["--replicas", "0"], "--replicas"),
        (["--slots", "0"], "--slots"),
    ],
)
def test_bad_configuration_is_refused_at_start(capsys, args, needle):
    # In this process (a fresh interpreter per case cost 15 s loaded): the exit code of the console script and the
    # refusal before `import torch` are tests/test_cli_args.py's, in fresh interpreters.
    from cam.run import cli

    assert cli.main([*args, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "bad configuration" in err and needle in err, err


def _has_matplotlib():
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--timeout", "nan"], "--timeout"),
        (["--timeout", "inf"], "--timeout"),
        (["--timeout", "1e9"], "--timeout"),
        (["--timeout", "-3"], "--timeout"),
        (["--idle-poll", "nan"], "--idle-poll"),
        (["--idle-poll", "0"], "--idle-poll"),
        (["--skew", "nan"], "--skew"),
        (["--skew", "1e300"], "--skew"),
        (["--skew", "-1"], "--skew"),
        (["--attention-cost", "-1", "0", "0"], "--attention-cost A"),
        (["--attention-cost", "0", "inf", "0"], "--attention-cost B"),
        (["--requests", "0"], "--requests"),
        (["--replicas", "4000"], "rank processes"),
        (["--slots", "100000"], "--slots"),
        (["--json", "/nonexistent-cam-dir/report.json"], "--json"),
        (["--timeline", "/nonexistent-cam-dir/t.png"], "--timeline"),
        (["--trace", "/nonexistent-cam-dir/t.json"], "--trace"),
        (["--participants", "0"], "--participants"),
        (["--participants", "4000"], "rank processes"),
        (["--cost-model", "--bound-costs", "/nonexistent-cam-dir/costs.json"], "--bound-costs"),
        (["--mode", "colocated", "--ffn", "1"], "--ffn must equal --replicas"),
        (["--mode", "colocated", "--participants", "2"], "--participants must be 1"),
        (["--mode", "colocated", "--graph"], "--graph needs --mode async or sync"),
        (["--mode", "colocated", "--keep-going"], "--keep-going needs --mode async"),
        (["--assign", "fewest-tokens", "--keep-going"], "--keep-going needs --assign round-robin"),
        (["--batch-rows", "64"], "--batch-rows sets the row budget of --batch-items"),
        (["--batch-items", "--batch-rows", "0"], "--batch-rows must be >= 1"),
        (["--batch-items", "--batch-rows", "1"], "--batch-rows 1 is below one work item's rows"),
        (["--mode", "colocated", "--batch-items"], "--batch-items is an FFN-side policy"),
        (["--placement", "nope"], "neither contiguous, balanced, hot:K nor a readable JSON file"),
        (["--placement", "hot:0"], "K must be an int in [1, E = 8]"),
        (["--placement", "hot:x"], "K must be an int"),
        (["--ffn", "9", "--placement", "contiguous"], "--ffn 9: more FFN ranks than the model's E = 8 experts"),
        (["--keep", "/proc/cam-keep"], "--keep '/proc/cam-keep' cannot be made in '/proc'"),
    ],
)
def test_bad_flags_are_refused_before_anything_starts(tmp_path, monkeypatch, capsys, args, needle):
    import tempfile

    from cam.run import cli

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    started = []
    monkeypatch.setattr(cli, "start_ranks", lambda *a, **k: started.append(a) or pytest.fail("started a rank"))
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "bad configuration" in err and needle in err, err
    assert list(scratch.iterdir()) == [], "a refused run left a temporary directory behind"
    assert not started


@pytest.mark.skipif(_has_matplotlib(), reason="matplotlib is installed")
def test_timeline_without_matplotlib_is_refused_at_start(tmp_path, capsys):
    from cam.run import cli

    assert cli.main(["--timeline", str(tmp_path / "t.png")]) == 2
    assert "--timeline needs matplotlib" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["quant", "--repeat", "0"],
        ["gmm1", "--repeat", "-5"],
        ["gmm2", "--rows", "0"],
        ["gmm1", "--rows", "100000000"],
        ["quant", "--budget", "nan"],
        ["dispatch", "--rounds", "0"],
        ["combine", "--rounds", "1"],
    ],
)
def test_cam_bench_refuses_bad_sizes_as_usage_errors(capsys, argv):
    from cam.bench import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and argv[1] in err, err


class _SlowStore:
    """A store whose check takes a while, like a TCPStore round trip to a busy launcher (the GIL is released in it)."""

    def __init__(self, delay_s: float):
        self.delay_s, self.calls, self.inside = delay_s, 0, threading.Event()

    def check(self, keys):
        self.calls += 1
        self.inside.set()
        time.sleep(self.delay_s)
        return False


def _watchdog_in_store_call(store):
    from cam.run import worker

    stop = threading.Event()
    watchdog = threading.Thread(target=worker._watch_abort, args=(store, None, {}, stop, os.getppid()), daemon=True)
    watchdog.start()
    assert store.inside.wait(10), "the watchdog never polled the store"
    return stop, watchdog


def test_rank_exit_waits_for_the_abort_watchdog_to_leave_its_store_call():
    """A rank must not finalize while its abort watchdog is inside a store call: the daemon thread would be ended by
    pthread_exit as it takes the GIL back, which aborts the process (SIGABRT, "terminate called without an active
    exception") after the rank did all its work. _stop_watch waits for it, bounded; the control shows that setting
    the stop event alone leaves the thread inside the call."""
    from cam.run import worker

    store = _SlowStore(0.5)
    stop, watchdog = _watchdog_in_store_call(store)
    stop.set()
    assert watchdog.is_alive(), "control: the stop event alone does not end a store call in flight"
    watchdog.join(10)

    store = _SlowStore(0.5)
    stop, watchdog = _watchdog_in_store_call(store)
    worker._stop_watch(stop, watchdog)
    assert not watchdog.is_alive()
    worker._stop_watch(stop, threading.Thread(target=lambda: None))  # a watchdog never started: nothing to wait for


@pytest.mark.slow
@pytest.mark.parametrize("stage, wire", [("dispatch", []), ("combine", ["--bf16"])])
def test_cam_bench_dataplane_runs_and_counts_delivered_bytes(tmp_path, stage, wire):
    """cam-bench dispatch / combine run end to end (they once crashed on a Topology attribute that did not exist) and
    report the bytes the stage delivers: dispatch an int8 row plus its fp32 scale per routed token, combine a bf16
    row per routed token (and a bf16 dispatch row with --bf16)."""
    from cam.bench import main

    out = tmp_path / "r.json"
    assert main([stage, "--rounds", "2", "--json", str(out)] + wire) == 0
    results = json.loads(out.read_text())["results"]
    assert len(results) == 3
    for r in results:
        row = r["H"] + 4 if (stage == "dispatch" and r["quantized"]) else r["H"] * 2
        assert r["bytes"] > 0 and r["bytes"] % row == 0, r
        assert r["op_over_memcpy"] > 0


def test_placement_files_are_read_checked_and_refused_by_name(tmp_path):
    """--placement FILE: the JSON form the report's table has (setup.placement_to_dict) round-trips; a table for
    another E, F or layer count, or one a Placement refuses (a replica outside the FFN set), names --placement."""
    from cam.placement import Placement
    from cam.run import cli
    from cam.run.setup import placement_from_dict, placement_to_dict, resolve_placement

    cfg = cli._config(cli._parse(["--ffn", "3"]), str(tmp_path), 1)
    table = placement_to_dict(Placement.balanced(8, 3, layers=2, replicate=[5]))
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"slots_per_rank": table["slots_per_rank"], "layers": table["layers"]}))
    resolved = resolve_placement(str(good), cfg)
    assert resolved == table and placement_from_dict(resolved).replicas(1, 5) == ((2, 1), (0, 3))
    bad = []
    for name, d in (("other-F", dict(table, ffn_ranks=2)), ("one-layer", dict(table, layers=table["layers"][:1])),
                    ("outside", dict(table, layers=[[[[7, 0]]] + layer[1:] for layer in table["layers"]])),
                    ("not-a-table", [1, 2])):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(d))
        with pytest.raises(ValueError, match=r"--placement") as e:
            resolve_placement(str(path), cfg)
        bad.append(str(e.value))
    assert "F = 2" in bad[0] and "over 1 layers" in bad[1] and "outside the FFN set" in bad[2], bad
