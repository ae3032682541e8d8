import torch

from .. import _C, _runtime
from ..comm import Comm
from . import _library
from ._dataplane import comm_arg, comm_of
from ._kinds import Args


@_library.op("combine_send", mutates_args=("token",))
def _combine_send(token: torch.Tensor, expert_out: torch.Tensor, work_item: torch.Tensor, comm_id: int) -> None:
    comm = comm_of(comm_id)
    _runtime.run(_C.combine_send, comm._c, expert_out, work_item, stream=comm.stream, tensor=expert_out)
    comm._count_op("combine_send")
    token.add_(1)


@_combine_send.register_fake
def _(token, expert_out, work_item, comm_id) -> None:
    _runtime.check(_C.combine_send, comm_of(comm_id)._c, expert_out, work_item)


@_library.op("combine_send_batch", mutates_args=("token",))
def _combine_send_batch(token: torch.Tensor, expert_out: torch.Tensor, work_items: torch.Tensor, comm_id: int,
                        row_budget: int) -> None:
    comm = comm_of(comm_id)
    _runtime.run(_C.combine_send_batch, comm._c, row_budget, expert_out, work_items, stream=comm.stream,
                 tensor=expert_out)
    comm._count_op("combine_send")
    token.add_(1)


@_combine_send_batch.register_fake
def _(token, expert_out, work_items, comm_id, row_budget) -> None:
    _runtime.check(_C.combine_send_batch, comm_of(comm_id)._c, row_budget, expert_out, work_items)


def combine_send(comm: Comm, expert_out: torch.Tensor, work_item: torch.Tensor) -> None:
    """FFN side: return a work item's expert outputs to their source Attention ranks (docs/protocol.md §6.3).

    Row ``i < work_item[5]`` of ``expert_out`` goes to the (token, slot) it was dispatched from, on the participant
    that sent it; then completion is signalled to every participant of the replica, including those that sent this
    rank no rows. An empty work item is a no-op. Work items of one replica must be combined in the order
    dispatch_recv returned them.

    Args:
        comm: this rank's :class:`cam.Comm` (an FFN rank).
        expert_out: ``[N, H]`` in ``comm.dtype`` (``N`` as dispatch_recv's ``expand_x``); rows past the work item's
            rows are ignored.
        work_item: the ``work_item`` dispatch_recv returned on this rank; read only by the kernel. A batched
            dispatch_recv's ``work_items`` (2-D) serves the whole batch: ``expert_out`` then has ``row_budget``
            rows, and each item goes to its own replica with its own done signal, exactly as if it had been served
            alone. Every item is checked before anything is written.

    Raises:
        TypeError / ValueError: bad dtype or shape, naming the argument, before anything runs.
        cam.DeviceArgumentError / cam.CommProtocolError: a work item not produced here, or combined twice / out
            of order (refused before anything is written). cam.CommProtocolError also when this rank's slot
            weights moved to another placement epoch since the item was received (fatal, names both epochs,
            docs/protocol.md §15; nothing written).
        cam.CommAbortedError: the plane was aborted.
    """
    comm = comm_arg("combine_send", comm)
    Args("combine_send").gate(expert_out=(expert_out, torch.Tensor), work_item=(work_item, torch.Tensor))
    if work_item.dim() == 2:
        _combine_send_batch(comm.token, expert_out, work_item, comm.id,
                            expert_out.shape[0] if expert_out.dim() >= 1 else 0)
    else:
        _combine_send(comm.token, expert_out, work_item, comm.id)
