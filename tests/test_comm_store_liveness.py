"""The liveness watchdog and a Store that cannot be read (docs/protocol.md §9, "Dead peers"): only a peer's process
being gone is evidence of its death; a Store that cannot say whether a gone peer left cleanly is asked again within
``store_grace_s`` and, past it, aborts the plane as a store failure, never as that peer's death.

The watchdog (``cam.comm._watch_peers``) runs here on rank 0 of a real two-rank plane (threads as ranks), watching a
real process the test ends, through a Store wrapper that fails a chosen number of reads: every outcome is read from
the plane's abort word, deterministic and without timing races."""

from __future__ import annotations

import subprocess
import threading
import time
import weakref

import pytest

import cam
from cam import comm as comm_mod
from _dataplane_harness import unique_group
from _topology import topology_with

pytestmark = pytest.mark.timeout(60)

topo = topology_with(D=1, P=1, F=1, E=2, K=1, H=32, Bmax=2, L=1, slots=1)
POLL_S = 0.02
GROUP = "g/w"


class FlakyStore:
    """A Store whose first ``fail`` reads raise as a TCPStore's do when its server is slow or gone (all of them
    with ``fail=None``); ``reads`` counts every read asked of it."""

    def __init__(self, keys=(), fail=0):
        self.keys, self.fail, self.reads = set(keys), fail, 0

    def check(self, keys) -> bool:
        self.reads += 1
        if self.fail is None or self.reads <= self.fail:
            raise TimeoutError("Socket Timeout (the store server did not answer)")
        return all(k in self.keys for k in keys)


@pytest.fixture
def plane():
    """Both ranks' Comms of a fresh in-process plane, kept open for the test."""
    group, comms, ready, release = unique_group("store-liveness"), {}, threading.Barrier(3, timeout=30), \
        threading.Event()

    def rank(r):
        with cam.Comm(topo(), r, group=group, timeout_s=30, join_timeout_s=30) as c:
            comms[r] = c
            ready.wait()
            release.wait(60)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(2)]
    for t in threads:
        t.start()
    ready.wait()
    yield comms
    release.set()
    for t in threads:
        t.join(30)


def gone_process() -> str:
    """The identity ("pid:start") of a process that has ended, as a peer's published identity."""
    p = subprocess.Popen(["sleep", "60"])
    ident = comm_mod._proc_identity(p.pid)
    assert ident is not None
    p.kill()
    p.wait(10)
    assert comm_mod.process_gone(ident)
    return ident


def watch(comm, store, peers, grace_s):
    """Rank 0's watchdog over ``peers`` through ``store``; returns (its thread, its stop event)."""
    stop = threading.Event()
    t = threading.Thread(target=comm_mod._watch_peers,
                         args=(weakref.ref(comm), POLL_S, stop, peers, store, GROUP, False, grace_s), daemon=True)
    t.start()
    return t, stop


def until(cond, bound_s=10.0):
    deadline = time.monotonic() + bound_s
    while not cond():
        assert time.monotonic() < deadline, "not reached within the bound"
        time.sleep(0.005)


def abort_word(comm) -> int:
    return int(comm.status()["abort"])


def test_a_store_that_fails_some_reads_and_recovers_is_no_death(plane):
    """A peer that closed its Comm (its left key set) and exited, read through a Store that fails its first reads:
    the watchdog asks again and, once the Store answers "left", stops watching it. Nothing is aborted."""
    store = FlakyStore(keys={f"{GROUP}/left/1"}, fail=5)
    peers = {1: gone_process()}
    t, stop = watch(plane[0], store, peers, grace_s=5.0)
    try:
        until(lambda: not peers)
    finally:
        stop.set()
        t.join(10)
    assert store.reads > 5
    assert plane[0].dead_rank is None and plane[0].died is None and plane[0].store_failure is None
    assert abort_word(plane[0]) == 0 and abort_word(plane[1]) == 0


def test_a_store_that_recovers_still_tells_a_death(plane):
    """The same flaky Store, but the gone peer never left: once the Store answers, it is a death (rank 1)."""
    store = FlakyStore(fail=5)
    t, stop = watch(plane[0], store, {1: gone_process()}, grace_s=5.0)
    t.join(10)
    stop.set()
    assert not t.is_alive()
    assert store.reads == 6
    assert plane[0].dead_rank == 1 and plane[0].died == 1 and plane[1].died == 1
    assert plane[0].store_failure is None


def test_a_store_that_stays_down_is_a_store_failure_not_a_death(plane):
    """A Store unreadable past store_grace_s: the plane is aborted in rank 0's name (abort word 1 + 0) with the
    store failure recorded, and no rank is named dead."""
    grace = 0.3
    store = FlakyStore(fail=None)
    began = time.monotonic()
    t, stop = watch(plane[0], store, {1: gone_process()}, grace_s=grace)
    t.join(10)
    took = time.monotonic() - began
    stop.set()
    assert not t.is_alive()
    failure = plane[0].store_failure
    assert isinstance(failure, comm_mod.StoreFailure), failure
    assert failure.peer == 1 and failure.error.startswith("TimeoutError: Socket Timeout")
    assert failure.found_at - failure.since >= 0.9 * grace and "not a death" in str(failure)
    assert took >= grace and store.reads >= 3  # asked again through the grace, not once
    assert plane[0].dead_rank is None and plane[0].died is None and plane[1].died is None
    assert abort_word(plane[0]) == 1 and abort_word(plane[1]) == 1  # raised by rank 0, not -(1 + 1)


class SilentStore:
    """A Store whose server never answers: a read blocks (as a TCPStore client's does, up to its own timeout,
    minutes) until the test releases it."""

    def __init__(self):
        self.release = threading.Event()

    def check(self, keys) -> bool:
        self.release.wait(30)
        raise TimeoutError("Socket Timeout")


def test_a_store_that_does_not_answer_is_a_store_failure_within_the_grace(plane):
    """A read that never returns holds neither the watchdog nor its bound: the store failure is reported once the
    grace is over, not when the Store's own timeout would end the read."""
    grace, store = 0.3, SilentStore()
    try:
        began = time.monotonic()
        t, stop = watch(plane[0], store, {1: gone_process()}, grace_s=grace)
        t.join(grace + 5)
        took = time.monotonic() - began
        stop.set()
        assert not t.is_alive(), "the watchdog waited for the Store's read"
        assert grace <= took < grace + 3, took
        failure = plane[0].store_failure
        assert failure is not None and failure.peer == 1 and failure.error.startswith("TimeoutError"), failure
        assert plane[0].died is None and abort_word(plane[1]) == 1
    finally:
        store.release.set()


def test_a_dead_peer_with_a_healthy_store_is_found_at_the_first_poll(plane):
    """Control: a peer gone without leaving, the Store healthy: found dead at the watchdog's first poll, as
    before (the grace only ever applies to a Store that cannot be read)."""
    store = FlakyStore()
    began = time.monotonic()
    t, stop = watch(plane[0], store, {1: gone_process()}, grace_s=60.0)
    t.join(10)
    stop.set()
    found = time.monotonic() - began
    assert not t.is_alive() and store.reads == 1
    assert plane[0].dead_rank == 1 and plane[1].died == 1
    assert found < 1.0, found  # one poll (0.02 s) plus scheduling, far below the 60 s grace


def test_store_grace_s_is_checked():
    for bad in (0, -1, float("nan"), True, "5", 3601):
        with pytest.raises(ValueError, match="store_grace_s"):
            cam.Comm(topo(), 0, group=unique_group("grace"), store_grace_s=bad)


def test_a_cam_run_aborted_after_start_up_still_tells_a_peers_exit_from_its_death(plane):
    """cam-run's abort guard refuses store reads only while the connector starts (an aborted start-up must not wait
    out its join timeout); the Comm keeps that store for life, so once started its watchdog reads through it as
    through the store itself: in a run aborted later, a peer's orderly exit is still told from a death."""
    from cam.run import worker

    store, aborted, guards = FlakyStore(keys={f"{GROUP}/left/1"}), {}, []

    def start(guard):
        guards.append(guard)
        aborted["by"] = "rank 2 failed"  # the run aborted during start-up: the handshake's next read refuses
        with pytest.raises(worker.RankFailed, match="start-up aborted: rank 2 failed"):
            guard.check(["any"])

    worker._start_up(start, store, aborted)
    peers = {1: gone_process()}
    t, stop = watch(plane[0], guards[0], peers, grace_s=0.3)
    try:
        until(lambda: not peers)
    finally:
        stop.set()
        t.join(10)
    assert plane[0].dead_rank is None and plane[0].store_failure is None and abort_word(plane[0]) == 0


def test_the_connector_names_a_store_failure_not_a_death():
    """On the Attention rank whose watchdog aborted the plane on a store failure, the connector's next op raises
    StoreFailedError carrying the failure (a CommAbortedError that says "store failure"), not a bare abort."""
    import torch

    from cam.connector import AFDTransferContext, AFDTransferMetadata, AsyncAFDConnector, ConnectorConfig
    from _connector_harness import init_connectors

    cfg = ConnectorConfig(topo(), timeout_s=30.0, idle_poll_s=0.01, group=unique_group("store-failed"),
                          transport="in_process")
    conns = [AsyncAFDConnector(r, "attention" if r == 0 else "ffn", cfg) for r in range(2)]
    init_connectors(conns, torch.distributed.HashStore(), 30)
    try:
        t, stop = watch(conns[0].comm, FlakyStore(fail=None), {1: gone_process()}, grace_s=0.1)
        t.join(10)
        stop.set()
        ids = torch.zeros(1, 1, dtype=torch.int32)
        with pytest.raises(comm_mod.StoreFailedError, match="aborted on a store failure") as got:
            conns[0].send_attn_output(torch.zeros(1, 32, dtype=torch.bfloat16),
                                      AFDTransferContext(AFDTransferMetadata(0)), topk_ids=ids,
                                      topk_weights=torch.ones(1, 1))
        assert got.value.failure is conns[0].comm.store_failure and got.value.failure.peer == 1
        assert isinstance(got.value, cam.CommAbortedError) and conns[0].comm.died is None
    finally:
        for c in conns:
            c.close()
