"""A data-plane op of a Comm called inside a capture on another stream is refused before anything runs, in every
capture mode: it would otherwise run eagerly and publish its round while the graph records none of it (RELAXED
silently; GLOBAL only invalidated the capture afterwards). Control: the same call outside the capture dispatches
one round, which the FFN rank receives and combines."""

import pytest
import torch

import cam
from _dataplane_harness import raise_first, run_ranks

TOPO = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=32, Bmax=4, L=2)


@pytest.mark.parametrize("mode", ["global", "thread_local", "relaxed"])
def test_data_plane_op_inside_a_capture_on_another_stream_is_refused(mode):
    x = torch.ones(2, TOPO.H, dtype=torch.bfloat16)
    ids = torch.tensor([[0], [1]], dtype=torch.int32)
    w = torch.ones(2, 1)

    def attention(comm):
        g = cam.Graph()
        with pytest.raises(cam.InvalidArgumentError, match="dispatch_send: called inside a capture on another "
                                                            "stream") as info:
            with g.capture(mode=mode):  # this thread's stream, not the Comm's
                cam.ops.dispatch_send(comm, x, ids, 0)
        assert "stream=comm.stream" in str(info.value)
        cam.ops.dispatch_send(comm, x, ids, 1)  # control: eager, outside any capture
        return cam.ops.combine_recv(comm, ids, w)

    def ffn(comm):
        items = []
        for _ in range(400):
            _, _, _, item = cam.ops.dispatch_recv(comm)
            if int(item[0]):
                items.append(item.clone())
                cam.ops.combine_send(comm, torch.zeros(TOPO.recv_rows, TOPO.H, dtype=torch.bfloat16), item)
                break
        for _ in range(3):  # the refused call published nothing: no second round arrives
            _, _, _, item = cam.ops.dispatch_recv(comm)
            assert int(item[0]) == 0, "a round from the refused call arrived"
        return [int(i[2]) for i in items]  # the layers served

    results, errors = run_ranks(TOPO, {0: attention, 1: ffn}, timeout=120, timeout_s=10.0, idle_poll_s=0.05)
    raise_first(errors)
    assert results[1] == [1], results  # exactly the control round (layer 1)
    assert torch.equal(results[0], torch.zeros(2, TOPO.H, dtype=torch.bfloat16))
