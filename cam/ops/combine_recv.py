import torch

from .. import _C, _runtime
from ..comm import Comm
from . import _library
from ._checks import Args
from ._dataplane import comm_arg, comm_for, run_direct


def _check(comm: Comm, topk_ids: torch.Tensor, topk_weights: torch.Tensor, out: torch.Tensor) -> None:
    t = comm.topology
    args = Args("combine_recv")
    args.tensor("topk_ids", topk_ids, torch.int32, ndim=2, layout=f"[B <= Bmax={t.Bmax}, K={t.K}]")
    if topk_ids.shape[1] != t.K or topk_ids.shape[0] > t.Bmax:
        raise args.fail("topk_ids", f"must be [B <= Bmax={t.Bmax}, K={t.K}], got {list(topk_ids.shape)}")
    args.tensor("topk_weights", topk_weights, torch.float32, shape=tuple(topk_ids.shape), layout="[B, K]")
    args.tensor("out", out, comm.dtype, shape=(topk_ids.shape[0], t.H), layout="[B, H]")


@_library.op("combine_recv", mutates_args=("token", "out"))
def _combine_recv(token: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, out: torch.Tensor,
                  comm_id: int) -> None:
    comm = comm_for("combine_recv", comm_id, attention=True)
    _check(comm, topk_ids, topk_weights, out)
    _runtime.run(_C.combine_recv, comm._c, topk_ids, topk_weights, out, stream=comm.stream)
    token.add_(1)


@_combine_recv.register_direct
def _(token, topk_ids, topk_weights, out, comm_id) -> None:
    run_direct("combine_recv", True, _check, _C.combine_recv, comm_id, topk_ids, topk_weights, out)
    token.add_(1)


@_combine_recv.register_fake
def _(token, topk_ids, topk_weights, out, comm_id) -> None:
    _check(comm_for("combine_recv", comm_id, attention=True), topk_ids, topk_weights, out)


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
    result = given[0] if given else torch.empty((rows, comm.topology.H), dtype=comm.dtype)
    _combine_recv(comm.token, topk_ids, topk_weights, result, comm.id)
    return result
