"""The FFN loop captured: dispatch_recv → W1 → W2 → combine_send recorded once on the Comm's
stream and replayed, with every static buffer poisoned (0xFF) before every replay so a replay that writes nothing
cannot pass; idle replays (empty work items) between busy ones; the Attention side's results equal those of the
eager loop bit for bit."""

import os
import sys
import threading
import time

import pytest
import torch

import cam
from cam.connector import CapturedFFN, expert_weights, ffn_compute, ffn_iteration
from cam.connector import ffn_work_item as _work_item
from cam.models import PRESETS, MoEModel

sys.path.insert(0, os.path.dirname(__file__))
from _dataplane_harness import raise_first, run_ranks  # noqa: E402
from _window_layout import WindowLayout  # noqa: E402

ROUNDS = 120  # with the idle replays between them: hundreds of replays against the eager loop
KIND, ROWS = 0, 5  # work item words (docs/protocol.md §4.2): kind (0 = empty), rows


@pytest.fixture(scope="module")
def model():
    return MoEModel(PRESETS["tiny"])


def _topology(model, capacity=None):
    c = model.config
    return cam.Topology(D=1, P=1, F=1, E=c.num_experts, K=c.top_k, H=c.hidden, Bmax=16, L=len(c.moe_layers),
                        slots=2, capacity=capacity)


def _round_done(topo, wi):
    """A busy item that is its round's last chunk (docs/protocol.md §4.2 chunk words)."""
    chunk = WindowLayout(topo).work_item_chunk_off
    return int(wi[KIND]) == 1 and int(wi[chunk]) + int(wi[ROWS]) == int(wi[chunk + 1])


def _rounds(topo, model, n_rounds=ROUNDS):
    g = torch.Generator().manual_seed(11)
    rounds = []
    for r in range(n_rounds):
        b = (0, 1, 5, 16)[r % 4] if r % 7 else 3  # includes rounds with no tokens: legal, and still a work item
        x = torch.randn(b, topo.H, generator=g).to(torch.bfloat16)
        ids = torch.argsort(torch.rand(b, topo.E, generator=g), dim=1)[:, :topo.K].to(torch.int32).contiguous()
        if b:
            ids[0, -1] = -1  # an empty slot
        w = torch.softmax(torch.randn(b, topo.K, generator=g), -1)
        rounds.append((r % topo.L, x, ids, w))
    return rounds


def _attention(rounds, ready):
    def body(comm):
        assert ready.wait(120), "the FFN rank never became ready"
        outs = []
        for r, (layer, x, ids, w) in enumerate(rounds):
            if r % 5 == 0:
                time.sleep(5 * comm.idle_poll_s)  # nothing ready for a while: the FFN loop idles (empty items)
            cam.ops.dispatch_send(comm, x, ids, layer)
            outs.append(cam.ops.combine_recv(comm, ids, w))
        return outs

    return body


def _poison(*tensors):
    for t in tensors:
        t.view(torch.uint8).fill_(0xFF)


def _run(model, graph: bool, capacity=None, n_rounds=ROUNDS):
    """Serves n_rounds rounds (a chunked round counts once, at its last chunk); returns the Attention outputs and
    the FFN rank's (busy items, idle items, rounds)."""
    topo = _topology(model, capacity)
    rounds = _rounds(topo, model, n_rounds)
    ready = threading.Event()

    def ffn(comm):
        w1, w2 = expert_weights(model, topo, comm.rank - topo.A)
        busy = idle = done = 0
        end = time.monotonic() + 240
        if not graph:
            ready.set()
            while done < n_rounds:
                assert time.monotonic() < end, f"eager FFN loop served {done}/{n_rounds} rounds"
                wi = ffn_iteration(comm, w1, w2)
                busy, idle = (busy + 1, idle) if int(wi[KIND]) else (busy, idle + 1)
                done += _round_done(topo, wi)
            return busy, idle, done
        cap = CapturedFFN(comm, w1, w2)
        try:
            ready.set()
            while done < n_rounds:
                assert time.monotonic() < end, f"replayed FFN loop served {done}/{n_rounds} rounds"
                _poison(*cap.recv, cap.y, cap.y_scale, cap.out)
                cap.step(1)
                wi = cap.recv[3]
                assert not (wi.view(torch.uint8) == 0xFF).all(), "the replay wrote no work item"
                if int(wi[KIND]) == 0:
                    idle += 1
                    assert int(wi[ROWS]) == 0
                    assert (cap.out.view(torch.uint8) == 0xFF).all(), "an idle replay wrote W2 output"
                    continue
                busy += 1
                done += _round_done(topo, wi)
                # The replayed W1/W2 equal the eager ops on what the replay received, bit for bit.
                n = int(wi[ROWS])
                want = ffn_compute(_work_item(*[t.clone() for t in cap.recv]), w1, w2)
                assert torch.equal(cap.out[:n].view(torch.int16), want[:n].view(torch.int16)), f"item {busy}: W2"
        finally:
            cap.close()
        return busy, idle, done

    results, errors = run_ranks(topo, {0: _attention(rounds, ready), 1: ffn}, timeout=300, timeout_s=60.0,
                                idle_poll_s=0.01)
    raise_first(errors)
    return results


@pytest.mark.e2e
def test_captured_ffn_loop_equals_the_eager_loop_bit_for_bit(model):
    eager = _run(model, graph=False)
    replayed = _run(model, graph=True)
    busy, idle, done = replayed[1]
    assert busy == done == ROUNDS and idle > 0, (busy, idle)  # idle replays ran between busy ones
    assert eager[1][0] == ROUNDS
    assert len(eager[0]) == len(replayed[0]) == ROUNDS
    for r, (a, b) in enumerate(zip(eager[0], replayed[0])):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16)), f"round {r}: replayed result differs from eager"


@pytest.mark.e2e
def test_captured_ffn_loop_serves_chunked_rounds_like_the_eager_loop(model):
    """capacity = 5 rows: most rounds are several work items (docs/protocol.md §8). The chunk cursor lives in the
    window, so the same captured graph serves every chunk, and the Attention results equal the eager loop's and the
    unchunked eager loop's bit for bit."""
    n = 24
    unchunked = _run(model, graph=False, n_rounds=n)
    eager = _run(model, graph=False, capacity=5, n_rounds=n)
    replayed = _run(model, graph=True, capacity=5, n_rounds=n)
    assert eager[1][2] == replayed[1][2] == n
    assert replayed[1][0] == eager[1][0] > 2 * n, (eager[1], replayed[1])  # the rounds really were chunked
    for r in range(n):
        for other in (eager, unchunked):
            assert torch.equal(replayed[0][r].view(torch.int16), other[0][r].view(torch.int16)), f"round {r}"


@pytest.mark.e2e
def test_connector_graph_mode_serves_rounds_and_closes_with_a_live_graph(model):
    """AsyncAFDConnector.capture_ffn / ffn_graph_step: the replayed FFN side serves the Attention side's rounds
    (results equal the eager ops on the same items, checked above; here against the model's routed golden), the
    loop stops by an Event (no device read), and close() succeeds with the graph still alive, ending it."""
    from test_connector import make_world

    from cam.connector import AFDTransferContext, AFDTransferMetadata

    topo, (attn, ffn) = make_world(model, D=1, F=1, group="graph-loop")
    w1, w2 = expert_weights(model, topo, 0)
    captured = ffn.capture_ffn(w1, w2)
    stop, errors, outs = threading.Event(), [], []
    g = torch.Generator().manual_seed(3)
    c = model.config
    inputs = []
    for layer in range(topo.L):
        h = torch.randn(6, c.hidden, generator=g).to(torch.bfloat16)
        ids = torch.argsort(torch.rand(6, c.num_experts, generator=g), dim=1)[:, :c.top_k].to(torch.int32)
        inputs.append((layer, h, ids.contiguous(), torch.softmax(torch.randn(6, c.top_k, generator=g), -1)))

    def serve():
        try:
            end = time.monotonic() + 120
            while not stop.is_set():
                assert time.monotonic() < end
                ffn.ffn_graph_step(captured, items=2)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=serve)
    t.start()
    try:
        for layer, h, ids, w in inputs:
            attn.send_attn_output(h, AFDTransferContext(AFDTransferMetadata(layer)), topk_ids=ids, topk_weights=w)
            outs.append(attn.recv_ffn_output())
    finally:
        stop.set()
        t.join(120)
    assert not t.is_alive() and not errors, errors
    for (layer, h, ids, w), got in zip(inputs, outs):
        want = model.routed_reference(layer, h, ids, w)
        scale = max([1.0] + want.abs().flatten().tolist())  # one int8 level of W1's exp (docs/gmm.md)
        torch.testing.assert_close(got.float(), want.float(), atol=2e-2 * scale, rtol=0)
    ffn.close()  # the live graph holds the Comm busy: closing ends it first
    attn.close()
    with pytest.raises(cam.GraphInvalidError, match="which was closed"):
        captured.step()


def test_replayed_ffn_loop_reads_the_host_per_synchronize_not_per_item(model):
    """Idle replays (nothing dispatched): the host activity of one synchronize after n replays does not grow with n
    (0 reads, 0 host tasks per item), and every replay ran (its empty work item overwrote the poison)."""
    topo = _topology(model)
    from cam import _C

    def ffn(comm):
        w1, w2 = expert_weights(model, topo, 0)
        cap = CapturedFFN(comm, w1, w2)
        try:
            deltas = {}
            for n in (2, 12):
                _poison(*cap.recv)
                before = _C.host_activity()
                cap.step(n)
                after = _C.host_activity()
                assert int(cap.recv[3][KIND]) == 0 and int(cap.recv[3][1]) == -1, "the replays wrote no empty item"
                deltas[n] = {k: after[k] - before[k] for k in before}
            return deltas
        finally:
            cap.close()

    results, errors = run_ranks(topo, {1: ffn}, timeout=120, timeout_s=60.0, idle_poll_s=0.01)
    raise_first(errors)
    small, big = results[1][2], results[1][12]
    assert big["graph_launches"] - small["graph_launches"] == 10
    for key in ("synchronizes", "device_reads", "host_tasks", "host_to_device_copies"):
        assert big[key] == small[key], (key, small, big)  # per synchronize, not per item
    assert big["host_tasks"] == 0 and big["host_to_device_copies"] == 0
