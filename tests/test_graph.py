"""cam.Graph and the C capture API (cam/cam_graph.h, docs/graph.md) on the twin: a captured W1 -> W2 chain replays
bit for bit like eager calls, with every output poisoned before each replay so a replay that writes nothing cannot
pass; idle items (all counts zero) between busy ones; every capture rule; graph lifetime; no torch.ops.cam dispatch
during a replay; a bad layer index met during a replay fails the synchronize with the eager sentence."""

import threading

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import cam
from cam import _C, _runtime
from cam.graph import capture_status

pytestmark = pytest.mark.timeout(300)

M, K, I, H, E, L = 48, 64, 32, 48, 3, 2  # rows (capacity), hidden, intermediate, W2 out, local experts, layers


def _weights(g, n, k):
    ws = [torch.randint(-128, 128, (E, k, n), generator=g, dtype=torch.int8) for _ in range(L)]
    ss = [(torch.rand(E, n, generator=g) * 1e-2 + 1e-3).float() for _ in range(L)]
    return cam.LayerWeights(ws, ss)


@pytest.fixture(scope="module")
def ffn():
    g = torch.Generator().manual_seed(14)
    return _weights(g, 2 * I, K), _weights(g, H, I)


def _poison(*ts):
    for t in ts:
        t.view(torch.uint8).fill_(0xFF)


def _outputs():
    y = torch.empty(M, I, dtype=torch.int8)
    ys = torch.empty(M, dtype=torch.float32)
    out = torch.empty(M, H, dtype=torch.bfloat16)
    _poison(y, ys, out)
    return y, ys, out


def _chain(w1, w2, x, xs, gl, li, y, ys, out):
    cam.ops.gmm_swiglu_quant_multi_layer(x, xs, w1, gl, li, 1, out=(y, ys))
    cam.ops.gmm_multi_layer(y, ys, w2, gl, li, 1, out=out)


def _item(g, busy):
    x = torch.randint(-128, 128, (M, K), generator=g, dtype=torch.int8)
    xs = (torch.rand(M, generator=g) * 1e-2 + 1e-3).float()
    if busy:
        cut = torch.sort(torch.randint(0, M + 1, (E - 1,), generator=g)).values.tolist()
        counts = [b - a for a, b in zip([0] + cut, cut + [M])]
        counts[int(torch.randint(0, E, (1,), generator=g))] -= int(torch.randint(0, M // 4, (1,), generator=g))
        counts = [max(c, 0) for c in counts]
    else:
        counts = [0] * E
    layer = int(torch.randint(0, L, (1,), generator=g))
    return x, xs, torch.tensor(counts, dtype=torch.int64), torch.tensor([layer], dtype=torch.int64)


class _CountCamOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "cam":
            self.count += 1
        return func(*args, **(kwargs or {}))


def _captured(ffn, stream=None, mode="global"):
    """Static inputs/outputs and a graph of the chain over them (after one eager warm-up call)."""
    w1, w2 = ffn
    g = torch.Generator().manual_seed(1)
    static = list(_item(g, True))
    outs = _outputs()
    _chain(w1, w2, *static, *outs)  # warm-up: builds the persistent address tables outside the capture
    graph = cam.Graph()
    with graph.capture(stream=stream, mode=mode):
        _chain(w1, w2, *static, *outs)
    return graph, static, outs


def test_replay_equals_eager_bit_for_bit_over_hundreds_of_replays(ffn):
    w1, w2 = ffn
    graph, (x, xs, gl, li), (y, ys, out) = _captured(ffn)
    g = torch.Generator().manual_seed(2)
    idle = busy = 0
    for i in range(240):
        item = _item(g, busy=i % 5 != 3)  # every fifth item is empty: the replayed loop idles through it
        for static, value in zip((x, xs, gl, li), item):
            static.copy_(value)
        _poison(y, ys, out)
        graph.replay()
        want = _outputs()
        _chain(w1, w2, *item, *want)
        for got, exp, name in zip((y, ys, out), want, ("y", "y_scale", "out")):
            assert torch.equal(got.view(torch.uint8), exp.view(torch.uint8)), f"replay {i}: {name} differs"
        rows = int(item[2].sum())
        if rows == 0:
            idle += 1
            assert (out.view(torch.uint8) == 0xFF).all(), "an idle replay wrote output rows"
        else:
            busy += 1
            # Rows the item covers were written (the poison pattern is not a valid y_scale: NaN).
            assert not torch.isnan(ys[:rows]).any()
    assert idle >= 40 and busy >= 150
    graph.reset()


def test_replay_dispatches_no_cam_op(ffn):
    w1, w2 = ffn
    graph, static, outs = _captured(ffn)
    with _CountCamOps() as eager:  # control: the counter does see eager calls
        _chain(w1, w2, *static, *outs)
    assert eager.count == 2
    with _CountCamOps() as replay:
        for _ in range(5):
            graph.replay()
    assert replay.count == 0
    graph.reset()


def test_ops_inside_a_capture_are_recorded_not_run(ffn):
    w1, w2 = ffn
    g = torch.Generator().manual_seed(3)
    static = _item(g, True)
    outs = _outputs()
    _chain(w1, w2, *static, *_outputs())
    graph = cam.Graph()
    with graph.capture():
        _chain(w1, w2, *static, *outs)
        status, ops = capture_status()
        assert status == "active" and ops == 2  # W1 and W2 (W8A8) are one mixed kernel each
    assert capture_status() == ("none", 0)
    assert (outs[2].view(torch.uint8) == 0xFF).all(), "a captured op ran during the capture"
    graph.replay()
    assert not (outs[2].view(torch.uint8) == 0xFF).all()
    graph.reset()


def test_bad_layer_index_in_a_replay_fails_the_synchronize_like_eager(ffn):
    w1, w2 = ffn
    graph, (x, xs, gl, li), (y, ys, out) = _captured(ffn)
    li.fill_(7)
    with pytest.raises(cam.DeviceArgumentError) as eager:
        _chain(w1, w2, x, xs, gl, li, *_outputs())
    _poison(out)
    with pytest.raises(cam.DeviceArgumentError) as replayed:
        graph.replay()
    assert str(replayed.value) == str(eager.value)
    assert "layer_index 7 outside [0, 2)" in str(replayed.value)
    assert (out.view(torch.uint8) == 0xFF).all(), "the refused replay wrote output"
    # Several replays, one synchronize: the record is read once and reports the error once.
    for _ in range(3):
        graph.replay(synchronize=False)
    with pytest.raises(cam.DeviceArgumentError):
        graph.synchronize()
    # Reported records are cleared: a good item replays cleanly again.
    li.fill_(1)
    graph.replay()
    want = _outputs()
    _chain(w1, w2, x, xs, gl, li, *want)
    assert torch.equal(out.view(torch.uint8), want[2].view(torch.uint8))
    graph.reset()


def _expect_invalidated(graph, body, what):
    with pytest.raises(cam.CaptureInvalidatedError) as ended:
        with graph.capture():
            with pytest.raises(cam.CaptureInvalidatedError, match=what):
                body()
            assert capture_status()[0] == "invalidated"
    assert what in str(ended.value) and "no graph was made" in str(ended.value)
    assert capture_status() == ("none", 0)
    with pytest.raises(cam.GraphInvalidError):
        graph.replay()


def test_synchronize_inside_a_capture_invalidates_it():
    s = _runtime.default_stream()
    _expect_invalidated(cam.Graph(), lambda: s.synchronize(10.0), "a synchronize of the capturing stream")


def test_global_capture_refuses_a_synchronize_of_any_stream():
    other = _C.Stream()
    _expect_invalidated(cam.Graph(), lambda: other.synchronize(10.0), "during a GLOBAL capture")
    other.close()


def test_capture_modes_limit_what_breaks_them(ffn):
    other = _C.Stream()
    # RELAXED: another stream may synchronize, on this thread too (control for the GLOBAL case above).
    graph = cam.Graph()
    with graph.capture(mode="relaxed"):
        other.synchronize(10.0)
    graph.reset()
    # THREAD_LOCAL: another thread may synchronize; this thread may not.
    graph = cam.Graph()
    errors = []
    with pytest.raises(cam.CaptureInvalidatedError, match="THREAD_LOCAL"):
        with graph.capture(mode="thread_local"):
            t = threading.Thread(target=lambda: _catch(errors, other.synchronize, 10.0))
            t.start()
            t.join(30)
            assert not t.is_alive() and errors == [None]
            assert capture_status()[0] == "active"
            other.synchronize(10.0)
    other.close()


def _catch(errors, fn, *args):
    try:
        fn(*args)
        errors.append(None)
    except Exception as e:  # noqa: BLE001 - reported to the test thread
        errors.append(e)


def test_workspace_not_graph_owned_invalidates_the_capture(ffn):
    w1, w2 = ffn
    g = torch.Generator().manual_seed(4)
    x, xs, gl, li = _item(g, True)
    y, ys, out = _outputs()
    keep = []

    def private(nbytes):
        ws = torch.empty(nbytes, dtype=torch.uint8)
        keep.append(ws)
        return (ws.data_ptr(), [nbytes], [1], 4)

    from cam._tensor import desc as descriptor  # the descriptors cam.ops build

    def call():
        _C.gmm_multi_layer(descriptor(y), descriptor(ys), [descriptor(w) for w in w2.weights],
                           [descriptor(s) for s in w2.scales], descriptor(gl), descriptor(li), 1, descriptor(out),
                           None, None, _runtime.default_stream(), private)  # out_scale, weight_colsums

    _expect_invalidated(cam.Graph(), call, "not graph-owned")
    assert (out.view(torch.uint8) == 0xFF).all()


def test_graph_lifetime_errors(ffn):
    graph, _, _ = _captured(ffn)
    handle = graph._handle
    with pytest.raises(RuntimeError, match="reset"):
        with graph.capture():
            pass
    graph.invalidate("its communicator was closed")
    with pytest.raises(cam.GraphInvalidError, match="its communicator was closed"):
        graph.replay()
    graph.reset()
    with pytest.raises(cam.GraphInvalidError, match="reset or destroyed"):
        graph.replay()
    with pytest.raises(cam.GraphInvalidError, match="not live"):
        _C.graph_launch(handle, _runtime.default_stream())  # a stale handle is refused, never dereferenced
    with pytest.raises(cam.GraphInvalidError):
        _C.graph_destroy(handle)
    with pytest.raises(cam.GraphInvalidError, match="holds no capture"):
        cam.Graph().replay()
    with pytest.raises(ValueError, match="mode"):
        with cam.Graph().capture(mode="eager"):
            pass


def test_destroy_with_replays_queued_frees_nothing_under_them(ffn):
    w1, w2 = ffn
    graph, static, (y, ys, out) = _captured(ffn)
    want = _outputs()
    _chain(w1, w2, *static, *want)
    _poison(out)
    s = _runtime.default_stream()
    for _ in range(20):
        graph.replay(synchronize=False)
    graph.reset()  # the pool must outlive the queued replays
    s.synchronize(60.0)
    assert torch.equal(out.view(torch.uint8), want[2].view(torch.uint8))


def test_capture_end_without_begin_and_nested_captures_are_refused():
    s = _C.Stream()
    with pytest.raises(cam.InvalidArgumentError, match="does not capture"):
        _C.capture_end(s)
    _C.capture_begin(s, 0)
    with pytest.raises(cam.InvalidArgumentError, match="already captures"):
        _C.capture_begin(s, 0)
    handle = _C.capture_end(s)
    assert handle != 0
    _C.graph_destroy(handle)
    s.close()


def test_replays_do_no_host_read_or_synchronize_per_item(ffn):
    graph, static, outs = _captured(ffn)
    before = _C.host_activity()
    for _ in range(10):
        graph.replay(synchronize=False)
    middle = _C.host_activity()
    graph.synchronize()
    after = _C.host_activity()
    assert middle["graph_launches"] - before["graph_launches"] == 10
    for key in ("synchronizes", "device_reads", "host_to_device_copies", "host_tasks"):
        assert middle[key] == before[key], key
    # The synchronize reads each captured op's status record once, however many replays ran.
    assert after["synchronizes"] - middle["synchronizes"] == 1
    assert after["device_reads"] - middle["device_reads"] == 2
    # Control: eager calls do synchronize and read back per op.
    w1, w2 = ffn
    before = _C.host_activity()
    _chain(w1, w2, *static, *outs)
    after = _C.host_activity()
    assert after["synchronizes"] - before["synchronizes"] == 2
    assert after["device_reads"] - before["device_reads"] == 2
    assert after["host_to_device_copies"] == before["host_to_device_copies"]  # the address table is persistent
    graph.reset()


def test_bench_ffn_loop_runs(tmp_path, capsys):
    import json

    from cam.bench import main

    path = tmp_path / "ffn.json"
    assert main(["ffn-loop", "--rows", "16", "--items", "8", "--batch", "4", "--rounds", "1", "--json",
                 str(path)]) == 0
    doc = json.loads(path.read_text())
    r = doc["results"][0]
    assert r["replay_activity_per_item"]["synchronizes"] == 0.25
    assert r["eager_activity_per_item"]["synchronizes"] == 2
    assert "eager/replay" in capsys.readouterr().out


def test_bench_ffn_loop_plane_runs(tmp_path, capsys):
    """The whole FFN iteration on an in-process plane: every round the Attention thread dispatched came back in both
    modes, and replay costs the FFN thread less host CPU per item than eager (by a wide margin: eager synchronizes
    four ops per item, replay one batch)."""
    import json

    from cam.bench import main

    path = tmp_path / "ffn-plane.json"
    assert main(["ffn-loop", "--plane", "--rows", "16", "--items", "8", "--batch", "4", "--rounds", "1", "--json",
                 str(path)]) == 0
    r = json.loads(path.read_text())["results"][0]
    assert r["eager_iterations"] >= 8 and r["replay_iterations"] >= 8
    assert r["replay_activity_per_item"]["synchronizes"] < r["eager_activity_per_item"]["synchronizes"]
    assert "eager/replay" in capsys.readouterr().out


def test_a_data_plane_op_is_captured_and_its_status_read_at_the_synchronize():
    """A data-plane op records without a host task: its communicator status is read after the synchronize that
    follows the replay (once, not per replay), with the eager sentence; a refusal is cleared, so the communicator
    stays usable and a later replay with good input runs."""
    import sys
    import os

    sys.path.insert(0, os.path.dirname(__file__))
    from _dataplane_harness import raise_first, run_ranks

    t = cam.Topology(D=1, P=1, F=1, E=4, K=2, H=64, Bmax=8, L=3, slots=2)

    def attention(comm):
        x = torch.randn(4, 64).to(comm.dtype)
        ids = torch.tensor([[0, 1], [2, 3], [1, -1], [0, 2]], dtype=torch.int32)
        graph = cam.Graph()
        with graph.capture(stream=comm.stream):
            cam.ops.dispatch_send(comm, x, ids, 0)
            status, ops = capture_status(comm.stream)
            assert status == "active" and ops > 0
        good = ids.clone()
        ids[1, 0] = 9  # outside [-1, E): the device pre-pass refuses the round before anything is written
        before = _C.host_activity()
        with pytest.raises(cam.DeviceArgumentError, match="topk_ids holds an id outside"):
            graph.replay()
        after = _C.host_activity()
        assert after["host_tasks"] == before["host_tasks"], "a replay ran a host task"
        refused = comm.status()
        ids.copy_(good)
        graph.replay()  # the refusal was cleared: the same graph runs the round
        graph.reset()
        return refused, comm.status()

    results, errors = run_ranks(t, {0: attention}, timeout=60)
    raise_first(errors)
    refused, after = results[0]
    assert refused["code"] == 0 and after["code"] == 0


def _captured_dispatch(comm):
    x = torch.randn(4, 64).to(comm.dtype)
    ids = torch.tensor([[0, 1], [2, 3], [1, -1], [0, 2]], dtype=torch.int32)
    graph = cam.Graph()
    with graph.capture(stream=comm.stream):
        cam.ops.dispatch_send(comm, x, ids, 0)
    return graph, (x, ids)


def test_closing_a_comm_ends_its_graphs_and_abort_fails_the_next_replay():
    """Replaying after abort() raises CommAbortedError (the kernel meets the abort word; the synchronize reads the
    status). Closing the Comm ends the graphs captured on its stream, so the close succeeds although a graph holds
    the Comm busy, and a later replay raises GraphInvalidError naming the closed Comm."""
    import sys
    import os

    sys.path.insert(0, os.path.dirname(__file__))
    from _dataplane_harness import raise_first, run_ranks

    t = cam.Topology(D=1, P=1, F=1, E=4, K=2, H=64, Bmax=8, L=3, slots=2)

    def attention(comm):
        graph, keep = _captured_dispatch(comm)
        comm.abort()
        with pytest.raises(cam.CommAbortedError):
            graph.replay()
        with pytest.raises(cam.CommAbortedError):
            graph.replay()  # the failure is sticky: the Comm is aborted for good
        comm.close()
        with pytest.raises(cam.GraphInvalidError, match="which was closed"):
            graph.replay()
        return True

    results, errors = run_ranks(t, {0: attention}, timeout=60)
    raise_first(errors)
    assert results[0]

