"""cam-run's process trust: the launcher's store listens on loopback only; the
connector's rendezvous refuses a process that reaches the store without the run's secret (a real second process,
same uid: the store is what it attacks, not file permissions), while one holding it joins; a SIGKILLed launcher's
run directory is removed; a rank dying during start-up ends the others' handshake instead of the launcher's grace."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from datetime import timedelta

import pytest
import torch

import cam
from cam.connector import AsyncAFDConnector, ConnectorConfig, SignedStore, loopback_store
from cam.models import PRESETS, MoEModel
from cam.run import run_dir, start

pytestmark = pytest.mark.timeout(400)


def _listening(port: int):
    """Local addresses (hex, as /proc/net/tcp{,6} print them) of the sockets in LISTEN state on ``port``."""
    found = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(path).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            addr, hex_port = fields[1].rsplit(":", 1)
            if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: TCP_LISTEN
                found.append(addr)
    return found


def test_the_launcher_store_listens_on_loopback_only():
    store = start.launcher_store(0, 10.0)
    addrs = _listening(store.port)
    assert addrs == ["0100007F"], addrs  # 127.0.0.1, and nothing on 0.0.0.0 / ::
    client = torch.distributed.TCPStore("127.0.0.1", store.port, is_master=False, timeout=timedelta(seconds=10))
    client.set("k", "v")
    assert store.get("k") == b"v"
    # Control: what the launcher did before: the host name only tells clients where to connect; it binds every
    # interface (0.0.0.0, or :: which takes IPv4 too).
    plain = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    wild = _listening(plain.port)
    assert wild and all(set(a) == {"0"} for a in wild), wild


def test_a_signed_store_refuses_a_forged_or_moved_value():
    raw = torch.distributed.HashStore()
    secret = os.urandom(32)
    mine = SignedStore(raw, secret, "g")
    mine.set("g/shm/0", "/seg-r0")
    assert mine.get("g/shm/0") == b"/seg-r0" and mine.check(["g/shm/0"])
    assert not mine.check(["g/shm/9"])  # absent is absent, not an error
    raw.set("g/shm/1", "/forged")  # no tag
    SignedStore(raw, os.urandom(32), "g").set("g/shm/2", "/guessed")  # another secret
    raw.set("g/shm/3", raw.get("g/shm/0"))  # a valid value moved to another key
    SignedStore(raw, secret, "other").set("g/shm/4", "/other-group")  # the secret, another group
    for key in ("g/shm/1", "g/shm/2", "g/shm/3", "g/shm/4"):
        with pytest.raises(PermissionError, match=re.escape(repr(key))):
            mine.get(key)
        with pytest.raises(PermissionError):
            mine.check([key])


_PEER = textwrap.dedent("""
    import sys
    from datetime import timedelta
    import torch, cam
    from cam.connector import AsyncAFDConnector, ConnectorConfig
    from cam.models import PRESETS, MoEModel
    port, group = int(sys.argv[1]), sys.argv[2]
    c = MoEModel(PRESETS["tiny"]).config
    topo = cam.Topology(D=1, P=1, F=1, E=c.num_experts, K=c.top_k, H=c.hidden, Bmax=8, L=len(c.moe_layers), slots=2)
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=30))
    conn = AsyncAFDConnector(1, "ffn", ConnectorConfig(topo, timeout_s=float(sys.argv[3]), idle_poll_s=0.01,
                                                       group=group))
    try:
        conn.init_afd_connector(store=store)
        print("joined", flush=True)
    except BaseException as e:
        print("peer failed:", type(e).__name__, e, flush=True)
        sys.exit(1)
    finally:
        conn.close()
""")


def _world_of_two(store, secret, peer_env, peer_join_s, join_s=90.0):
    """Rank 0 (Attention) here, rank 1 (FFN) a second process; returns (rank 0's error or None, peer output)."""
    c = MoEModel(PRESETS["tiny"]).config
    topo = cam.Topology(D=1, P=1, F=1, E=c.num_experts, K=c.top_k, H=c.hidden, Bmax=8, L=len(c.moe_layers), slots=2)
    group = f"trust-{uuid.uuid4().hex[:8]}"
    conn = AsyncAFDConnector(0, "attention", ConnectorConfig(topo, timeout_s=join_s, idle_poll_s=0.01, group=group,
                                                             secret=secret))
    env = {k: v for k, v in os.environ.items() if k != "CAM_RUN_SECRET"}
    env.update(peer_env)
    peer = subprocess.Popen([sys.executable, "-c", _PEER, str(store.port), group, str(peer_join_s)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    error = None
    try:
        conn.init_afd_connector(store=store)
    except BaseException as e:  # noqa: BLE001 - what the test checks
        error = e
    finally:
        conn.close()
    try:
        out, _ = peer.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        peer.kill()
        out, _ = peer.communicate(timeout=30)
    return error, out


def test_the_rendezvous_refuses_a_second_process_without_the_run_secret():
    store = loopback_store(0, 120.0)
    secret = os.urandom(32)
    t0 = time.monotonic()
    # No secret, and a guessed one (no better), side by side: two worlds of their own groups on one store, so the
    # two peers' interpreter starts and join timeouts overlap instead of adding up.
    worlds = {"none": {}, "guessed": {"CAM_RUN_SECRET": os.urandom(32).hex()}}
    results = {}
    threads = [threading.Thread(target=lambda k=k, env=env: results.__setitem__(k, _world_of_two(store, secret, env,
                                                                                                  10.0, 30.0)))
               for k, env in worlds.items()]
    for th in threads:
        th.start()
    for th in threads:
        th.join(150)
    assert set(results) == set(worlds), f"a world did not end within its bounds: {sorted(results)}"
    # The second process is refused as soon as it reads the world key (signed with a secret it does not hold: the
    # group is another run's), before it writes anything; rank 0 is left waiting for a real rank 1, bounded.
    for error, out in results.values():
        assert isinstance(error, TimeoutError) and "rank(s) 1 never published its pid" in str(error), (error, out)
        assert "peer failed: GroupInUseError" in out and "is in use on this store by another run" in out, out
    assert time.monotonic() - t0 < 80, "a world did not end within its bounds"
    # Control: the same second process holding the run's secret (its environment, as cam-run hands it) joins.
    error, out = _world_of_two(store, secret, {"CAM_RUN_SECRET": secret.hex()}, 90.0)
    assert error is None and "joined" in out, (error, out)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_stale_run_dirs_of_dead_launchers_are_reaped(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait(timeout=30)
    stale = tmp_path / (run_dir.RUN_DIR_PREFIX + "stale")
    stale.mkdir()
    (stale / run_dir.OWNER_FILE).write_text(f"{dead.pid} 12345")
    reused = tmp_path / (run_dir.RUN_DIR_PREFIX + "reused")  # a live pid, but another process's start time
    reused.mkdir()
    (reused / run_dir.OWNER_FILE).write_text(f"{os.getpid()} 1")
    live = tmp_path / (run_dir.RUN_DIR_PREFIX + "live")
    live.mkdir()
    (live / run_dir.OWNER_FILE).write_text(run_dir.process_identity(os.getpid()))
    kept = tmp_path / (run_dir.RUN_DIR_PREFIX + "kept")  # --keep style: no owner file
    kept.mkdir()
    removed = run_dir.reap_stale_run_dirs(str(tmp_path))
    assert sorted(removed) == sorted([str(stale), str(reused)])
    assert live.exists() and kept.exists() and not stale.exists() and not reused.exists()
    made = run_dir.make_run_dir()
    try:
        assert os.stat(made).st_mode & 0o777 == 0o700 and not run_dir.owner_gone(made)
    finally:
        import shutil

        shutil.rmtree(made)


def test_a_zombie_launcher_counts_as_gone(tmp_path):
    """A SIGKILLed launcher is a zombie until its parent reaps it, and its ranks see it die (re-parented) before
    that: its run directory must count as orphaned then, or every rank leaves it behind (what the SIGKILLed-launcher
    test below saw when the test's reap came late). Control: the same owner alive is not gone."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child only waits for its cue and leaves
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    zombie_dir = tmp_path / (run_dir.RUN_DIR_PREFIX + "zombie")
    zombie_dir.mkdir()
    try:
        (zombie_dir / run_dir.OWNER_FILE).write_text(run_dir.process_identity(pid))
        assert not run_dir.owner_gone(str(zombie_dir)), "control: a live launcher is not gone"
        os.write(w, b"x")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        else:
            raise AssertionError("the child never became a zombie")
        assert run_dir.owner_gone(str(zombie_dir)) and run_dir.remove_if_orphaned(str(zombie_dir))
        assert not zombie_dir.exists()
    finally:
        os.close(w)
        os.waitpid(pid, 0)


def _launch(tmp_path, *extra):
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmp))
    env.pop("CAM_RUN_SECRET", None)
    proc = subprocess.Popen([sys.executable, "-m", "cam.run.cli", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    pids = {}
    deadline = time.monotonic() + 180
    while len(pids) < 4 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.match(r"rank (\d+) \(\w+\) pid (\d+)", line)
        if m:
            pids[int(m.group(1))] = int(m.group(2))
    assert len(pids) == 4, f"cam-run printed no rank pids: {proc.poll()}"
    return proc, pids, tmp


@pytest.mark.e2e
def test_a_sigkilled_launchers_run_dir_is_removed_by_its_ranks(tmp_path):
    """The ranks of a SIGKILLed launcher remove its run directory. The launcher is reaped only once its ranks are gone,
    so it stays a zombie the whole time they look at it: the window in which they used to see it alive and leave the
    directory behind (config.json and launcher.owner), now on every run of this test rather than on a late reap.
    Losing the launcher (and with it the store) is an abort: the ranks end at once, far below --timeout, instead of
    waiting for a launcher that will never end the run, and they leave no shm window behind."""
    from test_run import leftover_windows

    proc, pids, tmp = _launch(tmp_path, "--requests", "400", "--timeout", "200")
    try:
        dirs = [p for p in tmp.iterdir() if p.name.startswith(run_dir.RUN_DIR_PREFIX)]
        assert len(dirs) == 1, dirs
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # mid-run: a batch is done, others are in flight
            line = proc.stderr.readline()  # the ranks' progress lines
            if not line or "step 1/" in line:
                break
        assert "step 1/" in line, f"no step finished: {proc.poll()}"
        proc.kill()
        deadline = time.monotonic() + 90  # far below --timeout: they must not wait for it
        while time.monotonic() < deadline and (dirs[0].exists() or not all(_gone(p) for p in pids.values())):
            time.sleep(0.2)
        assert all(_gone(p) for p in pids.values()), "ranks outlived their SIGKILLed launcher"
        assert leftover_windows(proc.pid) == [], "no shm window may be left behind"
        with open(f"/proc/{proc.pid}/stat") as f:  # control: the launcher is still unreaped here
            assert f.read().rsplit(")", 1)[1].split()[0] == "Z"
        assert not dirs[0].exists(), f"{dirs[0]} left behind: {sorted(os.listdir(dirs[0]))}"
    finally:
        for p in pids.values():
            if not _gone(p):
                os.kill(p, signal.SIGKILL)
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.e2e
def test_a_rank_dying_in_start_up_ends_the_others_handshake(tmp_path):
    proc, pids, tmp = _launch(tmp_path)
    os.kill(pids[1], signal.SIGKILL)  # its peers are building or in the Comm handshake, which needs it
    try:
        _, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    assert "rank 1" in err, err
    # Each survivor ended its own start-up on the abort key (before: it sat in the handshake until the launcher's
    # 20 s grace ran out and it was SIGKILLed, printing nothing).
    for rank in (0, 2, 3):
        assert re.search(rf"\[rank {rank}\] \w+ failed \(run aborted: .*\).*(start-up aborted|waiting for the start)",
                         err), (rank, err)
    assert not [p for p in tmp.iterdir() if p.name.startswith(run_dir.RUN_DIR_PREFIX)], "the run dir was left"
