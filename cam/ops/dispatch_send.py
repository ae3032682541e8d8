import torch

from .. import _C, _runtime
from ..comm import Comm
from . import _library
from ._dataplane import comm_arg, comm_of
from ._kinds import Args


@_library.op("dispatch_send", mutates_args=("token",))
def _dispatch_send(token: torch.Tensor, x: torch.Tensor, topk_ids: torch.Tensor, layer: int, comm_id: int) -> None:
    comm = comm_of(comm_id)
    _runtime.run(_C.dispatch_send, comm._c, x, topk_ids, layer, comm.placement_buffer, stream=comm.stream, tensor=x)
    comm._count_op("dispatch_send")
    token.add_(1)


@_dispatch_send.register_fake
def _(token, x, topk_ids, layer, comm_id) -> None:
    comm = comm_of(comm_id)
    _runtime.check(_C.dispatch_send, comm._c, x, topk_ids, layer, comm.placement_buffer)


def dispatch_send(comm: Comm, x: torch.Tensor, topk_ids: torch.Tensor, layer: int) -> None:
    """Attention side: hand this rank's next round to every FFN rank (docs/protocol.md §6.1).

    Each token is written once per destination FFN rank (int8 + one fp32 scale per token with the shared
    per-token quantization when the topology is quantized, else unchanged), with an index table and a record;
    then the round is published with a sequence-number signal. Each row goes where the Comm's placement table
    says (docs/protocol.md §15): replica ``(t + k0) % n`` of its expert's ``n`` replicas, ``k0`` the token's first
    top-k index naming that expert (a token's rows for one expert share a replica), or with no table the
    contiguous placement. Rounds go to slot ``round % slots``; when
    ``slots`` rounds are already in flight the op waits (bounded by ``comm.timeout_s``) for the oldest to be
    combined. No barrier spans replicas.

    Args:
        comm: this rank's :class:`cam.Comm` (an Attention rank).
        x: ``[B, H]`` activations in ``comm.dtype``, contiguous, ``0 <= B <= Bmax``.
        topk_ids: ``[B, K]`` int32 routed expert ids in ``[-1, E)``; -1 marks an empty slot, duplicates within a
            row are legal (one row each).
        layer: MoE layer in ``[0, L)``; travels in-band to the FFN side (work item word 2).

    Raises:
        TypeError / ValueError: bad dtype, shape, layer, or role, naming the argument, before anything runs.
        cam.DeviceArgumentError: an id outside ``[-1, E)``, a placement table word out of bounds (its device
            copy, ``comm.placement_buffer``, was changed), the table's epoch negative or changed while the kernel
            read the table (docs/protocol.md §15), or more distinct tokens for one FFN rank than
            ``window_tokens``, found by the kernel's pre-pass before anything was written; the Comm stays usable.
            More rows than ``capacity`` is not an error: the FFN side receives the round in chunks.
        cam.CommTimeoutError / cam.CommAbortedError: the slot did not free up in time / the plane was aborted.
    """
    comm = comm_arg("dispatch_send", comm)
    Args("dispatch_send").gate(x=(x, torch.Tensor), topk_ids=(topk_ids, torch.Tensor), layer=(layer, int))
    _dispatch_send(comm.token, x, topk_ids, layer, comm.id)
