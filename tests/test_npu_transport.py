"""The NPU transport (transport="npu": device memory shared by ACL IPC) on the twin, where the same create path runs
over cam's POSIX-shm stand-ins of the ACL calls: a 2 Attention + 2 FFN round trip over processes bit-exact against
the golden, the create path's stand-in calls in order, tampered records refused naming the rank, and every import
closed afterwards."""

from __future__ import annotations

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
from cam import _C
from _dataplane_harness import check_against_golden, make_rounds, FfnLog, Served

pytestmark = [pytest.mark.timeout(240), pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm"),
              pytest.mark.skipif(not hasattr(_C, "twin_ipc_calls"), reason="the twin's ACL IPC stand-ins")]

SCRIPT = pathlib.Path(__file__).with_name("_npu_rank.py")
TOPO = dict(D=2, P=1, F=2, E=4, K=2, H=48, Bmax=6, L=2, slots=2)  # A = 2 Attention ranks, F = 2 FFN ranks
COUNTS = [[6, 2], [0, 5]]


def _run(tmp_path, mode, timeout=180):
    t = cam.Topology(**TOPO)
    procs = []
    for r in range(t.world_size):
        cmd = [sys.executable, str(SCRIPT), "--store", str(tmp_path / "store"), "--rank", str(r), "--topology",
               json.dumps(TOPO), "--counts", json.dumps(COUNTS), "--out", str(tmp_path / f"rank{r}.pt"),
               "--mode", mode, "--victim", "0"]
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
        assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{out.decode(errors='replace')}"
    return t, [torch.load(tmp_path / f"rank{r}.pt") for r in range(t.world_size)]


def _twin_segments(pids):
    return sorted(n for n in os.listdir("/dev/shm") if any(n.startswith(f"cam-npu-twin-{p}-") for p in pids))


def _expected_create_calls(t, rank, window_bytes):
    """The create path as docs/ascend.md §5.0 orders it, written from the flow, not from the code."""
    calls = ["aclrtDeviceGetBareTgid", "aclrtGetDevice", "aclrtMalloc"]
    calls += ["aclrtMemcpy"] * math.ceil(window_bytes / (1 << 20))  # device memory is not zeroed by aclrtMalloc
    calls += ["aclrtMemcpy", "aclrtIpcMemGetExportKey", "aclrtIpcMemSetImportPid", "aclrtDeviceGetBareTgid"]
    for r in range(t.world_size):
        if r != rank:
            calls += ["aclrtDeviceCanAccessPeer", "aclrtIpcMemImportByKey"]
        calls += ["aclrtMemcpy"]  # the identity line, read back through a copy
    calls += ["aclrtMalloc", "aclrtMemcpy", "aclrtMemcpy"]  # the device peer table, then the plane id
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
        assert o["run_calls"] == [], f"rank {r}: the data plane itself makes no ACL call on the twin"
        # every import closed first, then the own export withdrawn, the table and the window freed
        assert o["close_calls"] == ["aclrtIpcMemClose"] * peers + ["aclrtIpcMemClose", "aclrtFree", "aclrtFree"], r
        assert o["open_imports"] == 0, f"rank {r}"
    assert _twin_segments([o["pid"] for o in outs]) == []


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["tamper_key", "tamper_size", "tamper_pid"])
def test_npu_tampered_record_fails_naming_the_rank(tmp_path, mode):
    # Rank 0 publishes an altered record. Every other rank imports rank 0 first (rank order), so each fails on it.
    t, outs = _run(tmp_path, mode)
    for r, o in enumerate(outs):
        assert o["open_imports"] == 0, f"rank {r}"
        if r == 0:
            # The tamperer never completes either: it waits for peers that never finish importing, or finds a peer
            # that already gave up (its export withdrawn), whichever comes first.
            assert o["error"] and ("imported the windows" in o["error"] or "cannot import rank" in o["error"]), \
                o["error"]
            continue
        assert o["error"] is not None, f"rank {r} accepted rank 0's tampered record"
        if mode == "tamper_key":
            assert "cannot import rank 0's window" in o["error"], o["error"]
        elif mode == "tamper_pid":
            m = re.search(r"rank 0's record comes from pid (\d+), the pid it published \(and this rank allowed\) is "
                          r"(\d+)", o["error"])
            assert m and int(m.group(1)) == int(m.group(2)) + 1, o["error"]
        else:
            m = re.search(r"rank 0 published a window of (\d+) bytes, the topology gives that rank (\d+)", o["error"])
            assert m, o["error"]
            assert int(m.group(1)) == int(m.group(2)) + 128  # both sizes: the published one and the topology's


def test_npu_transport_requires_a_store():
    with pytest.raises(ValueError, match="transport 'npu' needs a torch.distributed Store"):
        cam.Comm(cam.Topology(**TOPO), 0, transport="npu")
