"""One rank of a ``cam-run`` world (``python -m cam.run.worker CONFIG.json RANK``).

Attention ranks run their replica's batches layer by layer through the connector (shared experts locally between
dispatch and combine); FFN ranks run :func:`cam.serve_ffn` until the launcher says the run is over. A watchdog
thread ends every wait of the world at once when the launcher raises the abort key (a rank died) or the launcher
itself is gone.

``--mode colocated``: process d is one device holding Attention rank d and FFN rank D + d of the same plane (the FFN
loop on a thread), with the sync mode's barrier per layer; the device's compute (attention, dense MLP, shared
experts, the FFN work items) takes one lock, so it runs on one timeline, as on a device that hosts both.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
import traceback
from datetime import timedelta

import torch

from ..connector import AFDTransferContext, AFDTransferMetadata, AsyncAFDConnector, expert_weights
from ..ffn_weights import ExpertWeights, FfnWeights
from ..layer_weights import LayerWeights
from ..serve import Iteration, ServePolicy, serve_ffn
from ..serve.store import Shutdown
from ..work_item import WorkItem
from . import assign
from .deaths import UntilShutdown, die_after, join_running_world, rejoin_setup
from .participants import Participants, request_pieces
from .run_dir import remove_if_orphaned
from .setup import RunConfig, build, rank_threads, rebalance_count, rebalance_table
from .._proc import process_start_time
from .timeline import Lane

ABORT_KEY = "run/abort"
SHUTDOWN_KEY = "run/shutdown"
READY_KEY = "run/ready"  # counts ranks whose connector is up
ATTENTION_DONE_KEY = "run/attention_done"  # colocated: counts Attention ranks done (their process still serves)
START_KEY = "run/t0"  # the common clock origin, set by the launcher once every rank is ready
_POLL_S = 0.05


class RankFailed(RuntimeError):
    pass


def _store(cfg: RunConfig):
    return torch.distributed.TCPStore(cfg.master_addr, cfg.master_port, is_master=False,
                                      timeout=timedelta(seconds=cfg.timeout_s))


class _AbortAware:
    """The store as the connector's handshake sees it: once the watchdog saw the abort key (a rank died during
    start-up) or the launcher gone, the handshake's next poll raises instead of waiting out its join timeout.

    Only during start-up (:func:`_start_up` lifts it): the connector and its Comm keep this store for the rest of
    the rank's life, and after start-up the run's abort reaches them through ``connector.abort()`` (``_watch_abort``).
    A refusal left on it would fail every read of the Comm's liveness watchdog in an aborted run, so a peer's orderly
    exit (its ``left`` key) could no longer be told from a death."""

    def __init__(self, store, aborted: dict):
        self._store = store
        self._aborted = aborted
        self._starting = True

    def started(self) -> None:
        """The connector is up: reads pass through from now on."""
        self._starting = False

    def _raise_if_aborted(self) -> None:
        if self._starting and "by" in self._aborted:
            raise RankFailed(f"start-up aborted: {self._aborted['by']}")

    def check(self, keys) -> bool:
        self._raise_if_aborted()
        return self._store.check(keys)

    def get(self, key):
        self._raise_if_aborted()
        return self._store.get(key)

    def __getattr__(self, name):
        return getattr(self._store, name)


def _start_up(connect, store, aborted: dict) -> None:
    """``connect(store)`` (a connector's start-up or join) through the run's abort guard, lifted once it returns."""
    guard = _AbortAware(store, aborted)
    try:
        connect(guard)
    finally:
        guard.started()


def _watch_abort(store, connector: AsyncAFDConnector, seen: dict, stop: threading.Event, launcher_pid: int) -> None:
    """Ends every wait of the world at once when the launcher raises the abort key, and also when the launcher is
    gone (its store unreachable, or this process re-parented): a SIGKILLed launcher can no longer end the run, so
    its workers must not wait out --timeout for it."""
    while not stop.wait(_POLL_S):
        why = None
        if os.getppid() != launcher_pid:
            why = f"the cam-run launcher (pid {launcher_pid}) is gone"
        else:
            try:
                if store.check([ABORT_KEY]):
                    why = store.get(ABORT_KEY).decode()
            except Exception as e:  # noqa: BLE001 - any store failure means the launcher's store is lost
                why = f"lost the cam-run launcher's store ({type(e).__name__}): the launcher died"
        if why is not None and not stop.is_set():
            seen["by"] = why
            connector.abort()
            return


# How long the exiting rank waits for its abort watchdog to leave a store call in flight (one TCPStore round trip,
# the loop then sees `stop` within _POLL_S).
_WATCH_JOIN_S = 10.0


def _stop_watch(stop: threading.Event, watchdog: threading.Thread) -> None:
    """Stops the abort watchdog and waits, bounded, until it has left. A daemon thread still inside a store call
    (TCPStore releases the GIL) when the interpreter finalizes is ended by pthread_exit as it takes the GIL back; that
    unwinds through the binding's noexcept GIL guard and aborts the process with "terminate called without an active
    exception", so a rank that finished its work would die by SIGABRT."""
    stop.set()
    if watchdog.ident is not None and watchdog is not threading.current_thread():
        watchdog.join(_WATCH_JOIN_S)


class DeviceTimeline:
    """Colocated mode: the one compute timeline of a device shared by its Attention rank and its FFN rank. A
    bounded wait: a holder that never lets go (a hung op) fails the other side with the timeout, never a hang."""

    def __init__(self, timeout_s: float, aborted: dict):
        self._lock = threading.Lock()
        self._timeout_s = timeout_s
        self._aborted = aborted

    def __enter__(self):
        deadline = time.monotonic() + self._timeout_s
        while not self._lock.acquire(timeout=min(_POLL_S, self._timeout_s)):
            if "by" in self._aborted:
                raise RankFailed(f"aborted while waiting for the device: {self._aborted['by']}")
            if time.monotonic() > deadline:
                raise RankFailed(f"the device's other rank held it for more than {self._timeout_s:g} s")
        return self

    def __exit__(self, *exc):
        self._lock.release()
        return False


class _Free:
    """A rank alone on its device: nothing to share."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _barrier(store, name: str, members: int, deadline_s: float, aborted: dict) -> None:
    """Store barrier among the Attention ranks (sync mode only), bounded and abort-aware."""
    store.add(name, 1)
    deadline = time.monotonic() + deadline_s
    while store.add(name, 0) < members:
        if "by" in aborted:
            raise RankFailed(f"aborted while waiting in barrier {name}: {aborted['by']}")
        if time.monotonic() > deadline:
            raise RankFailed(f"barrier {name} not complete within {deadline_s} s")
        time.sleep(0.001)


def _warm_up(model, attention: bool = True) -> None:
    """The first call of a torch custom op and of attention pays one-off set-up (seconds); pay it before the clock
    starts so it does not land in the first batch's TTFT. An FFN rank runs no attention (nor builds it)."""
    from .. import ops

    ops.dynamic_quant(torch.zeros(1, model.config.hidden, dtype=torch.bfloat16))
    if not attention:
        return
    tokens = torch.zeros(2, dtype=torch.long)
    model.pre_moe(model.config.moe_layers[0], model.embed_tokens(tokens), [2], tokens)


def _wait_for_start(store, cfg: RunConfig, marks: dict, aborted: dict = None) -> float:
    """Start-up (imports, windows) is not part of the run: time starts when the launcher says every rank is up.
    Polled, so an abort raised meanwhile (another rank died starting) ends the wait at once."""
    marks["warmed"] = time.time()
    store.add(READY_KEY, 1)
    deadline = time.monotonic() + cfg.timeout_s
    while not store.check([START_KEY]):
        if aborted is not None and "by" in aborted:
            raise RankFailed(f"aborted while waiting for the start: {aborted['by']}")
        if time.monotonic() > deadline:
            raise RankFailed(f"the launcher did not start the run within {cfg.timeout_s:g} s")
        time.sleep(0.005)
    marks["started"] = time.time()
    return float(store.get(START_KEY).decode())


def run_attention(cfg: RunConfig, rank: int, store, connector: AsyncAFDConnector, aborted: dict, built,
                  marks: dict, device=None) -> dict:
    model, workload, topo = built
    replica, part = divmod(rank, topo.P)
    # P > 1: this participant dispatches and combines its own share of each micro-batch (cam.run.participants).
    group = Participants(store, replica, part, topo.P, cfg.timeout_s)
    try:
        return _attention_loop(cfg, rank, store, connector, aborted, built, group, marks, device or _Free())
    finally:
        group.close()


def _attention_loop(cfg: RunConfig, rank: int, store, connector: AsyncAFDConnector, aborted: dict, built,
                    group: Participants, marks: dict, device) -> dict:
    model, workload, topo = built
    replica = group.replica
    lockstep = cfg.mode in ("sync", "colocated")  # a barrier across replicas per layer
    moe_layers = model.config.moe_layers
    pieces, events = [], []
    _warm_up(model)
    t0 = _wait_for_start(store, cfg, marks, aborted)
    lane = Lane(t0)
    source = (_StaticSteps(workload, replica, lockstep, lane, t0) if cfg.assign == "round-robin" else
              _AssignedSteps(cfg, store, workload, topo, group, lane, t0, aborted, lockstep, connector, rank))
    rebalanced = 0
    try:
        for step, rids in enumerate(source):
            _run_step(cfg, rank, store, connector, aborted, built, group, device, lane, lockstep, step, rids,
                      source, pieces, events)
            if cfg.rebalance_every and (step + 1) % cfg.rebalance_every == 0:
                rebalanced = _rebalance(cfg, rank, store, connector, aborted, topo, rebalanced + 1, lane)
        for k in range(rebalanced + 1, rebalance_count(cfg, workload) + 1):  # the others' rebalances: join them
            rebalanced = _rebalance(cfg, rank, store, connector, aborted, topo, k, lane)
    except BaseException:
        source.close(failed=True)  # stops a coordinator on this rank; the error is this one
        raise
    coordinator_log = source.close()
    marks["done"] = time.time()
    torch.save(pieces, os.path.join(cfg.out_dir, f"outputs-{rank}.pt"))
    if cfg.elastic:
        # Every round of this rank was received; it stays a member, following any failover or join, until every
        # Attention rank finished: a rank that exited while the others re-form would be taken for dead there.
        connector.finish(cfg.timeout_s)
    result = {"role": "attention", "rank": rank, "replica": replica, "participant": group.part, "batches": events,
              "spans": lane.spans, "startup": marks, "placement_epoch": connector.comm.placement_epoch,
              "failovers": [dataclasses.asdict(f) for f in connector.failovers]}
    if coordinator_log is not None:
        result["assign_log"] = coordinator_log
    return result


def _rebalance(cfg: RunConfig, rank: int, store, connector: AsyncAFDConnector, aborted: dict, topo, k: int,
               lane: Lane, weights=None) -> int:
    """Rebalance ``k`` of a --rebalance-every run on this rank (nothing of its own in flight: an Attention rank
    between steps, an FFN rank between iterations). Attention ranks meet first (a bounded store barrier), so the
    FFN ranks, which join once every Attention rank arrived, find the plane quiet; the agreement itself is
    Comm.set_placement's. Returns ``k``."""
    table = rebalance_table(cfg, topo, k)
    with lane.span("rebalance", epoch=k):
        if weights is None:
            _barrier(store, f"run/rebalance/{k}", topo.A, cfg.timeout_s, aborted)
            connector.set_placement(table)
        else:
            connector.set_placement(table, weights[0], experts=weights[1])
    if connector.comm.placement_epoch != k:
        raise RankFailed(f"rank {rank}: after rebalance {k} the plane is at placement epoch "
                         f"{connector.comm.placement_epoch}")
    return k


def _rebalance_due(store, topo, k: int) -> bool:
    """FFN ranks: whether every Attention rank reached rebalance ``k`` (its barrier counter is complete)."""
    return store.check([f"run/rebalance/{k}"]) and store.add(f"run/rebalance/{k}", 0) >= topo.A


class _StaticSteps:
    """Round robin: the replica's batches as the workload dealt them (lockstep modes: as many steps as the longest
    replica has, an empty batch where this one has none), each once its last request arrived."""

    def __init__(self, workload, replica: int, lockstep: bool, lane: Lane, t0: float):
        self.workload, self.own, self.lane, self.t0 = workload, workload.batches[replica], lane, t0
        self.steps = max(len(b) for b in workload.batches) if lockstep else len(self.own)

    def __iter__(self):
        for step in range(self.steps):
            rids = self.own[step] if step < len(self.own) else []
            arrival = max((self.workload.requests[r].arrival_s for r in rids), default=0.0)
            delay = self.t0 + arrival - time.time()
            if delay > 0:
                waited = self.lane.now()
                time.sleep(delay)
                self.lane.add("wait_arrival", waited, self.lane.now(), step=step)
            yield rids

    def finished(self, rids) -> None:
        pass

    def close(self, failed: bool = False):
        return None


class _AnyOf:
    """Abort flags read as one (``"by" in flags``): the rank's watchdog's and the coordinator's own stop."""

    def __init__(self, *flags: dict):
        self.flags = flags

    def __contains__(self, key) -> bool:
        return any(key in f for f in self.flags)

    def __getitem__(self, key):
        return next(f[key] for f in self.flags if key in f)


# How long a failing Attention rank 0 waits for its coordinator to see the stop (its waits poll every 50 ms).
_COORDINATOR_STOP_S = 5.0


class _AssignedSteps:
    """--assign fewest-tokens / shortest-queue: the batches this replica takes as the coordinator assigns requests
    (cam.run.assign; docs/run.md §8). Participant 0 of the replica takes them and, with P > 1, publishes each batch
    for the others. Attention rank 0's process runs the coordinator on a thread of its own, with its own store
    client."""

    def __init__(self, cfg: RunConfig, store, workload, topo, group: Participants, lane: Lane, t0: float,
                 aborted: dict, lockstep: bool, connector, rank: int):
        self.cfg, self.store, self.topo, self.group, self.lane, self.t0 = cfg, store, topo, group, lane, t0
        self.aborted, self.lockstep, self.connector = aborted, lockstep, connector
        self.d, self.requests = group.replica, len(workload.requests)
        lengths = [int(r.tokens.numel()) for r in workload.requests]
        arrivals = [r.arrival_s for r in workload.requests]
        self.last_arrival = t0 + max(arrivals)
        self.queue = assign.ReplicaQueue(store, self.d, lengths, cfg.workload_spec().max_batch_tokens, aborted) \
            if group.part == 0 else None
        self.coordinator, self._thread, self._outcome, self._halt = None, None, {}, {}
        if rank == 0:
            self.coordinator = assign.Coordinator(cfg.assign, lengths, arrivals, topo.D)
            self._thread = threading.Thread(target=self._coordinate, daemon=True)
            self._thread.start()

    def _coordinate(self) -> None:
        store = None
        try:
            store = _store(self.cfg)
            self._outcome["log"] = self.coordinator.run(store, self.t0, _AnyOf(self.aborted, self._halt))
        except BaseException as e:  # noqa: BLE001 - every replica waits on it: end the run now, not at a timeout
            self._outcome["error"] = e
            if "by" not in self.aborted and "by" not in self._halt:
                self.aborted["by"] = f"the assignment coordinator on Attention rank 0 failed: {type(e).__name__}: {e}"
                self.connector.abort()

    def _deadline(self) -> float:
        """A wait for an assignment lasts at most until the last arrival (the coordinator has assigned everything
        by then), plus --timeout."""
        return max(time.time(), self.last_arrival) + self.cfg.timeout_s

    def __iter__(self):
        return self._lockstep() if self.lockstep else self._async()

    def _async(self):
        n = 0
        while True:
            waited = self.lane.now()
            if self.queue is not None:
                rids = self.queue.take_next(self._deadline())
                if self.group.count > 1:
                    assign.publish_batch(self.store, self.d, n, rids)
            else:
                rids = assign.read_batch(self.store, self.d, n, self._deadline(), self.aborted)
            if self.lane.now() > waited:
                self.lane.add("wait_arrival", waited, self.lane.now(), step=n)
            if not rids:
                return
            yield rids
            n += 1

    def _lockstep(self):
        """Every replica forms its batch from what it was assigned by now; after a barrier all read how many were
        taken in all: none (nobody had a request) repeats the formation at the next assignment, and the run ends
        once every request was taken. The same counts in every replica make the same decisions."""
        step = attempt = taken = 0
        while taken < self.requests:
            if self.queue is not None:
                rids = self.queue.take()
                if self.group.count > 1:
                    assign.publish_batch(self.store, self.d, f"{step}.{attempt}", rids)
                self.store.add(assign.taken_key(step, attempt), len(rids))
            with self.lane.span("barrier", step=step, formation=attempt):
                _barrier(self.store, f"run/step/{step}/{attempt}/formed", self.topo.A, self.cfg.timeout_s,
                         self.aborted)
            if self.queue is None:
                rids = assign.read_batch(self.store, self.d, f"{step}.{attempt}", self._deadline(), self.aborted)
            total = int(self.store.add(assign.taken_key(step, attempt), 0))
            if total == 0:  # the step starts once the next request is assigned (log entry `taken` exists)
                waited = self.lane.now()
                assign.wait_for_key(self.store, assign.log_key(taken), self._deadline(), self.aborted,
                                    f"replica {self.d} waiting for the next assignment")
                self.lane.add("wait_arrival", waited, self.lane.now(), step=step)
                attempt += 1
                continue
            yield rids
            taken += total
            step, attempt = step + 1, 0

    def finished(self, rids) -> None:
        """Participant 0 counts the batch's requests finished, at once: the coordinator's next decision sees it."""
        if self.queue is not None and rids:
            self.store.add(assign.finished_key(self.d), len(rids))

    def close(self, failed: bool = False):
        """The coordinator's log (Attention rank 0; None elsewhere), after its thread ended (bounded). ``failed``:
        this rank is failing; the coordinator is told to stop and nothing is raised (the rank's error is the cause)."""
        if self._thread is None:
            return None
        if failed:
            self._halt["by"] = f"Attention rank 0 (replica {self.d}) failed"
            self._thread.join(_COORDINATOR_STOP_S)
            return None
        self._thread.join(self.cfg.timeout_s)
        if self._thread.is_alive():
            raise RankFailed(f"the assignment coordinator did not end within {self.cfg.timeout_s:g} s")
        if "error" in self._outcome:
            raise self._outcome["error"]
        return self._outcome["log"]


def _run_step(cfg: RunConfig, rank: int, store, connector: AsyncAFDConnector, aborted: dict, built,
              group: Participants, device, lane: Lane, lockstep: bool, step: int, rids, source, pieces: list,
              events: list) -> None:
    """One batch (a step), layer by layer: the outputs of its requests go to ``pieces``, its record to ``events``."""
    model, workload, topo = built
    replica = group.replica
    moe_layers = model.config.moe_layers
    prompts = [workload.requests[r].tokens for r in rids]
    seq_lens = [int(p.numel()) for p in prompts]
    start = lane.now()
    # Two micro-batches (stages) when the batch has two requests or more: stage s takes every other request.
    stages = [list(range(s, len(rids), 2)) for s in range(2)] if len(rids) >= 2 else [list(range(len(rids)))]
    # Each stage's token ids (a router may read them: DeepSeek-V4's hash layers) and its residual, whose rows are
    # the tokens (the model's shape: [T, H], or DeepSeek-V4's [T, streams, H]).
    ts = [torch.cat([prompts[i].reshape(-1) for i in members]) if members else torch.zeros(0, dtype=torch.long)
          for members in stages]
    xs = [model.embed_tokens(t) for t in ts]
    lens = [[seq_lens[i] for i in members] for members in stages]
    mine = [group.own(sum(lens[s])) for s in range(len(stages))]
    for layer in range(model.config.num_layers):
        layer_start = lane.now()
        if lockstep:
            with lane.span("barrier", layer=layer):
                _barrier(store, f"run/layer/{step}/{layer}", topo.A, cfg.timeout_s, aborted)
        if layer not in moe_layers:
            for s in range(len(stages)):
                with device, lane.span("attention", layer=layer, stage=s, tokens=sum(lens[s])):
                    _emulate_attention(cfg, lens[s], topo.P, lane)
                    x, h = model.pre_moe(layer, xs[s], lens[s], ts[s])
                with device, lane.span("dense_mlp", layer=layer, stage=s):
                    xs[s] = x + model.dense_mlp(layer, h)
            lane.add("layer", layer_start, lane.now(), layer=layer)
            continue
        moe_index = moe_layers.index(layer)
        held = []
        for s in range(len(stages)):  # Attention(ub) -> dispatch(ub) -> shared(ub), then the next stage
            a, b = mine[s]
            with device, lane.span("attention", layer=layer, stage=s, tokens=sum(lens[s])):
                _emulate_attention(cfg, lens[s], topo.P, lane)
                x, h, ids, w = model.pre_moe(layer, xs[s], lens[s], ts[s])
            ctx = AFDTransferContext(AFDTransferMetadata(moe_index, s, tuple(lens[s])))
            with lane.span("dispatch", layer=layer, stage=s, tokens=b - a):
                connector.send_attn_output(h[a:b], ctx, topk_ids=ids[a:b], topk_weights=w[a:b])
            with device, lane.span("shared", layer=layer, stage=s):
                held.append((x, model.shared(layer, h)))
        for s, (x, shared) in enumerate(held):  # combine in dispatch order
            a, b = mine[s]
            with lane.span("combine_wait", layer=layer, stage=s, tokens=b - a):
                routed = connector.recv_ffn_output(ubatch_idx=s)
            rows = model.moe_output(layer, x, routed, shared[a:b], slice(a, b))
            if topo.P > 1:
                with lane.span("gather", layer=layer, stage=s):
                    rows = group.gather(rows, sum(lens[s]))
            xs[s] = rows
        lane.add("layer", layer_start, lane.now(), layer=layer)
    end = lane.now()
    source.finished(rids)
    for s, (members, x) in enumerate(zip(stages, xs)):
        a, b = mine[s]
        final = model.finish(x)
        for rid, first, row, count in request_pieces([rids[i] for i in members], lens[s], a, b):
            pieces.append((rid, first, final[a + row:a + row + count].clone()))
    lane.add("step", start, end, step=step, requests=list(rids), tokens=sum(seq_lens))
    events.append({"replica": replica, "step": step, "requests": list(rids), "tokens": sum(seq_lens),
                   "start_s": start, "end_s": end})
    if cfg.progress:
        total = f"/{source.steps}" if isinstance(source, _StaticSteps) else ""
        print(f"[rank {rank}] replica {replica} step {step + 1}{total}: {sum(seq_lens)} tokens "
              f"in {end - start:.2f} s", file=sys.stderr, flush=True)


def emulated_attention_s(attention_cost, seq_lens, participants: int = 1) -> float:
    """Cost model: attention time of one participant for one micro-batch and layer, a + (b * tokens + c * sum(len^2))
    / P (each of the P participants attends for its share of the queries; 0 for an empty micro-batch)."""
    if not seq_lens:
        return 0.0
    a, b, c = attention_cost
    return a + (b * sum(seq_lens) + c * sum(n * n for n in seq_lens)) / participants


def _emulate_attention(cfg: RunConfig, seq_lens, participants: int, lane: Lane) -> None:
    """Slept, so the 2 CPUs stay free for the ranks' real work and the scheduling effect is not hidden by CPU
    contention. Its own span inside ``attention``: the rest of that span is the real attention and router."""
    if cfg.cost_model:
        with lane.span("emulated"):
            time.sleep(emulated_attention_s(cfg.attention_cost, seq_lens, participants))


def _ffn_weights(cfg: RunConfig, model, topo, ffn_index: int):
    """This FFN rank's slot weights: its R contiguous experts, or under --placement the experts its slots hold
    (a replicated expert's weights on every rank with a replica)."""
    placement = cfg.expert_placement()
    if placement is None:
        return expert_weights(model, topo, ffn_index)
    w1, s1, w2, s2 = model.routed_weights(0, topo.E)
    return (LayerWeights.from_placement(placement, ffn_index, w1, s1, format=model.weight_format),
            LayerWeights.from_placement(placement, ffn_index, w2, s2, format=model.weight_format))


def ffn_swiglu_limit(model):
    """The clamp this FFN rank's W1 applies (the model's ``swiglu_limit``: DeepSeek-V4's, else None), on every path
    of its loop: eager, batched and captured."""
    return model.swiglu_limit


def run_ffn(cfg: RunConfig, rank: int, store, connector: AsyncAFDConnector, aborted: dict, built,
            marks: dict, device=None) -> dict:
    """FFN rank ``rank`` of the run: :func:`cam.serve_ffn` until the launcher's shutdown message, its iterations
    recorded on the timeline through ``on_iteration`` and its rebalances done between iterations."""
    model, _, topo = built
    w1, w2 = _ffn_weights(cfg, model, topo, rank - topo.A)
    limit = ffn_swiglu_limit(model)
    # --rebalance-every: the served slots (rewritten in place, so a captured loop follows) and every expert's weights
    rebalances, weights = rebalance_count(cfg, built[1]), None
    if rebalances:
        # copies: the served slots may be views of the model's tensors (a rebalance writes into them)
        w1q, s1, w2q, s2 = ([t.clone() for t in ts] for ts in model.routed_weights(0, topo.E))
        weights = (FfnWeights(w1, w2, swiglu_limit=limit),
                   ExpertWeights(LayerWeights(w1q, s1, format=model.weight_format),
                                 LayerWeights(w2q, s2, format=model.weight_format), swiglu_limit=limit))
    _warm_up(model, attention=False)
    # --graph: the iteration is captured once and replayed (docs/graph.md); nothing in it reads the host.
    # --batch-items: each receive takes every ready work item up to cfg.batch_rows rows (one W1 + one W2 launch).
    # Busy, every 4th item asks the store (a round trip); idle, every receive does: the run may be over, and an idle
    # receive has just waited --idle-poll already.
    policy = ServePolicy(row_budget=cfg.batch_rows, graph=cfg.graph, swiglu_limit=limit, weights=cfg.weights,
                         items_per_check=4)
    state = {"t0": None, "lane": None, "rebalanced": 0}
    events, totals = [], {"waiting": 0.0, "busy": 0.0, "rows": 0}

    def ready():
        state["t0"] = _wait_for_start(store, cfg, marks, aborted)
        state["lane"] = Lane(state["t0"])
        state["loop_start"] = time.time()

    kill_after = cfg.kill_ffn[1] if cfg.kill_ffn is not None and cfg.kill_ffn[0] == rank else None

    def on_iteration(it: Iteration) -> None:
        t0, lane = state["t0"], state["lane"]
        if kill_after is not None and it.served:
            die_after(kill_after, state)
        totals["waiting"] += it.received - it.start
        totals["busy"] += it.end - it.received
        # Telemetry only, after the items are done: which replica/layer each was, for the timeline (a batch: one
        # event per item it served, all with the batch's times).
        served = [item for item in WorkItem.table(it.records) if not item.is_empty]
        for item in served:
            info = {"replica": item.replica, "layer": item.layer, "rows": item.rows}
            totals["rows"] += info["rows"]
            events.append(dict(info, start_s=it.start - t0, recv_done_s=it.received - t0, end_s=it.end - t0))
            lane.add("item", it.start - t0, it.end - t0, **info)
        if served:
            lane.add("recv", it.start - t0, it.received - t0)
            lane.add("compute", it.received - t0, it.computed - t0)
            if it.end > it.computed:
                lane.add("send", it.computed - t0, it.end - t0)
        else:
            lane.idle(it.start - t0, it.end - t0)

    def shutdown():
        # The launcher's message: the run is over, with the Attention ranks it saw die (--keep-going).
        return Shutdown.parse(store.get(SHUTDOWN_KEY).decode()) if store.check([SHUTDOWN_KEY]) else None

    def between() -> None:
        k = state["rebalanced"] + 1
        if state["rebalanced"] < rebalances and _rebalance_due(store, topo, k):
            state["rebalanced"] = _rebalance(cfg, rank, store, connector, aborted, topo, k, state["lane"], weights)

    result = serve_ffn(connector, w1, w2, policy, ready=ready, device=device, on_iteration=on_iteration,
                       shutdown=shutdown, between=between)
    marks["done"] = time.time()
    total = marks["done"] - state["loop_start"]
    # --keep-going: serve_ffn fenced the Attention ranks the launcher saw die (its liveness watchdog may not have
    # yet); nothing is in flight now, so the dropped-round counts are final.
    lost = [{"replica": x.replica, "dead_rank": x.dead_rank, "dropped_rounds": x.dropped_rounds, "report": str(x)}
            for x in connector.lost_replicas.values()]
    waiting = totals["waiting"]
    return {"role": "ffn", "rank": rank, "items": events, "spans": state["lane"].spans, "recv_wait_s": waiting,
            "failovers": [dataclasses.asdict(f) for f in connector.failovers],
            "placement_epoch": connector.comm.placement_epoch,
            "compute_s": totals["busy"], "loop_s": total, "rows": totals["rows"],
            # Eager loops only (a replay launches no executor): W1 + W2 launches of this process while it served.
            "gmm_launches": result.launches, "idle_fraction": waiting / total if total > 0 else 0.0,
            "lost_replicas": lost, "startup": marks}


def main(argv=None) -> int:
    # Wall-time profile of this rank (the report's "wall"): when it reached each stage, on the time.time() clock.
    marks = {"process": process_start_time(), "main": time.time()}
    argv = sys.argv[1:] if argv is None else argv
    cfg = RunConfig.load(argv[0])
    rank = int(argv[1])
    try:
        return _main(cfg, rank, marks, join=argv[2:] == ["join"])
    finally:
        # A SIGKILLed launcher removes nothing: its ranks do, on every exit path (one may fail on the lost store
        # while building or connecting, before its watchdog runs); while the launcher lives this removes nothing.
        remove_if_orphaned(cfg.out_dir)


class _Connectors:
    """The connectors of one process, as the abort watchdog sees them: one abort reaches every one."""

    def __init__(self, connectors):
        self.connectors = list(connectors)

    def abort(self) -> None:
        for c in self.connectors:
            c.abort()


# Bound of the colocated process's joins of its init and FFN threads beyond --timeout: each thread's own waits are
# bounded by --timeout already, so this only covers their last store round trip.
_JOIN_MARGIN_S = 30.0


def _main_colocated(cfg: RunConfig, rank: int, marks: dict, built) -> int:
    """Process ``rank`` of a colocated world: Attention rank ``rank`` and FFN rank ``A + rank`` of one plane."""
    topo = built[2]
    ranks = [(rank, "attention"), (topo.A + rank, "ffn")]
    store = _store(cfg)
    connectors = [AsyncAFDConnector(r, role, cfg.connector_config(topo)) for r, role in ranks]
    aborted: dict = {}
    stop = threading.Event()
    watchdog = threading.Thread(target=_watch_abort, args=(store, _Connectors(connectors), aborted, stop,
                                                           os.getppid()), daemon=True)
    device = DeviceTimeline(cfg.timeout_s, aborted)
    outcome: dict = {}

    def guarded(key, fn, *args):
        try:
            outcome[key] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            outcome[key] = e

    def joined(thread: threading.Thread, what: str) -> None:
        thread.join(cfg.timeout_s + _JOIN_MARGIN_S)
        if thread.is_alive():
            raise RankFailed(f"{what} did not end within {cfg.timeout_s + _JOIN_MARGIN_S:g} s")

    try:
        watchdog.start()
        # The handshake waits for every rank of the plane, this process's other rank included: both at once.
        inits = [threading.Thread(target=guarded, args=(("init", i), _start_up, c.init_afd_connector, store, aborted),
                                  daemon=True) for i, c in enumerate(connectors)]
        for t in inits:
            t.start()
        for t, (r, role) in zip(inits, ranks):
            joined(t, f"the {role} rank {r}'s connector start-up")
        for i in range(2):
            if isinstance(outcome.get(("init", i)), BaseException):
                raise outcome[("init", i)]
        marks["connected"] = time.time()
        if "by" in aborted:
            raise RankFailed(f"start-up aborted: {aborted['by']}")
        ffn_marks = dict(marks)
        ffn = threading.Thread(target=guarded, args=(("run", 1), run_ffn, cfg, ranks[1][0], store, connectors[1],
                                                     aborted, built, ffn_marks, device), daemon=True)
        ffn.start()
        guarded(("run", 0), run_attention, cfg, rank, store, connectors[0], aborted, built, marks, device)
        if isinstance(outcome[("run", 0)], BaseException):
            connectors[1].abort()  # its FFN thread's waits end now; the process exits with the Attention error
            ffn.join(_JOIN_MARGIN_S)
            raise outcome[("run", 0)]
        # This Attention rank is done; its FFN rank serves the others' rounds until the launcher says all are.
        store.add(ATTENTION_DONE_KEY, 1)
        joined(ffn, f"FFN rank {ranks[1][0]}")
        for i, (r, role) in enumerate(ranks):
            result = outcome[("run", i)]
            if isinstance(result, BaseException):
                raise result
            result["loaded"] = getattr(built[0], "loaded", {})  # what this process read of a --checkpoint
            with open(os.path.join(cfg.out_dir, f"result-{r}.json"), "w") as f:
                json.dump(result, f)
        return 0
    except BaseException as e:  # report, then exit non-zero so the launcher aborts the others
        why = f" (run aborted: {aborted['by']})" if "by" in aborted else ""
        print(f"[process {rank}] colocated ranks {[r for r, _ in ranks]} failed{why}: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)
        if cfg.progress and not aborted:
            traceback.print_exc()
        return 3
    finally:
        _stop_watch(stop, watchdog)
        for c in connectors:
            c.close()


def _main(cfg: RunConfig, rank: int, marks: dict, join: bool = False) -> int:
    torch.set_num_threads(rank_threads(cfg.world_size))
    built = build(cfg)
    marks["built"] = time.time()
    topo = built[2]
    if cfg.mode == "colocated":
        return _main_colocated(cfg, rank, marks, built)
    role = "attention" if rank < topo.A else "ffn"
    store = _store(cfg)
    result_path, launched_as = os.path.join(cfg.out_dir, f"result-{rank}.json"), rank
    if join:  # the killed FFN rank, restarted: it joins the running world as its last FFN rank
        cfg, rank, built, connector = rejoin_setup(cfg, rank, built, UntilShutdown(store, SHUTDOWN_KEY))
    else:
        connector = AsyncAFDConnector(rank, role, cfg.connector_config(topo))
    aborted: dict = {}
    stop = threading.Event()
    watchdog = threading.Thread(target=_watch_abort, args=(store, connector, aborted, stop, os.getppid()),
                                daemon=True)
    try:
        # The watchdog runs during the handshake too: a rank that died starting aborts the others' handshake.
        watchdog.start()
        if join:
            _start_up(lambda guard: join_running_world(connector, guard, SHUTDOWN_KEY), store, aborted)
        else:
            _start_up(connector.init_afd_connector, store, aborted)
        marks["connected"] = time.time()
        if "by" in aborted:  # seen while the Comm was being made: its abort had no Comm to reach yet
            connector.abort()
            raise RankFailed(f"start-up aborted: {aborted['by']}")
        result = (run_attention if role == "attention" else run_ffn)(cfg, rank, store, connector, aborted, built,
                                                                     marks)
        if join:  # reported under the rank the launcher started it as; it served as the world's last FFN rank
            result["rank"], result["joined_as"] = launched_as, rank
        result["loaded"] = getattr(built[0], "loaded", {})  # what this rank read of a --checkpoint
        with open(result_path, "w") as f:
            json.dump(result, f)
        return 0
    except BaseException as e:  # report, then exit non-zero so the launcher aborts the others
        why = f" (run aborted: {aborted['by']})" if "by" in aborted else ""
        print(f"[rank {rank}] {role} failed{why}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        if cfg.progress and not aborted:
            traceback.print_exc()
        return 3
    finally:
        _stop_watch(stop, watchdog)
        connector.close()


if __name__ == "__main__":
    sys.exit(main())
