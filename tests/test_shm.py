"""Processes as ranks over POSIX shared memory: the same round trip as in-process, and no /dev/shm segment left
behind, neither after a normal exit nor after a rank was killed (segments are unlinked once every rank mapped
them)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest
import torch

import cam
import cam.world
from _dataplane_harness import check_against_golden, make_rounds, FfnLog, Served

pytestmark = [pytest.mark.timeout(180), pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")]

SCRIPT = pathlib.Path(__file__).with_name("_shm_rank.py")


def _segments(prefix: str):
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))


def _launch(tmp_path, topo_kw, counts, prefix, mode):
    t = cam.Topology(**topo_kw)
    store = tmp_path / "store"
    procs = []
    for r in range(t.world_size):
        cmd = [sys.executable, str(SCRIPT), "--store", str(store), "--rank", str(r), "--topology", json.dumps(topo_kw),
               "--counts", json.dumps(counts), "--prefix", prefix, "--out", str(tmp_path / f"rank{r}.pt"),
               "--mode", mode]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    return t, procs


def _finish(procs, timeout):
    outs = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append((p.returncode, out.decode(errors="replace")))
    return outs


@pytest.mark.slow
def test_shm_round_trip_over_processes_leaves_no_segment(tmp_path):
    prefix = f"camtest-{uuid.uuid4().hex[:10]}"
    topo_kw = dict(D=2, P=1, F=1, E=4, K=2, H=48, Bmax=6, L=2, slots=2)
    counts = [[6, 2], [0, 5]]
    t, procs = _launch(tmp_path, topo_kw, counts, prefix, "round_trip")
    outs = _finish(procs, 150)
    for r, (code, text) in enumerate(outs):
        assert code == 0, f"rank {r} exited {code}:\n{text}"
    assert _segments(prefix) == []
    results = {}
    for r in range(t.world_size):
        res = torch.load(tmp_path / f"rank{r}.pt")
        if r < t.A:
            results[r] = res
        else:
            log = FfnLog()
            for d, seq, layer, rows, scales, cnt in res:
                log.served.append(Served(d, seq, layer, rows, scales, cnt, _fake_wi(t, r, rows.shape[0], cnt),
                                         0, rows.shape[0]))  # never chunked: capacity is the worst case
            results[r] = log
    check_against_golden(t, make_rounds(t, counts, seed=21), results)


def _fake_wi(t, rank, n, counts):
    # the work item words the golden comparison reads (rows, FFN rank, plane id, counts); the plane id is not
    # carried back from the rank process, so both sides use FfnLog's default
    wi = torch.zeros(t.work_item_words, dtype=torch.int64)
    wi[5], wi[6], wi[7] = n, rank, FfnLog().plane_id
    wi[8:8 + t.R] = counts
    return wi


@pytest.mark.slow
def test_shm_killed_rank_leaks_no_segment(tmp_path):
    prefix = f"camtest-{uuid.uuid4().hex[:10]}"
    topo_kw = dict(D=1, P=1, F=2, E=4, K=2, H=16, Bmax=2, L=1, slots=1)
    t, procs = _launch(tmp_path, topo_kw, [[1]], prefix, "wait_for_kill")
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"rank{r}.pt.ready").exists() for r in range(t.world_size)):
        assert time.monotonic() < deadline, "ranks did not finish the handshake"
        assert all(p.poll() is None for p in procs), _finish(procs, 10)
        time.sleep(0.05)
    # every rank mapped every window: the names are already gone, while the windows are still in use
    assert _segments(prefix) == []
    procs[1].send_signal(signal.SIGKILL)
    procs[1].wait(30)
    (tmp_path / "rank0.pt.go").touch()
    (tmp_path / "rank2.pt.go").touch()
    outs = _finish([procs[0], procs[2]], 60)
    assert [code for code, _ in outs] == [0, 0], outs
    assert procs[1].returncode == -signal.SIGKILL
    assert _segments(prefix) == []
    # nor did the killed rank's own device memory that was never exported (its peer table and staging words):
    # the twin allocates it unnamed
    assert _segments(f"cam-npu-twin-{procs[1].pid}-") == []


def _shm_threads(topos, prefix, body=None, timeout=60, join_timeout_s=10):
    """Ranks as threads but over the shm transport (one in-memory HashStore): the handshake and its checks
    without process start-up cost."""
    import threading

    from torch.distributed import HashStore

    store = HashStore()
    results, errors = {}, {}

    def main(rank):
        try:
            with cam.Comm(topos[rank], rank, transport="shm", store=store, group="g", shm_prefix=prefix,
                          join_timeout_s=join_timeout_s) as comm:
                results[rank] = body(comm) if body else comm.window_bytes
        except Exception as e:  # noqa: BLE001
            errors[rank] = e

    threads = [threading.Thread(target=main, args=(r,), daemon=True) for r in range(len(topos))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)
    assert not any(th.is_alive() for th in threads)
    return results, errors


def test_shm_topology_mismatch_fails_at_creation_and_leaks_nothing():
    prefix = f"camtest-{uuid.uuid4().hex[:10]}"
    good = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=32, Bmax=2, L=1)
    other = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=64, Bmax=2, L=1)
    results, errors = _shm_threads([good, other], prefix)
    assert errors, results
    assert any("different topology" in str(e) for e in errors.values()), errors
    assert _segments(prefix) == []


def test_shm_handshake_refusal_ends_every_rank_at_once_and_leaves_no_segment():
    # The shm plane runs the npu transport's handshake: rank 0's published window record claims 128 bytes more than
    # the topology gives it; every other rank refuses it naming both sizes, rank 0 learns it from their failure keys,
    # every rank ends long before join_timeout_s (30 s), and no segment name is left under the prefix.
    import threading

    from torch.distributed import HashStore

    class Tampering:
        def __init__(self, store):
            self._store = store

        def set(self, key, value):
            if key.startswith("g/") and key.endswith("/ipc/0"):  # g/{world id}/ipc/0
                rec = json.loads(value)
                rec["window_bytes"] += 128
                value = json.dumps(rec)
            return self._store.set(key, value)

        def __getattr__(self, name):
            return getattr(self._store, name)

    prefix = f"camtest-{uuid.uuid4().hex[:10]}"
    t = cam.Topology(D=1, P=1, F=2, E=4, K=1, H=32, Bmax=2, L=1)
    store, errors = HashStore(), {}

    def main(rank):
        try:
            cam.Comm(t, rank, transport="shm", store=Tampering(store) if rank == 0 else store, group="g",
                     shm_prefix=prefix, join_timeout_s=30).close()
        except Exception as e:  # noqa: BLE001 - the error is the result
            errors[rank] = e

    start = time.monotonic()
    threads = [threading.Thread(target=main, args=(r,), daemon=True) for r in range(t.world_size)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not any(th.is_alive() for th in threads) and set(errors) == {0, 1, 2}, errors
    assert time.monotonic() - start < 20
    for rank, e in errors.items():
        assert re.search(r"rank 0 published a window of (\d+) bytes, the topology gives that rank (\d+)", str(e)), e
    assert _segments(prefix) == []


def test_shm_transport_in_threads_round_trip():
    from _dataplane_harness import attention_body, ffn_server

    prefix = f"camtest-{uuid.uuid4().hex[:10]}"
    t = cam.Topology(D=1, P=1, F=2, E=4, K=2, H=40, Bmax=5, L=2)
    rounds = make_rounds(t, [[5, 3]], seed=2)
    bodies = {0: attention_body(rounds[0]), 1: ffn_server(t, 2), 2: ffn_server(t, 2)}
    cam._C.twin_ipc_calls(reset=True)
    # relative: an earlier test of this process may leave an import counted for its life (test_npu_transport.py's
    # failed handshake whose peer never answers keeps its window, and with both ranks in one process the stand-ins
    # cannot tell that rank's close of the peer's key from the peer's own withdrawal of it)
    open_before = cam._C.twin_ipc_open_imports()
    results, errors = _shm_threads([t] * 3, prefix, body=lambda comm: bodies[comm.rank](comm))
    assert not errors, errors
    assert _segments(prefix) == []
    check_against_golden(t, rounds, results)
    # the plane ran the NPU transport's code and handshake over the twin's ACL stand-ins: three windows exported,
    # each with its pid allow-list, every peer's imported and closed, every allocation freed, nothing refused
    calls = cam._C.twin_ipc_calls(reset=True)
    assert calls.count("aclrtIpcMemGetExportKey") == 3 and calls.count("aclrtIpcMemSetImportPid") == 3, calls
    assert calls.count("aclrtIpcMemImportByKey") == 6, calls
    assert calls.count("aclrtIpcMemClose") == 6 + 3, calls  # the imports, then each export withdrawn
    assert calls.count("aclrtFree") == calls.count("aclrtMalloc") == 6, calls  # windows, peer tables
    assert not [c for c in calls if c.endswith("!")], calls
    assert cam._C.twin_ipc_open_imports() == open_before


def test_shm_prefix_with_a_nul_is_refused_before_any_segment_exists():
    # A NUL in the prefix: "p\0x" and "p\0y" were both cut to "p" by the C string, so two planes opened one segment
    # name. Refused by name before any segment is created (nothing under either prefix); '/' likewise.
    from torch.distributed import HashStore

    base = f"camtest-{uuid.uuid4().hex[:10]}"
    t = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=64, Bmax=4, L=1)
    for bad in (f"{base}\0x", f"{base}\0y"):
        with pytest.raises(ValueError, match="shm_prefix contains a NUL"):
            cam.Comm(t, 0, transport="shm", store=HashStore(), shm_prefix=bad, join_timeout_s=5)
    with pytest.raises(ValueError, match="must not contain '/'"):
        cam.Comm(t, 0, transport="shm", store=HashStore(), shm_prefix=f"{base}/x", join_timeout_s=5)
    with pytest.raises(TypeError, match="shm_prefix must be a str or None"):
        cam.Comm(t, 0, transport="shm", store=HashStore(), shm_prefix=5, join_timeout_s=5)
    assert _segments(base) == []
    with pytest.raises(cam.CamError, match="NUL"):  # the binding below refuses it too
        cam._C.Comm.shm(f"/{base}\0x-r0", list(t.as_c_fields()), 0, 10**9, 10**6, 27)
    assert _segments(base) == []
    # Control: the same prefix without the NUL makes a working plane.
    results, errors = _shm_threads([t] * t.world_size, base)
    assert errors == {} and len(results) == t.world_size
    assert _segments(base) == []


def test_shm_names_that_cannot_be_a_twin_key_are_refused_before_anything_exists():
    # The twin's window key holds the segment name and a nonce in ACL's 65 bytes: a prefix whose longest name would
    # not fit is refused by name before any segment or store key exists; the C API refuses such a name, and one
    # without its leading '/' or with another '/'. Control: the longest prefix that fits makes a plane.
    from torch.distributed import HashStore

    base = f"camtest-{uuid.uuid4().hex[:10]}"
    t = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=64, Bmax=4, L=1)
    fits = base + "x" * (cam._C.SHM_NAME_MAX - len(f"/{base}-r1"))
    store = HashStore()
    with pytest.raises(ValueError, match=r"shm_prefix .* is too long: a segment name such as .* must fit 47 bytes"):
        cam.Comm(t, 0, transport="shm", store=store, shm_prefix=fits + "x", join_timeout_s=5)
    assert not store.check(["cam/world"])
    fields = list(t.as_c_fields())
    for bad, why in ((f"/{fits}x-r1", "at most 47 bytes"), (f"{base}-r0", "must be '/' and a name"),
                     (f"/{base}/x-r0", "must be '/' and a name without another '/'")):
        with pytest.raises(cam.CamError, match=f"camCommCreateShm: segmentName .*{re.escape(why)}"):
            cam._C.Comm.shm(bad, fields, 0, 10**9, 10**6, 27)
    assert _segments(base) == []
    # a name is created exclusively: a second window under a name that exists is refused, the first untouched
    first = cam._C.Comm.shm(f"/{base}-r0", fields, 0, 10**9, 10**6, 27)
    try:
        with pytest.raises(cam.CamError, match=rf"cannot name the exported memory /{base}-r0: File exists"):
            cam._C.Comm.shm(f"/{base}-r0", fields, 0, 10**9, 10**6, 27)
        assert _segments(base) == [f"{base}-r0"]
    finally:
        first.close()
    assert _segments(base) == []
    results, errors = _shm_threads([t] * t.world_size, fits)  # control
    assert errors == {} and len(results) == t.world_size
    assert _segments(base) == []


def test_twin_call_log_is_bounded():
    # The stand-ins log every call on device memory for tests; a plane that runs for hours copies words on every op,
    # so the log keeps its newest entries and counts the ones it dropped (the first entry says how many).
    import ctypes

    lib = ctypes.CDLL(os.path.join(os.path.dirname(cam.__file__), "lib", "libcam_aclnn.so"))
    device = ctypes.c_int32()
    cam._C.twin_ipc_calls(reset=True)
    n = 60000  # ~900 KB of "aclrtGetDevice;": past the cap several times
    for _ in range(n):
        lib.camTwinAclrtGetDevice(ctypes.byref(device))
    calls = cam._C.twin_ipc_calls(reset=True)
    m = re.fullmatch(r"\((\d+) earlier calls dropped\)", calls[0])
    assert m, calls[:3]
    assert set(calls[1:]) == {"aclrtGetDevice"} and int(m.group(1)) + len(calls) - 1 == n
    assert len(";".join(calls)) <= 256 * 1024 + 64
    assert cam._C.twin_ipc_calls() == []  # the reset cleared the count too


def _two_segments(base: str):
    """Rank 0's and rank 1's C communicators of one 2-rank shm plane, created but not attached."""
    t = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=64, Bmax=4, L=1)
    names = [f"/{base}-r{r}" for r in range(t.world_size)]
    comms = [cam._C.Comm.shm(names[r], list(t.as_c_fields()), r, 10**9, 10**6, 27) for r in range(t.world_size)]
    return comms, names


def test_shm_attach_by_name_checks_the_owner_pid_where_pids_were_allowed():
    # camCommCreateShmIpc (pids exchanged) then attach by name: the segment's owner pid must be the one this rank
    # allowed for that rank, or the attach refuses naming both, before importing. Control: the right pid attaches.
    base = f"camtest-{uuid.uuid4().hex[:10]}"
    t = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=64, Bmax=4, L=1)
    names = [f"/{base}-r{r}" for r in range(t.world_size)]
    me = os.getpid()
    for wrong in (True, False):
        pids = [[me, me + 1 if wrong else me], [me, me]]
        comms = [cam._C.Comm.ipc(list(t.as_c_fields()), r, 10**9, 10**6, 27, pids[r], segment_name=names[r])
                 for r in range(t.world_size)]
        try:
            cam._C.twin_ipc_calls(reset=True)
            if wrong:
                with pytest.raises(cam.CamError, match=rf"rank 1's record comes from pid {me}, the pid it published "
                                                       rf"\(and this rank allowed\) is {me + 1}"):
                    comms[0].attach_shm(names)
                assert "aclrtIpcMemImportByKey" not in cam._C.twin_ipc_calls(reset=True)
            else:
                for c in comms:
                    c.attach_shm(names)
        finally:
            for c in comms:
                c.close()
    assert _segments(base) == []


@pytest.mark.parametrize("tamper", ["world_writable", "group_readable", "other_owner"])
def test_shm_attach_refuses_a_segment_someone_else_can_write(tamper):
    # Segment trust: rank 1's real segment file, made writable by group/other (chmod) or handed to another owner
    # (chown: the tests run as root, so the owner is set directly rather than created by a second uid), is refused
    # by rank 0's attach with the reason, before anything is mapped from it. Control: the untouched plane attaches.
    base = f"camtest-{uuid.uuid4().hex[:10]}"
    comms, names = _two_segments(base)
    try:
        path = f"/dev/shm{names[1]}"
        if tamper == "world_writable":
            os.chmod(path, 0o666)
            expected = "open to group/other (mode 0666"
        elif tamper == "group_readable":
            os.chmod(path, 0o640)
            expected = "open to group/other (mode 0640"
        else:
            if os.geteuid() != 0:
                pytest.skip("chown to another uid needs root")
            os.chown(path, 65534, -1)
            expected = "owned by uid 65534"
        cam._C.twin_ipc_calls(reset=True)
        refused = r"rank 1's segment /\S+: .*refused the segment .*" + re.escape(expected)
        with pytest.raises(cam.CamError, match=refused):
            comms[0].attach_shm(names)
        # refused at the look-up of its key: nothing was imported from it (the stand-ins' call log)
        assert "aclrtIpcMemImportByKey" not in cam._C.twin_ipc_calls(reset=True)
    finally:
        for c in comms:
            c.close()
    assert _segments(base) == []


def test_shm_attach_control_untouched_segments_attach():
    base = f"camtest-{uuid.uuid4().hex[:10]}"
    comms, names = _two_segments(base)
    try:
        for c in comms:
            c.attach_shm(names)
        assert all(os.stat(f"/dev/shm{n}").st_mode & 0o777 == 0o600 for n in names)
    finally:
        for c in comms:
            c.close()
    assert _segments(base) == []


class _KeyArrivesLate:
    """A store in which rank 1's key arrives between a wait's look for it and its look for rank 1's failure: rank 1
    published its key, found the plane descriptions differ, and gave up (the race that once made rank 0 report a
    CommJoinError instead of naming the differing field itself)."""

    def __init__(self, key_ever_set: bool):
        self.data = {"g/k/0": b"1", "g/failed/1": b"InvalidArgumentError: rank 1 was created with a different topology"}
        self.key_ever_set, self.looks = key_ever_set, 0

    def check(self, keys):
        if keys == ["g/k/1"]:
            self.looks += 1
            return self.key_ever_set and self.looks > 1
        return all(k in self.data for k in keys)

    def get(self, key):
        return self.data[key]


@pytest.mark.parametrize("key_ever_set", [True, False])
def test_a_wait_leaves_a_peer_that_published_its_key_to_the_next_check(key_ever_set):
    import types

    waiter = types.SimpleNamespace(rank=0)
    waiter._check_joining_peer = lambda *a, **kw: cam.Comm._check_joining_peer(waiter, *a, **kw)
    store = _KeyArrivesLate(key_ever_set)
    wait = lambda: cam.Comm._await_keys(waiter, store, ["g/k/0", "g/k/1"], time.monotonic() + 5, 5,  # noqa: E731
                                        "published its pid", group="g")
    if key_ever_set:
        wait()  # returns: the caller's own comparison of the descriptions names the field (test below)
    else:  # control: a rank that gave up without its key ends the wait at once, quoting its reason
        with pytest.raises(cam.CommJoinError, match="rank 1 gave up the handshake before it published its pid"):
            wait()


def test_topology_mismatch_names_the_field_and_the_rank_on_every_rank_within_seconds():
    # Topology blame: rank 2 (the last to be started here, so never the first joiner) differs in H and Bmax. Every
    # rank's error names rank 2, each differing field and both values, and never an innocent rank; no rank waits
    # out its join timeout (30 s) for ranks that did join.
    prefix = f"camtest-{uuid.uuid4().hex[:10]}"
    good = cam.Topology(D=1, P=1, F=2, E=4, K=1, H=32, Bmax=2, L=1)
    odd = cam.Topology(D=1, P=1, F=2, E=4, K=1, H=64, Bmax=3, L=1)
    start = time.monotonic()
    results, errors = _shm_threads([good, good, odd], prefix, join_timeout_s=30)
    elapsed = time.monotonic() - start
    assert results == {} and set(errors) == {0, 1, 2}, (results, errors)
    for rank, e in errors.items():
        message = str(e)
        assert isinstance(e, cam.InvalidArgumentError), repr(e)
        assert f"rank {rank}:" in message and "rank 2 was created with a different topology" in message, message
        assert "H=64 (rank(s) 0, 1: H=32)" in message and "Bmax=3 (rank(s) 0, 1: Bmax=2)" in message, message
        assert "rank 0 was" not in message and "rank 1 was" not in message and "not joined" not in message, message
    assert elapsed < 15, elapsed
    assert _segments(prefix) == []
    # Control: the same three ranks with one topology make a plane.
    results, errors = _shm_threads([good] * 3, prefix, join_timeout_s=30)
    assert errors == {} and len(results) == 3
    assert _segments(prefix) == []



@pytest.mark.parametrize("forged", ["", "1:0", "not-a-pid", "dead", "live"])
def test_a_rank_the_watchdog_cannot_watch_is_refused(forged):
    # Identity binding: a forger publishes rank 1 in the store (a real, well-formed 0600 segment of this user, the
    # right topology) with a process identity that the liveness watchdog could never find dead: none, pid 1 with a
    # wrong start time, garbage, or a process that has exited. Rank 0 refuses it by rank. Control: the forger's
    # own live identity is accepted (and then watched).
    import json

    from torch.distributed import HashStore

    from cam.comm import Comm, _proc_identity

    base = f"camtest-{uuid.uuid4().hex[:10]}"
    t = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=64, Bmax=4, L=1)
    if forged == "live":
        forged = _proc_identity(os.getpid())
    elif forged == "dead":
        child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                               text=True, timeout=60, check=True)
        forged = f"{child.stdout.strip()}:1"
    store = HashStore()
    forger = cam._C.Comm.ipc(list(t.as_c_fields()), 1, 10**9, 10**6, 27, [os.getpid()] * 2,
                             segment_name=f"/{base}-forged-r1")
    probe = Comm.__new__(Comm)
    probe.topology, probe.dtype = t, torch.bfloat16
    description = probe._plane_description()  # the exact keys a rank publishes
    try:
        w = f"g/{cam.world.join(store, 'g', 1, 2, 10)}"  # the forger takes rank 1's slot of the world rank 0 joins
        store.set(f"{w}/proc/1", forged)
        store.set(f"{w}/topo/1", json.dumps(description))
        store.set(f"{w}/ipcpid/1", str(os.getpid()))
        store.set(f"{w}/ipc/1", json.dumps(forger.ipc_record()))
        if forged == _proc_identity(os.getpid()):  # control
            store.set(f"{w}/mapped/1", "1")
            with Comm(t, 0, transport="shm", store=store, group="g", shm_prefix=base, join_timeout_s=10) as comm:
                assert comm._peers_proc == {1: forged}  # accepted, and under the liveness watchdog
        else:
            with pytest.raises(cam.InvalidArgumentError, match="rank 1 published the process identity .* could not "
                                                               "be watched"):
                cam.Comm(t, 0, transport="shm", store=store, group="g", shm_prefix=base, join_timeout_s=10)
        assert _segments(f"{base}-r") == []  # rank 0's own segment is gone either way
    finally:
        forger.close()
    assert _segments(base) == []
