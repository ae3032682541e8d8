import torch

from .. import _C, _runtime
from .._tensor import desc
from ..comm import Comm, lookup
from ._dataplane import comm_for


def _empty_outputs(comm: Comm, like: torch.Tensor):
    t = comm.topology
    n = t.recv_rows
    row_dtype = torch.int8 if t.quantized else comm.dtype
    return (
        like.new_empty((n, t.H), dtype=row_dtype),
        like.new_empty((n if t.quantized else 1,), dtype=torch.float32),
        like.new_empty((t.R,), dtype=torch.int64),
        like.new_empty((t.work_item_words,), dtype=torch.int64),
    )


@torch.library.custom_op("cam::dispatch_recv", mutates_args=("token",))
def _dispatch_recv(token: torch.Tensor, comm_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    comm = comm_for("dispatch_recv", comm_id, attention=False)
    expand_x, scales, counts, work_item = _empty_outputs(comm, token)
    _runtime.run(
        lambda stream, allocate: _C.dispatch_recv(comm._c, desc(expand_x), desc(scales), desc(counts), desc(work_item),
                                                  stream, allocate),
        stream=comm.stream,
    )
    token.add_(1)
    return expand_x, scales, counts, work_item


@_dispatch_recv.register_fake
def _(token, comm_id):
    return _empty_outputs(lookup(comm_id), token)


def dispatch_recv(comm: Comm) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """FFN side: take the next ready work item (docs/protocol.md §6.2).

    Replicas are served round robin over the ready ones (a replica that is ready is served within D
    selections); a replica is ready once all its P participants published the same round. No host argument
    changes per call: sequence numbers, the fairness pointer and counters live in the window and are advanced by
    the kernel, so a captured FFN loop replays correctly.

    Args:
        comm: this rank's :class:`cam.Comm` (an FFN rank).

    Returns:
        ``(expand_x, scales, expert_counts, work_item)``, static shapes from the topology with
        ``N = min(capacity, P*Bmax*K)`` and ``R = E/F``:

        - ``expand_x`` ``[N, H]``: int8 when quantized, else ``comm.dtype``; rows grouped by local expert, within
          an expert by (participant, token, slot). Rows past ``work_item[5]`` are not written.
        - ``scales`` ``[N]`` fp32 per-row dequant scale (quantized), else a 1-element placeholder.
        - ``expert_counts`` ``[R]`` int64 rows per local expert: a GMM ``group_list`` of type 1 (counts).
        - ``work_item`` ``[work_item_words]`` int64, device-resident (docs/protocol.md §4.2): kind, replica, layer,
          seq, slot, rows, FFN rank, fingerprint, counts, cell tables. ``work_item[2:3]`` is the GMM ``layer_index``.

        When nothing became ready within ``comm.idle_poll_s`` the work item is **empty** (kind 0, replica -1,
        layer 0, zero rows and counts): W1/W2/combine_send treat it as a no-op and the caller simply loops. Idle
        is not a fault, however long it lasts.

    Raises:
        cam.CommTimeoutError: a replica stayed partly published for ``comm.timeout_s`` (names the replica, the
            participant that did not publish and the layer).
        cam.CommAbortedError: the plane was aborted (ends an idle wait at once).
        cam.CommProtocolError / cam.DeviceArgumentError: records that break the protocol or exceed the capacity.
    """
    return torch.ops.cam.dispatch_recv(comm._require().token, comm.id)
