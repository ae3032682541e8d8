from typing import Optional

import torch

from .. import _C, _runtime
from ..comm import Comm
from . import _library
from ._dataplane import comm_arg, comm_of
from ._kinds import Args

def output_specs(comm: Comm):
    """(dtype, shape) of each output, static for the topology: one FFN graph serves every work item."""
    t = comm.topology
    n = t.recv_rows
    return (
        (torch.int8 if t.quantized else comm.dtype, (n, t.H)),
        (torch.float32, (n if t.quantized else 1,)),
        (torch.int64, (t.R,)),
        (torch.int64, (t.work_item_words,)),
    )


def batch_items(topology) -> int:
    """Work items one batched dispatch_recv may return: ``min(D, 64)`` (the rows of its ``work_items``)."""
    return min(topology.D, _C.DISPATCH_RECV_MAX_ITEMS)


def batch_output_specs(comm: Comm, row_budget: int):
    """(dtype, shape) of each output of the batched mode, static for (topology, row_budget)."""
    t = comm.topology
    n, items = row_budget, batch_items(t)
    return (
        (torch.int8 if t.quantized else comm.dtype, (n, t.H)),
        (torch.float32, (n if t.quantized else 1,)),
        (torch.int64, (items * t.R, 3)),
        (torch.int64, (n, 3)),
        (torch.int64, (items, t.work_item_words)),
    )


@_library.op("dispatch_recv", mutates_args=("token", "expand_x", "scales", "expert_counts", "work_item"))
def _dispatch_recv(token: torch.Tensor, expand_x: torch.Tensor, scales: torch.Tensor, expert_counts: torch.Tensor,
                   work_item: torch.Tensor, comm_id: int, stop_word: int = 0) -> None:
    comm = comm_of(comm_id)
    _runtime.run(_C.dispatch_recv_v2, comm._c, expand_x, scales, expert_counts, work_item, stop_word,
                 stream=comm.stream, tensor=expand_x)
    comm._count_op("dispatch_recv")
    token.add_(1)


@_dispatch_recv.register_fake
def _(token, expand_x, scales, expert_counts, work_item, comm_id, stop_word=0) -> None:
    _runtime.check(_C.dispatch_recv_v2, comm_of(comm_id)._c, expand_x, scales, expert_counts, work_item, stop_word)


@_library.op("dispatch_recv_batch",
             mutates_args=("token", "expand_x", "scales", "group_table", "origin", "work_items"))
def _dispatch_recv_batch(token: torch.Tensor, expand_x: torch.Tensor, scales: torch.Tensor, group_table: torch.Tensor,
                         origin: torch.Tensor, work_items: torch.Tensor, comm_id: int, row_budget: int,
                         stop_word: int = 0) -> None:
    comm = comm_of(comm_id)
    _runtime.run(_C.dispatch_recv_batch_v2, comm._c, row_budget, expand_x, scales, group_table, origin, work_items,
                 stop_word, stream=comm.stream, tensor=expand_x)
    comm._count_op("dispatch_recv")
    token.add_(1)


@_dispatch_recv_batch.register_fake
def _(token, expand_x, scales, group_table, origin, work_items, comm_id, row_budget, stop_word=0) -> None:
    _runtime.check(_C.dispatch_recv_batch_v2, comm_of(comm_id)._c, row_budget, expand_x, scales, group_table, origin,
                   work_items, stop_word)


def _stop_word_arg(comm: Comm, stop) -> int:
    """The ``stop`` argument as the address the C call checks (0: no stop). The checks that need the window (is it
    the Comm's stop word) are the C API's, in its words, before anything is launched."""
    if stop is None or stop is False:
        return 0
    if stop is True:
        return _C.dispatch_recv_stop_word(comm._c)
    if not isinstance(stop, torch.Tensor):
        raise TypeError(f"dispatch_recv: stop must be None, True (the Comm's stop word) or an int32 tensor of one "
                        f"element over it (dispatch_recv_stop_word(comm)), got {type(stop).__name__}")
    if stop.dtype != torch.int32 or stop.numel() != 1:
        raise ValueError(f"dispatch_recv: stop must be an int32 tensor of one element, got {stop.dtype} of "
                         f"{stop.numel()} elements")
    return stop.data_ptr()


def dispatch_recv_stop_word(comm: Comm) -> torch.Tensor:
    """The Comm's stop word as an int32 ``[1]`` tensor over its window (docs/graph.md, "Stopping a captured
    loop"), for a caller that passes its stop buffer to the receive (``dispatch_recv(comm, stop=word)``) and writes
    it itself: any non-zero value stops. Where the window is device memory the host has no view of it: pass
    ``stop=True`` and stop with :func:`dispatch_recv_stop`."""
    comm = comm_arg("dispatch_recv_stop_word", comm)
    address = _C.dispatch_recv_stop_word(comm._c)  # refuses an Attention rank's Comm, by name
    window = comm.window  # refuses a window in device memory, by name
    offset = address - window.data_ptr()
    return window[offset:offset + 4].view(torch.int32)


def dispatch_recv_stop(comm: Comm) -> bool:
    """Sets the Comm's stop word: every receive launched with ``stop`` (a captured loop's included) then returns
    an empty work item at once instead of waiting its idle bound. Returns False, and writes nothing, when the word is
    set already (a stop of a stopped loop is a no-op). Not a device op: a host write through the Comm's transport,
    seen by the next poll of a running receive."""
    comm = comm_arg("dispatch_recv_stop", comm)
    return not _C.dispatch_recv_set_stop(comm._c, True)


def dispatch_recv_resume(comm: Comm) -> bool:
    """Clears the Comm's stop word (receives with ``stop`` wait for work again). Returns whether it was set."""
    comm = comm_arg("dispatch_recv_resume", comm)
    return _C.dispatch_recv_set_stop(comm._c, False)


def dispatch_recv(comm: Comm, *, out=None, row_budget: Optional[int] = None, stop=None):
    """FFN side: take the next ready work item, or with ``row_budget`` a batch of them (docs/protocol.md §6.2).

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
        ``N = min(capacity, P*min(Bmax, window_tokens)*K)`` and ``R`` the local expert slots (``topology.R``). A
        round with more rows for this rank than ``N`` comes as several work items (chunks, docs/protocol.md §8),
        each handled like any other:

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

    Batched (``row_budget`` given): at scan time it takes every replica that is ready, round robin from the same
    fairness pointer, one chunk each, while the chunks fit ``row_budget`` rows and at most ``I = min(D, 64)``
    items; it never waits for a replica that is not ready, and waits boundedly as above when none is. The bound
    stays: a replica ready at a scan is served within D calls. ``row_budget`` must hold one whole work item
    (``>= recv_rows``). Returns ``(expand_x, scales, group_table, origin, work_items)``:

        - ``expand_x`` ``[row_budget, H]``, ``scales`` ``[row_budget]`` (or ``[1]``): item after item, each item's
          rows as in the one-item mode; rows past the items' total are not written.
        - ``group_table`` ``[I*R, 3]`` int64: group ``i*R + j`` is ``(layer of item i, local expert j, rows)``;
          unused item slots give ``(0, j, 0)``. W1 and W2 take it as their ``group_table`` (docs/gmm.md).
        - ``origin`` ``[row_budget, 3]`` int64: each written row's ``(replica, participant, t*K + k)``.
        - ``work_items`` ``[I, work_item_words]`` int64: item ``i`` as the one-item mode writes it, unused slots
          empty items. ``combine_send`` takes the whole table.

        ``out`` is then the five tensors. Shapes depend only on (topology, row_budget): capturable.

    ``stop``: None (the default: no stop), True (the Comm's stop word) or an int32 ``[1]`` tensor that must be that
    word (:func:`dispatch_recv_stop_word`); anything else, another Comm's word or a tensor outside this Comm's
    window, is refused by name before anything is launched. While the word is non-zero the receive takes no work
    item and returns an empty one at once, without waiting ``idle_poll_s`` (:func:`dispatch_recv_stop`; docs/graph.md,
    "Stopping a captured loop"). The kernel reads it at every poll, as a flag only.

    Raises:
        TypeError / ValueError: ``comm`` not an FFN rank's Comm, ``out`` of the wrong dtypes or shapes, or
            ``row_budget`` not an int or smaller than one work item's rows (``recv_rows``).
        cam.CommTimeoutError: a replica stayed partly published for ``comm.timeout_s`` (names the replica, the
            participant that did not publish and the layer).
        cam.CommAbortedError: the plane was aborted (ends an idle wait at once).
        cam.CommProtocolError / cam.DeviceArgumentError: records that break the protocol or exceed the window, or
            a round routed by an older placement table than this rank's slot weights hold (names both epochs,
            docs/protocol.md §15). A round routed by a newer one, or any round while a rebalance moves the
            weights, is held back (not ready): an idle poll returns empty items, no error.
    """
    comm = comm_arg("dispatch_recv", comm)
    stop_word = _stop_word_arg(comm, stop)
    if row_budget is not None:
        args = Args("dispatch_recv")
        args.integer("row_budget", row_budget)
        given = args.outputs("out", out, 5)
        if given is None:
            # Before allocating row_budget rows: C's rule (host/src/dispatch_recv.cpp), in its words.
            _C.dispatch_recv_check_row_budget(list(comm.topology.as_c_fields()), row_budget)
            given = tuple(torch.empty(shape, dtype=dtype) for dtype, shape in batch_output_specs(comm, row_budget))
        _dispatch_recv_batch(comm.token, *given, comm.id, row_budget, stop_word)
        return given
    given = Args("dispatch_recv").outputs("out", out, 4)
    if given is None:
        given = tuple(torch.empty(shape, dtype=dtype) for dtype, shape in output_specs(comm))
    _dispatch_recv(comm.token, *given, comm.id, stop_word)
    return given
