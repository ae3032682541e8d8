import torch

from .. import _C, _runtime
from ..comm import Comm
from . import _library
from ._dataplane import comm_arg, comm_of
from ._kinds import Args

def _output_specs(comm: Comm):
    """(dtype, shape) of each output, static for the topology: one FFN graph serves every work item."""
    t = comm.topology
    n = t.recv_rows
    return (
        (torch.int8 if t.quantized else comm.dtype, (n, t.H)),
        (torch.float32, (n if t.quantized else 1,)),
        (torch.int64, (t.R,)),
        (torch.int64, (t.work_item_words,)),
    )


@_library.op("dispatch_recv", mutates_args=("token", "expand_x", "scales", "expert_counts", "work_item"))
def _dispatch_recv(token: torch.Tensor, expand_x: torch.Tensor, scales: torch.Tensor, expert_counts: torch.Tensor,
                   work_item: torch.Tensor, comm_id: int) -> None:
    comm = comm_of(comm_id)
    _runtime.run(_C.dispatch_recv, comm._c, expand_x, scales, expert_counts, work_item, stream=comm.stream,
                 tensor=expand_x)
    token.add_(1)


@_dispatch_recv.register_fake
def _(token, expand_x, scales, expert_counts, work_item, comm_id) -> None:
    _runtime.check(_C.dispatch_recv, comm_of(comm_id)._c, expand_x, scales, expert_counts, work_item)


def dispatch_recv(comm: Comm, *, out=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """FFN side: take the next ready work item (docs/protocol.md §6.2).

    Replicas are served round robin over the ready ones (a replica that is ready is served within D
    selections); a replica is ready once all its P participants published the same round. No host argument
    changes per call: sequence numbers, the fairness pointer and counters live in the window and are advanced by
    the kernel, so a captured FFN loop replays correctly.

    Args:
        comm: this rank's :class:`cam.Comm` (an FFN rank).
        out: optional ``(expand_x, scales, expert_counts, work_item)`` to write into, with the dtypes and shapes
            below (static buffers of a captured loop); allocated when not given.

    Returns:
        ``(expand_x, scales, expert_counts, work_item)``, static shapes from the topology with
        ``N = min(capacity, P*min(Bmax, window_tokens)*K)`` and ``R = E/F``. A round with more rows for this rank
        than ``N`` comes as several work items (chunks, docs/protocol.md §8), each handled like any other:

        - ``expand_x`` ``[N, H]``: int8 when quantized, else ``comm.dtype``; rows grouped by local expert, within
          an expert by (participant, token, slot). Rows past ``work_item[5]`` are not written.
        - ``scales`` ``[N]`` fp32 per-row dequant scale (quantized), else a 1-element placeholder.
        - ``expert_counts`` ``[R]`` int64 rows per local expert: a GMM ``group_list`` of type 1 (counts).
        - ``work_item`` ``[work_item_words]`` int64, device-resident (docs/protocol.md §4.2): kind, replica, layer,
          seq, slot, rows, FFN rank, fingerprint, counts, cell tables, chunk words (first row of the round, the
          round's rows). ``work_item[2:3]`` is the GMM ``layer_index``.

        When nothing became ready within ``comm.idle_poll_s`` the work item is **empty** (kind 0, replica -1,
        layer 0, zero rows and counts): W1/W2/combine_send treat it as a no-op and the caller simply loops. Idle
        is not a fault, however long it lasts.

    Raises:
        TypeError / ValueError: ``comm`` not an FFN rank's Comm, or ``out`` of the wrong dtypes or shapes.
        cam.CommTimeoutError: a replica stayed partly published for ``comm.timeout_s`` (names the replica, the
            participant that did not publish and the layer).
        cam.CommAbortedError: the plane was aborted (ends an idle wait at once).
        cam.CommProtocolError / cam.DeviceArgumentError: records that break the protocol or exceed the window.
    """
    comm = comm_arg("dispatch_recv", comm)
    given = Args("dispatch_recv").outputs("out", out, 4)
    if given is None:
        given = tuple(torch.empty(shape, dtype=dtype) for dtype, shape in _output_specs(comm))
    _dispatch_recv(comm.token, *given, comm.id)
    return given
