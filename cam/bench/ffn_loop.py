"""cam-bench ffn-loop: host cost per FFN work item, eager calls vs the same chain captured once in a cam.Graph and
replayed, in one run. By default the chain is W1 -> W2 on one FFN rank's receive buffer; with --plane it is the
whole FFN iteration (dispatch_recv -> W1 -> W2 -> combine_send) on an in-process plane whose Attention rank (a
thread) keeps rounds coming, as the connector's CapturedFFN runs it.

The measure is the calling thread's CPU time (time.thread_time), not wall time: the question is how much host work
an item costs, and a thread blocked in a synchronize uses none. Beside it, the C library's own counts of host
synchronizes, host reads of device data and host-to-device copies per item (camGetHostActivity). Eager mode
synchronizes after every op (torch CPU semantics) and reads each op's status record back; replay mode launches the
graph once per item and synchronizes once per --batch items (the status records are read at that synchronize, not
per item). The target is replay >= 5x less host CPU per item and 0 reads per item."""

import time

from .common import int_in, json_path, print_table, write_json

# A scaled DeepSeek-like FFN rank (as cam-bench gmm): hidden, moe intermediate, local experts, layers.
_HIDDEN, _INTER, _EXPERTS, _LAYERS = 1024, 256, 8, 3


def _weights(g, k, n):
    import torch

    ws = [torch.randint(-128, 128, (_EXPERTS, k, n), generator=g, dtype=torch.int8) for _ in range(_LAYERS)]
    ss = [torch.rand(_EXPERTS, n, generator=g) * 1e-2 + 1e-3 for _ in range(_LAYERS)]
    import cam

    return cam.LayerWeights(ws, ss)


def _activity():
    from cam import _C

    return _C.host_activity()


def _per_item(before: dict, after: dict, items: int) -> dict:
    return {k: (after[k] - before[k]) / items for k in before}


def _measure(step, items: int) -> tuple[float, dict]:
    before = _activity()
    t0 = time.thread_time()
    for _ in range(items):
        step()
    cpu = time.thread_time() - t0
    return cpu / items, _per_item(before, _activity(), items)


def _run(args) -> int:
    import torch

    import cam

    g = torch.Generator().manual_seed(7)
    w1 = _weights(g, _HIDDEN, 2 * _INTER)
    w2 = _weights(g, _INTER, _HIDDEN)
    m = args.rows
    x = torch.randint(-128, 128, (m, _HIDDEN), generator=g, dtype=torch.int8)
    xs = torch.rand(m, generator=g) * 1e-2 + 1e-3
    counts = [m // _EXPERTS] * _EXPERTS
    counts[-1] += m - sum(counts)
    gl = torch.tensor(counts if not args.idle else [0] * _EXPERTS, dtype=torch.int64)
    li = torch.tensor([1], dtype=torch.int64)
    y = torch.empty(m, _INTER, dtype=torch.int8)
    ys = torch.empty(m)
    out = torch.empty(m, _HIDDEN, dtype=torch.bfloat16)

    def eager():
        cam.ops.gmm_swiglu_quant_multi_layer(x, xs, w1, gl, li, 1, out=(y, ys))
        cam.ops.gmm_multi_layer(y, ys, w2, gl, li, 1, out=out)

    eager()  # warm-up (builds the persistent address tables)
    want = out.clone()
    graph = cam.Graph()
    with graph.capture():
        eager()
    graph.replay()
    if not torch.equal(out.view(torch.int16), want.view(torch.int16)):
        raise RuntimeError("replay output differs from eager output: the benchmark would compare different work")

    results, rows = [], []
    for rep in range(args.rounds):
        e_cpu, e_act = _measure(eager, args.items)
        batches = max(1, args.items // args.batch)
        before = _activity()
        t0 = time.thread_time()
        for _ in range(batches):
            for _ in range(args.batch):
                graph.replay(synchronize=False)
            graph.synchronize()
        r_cpu = (time.thread_time() - t0) / (batches * args.batch)
        r_act = _per_item(before, _activity(), batches * args.batch)
        results.append({"round": rep, "eager_cpu_s_per_item": e_cpu, "replay_cpu_s_per_item": r_cpu,
                        "eager_over_replay": e_cpu / r_cpu, "eager_activity_per_item": e_act,
                        "replay_activity_per_item": r_act})
        rows.append([rep, f"{e_cpu * 1e6:.0f}", f"{r_cpu * 1e6:.0f}", f"{e_cpu / r_cpu:.1f}",
                     f"{e_act['synchronizes']:.2f}/{r_act['synchronizes']:.3f}",
                     f"{e_act['device_reads']:.2f}/{r_act['device_reads']:.3f}",
                     f"{e_act['host_to_device_copies']:.2f}/{r_act['host_to_device_copies']:.3f}"])
    graph.reset()
    print_table(
        f"ffn-loop (W1 -> W2, M={m}, {'idle items' if args.idle else 'busy items'}) on backend '{cam.backend()}': "
        f"host CPU per item (thread_time), eager vs replay (one synchronize per {args.batch} replays)",
        ["round", "eager us/item", "replay us/item", "eager/replay", "syncs e/r", "dev reads e/r", "h2d copies e/r"],
        rows,
    )
    write_json(args.json, "ffn-loop", results, rows_per_item=m, hidden=_HIDDEN, inter=_INTER,
               experts=_EXPERTS, layers=_LAYERS, batch=args.batch, idle=args.idle,
               measure="calling thread CPU seconds per item (time.thread_time); activity from camGetHostActivity")
    return 0


def _run_plane(args) -> int:
    """The whole FFN iteration on a live plane. An Attention thread dispatches each phase's rounds (slots in flight)
    and combines them; the FFN thread (this one) loops until every round of the phase came back. Idle iterations
    (nothing ready yet) are part of the loop's cost, so the figure is host CPU per *served* item."""
    import torch

    import threading
    import uuid

    import cam
    from cam.connector import CapturedFFN, ffn_iteration

    g = torch.Generator().manual_seed(7)
    tokens = max(1, args.rows // 2)
    # as many rounds in flight as one replay batch serves, so a batch is not mostly idle polls
    topo = cam.Topology(D=1, P=1, F=1, E=_EXPERTS, K=2, H=_HIDDEN, Bmax=tokens, L=_LAYERS, slots=max(2, args.batch))
    w1 = _weights(g, _HIDDEN, 2 * _INTER)
    w2 = _weights(g, _INTER, _HIDDEN)
    x = (torch.randn(tokens, _HIDDEN, generator=g) * 2).to(torch.bfloat16)
    ids = torch.randint(0, _EXPERTS, (tokens, topo.K), generator=g, dtype=torch.int32)
    weights = torch.rand(tokens, topo.K, generator=g)
    group = f"ffn-loop-{uuid.uuid4().hex[:10]}"
    phase_rounds: list = []  # the Attention thread's work orders: rounds per phase, None to stop
    order, finished, failed = threading.Event(), threading.Event(), []
    deadline_s = 600.0

    def attention():
        try:
            with cam.Comm(topo, 0, group=group, timeout_s=120.0, idle_poll_s=0.005) as comm:
                while True:
                    if not order.wait(deadline_s):
                        raise TimeoutError("ffn-loop: the FFN thread gave no work order")
                    order.clear()
                    n = phase_rounds.pop(0)
                    if n is None:
                        return
                    in_flight = 0
                    for layer in [r % topo.L for r in range(n)]:
                        if in_flight == topo.slots:
                            cam.ops.combine_recv(comm, ids, weights)
                            in_flight -= 1
                        cam.ops.dispatch_send(comm, x, ids, layer)
                        in_flight += 1
                    for _ in range(in_flight):
                        cam.ops.combine_recv(comm, ids, weights)
                    finished.set()
        except BaseException as e:  # noqa: BLE001 - reported by the FFN thread
            failed.append(e)
            finished.set()

    def phase(n: int, step) -> tuple[float, dict, int]:
        finished.clear()
        phase_rounds.append(n)
        before = _activity()
        t0 = time.thread_time()
        order.set()
        iterations, end = 0, time.monotonic() + deadline_s
        while not finished.is_set():
            if time.monotonic() > end:
                raise TimeoutError(f"ffn-loop: {n} rounds did not come back within {deadline_s} s")
            iterations += step()
        cpu = time.thread_time() - t0
        if failed:
            raise RuntimeError(f"ffn-loop: the Attention rank failed: {failed[0]!r}") from failed[0]
        return cpu / n, _per_item(before, _activity(), n), iterations

    thread = threading.Thread(target=attention, daemon=True, name="ffn-loop-attention")
    thread.start()
    results, rows = [], []
    with cam.Comm(topo, 1, group=group, timeout_s=120.0, idle_poll_s=0.005) as comm:
        def eager_step() -> int:
            ffn_iteration(comm, w1, w2)
            return 1

        captured = CapturedFFN(comm, w1, w2)

        def replay_step() -> int:
            captured.step(args.batch)
            return args.batch

        phase(2, eager_step)  # warm-up: address tables, first-call costs
        phase(2, replay_step)
        for rep in range(args.rounds):
            e_cpu, e_act, e_it = phase(args.items, eager_step)
            r_cpu, r_act, r_it = phase(args.items, replay_step)
            results.append({"round": rep, "eager_cpu_s_per_item": e_cpu, "replay_cpu_s_per_item": r_cpu,
                            "eager_over_replay": e_cpu / r_cpu, "eager_activity_per_item": e_act,
                            "replay_activity_per_item": r_act, "eager_iterations": e_it, "replay_iterations": r_it})
            rows.append([rep, f"{e_cpu * 1e6:.0f}", f"{r_cpu * 1e6:.0f}", f"{e_cpu / r_cpu:.1f}",
                         f"{e_act['synchronizes']:.2f}/{r_act['synchronizes']:.3f}",
                         f"{e_act['device_reads']:.2f}/{r_act['device_reads']:.3f}",
                         f"{e_act['host_to_device_copies']:.2f}/{r_act['host_to_device_copies']:.3f}"])
        captured.close()
        phase_rounds.append(None)
        order.set()
        thread.join(deadline_s)
    print_table(
        f"ffn-loop --plane (dispatch_recv -> W1 -> W2 -> combine_send, {tokens} tokens x K={topo.K} per round) on "
        f"backend '{cam.backend()}': host CPU of the FFN thread per served item (thread_time, idle iterations "
        f"included), eager vs replay (one synchronize per {args.batch} replays); the activity counts are "
        f"process-wide, so they include the Attention thread's 2 synchronizes and reads per round",
        ["round", "eager us/item", "replay us/item", "eager/replay", "syncs e/r", "dev reads e/r", "h2d copies e/r"],
        rows,
    )
    write_json(args.json, "ffn-loop-plane", results, tokens=tokens, k=topo.K, hidden=_HIDDEN, inter=_INTER,
               experts=_EXPERTS, layers=_LAYERS, batch=args.batch,
               measure="FFN thread CPU seconds per served item (time.thread_time), idle iterations included; "
                       "activity from camGetHostActivity is process-wide (the Attention thread's dispatch_send and "
                       "combine_recv add 2 synchronizes and their status reads per round)")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("ffn-loop", help="host CPU per FFN work item, eager vs captured replay")
    p.add_argument("--json", metavar="PATH", type=json_path, help="write results as JSON")
    # Bounds: rows up to a large prefill micro-batch; --batch is also the plane's slots in flight (at most 64).
    p.add_argument("--rows", type=int_in(1, 8192), default=128,
                   help="rows per work item (receive capacity, 1-8192, default 128)")
    p.add_argument("--items", type=int_in(1, 100_000), default=64, help="work items per measurement (default 64)")
    p.add_argument("--batch", type=int_in(1, 64), default=16,
                   help="replays per synchronize in replay mode (1-64, default 16)")
    p.add_argument("--rounds", type=int_in(1, 1000), default=3, help="measurement rounds (default 3)")
    p.add_argument("--idle", action="store_true", help="empty work items (all counts zero)")
    p.add_argument("--plane", action="store_true",
                   help="the whole FFN iteration (receive, W1, W2, send) on an in-process plane")
    p.set_defaults(run=lambda args: _run_plane(args) if args.plane else _run(args))
