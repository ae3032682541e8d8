import torch

from .. import _C, _runtime
from ..comm import Comm
from . import _library
from ._checks import Args
from ._dataplane import comm_arg, comm_for, run_direct


def _check(comm: Comm, x: torch.Tensor, topk_ids: torch.Tensor, layer: int) -> None:
    t = comm.topology
    args = Args("dispatch_send")
    args.tensor("x", x, comm.dtype, ndim=2, layout=f"[B, H={t.H}]")
    if x.shape[1] != t.H:
        raise args.fail("x", f"must be [B, H={t.H}], got {list(x.shape)}")
    if x.shape[0] > t.Bmax:
        raise args.fail("x", f"has B={x.shape[0]} tokens, more than Bmax={t.Bmax}")
    args.tensor("topk_ids", topk_ids, torch.int32, shape=(x.shape[0], t.K), layout="[B, K]")
    args.integer("layer", layer, 0, t.L, hi_name="L")


@_library.op("dispatch_send", mutates_args=("token",))
def _dispatch_send(token: torch.Tensor, x: torch.Tensor, topk_ids: torch.Tensor, layer: int, comm_id: int) -> None:
    comm = comm_for("dispatch_send", comm_id, attention=True)
    _check(comm, x, topk_ids, layer)
    _runtime.run(_C.dispatch_send, comm._c, x, topk_ids, layer, stream=comm.stream)
    token.add_(1)


@_dispatch_send.register_direct
def _(token, x, topk_ids, layer, comm_id) -> None:
    run_direct("dispatch_send", True, _check, _C.dispatch_send, comm_id, x, topk_ids, layer)
    token.add_(1)


@_dispatch_send.register_fake
def _(token, x, topk_ids, layer, comm_id) -> None:
    _check(comm_for("dispatch_send", comm_id, attention=True), x, topk_ids, layer)


def dispatch_send(comm: Comm, x: torch.Tensor, topk_ids: torch.Tensor, layer: int) -> None:
    """Attention side: hand this rank's next round to every FFN rank (docs/protocol.md §6.1).

    Each token is written once per destination FFN rank (int8 + one fp32 scale per token with the shared
    per-token quantization when the topology is quantized, else unchanged), with an index table and a record;
    then the round is published with a sequence-number signal. Rounds go to slot ``round % slots``; when
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
        cam.DeviceArgumentError: an id outside ``[-1, E)`` or more distinct tokens for one FFN rank than
            ``window_tokens``, found by the kernel's pre-pass before anything was written; the Comm stays usable.
            More rows than ``capacity`` is not an error: the FFN side receives the round in chunks.
        cam.CommTimeoutError / cam.CommAbortedError: the slot did not free up in time / the plane was aborted.
    """
    comm = comm_arg("dispatch_send", comm)
    Args("dispatch_send").gate(x=(x, torch.Tensor), topk_ids=(topk_ids, torch.Tensor), layer=(layer, int))
    _dispatch_send(comm.token, x, topk_ids, layer, comm.id)
