"""The world id (docs/protocol.md §16): two worlds of one group on one store never read each other's keys; a signed
shutdown recorded in one world is refused in another; a group held by a live plane is refused by name. Ranks are
threads over the shm transport (the store handshake runs as between processes), FFN ranks serve with the real ops
through cam.serve_ffn, and every round is checked bit for bit against cam's ops in one process."""

import time
import uuid

import pytest
import torch
from torch.distributed import HashStore

import cam
import cam.world
from cam import convert
from cam.connector import AFDTransferContext, AFDTransferMetadata, AsyncAFDConnector, ConnectorConfig
from cam.integrations.plane import routed_local

from _connector_harness import ServingFFNRanks, init_connectors

pytestmark = pytest.mark.timeout(180)

TIMEOUT_S = 30.0
E, K, H, I, L, B = 8, 2, 64, 32, 2, 6
SECRET = b"w" * 32


def _layers():
    g = torch.Generator().manual_seed(3)
    return [convert.ExpertFFN(torch.randn(E, H, 2 * I, generator=g) / H ** 0.5,
                              torch.randn(E, I, H, generator=g) / I ** 0.5) for _ in range(L)]


class _Plane:
    """One plane (D = 1, F = 2) of group ``group`` on ``store``: FFN ranks serving on threads, the Attention
    rank's connector returned by start()."""

    def __init__(self, store, group, secret=None):
        self.topo = cam.Topology(D=1, P=1, F=2, E=E, K=K, H=H, Bmax=B, L=L)
        self.cfg = ConnectorConfig(topology=self.topo, timeout_s=TIMEOUT_S, idle_poll_s=0.01, group=group,
                                   shm_prefix=f"camw-{uuid.uuid4().hex[:8]}", secret=secret)
        self.layers = _layers()
        self.ffn = ServingFFNRanks(self.cfg, store, self.layers, timeout_s=TIMEOUT_S)
        self.store = store

    def start(self):
        self.ffn.start()
        conn = AsyncAFDConnector(0, "attention", self.cfg)
        init_connectors([conn], self.store, TIMEOUT_S)
        conn.wait_ffn_serving(TIMEOUT_S)
        return conn

    def round_is_exact(self, conn, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(B, H, generator=g).to(torch.bfloat16)
        ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(B)]).to(torch.int32)
        w = torch.rand(B, K, generator=g)
        conn.send_attn_output(x, AFDTransferContext(AFDTransferMetadata(layer_idx=1)), topk_ids=ids, topk_weights=w)
        out = conn.recv_ffn_output()
        w1, w2 = convert.layer_weights(self.layers)
        return torch.equal(out, routed_local(x, ids, w, w1, w2, 1))


def test_a_second_world_on_the_same_store_and_group_serves_its_own_rounds():
    # The first world finishes (its done keys stay in the store) and closes; a second world of the same group on
    # the same store is another world: its FFN ranks serve it instead of reading the first one's "attention
    # finished" and stopping before its first round.
    store, group = HashStore(), "w-second"
    first = _Plane(store, group)
    conn = first.start()
    try:
        assert first.round_is_exact(conn, 1)
        first_world = conn.world_id
        conn.finish()
        first.ffn.join()
    finally:
        conn.close()
    assert not first.ffn.errors and {r.reason for r in first.ffn.results.values()} == {"attention finished"}
    second = _Plane(store, group)
    conn = second.start()
    try:
        time.sleep(0.2)  # many idle polls: an FFN rank reading the first world's done keys has stopped by now
        assert second.ffn.results == {}, second.ffn.results
        assert conn.world_id != first_world and conn.world_id == cam.world.current(store, group)
        assert second.round_is_exact(conn, 2)
        conn.finish()
        second.ffn.join()
    finally:
        conn.close()
    assert not second.ffn.errors, second.ffn.errors
    assert {r.reason for r in second.ffn.results.values()} == {"attention finished"}


def test_a_signed_shutdown_replayed_into_another_world_is_refused():
    # A shutdown signed with the run secret in one world, recorded and written into the next world's key of the
    # same group (same secret, same store), is refused by name by every FFN rank of that world instead of stopping
    # it cleanly. Control: the first world's own shutdown stopped it.
    store, group = HashStore(), "w-replay"
    first = _Plane(store, group, SECRET)
    conn = first.start()
    try:
        conn.request_shutdown("operator stop")
        first.ffn.join()
        recorded = store.get(f"{group}/{conn.world_id}/serve/shutdown")
    finally:
        conn.close()
    assert not first.ffn.errors and {r.reason for r in first.ffn.results.values()} == {"operator stop"}
    second = _Plane(store, group, SECRET)
    conn = second.start()
    try:
        key = f"{group}/{conn.world_id}/serve/shutdown"
        store.set(key, recorded)
        second.ffn.join()
    finally:
        conn.close()
    assert second.ffn.results == {}, second.ffn.results
    assert len(second.ffn.errors) == 2, second.ffn.errors
    for err in second.ffn.errors.values():
        assert isinstance(err, PermissionError) and key in str(err), repr(err)


def test_a_shutdown_message_of_another_world_is_refused_by_its_world_field():
    from cam.serve.store import Shutdown

    message = Shutdown("operator stop", (), "aaaa").text()
    assert Shutdown.parse(message, "aaaa") == Shutdown("operator stop", (), "aaaa")
    with pytest.raises(PermissionError, match="shutdown message of world 'aaaa' read in world 'bbbb'"):
        Shutdown.parse(message, "bbbb")
    with pytest.raises(PermissionError, match="of world None read in world 'bbbb'"):
        Shutdown.parse("operator stop", "bbbb")  # a message without a world is no world's


@pytest.mark.parametrize("secret", [SECRET, b"x" * 32], ids=["same-secret", "other-secret"])
def test_a_group_in_use_by_a_live_plane_is_refused_by_name(secret):
    # A second plane's rank reusing the group of a live plane on its store is refused at once, naming the group and
    # saying it is in use, and writes nothing the live plane reads: the live plane serves on, exactly.
    store, group = HashStore(), "w-busy"
    live = _Plane(store, group, SECRET)
    conn = live.start()
    try:
        topo = live.topo
        start = time.monotonic()
        with pytest.raises(cam.world.GroupInUseError, match=f"group '{group}' is in use on this store"):
            intruder = AsyncAFDConnector(topo.A, "ffn", ConnectorConfig(
                topology=topo, timeout_s=TIMEOUT_S, group=group, secret=secret,
                shm_prefix=f"camw-{uuid.uuid4().hex[:8]}"))
            intruder.init_afd_connector(store)
        assert time.monotonic() - start < 5
        assert live.round_is_exact(conn, 4)
        conn.finish()
        live.ffn.join()
    finally:
        conn.close()
    assert not live.ffn.errors, live.ffn.errors
    # Control: once the live plane closed, the group is free again for a new world.
    again = _Plane(store, group, SECRET)
    conn = again.start()
    try:
        assert again.round_is_exact(conn, 5)
        conn.finish()
        again.ffn.join()
    finally:
        conn.close()
    assert not again.ffn.errors, again.ffn.errors


def test_a_world_whose_rank_failed_is_replaced_and_its_keys_never_read():
    # A world of the group whose handshake failed (a rank published its failure) is over: the next plane's ranks
    # agree on a fresh world instead of reading that failure as theirs.
    store, group = HashStore(), "w-failed"
    old = cam.world.join(store, group, 1, 3, 10)
    store.set(f"{group}/{old}/failed/1", "RuntimeError: an earlier attempt gave up")
    plane = _Plane(store, group)
    conn = plane.start()
    try:
        assert conn.world_id != old
        assert plane.round_is_exact(conn, 6)
        conn.finish()
        plane.ffn.join()
    finally:
        conn.close()
    assert not plane.ffn.errors, plane.ffn.errors


def test_a_rank_joining_with_another_topology_or_table_is_refused_by_name():
    # A running elastic world (threads over shm, its plane published by Attention rank 0); a joiner whose topology
    # differs in H, whose F is not the world's + 1, or whose table moves a running rank's replica is refused naming
    # it, before it writes a join request. Control: the right config is checked and asks (no FFN rank serves here,
    # so nobody answers: it times out, its request written).
    import dataclasses

    from cam.placement import Placement

    store, group = HashStore(), "w-join"
    table = Placement.balanced(E, 2, L, replicate=range(E))
    topo = cam.Topology(D=1, P=1, F=2, E=E, K=K, H=H, Bmax=B, L=L, expert_slots=table.slots_per_rank)
    cfg = ConnectorConfig(topology=topo, timeout_s=TIMEOUT_S, idle_poll_s=0.01, group=group, placement=table,
                          shm_prefix=f"camw-{uuid.uuid4().hex[:8]}", elastic=True)
    conns = [AsyncAFDConnector(r, "attention" if r < topo.A else "ffn", cfg) for r in range(topo.world_size)]
    init_connectors(conns, store, TIMEOUT_S)
    try:
        held = [table.slot_experts(layer, 0) for layer in range(L)]
        good = dataclasses.replace(cfg, topology=dataclasses.replace(topo, F=3), placement=table.with_rank(held))
        wid = conns[0].world_id
        for bad, needle in (
                (dataclasses.replace(good, topology=dataclasses.replace(good.topology, H=2 * H)),
                 f"a different topology: H={2 * H} \\(the world's H={H}\\)"),
                (dataclasses.replace(good, topology=dataclasses.replace(topo, F=4),
                                     placement=table.with_rank(held).with_rank(held)),
                 "a different topology: F=4 \\(a joiner has the world's F=2 \\+ 1\\)"),
                (dataclasses.replace(good, placement=Placement.balanced(E, 3, L, replicate=range(E),
                                                                        slots_per_rank=table.slots_per_rank)),
                 "its table moves replicas of the running ranks")):
            joiner = AsyncAFDConnector(bad.topology.world_size - 1, "ffn", bad)
            with pytest.raises(ValueError, match=f"cannot join world {wid}: {needle}"):
                joiner.join_running(store, timeout_s=5)
            assert not store.check([f"{group}/{wid}/join/0"])
        joiner = AsyncAFDConnector(good.topology.world_size - 1, "ffn", good)
        with pytest.raises(TimeoutError, match=f"no FFN rank of world {wid} answered the join"):
            joiner.join_running(store, timeout_s=0.5)
        assert store.check([f"{group}/{wid}/join/0"])
    finally:
        for conn in conns:
            conn.close()
