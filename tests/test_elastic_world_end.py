"""A join into an elastic world whose end is claimed while the joiner waits (docs/connector.md, "The end of an
elastic world"; docs/protocol.md §18): the members never re-form once ``{group}/{world}/fate`` holds ``end``, so the
joiner raises ``WorldEndedError`` within its poll period instead of waiting out its bound for a world that never
forms. The running world is played by the test through the store (its plane record, the deciding FFN rank's
verdict, the end's claim), so the order of the race is forced, not hoped for."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
import torch

import cam
from cam import world as world_mod
from cam.connector import AsyncAFDConnector, ConnectorConfig, WorldEndedError
from cam.placement import Placement
from cam.serve.connector import _plane_record
from _dataplane_harness import unique_group

pytestmark = [pytest.mark.timeout(60), pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")]

E, L = 2, 1
BOUND_S = 30.0  # the joiner's join bound and handshake bound: what it waited out before
PROMPT_S = 3.0  # well above its poll period (0.02 s) and a loaded machine's scheduling, far below BOUND_S


def _world(store, group):
    """A running elastic world of one Attention and one FFN rank, as the store shows it: its world key and the plane
    its Attention rank 0 published. Returns (world id, the config of an FFN rank joining it)."""
    running = Placement.contiguous(E, 1, L)
    topo = cam.Topology(D=1, P=1, F=1, E=E, K=1, H=32, Bmax=2, L=L, expert_slots=running.slots_per_rank)
    left = world_mod.successor("0" * 32, "started")  # any world id
    store.set(world_mod.WORLD_KEY.format(group=group), json.dumps({"id": left, "t": time.time()}))
    plane = _plane_record(ConnectorConfig(topo, group=group, placement=running, elastic=True))
    store.set(f"{group}/{left}/plane", json.dumps({**plane, "epoch": 0}))
    table = running.with_rank([tuple(range(E)) for _ in range(L)])  # a replica of each expert
    joiner = ConnectorConfig(cam.Topology(D=1, P=1, F=2, E=E, K=1, H=32, Bmax=2, L=L,
                                          expert_slots=table.slots_per_rank),
                             group=group, placement=table, elastic=True, idle_poll_s=0.02, timeout_s=BOUND_S,
                             join_timeout_s=BOUND_S)
    return left, joiner


def _join(store, cfg):
    """The joiner on a thread: returns (its outcome dict, the thread)."""
    out = {}
    connector = AsyncAFDConnector(cfg.topology.world_size - 1, "ffn", cfg)

    def run():
        began = time.monotonic()
        try:
            connector.join_running(store=store)
            out["joined"] = True
        except BaseException as e:  # noqa: BLE001 - reported to the test
            out["error"] = e
        out["took"] = time.monotonic() - began
        connector.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return out, t


def _until_key(store, key, t):
    deadline = time.monotonic() + 10
    while not store.check([key]):
        assert t.is_alive(), "the joiner ended before it wrote " + key
        assert time.monotonic() < deadline, f"{key} never written"
        time.sleep(0.005)
    return store.get(key).decode()


def test_a_join_accepted_just_before_the_end_raises_world_ended_not_a_timeout(tmp_path):
    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    group = unique_group("ended")
    left, cfg = _world(store, group)
    out, t = _join(store, cfg)
    request = json.loads(_until_key(store, f"{group}/{left}/join/0", t))
    # The deciding FFN rank accepts (the world had not ended when it read the fate) ...
    store.compare_set(f"{group}/{left}/join/0/verdict", "", json.dumps({"accept": True, "reason": "",
                                                                        "rebalance": False}))
    # ... the joiner is inside the successor's handshake, waiting for the members ...
    successor = world_mod.successor(left, request["nonce"])
    _until_key(store, f"{group}/{successor}/ipcpid/{cfg.topology.world_size - 1}", t)
    # ... and every Attention rank finished before any member reached its boundary: the end holds, nobody re-forms.
    ended_at = time.monotonic()
    assert store.compare_set(f"{group}/{left}/fate", "", "end") == b"end"
    t.join(BOUND_S + 10)
    assert not t.is_alive()
    assert isinstance(out.get("error"), WorldEndedError), out
    assert "ended" in str(out["error"]) and left in str(out["error"])
    assert time.monotonic() - ended_at < PROMPT_S, out["took"]
    # It gave up as a rank does: its failure published in the successor's keys, so nobody waits for it.
    assert store.check([f"{group}/{successor}/failed/{cfg.topology.world_size - 1}"])


def test_a_join_waiting_for_its_verdict_when_the_world_ends_raises_world_ended(tmp_path):
    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    group = unique_group("ended")
    left, cfg = _world(store, group)
    out, t = _join(store, cfg)
    _until_key(store, f"{group}/{left}/join/0", t)
    # No FFN rank decides any more: every Attention rank finished and the FFN ranks stopped.
    ended_at = time.monotonic()
    store.compare_set(f"{group}/{left}/fate", "", "end")
    t.join(BOUND_S + 10)
    assert not t.is_alive()
    assert isinstance(out.get("error"), WorldEndedError), out
    assert time.monotonic() - ended_at < PROMPT_S, out["took"]
