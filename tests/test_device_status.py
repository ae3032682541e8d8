"""Device status records: the first error wins. A captured op's record lives in the graph's pool and is
never reset between replays, so two bad replays before one synchronize must report the first, and the record the
synchronize reported is cleared, so the next synchronize is clean (docs/graph.md, "Status records")."""

import time

import pytest
import torch

import cam

pytestmark = pytest.mark.timeout(120)

M, K, N, E, L = 16, 32, 32, 2, 3  # rows, hidden, intermediate, local experts, layers


def _poison(*ts):
    for t in ts:
        t.view(torch.uint8).fill_(0xFF)


def _wait_written(t, what, timeout_s=30.0):
    """Polls until `t` is no longer all 0xFF (the captured op that writes it ran), bounded."""
    deadline = time.monotonic() + timeout_s
    while (t.view(torch.uint8) == 0xFF).all():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} was not written within {timeout_s} s")
        time.sleep(0.001)


@pytest.fixture
def captured():
    """A graph of [W1 GMM (layer_index from a static tensor), dynamic_quant]: dynamic_quant runs after the GMM in
    every replay and always writes, so its output tells the host the replay's GMM has run, with no synchronize."""
    g = torch.Generator().manual_seed(11)
    weights = cam.LayerWeights([torch.randint(-128, 128, (E, K, 2 * N), generator=g, dtype=torch.int8) for _ in range(L)],
                               [(torch.rand(E, 2 * N, generator=g) * 1e-2 + 1e-3).float() for _ in range(L)])
    x = torch.randint(-128, 128, (M, K), generator=g, dtype=torch.int8)
    xs = (torch.rand(M, generator=g) * 1e-2 + 1e-3).float()
    gl = torch.tensor([M // 2, M - M // 2], dtype=torch.int64)
    li = torch.tensor([1], dtype=torch.int64)
    y, ys = torch.empty(M, N, dtype=torch.int8), torch.empty(M, dtype=torch.float32)
    a = torch.randn(4, 8, generator=g).to(torch.bfloat16)
    q, qs = torch.empty(4, 8, dtype=torch.int8), torch.empty(4, dtype=torch.float32)

    def body():
        cam.ops.gmm_swiglu_quant_multi_layer(x, xs, weights, gl, li, 1, out=(y, ys))
        cam.ops.dynamic_quant(a, out=(q, qs))

    body()  # warm-up: the persistent address table is built outside the capture
    graph = cam.Graph()
    with graph.capture():
        body()
    yield graph, li, q, body
    graph.reset()


def test_two_bad_replays_before_one_synchronize_report_the_first(captured):
    graph, li, q, _ = captured
    for bad in (7, 5):
        li.fill_(bad)
        _poison(q)
        graph.replay(synchronize=False)
        _wait_written(q, f"replay with layer_index {bad}")  # its GMM ran: the next fill cannot reach it
    with pytest.raises(cam.DeviceArgumentError) as first:
        graph.synchronize()
    assert "layer_index 7 outside [0, 3)" in str(first.value), str(first.value)
    # The record was cleared when it was reported: the next synchronize is clean, with or without a replay.
    graph.synchronize()
    li.fill_(2)
    graph.replay()


def test_a_bad_replay_after_a_report_is_reported_again(captured):
    graph, li, q, _ = captured
    li.fill_(4)
    with pytest.raises(cam.DeviceArgumentError, match=r"layer_index 4 outside \[0, 3\)"):
        graph.replay()
    li.fill_(9)  # a new error after the report: the cleared record takes it
    with pytest.raises(cam.DeviceArgumentError, match=r"layer_index 9 outside \[0, 3\)"):
        graph.replay()


def test_eager_calls_report_their_own_error(captured):
    # Control: eager launches start from a zeroed record, so first-wins never carries an old error into a new call.
    _, li, _, body = captured
    for bad in (6, 8):
        li.fill_(bad)
        with pytest.raises(cam.DeviceArgumentError, match=rf"layer_index {bad} outside"):
            body()
    li.fill_(0)
    body()
