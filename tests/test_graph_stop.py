"""The FFN iteration the AFD plugin's runner calls per layer (cam.integrations.afd_plugin.FFNGraphLoop), captured
once and replayed, and its stop word (docs/graph.md, "Stopping a captured loop"): each busy replay's W2 output
equals the eager ops on what it received, bit for bit; a stop ends a replay loop whose receive waits a 30 s idle
bound within seconds (the kernel reads the word: without that read the replay in flight waits the whole bound and
the test fails); a second stop is a no-op; a stop word that is not the Comm's is refused by name before anything is
launched; receives launched without the word (the eager default) ignore it."""

import os
import sys
import threading
import time

import pytest
import torch

import cam
from cam.connector import expert_weights, ffn_compute
from cam.connector import ffn_work_item as _work_item
from cam.integrations.afd_plugin import FFNGraphLoop
from cam.models import PRESETS, MoEModel

sys.path.insert(0, os.path.dirname(__file__))
from _dataplane_harness import raise_first, run_ranks  # noqa: E402
from _window_layout import WindowLayout  # noqa: E402

KIND, ROWS = 0, 5  # work item words (docs/protocol.md §4.2): kind (0 = empty), rows
IDLE_S = 30.0  # the FFN rank's idle bound in the stop tests: far beyond the bound a stop must meet
STOP_BOUND_S = 5.0


@pytest.fixture(scope="module")
def model():
    return MoEModel(PRESETS["tiny"])


def _topology(model):
    c = model.config
    return cam.Topology(D=1, P=1, F=1, E=c.num_experts, K=c.top_k, H=c.hidden, Bmax=8, L=len(c.moe_layers))


def _round(topo, seed, b=5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, topo.H, generator=g).to(torch.bfloat16)
    ids = torch.argsort(torch.rand(b, topo.E, generator=g), dim=1)[:, :topo.K].to(torch.int32).contiguous()
    w = torch.softmax(torch.randn(b, topo.K, generator=g), -1)
    return seed % topo.L, x, ids, w


def _captured(loop):
    g = cam.Graph()
    with g.capture(stream=loop.comm.stream, mode="thread_local"):
        loop.iteration()
    return g


def test_captured_iteration_replays_equal_eager(model):
    topo = _topology(model)
    w1, w2 = expert_weights(model, topo, 0)
    rounds = [_round(topo, s, b) for s, b in enumerate((5, 1, 8, 3, 0, 7, 2, 6))]
    ready = threading.Event()

    def attention(comm):
        assert ready.wait(60)
        for r, (layer, x, ids, w) in enumerate(rounds):
            if r % 3 == 0:
                time.sleep(3 * comm.idle_poll_s)  # the FFN loop idles meanwhile: empty items flow through
            cam.ops.dispatch_send(comm, x, ids, layer)
            cam.ops.combine_recv(comm, ids, w)

    def ffn(comm):
        loop = FFNGraphLoop(comm, w1, w2)
        g = _captured(loop)
        ready.set()
        busy = idle = 0
        while busy < len(rounds):
            for t in (*loop.recv, loop.y, loop.y_scale, loop.out):
                t.view(torch.uint8).fill_(0xFF)  # a replay that writes nothing cannot pass
            g.replay()
            item = loop.item.work_item
            if int(item[KIND]) == 0:
                idle += 1
                assert int(loop.item.group_list.sum()) == 0
                continue
            busy += 1
            rows = int(item[ROWS])
            eager = ffn_compute(_work_item(*(t.clone() for t in loop.recv)), w1, w2)
            assert torch.equal(loop.out[:rows].view(torch.uint8), eager[:rows].view(torch.uint8)), busy
        g.reset()
        return busy, idle

    results, errors = run_ranks(topo, {0: attention, 1: ffn}, timeout=300, timeout_s=30.0, idle_poll_s=0.05)
    raise_first(errors)
    busy, idle = results[1]
    assert busy == len(rounds) and idle > 0, results[1]


def _stop_run(model, stop_kernel_check=True):
    """An FFN loop replaying with a 30 s idle bound: it serves two rounds, then idles in a replay; the stop must end
    the loop well within the bound. Returns (seconds from stop to the loop's end, replays, stop results)."""
    topo = _topology(model)
    w1, w2 = expert_weights(model, topo, 0)
    served = threading.Event()

    def attention(comm):
        for s in range(2):
            layer, x, ids, w = _round(topo, s)
            cam.ops.dispatch_send(comm, x, ids, layer)
            cam.ops.combine_recv(comm, ids, w)
        served.set()

    def ffn(comm):
        loop = FFNGraphLoop(comm, w1, w2)
        g = _captured(loop)
        out = {}
        runner = threading.Thread(target=lambda: out.setdefault("n", loop.run(g.replay)), daemon=True)
        runner.start()
        assert served.wait(120), "the rounds were not served"
        time.sleep(1.0)  # the loop is now inside a replay's idle wait
        t0 = time.monotonic()
        first = loop.stop()
        runner.join(STOP_BOUND_S)
        took = time.monotonic() - t0
        ended = not runner.is_alive()
        again = loop.stop()  # a stop of a stopped loop
        word = int(cam.ops.dispatch_recv_stop_word(comm)[0])
        if not ended:
            comm.abort()  # end the replay still waiting, so the plane closes
            runner.join(60)
        else:
            g.reset()
        return took, ended, out.get("n"), first, again, word

    rank_kw = {1: {"idle_poll_s": IDLE_S}}
    results, errors = run_ranks(topo, {0: attention, 1: ffn}, timeout=300, timeout_s=60.0, idle_poll_s=0.05,
                                rank_kw=rank_kw)
    if 1 in results and not results[1][1]:
        return results[1]
    raise_first(errors)
    return results[1]


def test_stop_ends_the_replay_loop_within_a_bound_and_a_second_stop_is_a_no_op(model):
    took, ended, replays, first, again, word = _stop_run(model)
    assert ended, f"the replay loop did not end within {STOP_BOUND_S} s of the stop (idle bound {IDLE_S} s)"
    assert took < STOP_BOUND_S and replays >= 2, (took, replays)
    assert first is True and again is False  # the second stop changed nothing
    assert word == 1, word


def test_stop_word_lives_in_the_window_where_the_layout_says(model):
    topo = _topology(model)
    lay = WindowLayout(topo)

    def ffn(comm):
        word = cam.ops.dispatch_recv_stop_word(comm)
        off = word.data_ptr() - comm.window.data_ptr()
        assert cam.ops.dispatch_recv_stop(comm) is True
        raw = comm.window[lay.ffn_stop_off:lay.ffn_stop_off + 8].clone()
        assert cam.ops.dispatch_recv_resume(comm) is True and cam.ops.dispatch_recv_resume(comm) is False
        return off, raw

    results, errors = run_ranks(topo, {1: ffn}, timeout=120, timeout_s=10.0, idle_poll_s=0.05)
    raise_first(errors)
    off, raw = results[1]
    # Independent of the C layout: the weights-epoch line's second word, int32 1 then four zero bytes.
    assert off == lay.ffn_weights_epoch_off + 8 == lay.ffn_stop_off
    assert raw.tolist() == [1, 0, 0, 0, 0, 0, 0, 0], raw


def test_stop_word_that_is_not_the_comms_is_refused_before_anything_runs(model):
    topo = _topology(model)
    sent = threading.Event()
    other = cam.Topology(D=1, P=1, F=1, E=topo.E, K=topo.K, H=topo.H, Bmax=8, L=topo.L)
    words = {}

    def attention(comm):
        layer, x, ids, w = _round(topo, 3)
        with pytest.raises(ValueError, match="stop word is an FFN rank's"):
            cam.ops.dispatch_recv_stop(comm)
        cam.ops.dispatch_send(comm, x, ids, layer)
        sent.set()
        return cam.ops.combine_recv(comm, ids, w)

    def ffn(comm):
        assert sent.wait(60)
        refusals = []
        own = cam.ops.dispatch_recv_stop_word(comm)
        candidates = {
            "a tensor of the caller's": torch.zeros(1, dtype=torch.int32),
            "another Comm's stop word": words["other"],
            "another word of the window": comm.window[:4].view(torch.int32),
        }
        for what, word in candidates.items():
            with pytest.raises(cam.InvalidArgumentError) as info:
                cam.ops.dispatch_recv(comm, stop=word)
            refusals.append((what, str(info.value)))
        with pytest.raises(ValueError, match="stop must be an int32 tensor of one element"):
            cam.ops.dispatch_recv(comm, stop=torch.zeros(1, dtype=torch.int64))
        with pytest.raises(TypeError, match="stop must be None, True"):
            cam.ops.dispatch_recv(comm, stop=own.data_ptr())
        # Nothing ran: the round sent before the refusals is still there for the next receive.
        for _ in range(200):
            _, _, _, item = cam.ops.dispatch_recv(comm, stop=own)
            if int(item[KIND]):
                break
        else:
            raise AssertionError("the round was lost")
        cam.ops.combine_send(comm, torch.zeros(topo.recv_rows, topo.H, dtype=torch.bfloat16), item)
        return refusals

    other_ready, finished = threading.Event(), threading.Event()

    def other_ffn(comm):  # a second plane, alive for the whole test: its window's addresses stay its own
        words["other"] = cam.ops.dispatch_recv_stop_word(comm)
        other_ready.set()
        assert finished.wait(120)

    other_plane = threading.Thread(target=run_ranks, args=(other, {1: other_ffn}), daemon=True,
                                   kwargs=dict(timeout=150, timeout_s=10.0, idle_poll_s=0.05))
    other_plane.start()
    assert other_ready.wait(60)
    try:
        results, errors = run_ranks(topo, {0: attention, 1: ffn}, timeout=120, timeout_s=20.0, idle_poll_s=0.05)
    finally:
        finished.set()
        other_plane.join(60)
    raise_first(errors)
    refusals = dict(results[1])
    assert "stop_word lies outside the Comm's buffers" in refusals["a tensor of the caller's"], refusals
    assert "stop_word lies outside the Comm's buffers" in refusals["another Comm's stop word"], refusals
    assert "not its stop word" in refusals["another word of the window"], refusals
    for text in refusals.values():
        assert text.startswith("dispatch_recv: ") and "aclnnCamDispatchRecvStopWord" in text, text


def test_a_set_stop_word_empties_only_the_receives_given_it(model):
    topo = _topology(model)
    sent = threading.Event()

    def attention(comm):
        layer, x, ids, w = _round(topo, 5)
        cam.ops.dispatch_send(comm, x, ids, layer)
        sent.set()
        return cam.ops.combine_recv(comm, ids, w)

    def ffn(comm):
        assert sent.wait(60)
        assert cam.ops.dispatch_recv_stop(comm) is True
        t0 = time.monotonic()
        _, _, counts, item = cam.ops.dispatch_recv(comm, stop=True)  # a round is ready, but the loop is stopped
        took = time.monotonic() - t0
        assert int(item[KIND]) == 0 and int(counts.sum()) == 0 and took < IDLE_S / 3, took
        t0 = time.monotonic()  # the batched mode polls the same way
        _, _, table, _, items = cam.ops.dispatch_recv(comm, row_budget=topo.recv_rows, stop=True)
        assert int(items[:, KIND].sum()) == 0 and int(table[:, 2].sum()) == 0 and time.monotonic() - t0 < IDLE_S / 3
        _, _, _, item = cam.ops.dispatch_recv(comm)  # without the word (the default): the round
        assert int(item[KIND]) == 1
        cam.ops.combine_send(comm, torch.zeros(topo.recv_rows, topo.H, dtype=torch.bfloat16), item)
        return took

    results, errors = run_ranks(topo, {0: attention, 1: ffn}, timeout=120, timeout_s=60.0, idle_poll_s=0.05,
                                rank_kw={1: {"idle_poll_s": IDLE_S}})
    raise_first(errors)
