"""torch.library.opcheck for every cam op: schema (declared mutations), fake impl against the real op, autograd
registration, and AOT dispatch (compiled == eager).

The data-plane ops have side effects on a live plane, and opcheck calls an op several times: each dispatch_send call
publishes a round, each combine_recv call consumes one. The plane here has enough slots for every round opcheck
publishes, and the FFN side checks its ops on empty work items (nothing is ready yet) before it starts serving."""

import threading

import pytest
import torch

import cam
from _dataplane_harness import raise_first, run_ranks
from _window_layout import WindowLayout

OPCHECK_TIMEOUT_S = 120


def test_opcheck_dynamic_quant():
    x = torch.randn(3, 50, dtype=torch.bfloat16)
    q = torch.zeros(3, 50, dtype=torch.int8)
    scale = torch.zeros(3, dtype=torch.float32)
    torch.library.opcheck(torch.ops.cam.dynamic_quant.default, (x, q, scale))


def _gmm_case(k: int, n: int, rows: int = 12, layers: int = 2, experts: int = 3):
    g = torch.Generator().manual_seed(7)
    ws = [torch.randint(-127, 128, (experts, k, n), generator=g, dtype=torch.int8) for _ in range(layers)]
    ss = [torch.rand(experts, n, generator=g) * 1e-2 for _ in range(layers)]
    lw = cam.LayerWeights(ws, ss)
    x = torch.randint(-127, 128, (rows, k), generator=g, dtype=torch.int8)
    xs = torch.rand(rows, generator=g) * 1e-2
    gl = torch.tensor([5, 0, 6], dtype=torch.int64)
    li = torch.tensor([1], dtype=torch.int64)
    return lw, x, xs, gl, li


def test_opcheck_gmm_swiglu_quant_multi_layer():
    lw, x, xs, gl, li = _gmm_case(40, 64)
    y = torch.zeros(12, 32, dtype=torch.int8)
    ys = torch.zeros(12, dtype=torch.float32)
    torch.library.opcheck(torch.ops.cam.gmm_swiglu_quant_multi_layer.default,
                          (x, xs, list(lw.weights), list(lw.scales), gl, li, 1, y, ys))


def test_opcheck_gmm_multi_layer():
    lw, x, xs, gl, li = _gmm_case(32, 48)
    out = torch.zeros(12, 48, dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.cam.gmm_multi_layer.default,
                          (x, xs, list(lw.weights), list(lw.scales), gl, li, 1, out))


def test_opcheck_data_plane_ops():
    topo = cam.Topology(D=1, P=1, F=1, E=2, K=2, H=32, Bmax=4, L=2, slots=32)
    layout = WindowLayout(topo)
    ffn_checked = threading.Event()
    attention_done = threading.Event()
    g = torch.Generator().manual_seed(3)
    # every round carries the same tokens, so every combine_recv result is the same (opcheck compares calls)
    x = (torch.randn(3, topo.H, generator=g) * 2).to(torch.bfloat16)
    ids = torch.tensor([[0, 1], [1, -1], [0, 0]], dtype=torch.int32)
    w = torch.rand(3, topo.K, generator=g)

    def rounds_in_flight(comm) -> int:
        words = comm.window.view(torch.int64)
        return int(words[layout.attn_send_count_off // 8]) - int(words[layout.attn_recv_count_off // 8])

    def attention(comm):
        assert ffn_checked.wait(OPCHECK_TIMEOUT_S), "the FFN rank never finished its checks"
        torch.library.opcheck(torch.ops.cam.dispatch_send.default, (comm.token, x, ids, 1, comm.id))
        while rounds_in_flight(comm) < topo.slots // 2:  # enough for every combine_recv opcheck makes
            cam.ops.dispatch_send(comm, x, ids, 1)
        out = torch.zeros(3, topo.H, dtype=torch.bfloat16)
        torch.library.opcheck(torch.ops.cam.combine_recv.default, (comm.token, ids, w, out, comm.id))
        consumed = topo.slots // 2 - rounds_in_flight(comm)
        while rounds_in_flight(comm) > 0:
            cam.ops.combine_recv(comm, ids, w)
        attention_done.set()
        return consumed

    def ffn(comm):
        # Nothing is dispatched yet: dispatch_recv returns empty work items, combine_send of one is a no-op.
        outs = [torch.zeros(shape, dtype=dtype) for shape, dtype in (
            ((topo.recv_rows, topo.H), torch.int8), ((topo.recv_rows,), torch.float32), ((topo.R,), torch.int64),
            ((topo.work_item_words,), torch.int64))]
        torch.library.opcheck(torch.ops.cam.dispatch_recv.default, (comm.token, *outs, comm.id))
        empty = cam.ops.dispatch_recv(comm)[3]
        assert int(empty[0]) == 0, "an item was ready before the Attention rank dispatched"
        expert_out = torch.zeros(topo.recv_rows, topo.H, dtype=torch.bfloat16)
        torch.library.opcheck(torch.ops.cam.combine_send.default, (comm.token, expert_out, empty, comm.id))
        # The batched mode's two ops (the public dispatch_recv / combine_send with row_budget / a work_items
        # table): empty batches, so both are no-ops on the plane.
        budget = 2 * topo.recv_rows
        batch = [torch.zeros(shape, dtype=dtype) for shape, dtype in (
            ((budget, topo.H), torch.int8), ((budget,), torch.float32), ((topo.R, 3), torch.int64),
            ((budget, 3), torch.int64), ((1, topo.work_item_words), torch.int64))]
        torch.library.opcheck(torch.ops.cam.dispatch_recv_batch.default, (comm.token, *batch, comm.id, budget))
        items = cam.ops.dispatch_recv(comm, row_budget=budget)[4]
        assert int(items[0, 0]) == 0, "an item was ready before the Attention rank dispatched"
        torch.library.opcheck(torch.ops.cam.combine_send_batch.default,
                              (comm.token, torch.zeros(budget, topo.H, dtype=torch.bfloat16), items, comm.id, budget))
        ffn_checked.set()
        served = 0
        while not attention_done.is_set():
            rows, scales, counts, item = cam.ops.dispatch_recv(comm)
            if int(item[0]) == 1:
                expert_out = (rows.float() * scales[:, None]).to(torch.bfloat16)
                served += 1
            cam.ops.combine_send(comm, expert_out, item)
        return served

    results, errors = run_ranks(topo, {0: attention, 1: ffn}, timeout=3 * OPCHECK_TIMEOUT_S, idle_poll_s=0.02,
                                timeout_s=60.0)
    raise_first(errors)
    assert results[0] >= 1, "opcheck never ran combine_recv for real"
    assert results[1] >= topo.slots // 2


_DATA_PLANE = {"dispatch_send", "dispatch_recv", "combine_send", "combine_recv"}


@pytest.mark.parametrize("op", sorted(set(cam.ops.__all__) - {"prepack_weights"}))
def test_every_op_is_opchecked(op):
    """Every torch op cam.ops exports has an opcheck test above: a new op without one fails here."""
    assert hasattr(torch.ops.cam, op), f"cam.ops.{op} has no torch.ops.cam.{op}"
    test = "test_opcheck_data_plane_ops" if op in _DATA_PLANE else f"test_opcheck_{op}"
    assert test in globals(), f"no {test} for cam.ops.{op}"
