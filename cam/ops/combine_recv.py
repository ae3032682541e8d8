import torch

from .. import _C, _runtime
from .._tensor import desc
from ..comm import Comm
from ._dataplane import check_tensor, comm_for


def _check(comm: Comm, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> None:
    t = comm.topology
    check_tensor("combine_recv", "topk_ids", topk_ids, torch.int32, rank=2)
    if topk_ids.shape[1] != t.K or topk_ids.shape[0] > t.Bmax:
        raise ValueError(f"combine_recv: topk_ids must be [B <= Bmax={t.Bmax}, K={t.K}], got {tuple(topk_ids.shape)}")
    check_tensor("combine_recv", "topk_weights", topk_weights, torch.float32, shape=tuple(topk_ids.shape))


@torch.library.custom_op("cam::combine_recv", mutates_args=("token",))
def _combine_recv(token: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, comm_id: int) -> torch.Tensor:
    comm = comm_for("combine_recv", comm_id, attention=True)
    _check(comm, topk_ids, topk_weights)
    out = torch.empty((topk_ids.shape[0], comm.topology.H), dtype=comm.dtype)
    _runtime.run(
        lambda stream, allocate: _C.combine_recv(comm._c, desc(topk_ids), desc(topk_weights), desc(out), stream,
                                                 allocate),
        stream=comm.stream,
    )
    token.add_(1)
    return out


@_combine_recv.register_fake
def _(token, topk_ids, topk_weights, comm_id):
    comm = comm_for("combine_recv", comm_id, attention=True)
    _check(comm, topk_ids, topk_weights)
    return topk_ids.new_empty((topk_ids.shape[0], comm.topology.H), dtype=comm.dtype)


def combine_recv(comm: Comm, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """Attention side: the routed output of this rank's oldest round in flight (docs/protocol.md §6.4).

    Waits (bounded by ``comm.timeout_s``) until every FFN rank completed the round, then per token
    ``acc = acc + w[t,k] * row(t,k)`` in fp32 for ``k = 0..K-1`` (multiply, then add; empty slots skipped) and
    rounds ``acc`` once to ``comm.dtype``. Rounds are received in the order they were dispatched.

    Args:
        comm: this rank's :class:`cam.Comm` (an Attention rank).
        topk_ids: ``[B, K]`` int32, the ids dispatched in that round (``B`` must match it).
        topk_weights: ``[B, K]`` fp32 routing weights.

    Returns:
        ``out`` ``[B, H]`` in ``comm.dtype`` (the routed part; add the shared expert locally).

    Raises:
        TypeError / ValueError: bad dtype or shape, before anything runs.
        cam.DeviceArgumentError: ids outside ``[-1, E)`` or ``B`` differing from the dispatched round (refused
            before anything was written; the Comm stays usable).
        cam.CommTimeoutError: an FFN rank did not complete the round in time (named in the message).
        cam.CommAbortedError: the plane was aborted.
    """
    return torch.ops.cam.combine_recv(comm._require().token, topk_ids, topk_weights, comm.id)
