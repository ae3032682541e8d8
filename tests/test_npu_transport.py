"""The NPU transport (transport="npu": device memory shared by ACL IPC) on the twin, where the same create path runs
over cam's POSIX-shm stand-ins of the ACL calls: a 2 Attention + 2 FFN round trip over processes bit-exact against
the golden, the create path's stand-in calls in order, and every handshake fault (a tampered key, size or pid, a
differing topology, a device that cannot reach a peer, a rank that never joins, a rank that dies) ending every
rank's handshake with an error naming the rank, every successful import closed (the stand-ins' call log) and
nothing copied outside memory a successful allocation or import handed out."""

from __future__ import annotations

import ctypes
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest
import torch

import cam
import cam.world
from cam import _C
from _dataplane_harness import check_against_golden, make_rounds, FfnLog, Served

pytestmark = [pytest.mark.timeout(240), pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm"),
              pytest.mark.skipif(not hasattr(_C, "twin_ipc_calls"), reason="the twin's ACL IPC stand-ins")]

SCRIPT = pathlib.Path(__file__).with_name("_npu_rank.py")
TOPO = dict(D=2, P=1, F=2, E=4, K=2, H=48, Bmax=6, L=2, slots=2)  # A = 2 Attention ranks, F = 2 FFN ranks
COUNTS = [[6, 2], [0, 5]]


def _run(tmp_path, mode, timeout=180, exit_codes=None):
    """Runs every rank; returns the topology and the ranks' outputs (torch.save for round_trip, JSON for faults).
    ``exit_codes``: {rank: the code it must exit with} (0 for every other rank)."""
    t = cam.Topology(**TOPO)
    procs = []
    for r in range(t.world_size):
        cmd = [sys.executable, str(SCRIPT), "--store", str(tmp_path / "store"), "--rank", str(r), "--topology",
               json.dumps(TOPO), "--counts", json.dumps(COUNTS), "--out", str(tmp_path / f"rank{r}.out"),
               "--mode", mode]
        # each rank its own twin device, so the peer-access check runs for every peer (as across NPUs)
        env = dict(os.environ, CAM_TWIN_DEVICE_ID=str(r))
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env))
    deadline = time.monotonic() + timeout
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
                q.wait(10)
            raise
        want = (exit_codes or {}).get(r, 0)
        assert p.returncode == want, f"rank {r} exited {p.returncode}, not {want}:\n{out.decode(errors='replace')}"
    if mode == "faults":
        return t, [json.loads((tmp_path / f"rank{r}.out").read_text()) for r in range(t.world_size)]
    return t, [torch.load(tmp_path / f"rank{r}.out") for r in range(t.world_size)]


# The ACL calls of the NPU transport's table that act on devices or memory, as docs/ascend.md §5.0 lists them
# (aclGetRecentErrMsg only explains a failure; the stream calls are the twin backend's own stream stand-ins).
STAND_INS = {"aclrtMalloc", "aclrtFree", "aclrtMemcpy", "aclrtMemcpyAsync", "aclrtGetDevice", "aclrtDeviceGetBareTgid",
             "aclrtDeviceCanAccessPeer", "aclrtIpcMemGetExportKey", "aclrtIpcMemSetImportPid", "aclrtIpcMemImportByKey",
             "aclrtIpcMemClose"}


def _twin_segments(pids):
    return sorted(n for n in os.listdir("/dev/shm") if any(n.startswith(f"cam-npu-twin-{p}-") for p in pids))


def _expected_create_calls(t, rank, window_bytes):
    """The create path as docs/ascend.md §5.0 orders it, written from the flow, not from the code."""
    calls = ["aclrtDeviceGetBareTgid", "aclrtGetDevice", "aclrtMalloc"]
    calls += ["aclrtMemcpy"] * math.ceil(window_bytes / (1 << 20))  # device memory is not zeroed by aclrtMalloc
    calls += ["aclrtMemcpy", "aclrtIpcMemGetExportKey", "aclrtIpcMemSetImportPid", "aclrtDeviceGetBareTgid"]
    calls += ["aclrtMalloc"]  # own device memory for the peer table and the staging words
    for r in range(t.world_size):
        if r != rank:
            # a peer's identity line: device to device (asynchronously) into own memory, then to the host
            # (imported memory cannot be copied to the host, nor synchronously at all)
            calls += ["aclrtDeviceCanAccessPeer", "aclrtIpcMemImportByKey", "aclrtMemcpyAsync", "aclrtMemcpy"]
        else:
            calls += ["aclrtMemcpy"]  # its own identity line, read back through a copy
    calls += ["aclrtMemcpy", "aclrtMemcpy"]  # the device peer table, then the plane id
    return calls


@pytest.mark.slow
def test_npu_round_trip_calls_and_close(tmp_path):
    t, outs = _run(tmp_path, "round_trip")
    results = {}
    for r, o in enumerate(outs):
        if r < t.A:
            results[r] = o["result"]
        else:
            log = FfnLog()
            for d, seq, layer, rows, scales, cnt in o["result"]:
                wi = torch.zeros(t.work_item_words, dtype=torch.int64)
                wi[5], wi[6], wi[7] = rows.shape[0], r, log.plane_id
                wi[8:8 + t.R] = cnt
                log.served.append(Served(d, seq, layer, rows, scales, cnt, wi, 0, rows.shape[0]))
            results[r] = log
    check_against_golden(t, make_rounds(t, COUNTS, seed=21), results)
    peers = t.world_size - 1
    for r, o in enumerate(outs):
        assert o["create_calls"] == _expected_create_calls(t, r, o["window_bytes"]), f"rank {r}"
        # creation and close between them reach every stand-in of the transport's table (the one path an NPU runs)
        assert set(o["create_calls"]) | set(o["close_calls"]) == STAND_INS, f"rank {r}"
        # the host reads the plane's control words (the abort word before each op, the status) through copies,
        # none refused; the data plane allocates and imports nothing more
        assert o["run_calls"] and set(o["run_calls"]) <= {"aclrtMemcpy", "aclrtMemcpyAsync"}, f"rank {r}"
        # replica isolation and abort through the same copies: rank 1 fenced rank 0's replica in the FFN ranks'
        # windows and the last rank aborted every window; every round of replica 0 was returned, so none dropped
        live = o["liveness"]
        assert live["fenced"] == {0: 0}, f"rank {r}: {live}"
        assert live["dropped"] == ({} if r < t.A else {0: 0}), f"rank {r}: {live}"
        assert live["abort"] == t.world_size, f"rank {r}: {live}"  # 1 + the aborting rank
        assert set(o["liveness_calls"]) <= {"aclrtMemcpy", "aclrtMemcpyAsync"}, f"rank {r}: {o['liveness_calls']}"
        # every rank touched a peer's words (a fence, a done signal, an abort word): asynchronously device to device
        assert "aclrtMemcpyAsync" in o["liveness_calls"], f"rank {r}: {o['liveness_calls']}"
        # every import closed first, then the own export withdrawn, the table and the window freed
        assert o["close_calls"] == ["aclrtIpcMemClose"] * peers + ["aclrtIpcMemClose", "aclrtFree", "aclrtFree"], r
        assert o["open_imports"] == 0, f"rank {r}"
    assert _twin_segments([o["pid"] for o in outs]) == []


def _expected_errors(t, fault, out):
    """What every rank's error must say for each fault (each rank may meet it first-hand or through the rank that
    did, so every error must carry the first-hand words), written from the faults' definitions."""
    last = t.world_size - 1
    if fault == "tamper_key":
        return [r"cannot import rank 0's window: aclrtIpcMemImportByKey failed"]
    if fault == "tamper_size":
        return [r"rank 0 published a window of (\d+) bytes, the topology gives that rank (\d+)"]
    if fault == "tamper_pid":
        return [r"rank 0's record comes from pid (\d+), the pid it published \(and this rank allowed\) is (\d+)"]
    if fault == "topology":
        return [rf"rank {last} was created with a different topology: Bmax={TOPO['Bmax'] - 2} \(rank\(s\) 0, 1, 2: "
                rf"Bmax={TOPO['Bmax']}\)"]
    if fault == "no_peer_access":
        return [r"rank 2's device 2 cannot be reached from this rank's device 0"]
    if fault == "store_timeout":
        return [rf"rank\(s\) {last} never published its pid within join_timeout_s=2 s"]
    assert fault == "death"
    return [rf"rank {last} died during the handshake \(its process {out[last]['pid']} is gone\)"]


@pytest.mark.slow
def test_npu_handshake_faults_name_the_rank_and_leave_nothing_open(tmp_path):
    # One launch of four ranks runs every fault in turn, each on its own group (see _npu_rank.FAULTS).
    sys.path.insert(0, str(SCRIPT.parent))
    import _npu_rank as faults

    t, outs = _run(tmp_path, "faults", timeout=200, exit_codes={3: faults.DEATH_EXIT})
    last = t.world_size - 1
    try:
        for fault in faults.FAULTS:
            for r, o in enumerate(outs):
                res = o.get(fault)
                if fault == "store_timeout" and r == last or fault == "death" and r == last:
                    assert res is None or res.get("skipped"), (fault, r, res)  # it never joined, or it died
                    continue
                where = f"{fault}, rank {r}"
                assert res is not None, where
                assert res["error"] is not None, f"{where}: the handshake succeeded"
                for pattern in _expected_errors(t, fault, outs):
                    m = re.search(pattern, res["error"])
                    assert m, f"{where}: {res['error']}"
                    if fault == "tamper_size":
                        assert int(m.group(1)) == int(m.group(2)) + 128, res["error"]  # both sizes, as published
                    if fault == "tamper_pid":
                        assert int(m.group(1)) == int(m.group(2)) + 1, res["error"]
                if fault == "store_timeout":
                    assert res["seconds"] >= faults.STORE_TIMEOUT_JOIN_S, where
                else:
                    # ended by the peer's failure or death, not by join_timeout_s
                    assert res["seconds"] < faults.FAULT_JOIN_S, f"{where}: {res['seconds']:.1f} s"
                calls = res["calls"]  # the stand-ins' log, in call order
                imported = calls.count("aclrtIpcMemImportByKey")
                exported = calls.count("aclrtIpcMemGetExportKey")
                # every successful import closed, and the own export withdrawn; every allocation freed
                assert calls.count("aclrtIpcMemClose") == imported + exported, f"{where}: {calls}"
                assert calls.count("aclrtFree") == calls.count("aclrtMalloc"), f"{where}: {calls}"
                assert res["open_imports"] == 0, where
                # no copy touched memory outside a successful allocation or import, no close or free refused; the
                # one refusal allowed is an import (the altered key's, or a peer's that gave up first and withdrew
                # its export), after which the attach stops
                refused = [c for c in calls if c.endswith("!")]
                assert refused in ([], ["aclrtIpcMemImportByKey!"]), f"{where}: {calls}"
                if fault == "tamper_key" and r != 0:
                    assert refused == ["aclrtIpcMemImportByKey!"], f"{where}: {calls}"
                if fault == "no_peer_access" and r == 0:  # rank 1's window only: rank 2's device is unreachable
                    assert imported == 1, f"{where}: {calls}"
    finally:
        # the rank that died (a crash: no cleanup) leaves its twin "device memory" in /dev/shm, as a crashed
        # process on a device leaves its allocations to the driver
        for name in _twin_segments([outs[last]["pid"]]):
            os.unlink(f"/dev/shm/{name}")
    assert _twin_segments([o["pid"] for o in outs]) == []


def test_npu_transport_requires_a_store():
    with pytest.raises(ValueError, match="transport 'npu' needs a torch.distributed Store"):
        cam.Comm(cam.Topology(**TOPO), 0, transport="npu")


def _stand_ins():
    lib = ctypes.CDLL(os.path.join(os.path.dirname(cam.__file__), "lib", "libcam_aclnn.so"))
    lib.camTwinAclGetRecentErrMsg.restype = ctypes.c_char_p
    copy = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.camTwinAclrtMemcpy.argtypes = copy
    lib.camTwinAclrtMemcpyAsync.argtypes = [*copy, ctypes.c_void_p]
    return lib


def test_twin_refuses_host_copies_of_imported_memory():
    """A twin rule: CANN's aclrtIpcMemGetExportKey page (hicann/runtime, docs/api_docs/aclrtIpcMemGetExportKey.md)
    says memory imported from another device cannot be copied to or from the host, and only asynchronously device
    to device. The stand-ins refuse the other copies, naming why; the controls (own memory to the host, an
    asynchronous copy of imported memory into own memory) pass."""
    lib = _stand_ins()
    h2d, d2h, d2d = 1, 2, 3  # aclrtMemcpyKind
    own, imported = ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.camTwinAclrtMalloc(ctypes.byref(own), ctypes.c_size_t(4096), 0) == 0
    key = ctypes.create_string_buffer(65)
    assert lib.camTwinAclrtIpcMemGetExportKey(own, ctypes.c_size_t(4096), key, ctypes.c_size_t(65),
                                              ctypes.c_uint64(0)) == 0
    pid = (ctypes.c_int32 * 1)(os.getpid())
    try:
        assert lib.camTwinAclrtIpcMemSetImportPid(key, pid, ctypes.c_size_t(1)) == 0
        # the plane's trust rule for a segment (shared with the shm transport): one open to group/other is refused
        segment = "/dev/shm/" + key.value.decode().rsplit(":", 1)[0].lstrip("/")
        os.chmod(segment, 0o640)
        assert lib.camTwinAclrtIpcMemImportByKey(ctypes.byref(imported), key, ctypes.c_uint64(1)) != 0
        assert b"open to group/other (mode 0640" in lib.camTwinAclGetRecentErrMsg()
        os.chmod(segment, 0o600)
        assert lib.camTwinAclrtIpcMemImportByKey(ctypes.byref(imported), key, ctypes.c_uint64(1)) == 0
        assert imported.value != own.value
        host = ctypes.create_string_buffer(64)
        assert lib.camTwinAclrtMemcpy(host, 64, own, 64, d2h) == 0  # control: own memory
        assert lib.camTwinAclrtMemcpyAsync(own, 64, imported, 64, d2d, None) == 0  # control: the transport's path
        assert lib.camTwinAclrtMemcpy(own, 64, imported, 64, d2d) != 0  # only asynchronous copies may touch it
        assert b"synchronous copy of memory imported" in lib.camTwinAclGetRecentErrMsg()
        assert lib.camTwinAclrtMemcpy(host, 64, imported, 64, d2h) != 0
        assert b"imported from another device" in lib.camTwinAclGetRecentErrMsg()
        assert lib.camTwinAclrtMemcpy(imported, 64, host, 64, h2d) != 0
        assert b"imported from another device" in lib.camTwinAclGetRecentErrMsg()
    finally:
        if imported.value:
            assert lib.camTwinAclrtIpcMemClose(key) == 0  # the import
        assert lib.camTwinAclrtIpcMemClose(key) == 0  # the export
        assert lib.camTwinAclrtFree(own) == 0


def _npu_plane_in_threads():
    """Both ranks of a 2-rank npu plane as threads of this process (one pid: each allows itself), over the twin's
    stand-ins."""
    import threading

    from torch.distributed import HashStore

    t = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=64, Bmax=4, L=1)
    store, comms, errors = HashStore(), {}, {}

    def make(r):
        try:
            comms[r] = cam.Comm(t, r, transport="npu", store=store, group="w", join_timeout_s=30)
        except Exception as e:  # noqa: BLE001 - reported below
            errors[r] = e

    threads = [threading.Thread(target=make, args=(r,)) for r in range(t.world_size)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not any(th.is_alive() for th in threads) and errors == {}, errors
    return comms


def _close_in_threads(comms):
    """Closes every rank at once, as separate processes would: a rank's close waits (bounded) for every peer's word
    that it closed its imports, so closing them one after another in one thread would make the first wait its whole
    bound and then keep its window for the life of the process."""
    import threading

    names = ["/dev/shm" + c._c.ipc_record()["key"].rsplit(":", 1)[0] for c in comms.values()]
    threads = [threading.Thread(target=c.close) for c in comms.values()]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not any(th.is_alive() for th in threads)
    # every window freed, none kept for a peer that did not answer in time
    assert [n for n in names if os.path.exists(n)] == []


def test_npu_window_is_refused_where_it_is_device_memory(monkeypatch):
    """Comm.window reads the window as host memory. On an Ascend backend the npu transport's window is
    aclrtMalloc'ed device memory, so it refuses, naming the transport, and no tensor is ever made over it (here the
    backend check is made to answer as on Ascend). Comm.plane_id and Comm.status() read their words through the
    transport (device copies, camCommGetPlaneId / camCommGetStatus), so they answer there too: one plane id on both
    ranks, read by an aclrtMemcpy. Control: the same plane on the twin, whose stand-ins' device memory is host
    memory, gives the window, and its identity line holds the plane id the getter returns."""
    open_before = _C.twin_ipc_open_imports()  # relative: see test_shm_transport_in_threads_round_trip
    monkeypatch.setattr(cam.comm, "_window_is_host_memory", lambda transport: transport != "npu")
    comms = _npu_plane_in_threads()
    try:
        ids = set()
        for r, c in comms.items():
            assert c._window is None, f"rank {r}: a tensor over device memory was made"
            with pytest.raises(cam.CamError, match=rf"Comm.window: rank {r}'s window is device memory on the 'npu'"):
                c.window
            _C.twin_ipc_calls(reset=True)
            ids.add(c.plane_id)
            assert _C.twin_ipc_calls(reset=True) == ["aclrtMemcpy"], f"rank {r}: not one device-to-host copy"
            assert c.status()["abort"] == 0  # the control words still reach the host, through the copies
        assert len(ids) == 1 and ids != {0}, ids
    finally:
        _close_in_threads(comms)
    monkeypatch.undo()
    comms = _npu_plane_in_threads()  # control
    try:
        ids = {c.plane_id for c in comms.values()}
        assert len(ids) == 1 and ids != {0}, ids
        assert all(c.window.numel() == c.window_bytes for c in comms.values())
        assert {int(c.window.view(torch.int64)[_C.IDENTITY_PLANE_ID_WORD]) for c in comms.values()} == ids
    finally:
        _close_in_threads(comms)
    assert _C.twin_ipc_open_imports() == open_before


@pytest.mark.parametrize("peer_answers", [True, False])
def test_a_failed_handshake_frees_no_window_a_peer_still_imports(peer_answers):
    """CANN's teardown order (aclrtIpcMemClose.md): every importer closes its import before the owner closes the key
    and frees. Rank 0 (a real cam.Comm, in a thread) fails its handshake after rank 1 (driven by hand, this process)
    imported its window: rank 1 gives up (its failure key), or never answers at all (rank 0 times out). Rank 0 must
    not free while rank 1's import is open: it waits for rank 1's word that it closed its imports and frees then
    (answers), or keeps the window for the life of the process (silent). The stand-ins' call log shows no aclrtFree
    before rank 1 closed its import; without the wait rank 0 freed at once."""
    import threading

    from torch.distributed import HashStore

    from cam.comm import Comm, _proc_identity

    t = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=64, Bmax=4, L=1)
    store = HashStore()
    g = f"failed-release/{cam.world.join(store, 'failed-release', 1, 2, 30)}"  # rank 1's slot, taken by hand
    probe = Comm.__new__(Comm)
    probe.topology, probe.dtype = t, torch.bfloat16
    store.set(f"{g}/proc/1", _proc_identity(os.getpid()))
    store.set(f"{g}/topo/1", json.dumps(probe._plane_description()))
    store.set(f"{g}/ipcpid/1", str(os.getpid()))
    out = {}

    def rank0():
        try:
            cam.Comm(t, 0, transport="npu", store=store, group="failed-release",
                     join_timeout_s=30 if peer_answers else 2)
        except Exception as e:  # noqa: BLE001 - the error is the result
            out["error"] = e

    def wait_key(key, timeout=30, or_rank0_done=False):
        deadline = time.monotonic() + timeout
        while not store.check([key]) and not (or_rank0_done and not th.is_alive()):
            assert time.monotonic() < deadline, f"{key} never set"
            time.sleep(0.01)

    _C.twin_ipc_calls(reset=True)
    th = threading.Thread(target=rank0, daemon=True)
    th.start()
    wait_key(f"{g}/ipc/0")
    c1 = _C.Comm.ipc(list(t.as_c_fields()), 1, 10**9, 10**6, 27, [os.getpid()] * 2)
    window0 = json.loads(store.get(f"{g}/ipc/0").decode())["key"].rsplit(":", 1)[0]
    try:
        store.set(f"{g}/ipc/1", json.dumps(c1.ipc_record()))
        c1.attach_ipc([json.loads(store.get(f"{g}/ipc/{r}").decode()) for r in range(2)])  # imports rank 0's window
        if peer_answers:
            store.set(f"{g}/failed/1", "RuntimeError: rank 1 gives up")
        wait_key(f"{g}/detached/0", or_rank0_done=True)  # rank 0 is in its failure path, its imports closed
        if peer_answers:
            time.sleep(0.5)  # rank 0 waits for rank 1's word (up to 10 s)
            assert th.is_alive()
        else:
            th.join(30)  # rank 0 gives up waiting (min(10 s, join 2 s)) and ends on its own
            assert not th.is_alive()
        before = _C.twin_ipc_calls(reset=True)
        assert "aclrtFree" not in before, f"rank 0 freed while rank 1 still imports its window: {before}"
        c1.detach_ipc()  # rank 1 closes its import of rank 0's window ...
        store.set(f"{g}/detached/1", "1")  # ... and says so
        th.join(30)
        assert not th.is_alive()
        after = _C.twin_ipc_calls(reset=True)
        if peer_answers:
            assert isinstance(out["error"], cam.errors.CommJoinError) and "rank 1 gave up" in str(out["error"]), out
            # rank 0 withdrew its export, then freed its peer table and its window
            assert after[-3:] == ["aclrtIpcMemClose", "aclrtFree", "aclrtFree"], after
            assert not os.path.exists(f"/dev/shm{window0}")
        else:
            assert isinstance(out["error"], TimeoutError) and "rank(s) 1 never imported" in str(out["error"]), out
            assert "aclrtFree" not in after, after  # kept for the life of the process
            assert os.path.exists(f"/dev/shm{window0}")
    finally:
        c1.close()
        if not peer_answers and os.path.exists(f"/dev/shm{window0}"):
            os.unlink(f"/dev/shm{window0}")  # the kept window's name: this test process lives on
