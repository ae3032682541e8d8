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
    token.add_(1)


@_combine_send.register_fake
def _(token, expert_out, work_item, comm_id) -> None:
    _runtime.check(_C.combine_send, comm_of(comm_id)._c, expert_out, work_item)


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
        work_item: the ``work_item`` dispatch_recv returned on this rank; read only by the kernel.

    Raises:
        TypeError / ValueError: bad dtype or shape, naming the argument, before anything runs.
        cam.DeviceArgumentError / cam.CommProtocolError: a work item not produced here, or combined twice / out
            of order (refused before anything is written).
        cam.CommAbortedError: the plane was aborted.
    """
    comm = comm_arg("combine_send", comm)
    Args("combine_send").gate(expert_out=(expert_out, torch.Tensor), work_item=(work_item, torch.Tensor))
    _combine_send(comm.token, expert_out, work_item, comm.id)
