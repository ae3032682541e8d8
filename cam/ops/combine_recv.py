import torch

from .. import _C, _runtime
from ..comm import Comm
from . import _library
from ._dataplane import comm_arg, comm_of
from ._kinds import Args


@_library.op("combine_recv", mutates_args=("token", "out"))
def _combine_recv(token: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, out: torch.Tensor,
                  comm_id: int) -> None:
    comm = comm_of(comm_id)
    _runtime.run(_C.combine_recv, comm._c, topk_ids, topk_weights, out, stream=comm.stream, tensor=out)
    comm._count_op("combine_recv")
    token.add_(1)


@_combine_recv.register_fake
def _(token, topk_ids, topk_weights, out, comm_id) -> None:
    _runtime.check(_C.combine_recv, comm_of(comm_id)._c, topk_ids, topk_weights, out)


def combine_recv(comm: Comm, topk_ids: torch.Tensor, topk_weights: torch.Tensor, *, out=None) -> torch.Tensor:
    """Attention side: the routed output of this rank's oldest round in flight (docs/protocol.md §6.4).

    Waits (bounded by ``comm.timeout_s``) until every FFN rank completed the round, then per token
    ``acc = acc + w[t,k] * row(t,k)`` in fp32 for ``k = 0..K-1`` (multiply, then add; empty slots skipped) and
    rounds ``acc`` once to ``comm.dtype``. Rounds are received in the order they were dispatched.

    Args:
        comm: this rank's :class:`cam.Comm` (an Attention rank).
        topk_ids: ``[B, K]`` int32, the ids dispatched in that round (``B`` must match it).
        topk_weights: ``[B, K]`` fp32 routing weights.
        out: optional ``[B, H]`` tensor in ``comm.dtype`` to write into; allocated when not given.

    Returns:
        ``out`` ``[B, H]`` in ``comm.dtype`` (the routed part; add the shared expert locally).

    Raises:
        TypeError / ValueError: bad dtype or shape, naming the argument, before anything runs.
        cam.DeviceArgumentError: ids outside ``[-1, E)`` or ``B`` differing from the dispatched round (refused
            before anything was written; the Comm stays usable).
        cam.CommTimeoutError: an FFN rank did not complete the round in time (named in the message).
        cam.CommAbortedError: the plane was aborted.
    """
    comm = comm_arg("combine_recv", comm)
    args = Args("combine_recv")
    args.gate(topk_ids=(topk_ids, torch.Tensor), topk_weights=(topk_weights, torch.Tensor))
    given = args.outputs("out", out, 1)
    rows = topk_ids.shape[0] if topk_ids.dim() else 0  # a 0-d topk_ids is refused by the op, naming it
    result = given[0] if given else torch.empty((rows, comm.topology.H), dtype=comm.dtype, device=topk_ids.device)
    _combine_recv(comm.token, topk_ids, topk_weights, result, comm.id)
    return result
