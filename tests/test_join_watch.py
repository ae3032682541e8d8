"""Joining a world is never silent (cam.rank_status): a cam-ffn rank whose -D differs from the Attention side is
named on both sides within seconds of publishing, not after the join timeout; a peer that never published is
reported while the wait lasts; a peer that published and went silent is named; a rank's refusal is never preceded by
a store stack trace."""

import json
import logging
import os
import subprocess
import sys
import time

import pytest

import cam
from cam import rank_status
from cam.connector import AsyncAFDConnector, ConnectorConfig, loopback_store
from cam.serve.store import SignedStore

from test_ffn_server import B, _experts, _write_checkpoint

WAIT_S = 120.0


def _attention(store, ckpt, group, secret, *, join_timeout_s=60.0, D=1):
    topo = cam.Topology.from_checkpoint(str(ckpt), D=D, F=1, Bmax=B)
    cfg = ConnectorConfig(topology=topo, master_port=store.port, timeout_s=60.0, idle_poll_s=0.02, group=group,
                          secret=secret, join_timeout_s=join_timeout_s)
    return AsyncAFDConnector(0, "attention", cfg)


def _cam_ffn(ckpt, store, group, secret, *args):
    return subprocess.Popen([sys.executable, "-m", "cam.ffn_server", "--checkpoint", str(ckpt), "--max-tokens",
                             str(B), "--master-port", str(store.port), "--group", group, "--timeout", "60",
                             "--join-timeout", "60", *args], env=dict(os.environ, CAM_RUN_SECRET=secret.hex()),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def _first_beat(store, group, secret, role):
    """When the first status of ``role`` was published (time.time()), from the store."""
    found = rank_status.members(SignedStore(store, secret, group), group)
    return min(s["since"] for s in found.values() if s["role"] == role)


@pytest.mark.parametrize("rank", [2, 1], ids=["joining", "refused-locally"])
def test_a_replica_count_mismatch_is_named_on_both_sides_within_seconds(tmp_path, rank):
    """cam-ffn -D 2 against an Attention side of D = 1: rank 2 is an FFN rank of its world (it joins and compares);
    rank 1 is not (it is refused locally, and still publishes why). Both sides name D with both values."""
    _write_checkpoint(tmp_path, _experts())
    secret = os.urandom(16)
    store = loopback_store(0, WAIT_S)
    group = f"join-d-{rank}"
    proc = _cam_ffn(tmp_path, store, group, secret, "-D", "2", "-F", "1", "--rank", str(rank))
    try:
        conn = _attention(store, tmp_path, group, secret)
        with pytest.raises(cam.InvalidArgumentError) as e:
            conn.init_afd_connector(store)
        named = time.time()
        conn.close()
        _, stderr = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)
    assert "expects another world" in str(e.value) and "D=2 (this rank: D=1)" in str(e.value), str(e.value)
    assert named - _first_beat(store, group, secret, "ffn") < 10.0
    assert proc.returncode != 0
    if rank == 2:
        assert "D=1 (this rank: D=2)" in stderr, stderr
    else:
        assert "--rank 1 is not an FFN rank" in stderr, stderr
    assert "Traceback" not in stderr and "Exception raised from" not in stderr, stderr


def test_a_missing_peer_is_reported_while_waiting(tmp_path, caplog):
    _write_checkpoint(tmp_path, _experts())
    secret = os.urandom(16)
    store = loopback_store(0, WAIT_S)
    conn = _attention(store, tmp_path, "join-missing", secret, join_timeout_s=12.0)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="cam.join"):
        with pytest.raises(TimeoutError, match="never published its pid within join_timeout_s=12"):
            conn.init_afd_connector(store)
    conn.close()
    assert time.monotonic() - start < 30
    reports = [r.getMessage() for r in caplog.records if r.name == "cam.join"]
    assert len(reports) >= 2, reports
    assert all("rank 1 (ffn): never published" in m and "of the 12 s bound" in m for m in reports), reports


_SILENT = """
import json, os, sys, time
from datetime import timedelta
import torch.distributed
from cam.rank_status import StatusPublisher
from cam.serve.store import SignedStore
port, group, secret, desc = int(sys.argv[1]), sys.argv[2], bytes.fromhex(sys.argv[3]), json.loads(sys.argv[4])
store = SignedStore(torch.distributed.TCPStore("127.0.0.1", port, None, is_master=False,
                                               timeout=timedelta(seconds=30), wait_for_workers=False), secret, group)
pub = StatusPublisher.publish(store, group, "ffn", os.getpid(), 1, desc)
pub.set_state("loading", "MoE layer 1 of 2")
pub.close()  # the heartbeat stops: a hung rank
print("published", flush=True)
time.sleep(60)
"""


def test_a_peer_that_published_then_went_silent_is_named(tmp_path):
    _write_checkpoint(tmp_path, _experts())
    secret = os.urandom(16)
    store = loopback_store(0, WAIT_S)
    conn = _attention(store, tmp_path, "join-silent", secret)
    desc = {"D": 1, "P": 1, "F": 1, "Bmax": B, "slots": 2}
    proc = subprocess.Popen([sys.executable, "-c", _SILENT, str(store.port), "join-silent", secret.hex(),
                             json.dumps(desc)], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout.readline().strip() == "published"
        start = time.monotonic()
        with pytest.raises(cam.CommJoinError, match=r"rank 1 \(ffn/\d+/1\) published 'loading' and has been "
                                                    r"silent for \d+ s"):
            conn.init_afd_connector(store)
        assert time.monotonic() - start < rank_status.SILENT_S + 5
    finally:
        conn.close()
        proc.kill()
        proc.wait(WAIT_S)


@pytest.mark.parametrize("argv, needle", [
    (["--rank", "0"], "--rank 0 is not an FFN rank: with -D 1 -P 1 -F 1 the Attention ranks are [0, 1)"),
    (["--rank", "1", "-F", "9"], "--ffn-ranks 9: more FFN ranks than the checkpoint's 8 routed experts"),
])
def test_cam_ffn_refuses_its_rank_and_topology_before_importing_torch(tmp_path, argv, needle):
    _write_checkpoint(tmp_path, _experts())
    code = ("import sys; from cam import ffn_server; rc = ffn_server.main(sys.argv[1:]); "
            "print('torch imported' if 'torch' in sys.modules else 'no torch'); sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code, "--checkpoint", str(tmp_path), "--max-tokens", "4",
                        "--master-port", "1", *argv], capture_output=True, text=True, timeout=WAIT_S,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert r.stdout.strip() == "no torch"
