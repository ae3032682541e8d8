"""``cam.serve_ffn``: the one loop that serves an FFN rank, for ``cam-ffn``, ``cam-run`` and the integrations.

Its one job is to run the rank's FFN iteration (:mod:`cam.serve.iteration`, eager or replayed from one captured
graph) until a shutdown message. Between iterations, on the host and never from device values, it reads the store's
serving messages (docs/protocol.md, "Shutdown"): a shutdown request, which may carry the Attention ranks a supervisor
saw die (fenced before the rank reports), or every Attention rank having finished. Each iteration idles at most
``idle_poll_s`` when nothing is ready, so an idle rank sees the message within about one idle poll plus one store
read. Every wait is bounded: the data plane's by the connector's ``timeout_s``, the whole serve (optionally) by
``max_serve_s``, a shared device's by its own context. Importing it does not import torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from typing import Callable, Optional, Tuple

from .policy import ServePolicy

__all__ = ["Iteration", "ServeResult", "serve_ffn"]

log = logging.getLogger("cam.ffn")


@dataclasses.dataclass
class ServeResult:
    """What one :func:`serve_ffn` call did.

    Attributes:
        rank: the FFN rank's global rank.
        iterations: FFN iterations run (eager) or replayed (graph), empty ones included.
        reason: why it stopped (the shutdown request's reason, ``"attention finished"``, ``"stopped"`` for the
            ``stop`` event, ``"max_serve_s"``).
        seconds: wall time of the loop.
        lost_ranks: the Attention ranks the shutdown message named as lost (each fenced before returning).
        launches: W1 + W2 executors this process launched while the loop ran (eager; None with ``graph``, whose
            replays launch none), the effect of batching.
    """

    rank: int
    iterations: int
    reason: str
    seconds: float
    lost_ranks: Tuple[int, ...] = ()
    launches: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Iteration:
    """One iteration's phase times (``time.time()``) and work items, handed to ``on_iteration``.

    ``start`` → ``received`` is the receive (with ``graph``: 0 long when an item was served, the whole replay when
    it was idle), ``received`` → ``computed`` W1 + W2 (with a shared ``device``: from when it was held), and
    ``computed`` → ``end`` the send; a batched or replayed iteration has no send phase of its own (``computed ==
    end``). ``records`` is the ``[n, work_item_words]`` table of the work items it served (a view of the device
    records, :meth:`cam.WorkItem.table` names their words; read them during the call: a replay's buffers are the
    next replay's too); ``served`` whether any was not empty.
    """

    start: float
    received: float
    computed: float
    end: float
    records: object
    served: bool


def _gmm_launches() -> int:
    from .. import _C

    return sum(_C.launch_count(op) for op in ("gmm_swiglu_quant_multi_layer", "gmm_multi_layer"))


def serve_ffn(connector, w1, w2, policy: Optional[ServePolicy] = None, *, graph: bool = False,
              stop: Optional[threading.Event] = None, ready=None, max_serve_s: Optional[float] = None,
              items_per_check: int = 1, row_budget: Optional[int] = None, swiglu_limit: Optional[float] = None,
              device=None, on_iteration: Optional[Callable[[Iteration], None]] = None,
              shutdown: Optional[Callable[[], object]] = None,
              between: Optional[Callable[[], None]] = None) -> ServeResult:
    """Serves FFN rank ``connector`` (an initialized FFN :class:`cam.connector.AsyncAFDConnector`) with routed
    expert weights ``w1`` / ``w2`` (:class:`cam.LayerWeights` of its experts, every MoE layer) until a shutdown
    message, ``stop`` being set, or ``max_serve_s``.

    Args:
        policy: the :class:`cam.serve.ServePolicy` to serve with; when given, ``graph``, ``items_per_check``,
            ``row_budget`` and ``swiglu_limit`` are its (and must be left at their defaults). It is validated
            against the connector's topology once, before the capture.
        graph: capture the iteration once and replay it (:class:`cam.connector.CapturedFFN`) instead of eager ops.
        ready: a ``threading.Event`` set, or a callable called, once the loop is about to run its first iteration
            (after the capture with ``graph``), when it also tells the Attention ranks through the store
            (``connector.mark_serving()``; a capture that fails is reported there too, so their
            ``wait_ffn_serving`` raises naming this rank instead of timing out).
        items_per_check: iterations (replays) between two reads of the store's messages (>= 1); each idles at
            most ``idle_poll_s``, so this many idle polls bound how late a message is seen. With ``on_iteration``
            an idle iteration (read there anyway) is a check too.
        row_budget: serve batches: each iteration takes every ready replica's work item that fits this many rows
            (``dispatch_recv(comm, row_budget=...)``, C's rule: at least one work item's ``recv_rows``; one above the
            plane's largest useful batch is lowered to it) and serves them with one W1 and one W2 launch
            (:func:`cam.connector.ffn_batch_iteration`), outputs bit for bit those of the one-item loop.
        swiglu_limit: DeepSeek-V4's clamped SwiGLU in W1 (``cam.convert.common_swiglu_limit`` of the model's
            layers; None: the plain SwiGLU), in every mode.
        device: a context manager held around each iteration's compute (the colocated mode's shared device: the
            receive's idle wait is outside it); None for a rank alone on its device.
        on_iteration: called after each iteration with its :class:`Iteration` (phase times, work items): the
            telemetry hook (cam-run's timeline lanes). Called on this thread; its host reads are its own.
        shutdown: the host-side read of the shutdown message (returns None, a reason str, or a
            :class:`cam.serve.store.Shutdown`); default ``connector.shutdown_message``.
        between: called at each check, after the shutdown message was read and found absent (host-side work
            between iterations, e.g. cam-run's rebalances).

    Raises what the plane raised (after logging it); the connector stays the caller's to close.
    """
    from ..errors import CommAbortedError
    from ..layer_weights import LayerWeights
    from .connector import WorldEndedError
    from .store import Shutdown

    if getattr(connector, "role", None) != "ffn" or not connector.is_initialized:
        raise ValueError("serve_ffn: connector must be an initialized FFN-rank AsyncAFDConnector")
    if not isinstance(w1, LayerWeights) or not isinstance(w2, LayerWeights):
        raise TypeError("serve_ffn: w1 and w2 must be cam.LayerWeights")
    if policy is None:  # its checks are the policy's
        policy = ServePolicy(row_budget=row_budget, graph=graph, swiglu_limit=swiglu_limit,
                             items_per_check=items_per_check)
    elif not isinstance(policy, ServePolicy) or (graph, items_per_check, row_budget, swiglu_limit) != \
            (False, 1, None, None):
        raise ValueError("serve_ffn: give a ServePolicy or graph/items_per_check/row_budget/swiglu_limit, not both")
    if max_serve_s is not None and not max_serve_s > 0:
        raise ValueError(f"serve_ffn: max_serve_s must be > 0 seconds, got {max_serve_s!r}")
    topo = connector.config.topology
    policy = policy.validated(topo, None if policy.row_budget is None else f"serve_ffn: row_budget = "
                                                                            f"{policy.row_budget}")
    if w1.num_experts != topo.R or w2.num_experts != topo.R or w1.num_layers != topo.L:
        raise ValueError(f"serve_ffn: the weights hold {w1.num_experts} experts x {w1.num_layers} layers, the "
                         f"topology wants R = {topo.R} experts x L = {topo.L} layers per FFN rank")
    device = contextlib.nullcontext() if device is None else device
    read_shutdown = connector.shutdown_message if shutdown is None else shutdown
    # Elastic worlds: this rank stops only once the world's end holds (AsyncAFDConnector.claim_fate), never while
    # the others re-form it.
    elastic = bool(getattr(connector.config, "elastic", False))
    f = connector.rank - topo.A
    table = connector.config.placement
    held = [e for e in table.slot_experts(0, f) if e >= 0] if table is not None else list(range(f * topo.R,
                                                                                                 (f + 1) * topo.R))
    log.info("ffn rank %d serving experts %s (layer 0%s) of %d MoE layers, H = %d, I = %d, %s, %s, %s, "
             "idle poll %.3f s", connector.rank, held, ", by its placement table" if table is not None else "",
             topo.L, topo.H, w2.k, "graph replay" if policy.graph else "eager",
             "one work item per iteration" if policy.row_budget is None else
             f"batches of up to {policy.row_budget} rows" + ("" if policy.batch_rows == policy.row_budget else
                                                             f" (at most {policy.batch_rows} fit one batch here)"),
             "SwiGLU" if policy.swiglu_limit is None else f"clamped SwiGLU (swiglu_limit {policy.swiglu_limit:g})",
             connector.config.idle_poll_s)
    try:
        captured = connector.capture_ffn(w1, w2, policy.batch_rows, swiglu_limit=policy.swiglu_limit) \
            if policy.graph else None
    except BaseException as e:
        log.error("ffn rank %d failed before serving: %s: %s", connector.rank, type(e).__name__, e)
        connector.mark_serving(failure=f"{type(e).__name__}: {e}")
        raise
    # Attention ranks wait for this before their first round (AsyncAFDConnector.wait_ffn_serving).
    connector.mark_serving()
    launches_before = _gmm_launches() if captured is None else None
    if ready is not None:
        ready() if callable(ready) else ready.set()
    step = _Step(connector, captured, w1, w2, policy, device)
    start = time.monotonic()
    iterations, message, since_check = 0, None, 0
    try:
        while message is None:
            try:
                ran, done = step(telemetry=on_iteration is not None)
            except CommAbortedError:
                # Elastic worlds only: another FFN rank died, or a rank joins (another FFN rank admitted it)
                dead = connector.dead_ffn_rank()
                if step.captured is not None:
                    step.captured.close()  # its graph replays the aborted plane
                    step.captured = None
                if dead is not None:
                    try:
                        failover = connector.fail_over(dead)  # ExpertsLostError: no survivor holds some expert
                    except WorldEndedError:  # every Attention rank finished first: no round is owed to anyone
                        message = "attention finished"
                        continue
                    log.warning("ffn rank %d: FFN rank(s) %s died; serving as rank %d of world %s (their experts "
                                "served by their other replicas)", connector.rank + sum(
                                    1 for r in failover.dead_ranks if r <= connector.rank),
                                ", ".join(map(str, failover.dead_ranks)), connector.rank, failover.world_joined)
                else:
                    try:
                        if not connector.poll_join():
                            raise
                    except WorldEndedError:
                        message = "attention finished"
                        continue
                _recapture(step, connector, w1, w2, policy)
                continue
            iterations += ran
            since_check += ran
            if done is not None:
                on_iteration(done)
            if since_check < policy.items_per_check and (done is None or done.served):
                continue
            since_check = 0
            message = read_shutdown()
            if message is not None and elastic and connector.claim_fate("end") != "end":
                message = None  # a re-form of this world was claimed first: serve on, its abort comes next
            try:
                if message is None and connector.poll_join():  # elastic: a rank joins; the plane was re-formed
                    log.info("ffn rank %d: FFN rank %d joined world %s", connector.rank,
                             connector.failovers[-1].joined_rank, connector.world_id)
                    _recapture(step, connector, w1, w2, policy)
            except WorldEndedError:
                message = "attention finished"
                continue
            if message is None and between is not None:
                between()
            if message is None and stop is not None and stop.is_set():
                message = "stopped"
            if message is None and max_serve_s is not None and time.monotonic() - start > max_serve_s:
                message = "max_serve_s"
    except BaseException as e:
        log.error("ffn rank %d failed after %d iterations: %s: %s", connector.rank, iterations, type(e).__name__, e)
        raise
    finally:
        if step.captured is not None:
            step.captured.close()
    seconds = time.monotonic() - start
    launches = None if launches_before is None else _gmm_launches() - launches_before
    message = message if isinstance(message, Shutdown) else Shutdown(str(message))
    # Fenced here too, not only by the liveness watchdog (its poll may not have seen them yet when a run ends
    # sooner): nothing is in flight now, so the dropped-round counts the connector reports are final.
    for dead in message.lost:
        if connector.comm is not None and not connector.comm.closed:
            connector.comm.fence_dead_rank(int(dead))
    lost = connector.lost_replicas
    for replica in sorted(lost):
        log.warning("ffn rank %d: %s", connector.rank, lost[replica])
    log.info("ffn rank %d stopped (%s) after %d iterations in %.2f s", connector.rank, message.reason, iterations,
             seconds)
    return ServeResult(connector.rank, iterations, message.reason, seconds, tuple(message.lost), launches)


def _recapture(step, connector, w1, w2, policy: ServePolicy) -> None:
    """After the plane was re-formed (elastic): the captured iteration replays the old plane's Comm, so it is closed
    and, in graph mode, captured again on the new one."""
    if step.captured is not None:
        step.captured.close()
        step.captured = None
    if policy.graph and connector.comm is not None and not connector.comm.closed:
        step.captured = connector.capture_ffn(w1, w2, policy.batch_rows, swiglu_limit=policy.swiglu_limit)


class _Step:
    """One iteration of the policy's kind, timed by phase when asked (telemetry) and otherwise without host reads."""

    def __init__(self, connector, captured, w1, w2, policy: ServePolicy, device):
        self.connector, self.captured, self.w1, self.w2 = connector, captured, w1, w2
        self.policy, self.device = policy, device

    def __call__(self, telemetry: bool) -> Tuple[int, Optional[Iteration]]:
        """(iterations run, the last one's :class:`Iteration` when ``telemetry``)."""
        from .iteration import ffn_compute

        conn, policy = self.connector, self.policy
        if self.captured is not None and not telemetry:
            with self.device:  # the replays between two checks, one synchronize
                conn.ffn_graph_step(self.captured, policy.items_per_check)
            return policy.items_per_check, None
        a = time.time()
        if self.captured is not None:
            with self.device:
                conn.ffn_graph_step(self.captured)  # one replay, one synchronize: its records are read next
            records = self.captured.records
            b = sent = c = time.time()
        elif policy.batch_rows is not None:
            with self.device:
                b = time.time()  # receive, compute and send are one batched step: all of it counts as busy
                records = conn.ffn_step(self.w1, self.w2, policy.batch_rows, swiglu_limit=policy.swiglu_limit)
            sent = c = time.time()
        else:
            item = conn.recv_ffn_work_item()
            with self.device:
                b = time.time()  # a shared device: the wait for it is not compute
                out = ffn_compute(item, self.w1, self.w2, swiglu_limit=policy.swiglu_limit)
            sent = time.time()
            conn.send_ffn_work_item_output(item, out)
            c = time.time()
            records = item.work_item.unsqueeze(0)
        if not telemetry:
            return 1, None
        from ..work_item import WorkItem

        served = bool((WorkItem.kinds(records) != WorkItem.EMPTY).any())
        if self.captured is not None:
            # Receive and compute are one replay: its time counts as compute when it served, as waiting when idle.
            b = a if served else c
        elif policy.batch_rows is not None and not served:
            b = c  # nothing was ready: the batched step was the receive's idle wait
        return 1, Iteration(a, b, sent, c, records, served)
