"""``cam-ffn`` / :func:`cam.serve_ffn`: one FFN rank of an async AFD world as a server.

The rank's loop is the connector's FFN iteration (``dispatch_recv → W1 → W2 → combine_send``), eager or replayed
from one captured graph (``graph=True``). Between iterations, on the host and never from device values, it reads the
serving messages of the store (docs/protocol.md, "Shutdown"): a shutdown request, or every Attention rank having
finished. Each iteration idles at most ``idle_poll_s`` when nothing is ready, so an idle rank sees the message within
about one idle poll plus one store read. Every wait is bounded: the data plane's by the connector's ``timeout_s``,
the whole serve (optionally) by ``max_serve_s``.

``cam-ffn --checkpoint DIR --rank N ...`` loads the rank's routed experts of every MoE layer from a transformers
checkpoint directory through :mod:`cam.convert` and serves them (docs/connector.md, "cam-ffn").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import threading
import time
from typing import Optional

__all__ = ["ServeResult", "main", "serve_ffn"]

log = logging.getLogger("cam.ffn")

# Exit codes of cam-ffn: a clean stop, a failure while serving (the plane aborted, a timeout, a refused message),
# a refused command line or checkpoint.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


@dataclasses.dataclass
class ServeResult:
    """What one :func:`serve_ffn` call did.

    Attributes:
        rank: the FFN rank's global rank.
        iterations: FFN iterations run (eager) or replayed (graph), empty ones included.
        reason: why it stopped (the shutdown request's text, ``"attention finished"``, ``"stopped"`` for the
            ``stop`` event, ``"max_serve_s"``).
        seconds: wall time of the loop.
    """

    rank: int
    iterations: int
    reason: str
    seconds: float


def serve_ffn(connector, w1, w2, *, graph: bool = False, stop: Optional[threading.Event] = None,
              ready: Optional[threading.Event] = None, max_serve_s: Optional[float] = None,
              items_per_check: int = 1, row_budget: Optional[int] = None,
              swiglu_limit: Optional[float] = None) -> ServeResult:
    """Serves FFN rank ``connector`` (an initialized FFN :class:`cam.connector.AsyncAFDConnector`) with routed
    expert weights ``w1`` / ``w2`` (:class:`cam.LayerWeights` of its experts, every MoE layer) until a shutdown
    message, ``stop`` being set, or ``max_serve_s``.

    Args:
        graph: capture the iteration once and replay it (:class:`cam.connector.CapturedFFN`) instead of eager ops.
        ready: set once the loop is about to run its first iteration (after the capture with ``graph``), when it
            also tells the Attention ranks through the store (``connector.mark_serving()``; a capture that fails
            is reported there too, so their ``wait_ffn_serving`` raises naming this rank instead of timing out).
        items_per_check: iterations (replays) between two reads of the store's messages (>= 1); each idles at
            most ``idle_poll_s``, so this many idle polls bound how late a message is seen.
        row_budget: serve batches: each iteration takes every ready replica's work item that fits this many rows
            (``dispatch_recv(comm, row_budget=...)``, at least one work item's ``recv_rows``) and serves them with
            one W1 and one W2 launch (:func:`cam.connector.ffn_batch_iteration`), outputs bit for bit those of
            the one-item loop. A batched receive idles like the one-item one, so the messages are seen as late.
        swiglu_limit: DeepSeek-V4's clamped SwiGLU in W1 (``cam.convert.common_swiglu_limit`` of the model's
            layers; None: the plain SwiGLU), in every mode: eager, ``graph`` (part of the captured W1 launch) and
            ``row_budget``.

    Raises what the plane raised (after logging it); the connector stays the caller's to close.
    """
    from .layer_weights import LayerWeights

    if getattr(connector, "role", None) != "ffn" or not connector.is_initialized:
        raise ValueError("serve_ffn: connector must be an initialized FFN-rank AsyncAFDConnector")
    if not isinstance(w1, LayerWeights) or not isinstance(w2, LayerWeights):
        raise TypeError("serve_ffn: w1 and w2 must be cam.LayerWeights")
    if isinstance(items_per_check, bool) or not isinstance(items_per_check, int) or items_per_check < 1:
        raise ValueError(f"serve_ffn: items_per_check must be an int >= 1, got {items_per_check!r}")
    if max_serve_s is not None and not max_serve_s > 0:
        raise ValueError(f"serve_ffn: max_serve_s must be > 0 seconds, got {max_serve_s!r}")
    from .convert import _check_limit

    _check_limit("serve_ffn", swiglu_limit)
    topo = connector.config.topology
    if row_budget is not None:
        from .connector import _check_row_budget

        _check_row_budget("serve_ffn", topo, row_budget)
    if w1.num_experts != topo.R or w2.num_experts != topo.R or w1.num_layers != topo.L:
        raise ValueError(f"serve_ffn: the weights hold {w1.num_experts} experts x {w1.num_layers} layers, the "
                         f"topology wants R = {topo.R} experts x L = {topo.L} layers per FFN rank")
    first = (connector.rank - topo.A) * topo.R
    log.info("ffn rank %d serving experts [%d, %d) of %d MoE layers, H = %d, I = %d, %s, %s, %s, idle poll %.3f s",
             connector.rank, first, first + topo.R, topo.L, topo.H, w2.k, "graph replay" if graph else "eager",
             "one work item per iteration" if row_budget is None else f"batches of up to {row_budget} rows",
             "SwiGLU" if swiglu_limit is None else f"clamped SwiGLU (swiglu_limit {swiglu_limit:g})",
             connector.config.idle_poll_s)
    try:
        captured = connector.capture_ffn(w1, w2, row_budget, swiglu_limit=swiglu_limit) if graph else None
    except BaseException as e:
        log.error("ffn rank %d failed before serving: %s: %s", connector.rank, type(e).__name__, e)
        connector.mark_serving(failure=f"{type(e).__name__}: {e}")
        raise
    # Attention ranks wait for this before their first round (AsyncAFDConnector.wait_ffn_serving).
    connector.mark_serving()
    if ready is not None:
        ready.set()
    start = time.monotonic()
    iterations, reason = 0, None
    try:
        while reason is None:
            if captured is not None:
                connector.ffn_graph_step(captured, items_per_check)
            else:
                for _ in range(items_per_check):
                    connector.ffn_step(w1, w2, row_budget, swiglu_limit=swiglu_limit)
            iterations += items_per_check
            reason = connector.shutdown_requested()
            if reason is None and stop is not None and stop.is_set():
                reason = "stopped"
            if reason is None and max_serve_s is not None and time.monotonic() - start > max_serve_s:
                reason = "max_serve_s"
    except BaseException as e:
        log.error("ffn rank %d failed after %d iterations: %s: %s", connector.rank, iterations, type(e).__name__, e)
        raise
    finally:
        if captured is not None:
            captured.close()
    seconds = time.monotonic() - start
    lost = connector.lost_replicas
    for replica in sorted(lost):
        log.warning("ffn rank %d: %s", connector.rank, lost[replica])
    log.info("ffn rank %d stopped (%s) after %d iterations in %.2f s", connector.rank, reason, iterations, seconds)
    return ServeResult(connector.rank, iterations, reason, seconds)


# ----------------------------------------------------------------------------- cam-ffn


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cam-ffn", description="Serve one FFN rank of an async AFD world: the routed "
                                "experts of a transformers checkpoint through cam's data plane (docs/connector.md).")
    p.add_argument("--checkpoint", required=True, help="transformers checkpoint directory (config.json, *.safetensors)")
    p.add_argument("--rank", type=int, required=True, help="this FFN rank's global rank, in [A, A + F)")
    p.add_argument("--replicas", "-D", type=int, default=1, help="Attention DP replicas D")
    p.add_argument("--participants", "-P", type=int, default=1, help="Attention ranks per replica P")
    p.add_argument("--ffn-ranks", "-F", type=int, default=1,
                   help="FFN ranks F (the experts split contiguously: floor or ceil E / F each)")
    p.add_argument("--max-tokens", type=int, required=True, help="Bmax: tokens per Attention rank per MoE layer")
    p.add_argument("--slots", type=int, default=2, help="rounds in flight per Attention rank")
    p.add_argument("--capacity", type=int, default=None, help="rows per work item (default: the worst case)")
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29555)
    p.add_argument("--group", default="afd", help="the world's name in the store")
    p.add_argument("--graph", action="store_true", help="replay one captured FFN iteration instead of eager ops")
    p.add_argument("--row-budget", type=int, default=None,
                   help="serve batches of ready work items up to this many rows (one W1 and one W2 launch each)")
    p.add_argument("--timeout", type=float, default=300.0, help="bound of device waits and the rendezvous (s)")
    p.add_argument("--idle-poll", type=float, default=0.05, help="idle receive poll (s): shutdown latency")
    p.add_argument("--max-serve", type=float, default=None, help="stop after this many seconds (default: never)")
    p.add_argument("--weights", choices=["w8a8", "w4a8"], default="w8a8",
                   help="the routed experts' format; w4a8: int4 values (cam.quantize_weight(bits=4)) in int8 storage "
                        "on today's kernels (docs/gmm.md §9)")
    p.add_argument("--group-size", type=int, default=None,
                   help="with --weights w4a8: scales per group of this many K rows (a multiple of 32 dividing H and "
                        "I); default per output channel")
    p.add_argument("--log-level", default="INFO")
    return p


def _load(args):
    """Topology and this rank's weights from the command line and the checkpoint; ValueError on refusal."""
    import torch

    from . import convert
    from .connector import ConnectorConfig
    from .placement import Placement
    from .topology import Topology

    experts, info = convert.load_checkpoint_experts(args.checkpoint)
    topo = Topology.from_checkpoint(args.checkpoint, D=args.replicas, P=args.participants, F=args.ffn_ranks,
                                    Bmax=args.max_tokens, slots=args.slots, capacity=args.capacity)
    if not topo.A <= args.rank < topo.world_size:
        raise ValueError(f"--rank {args.rank} is not an FFN rank: FFN ranks are [{topo.A}, {topo.world_size})")
    f = args.rank - topo.A
    if args.row_budget is not None and args.row_budget < topo.recv_rows:
        raise ValueError(f"--row-budget {args.row_budget} is below one work item's rows (recv_rows = "
                         f"{topo.recv_rows} for this topology)")
    if args.group_size is not None and args.weights != "w4a8":
        raise ValueError("--group-size needs --weights w4a8")
    # F not dividing E: the contiguous placement's table (floor or ceil E / F experts per rank), on every rank
    placement = None if topo.contiguous_placement else Placement.contiguous(topo.E, topo.F, topo.L)
    held = [e for e in placement.slot_experts(0, f) if e >= 0] if placement else [f * topo.R, (f + 1) * topo.R - 1]
    w1, w2 = convert.layer_weights(experts, range(held[0], held[-1] + 1), bits=4 if args.weights == "w4a8" else 8,
                                   group_size=args.group_size, slots=topo.R)
    cfg = ConnectorConfig(topology=topo, master_addr=args.master_addr, master_port=args.master_port,
                          dtype=torch.bfloat16, timeout_s=args.timeout, idle_poll_s=args.idle_poll, group=args.group,
                          placement=placement)
    return cfg, w1, w2, info


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s cam-ffn[%(process)d] %(levelname)s %(message)s")
    if not os.path.isdir(args.checkpoint):
        log.error("--checkpoint %s is not a directory", args.checkpoint)
        return EXIT_USAGE
    try:
        cfg, w1, w2, info = _load(args)
    except (ValueError, KeyError, TypeError, OSError) as e:
        log.error("refused: %s", e)
        return EXIT_USAGE
    log.info("checkpoint %s: %s, MoE layers %s, weights %s%s", args.checkpoint, info["model_type"],
             json.dumps(info["layers"]), args.weights,
             "" if args.group_size is None else f" (groups of {args.group_size} K rows)")
    from .connector import AsyncAFDConnector

    connector = AsyncAFDConnector(args.rank, "ffn", cfg)
    try:
        connector.init_afd_connector()
        result = serve_ffn(connector, w1, w2, graph=args.graph, max_serve_s=args.max_serve,
                           row_budget=args.row_budget, swiglu_limit=info["swiglu_limit"])
    except Exception as e:  # noqa: BLE001 - logged by serve_ffn or here, then a failing exit status
        log.error("ffn rank %d: %s: %s", args.rank, type(e).__name__, e)
        return EXIT_FAILED
    finally:
        connector.close()
    print(json.dumps(dataclasses.asdict(result)), flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
