"""``cam-ffn``: one FFN rank of an async AFD world as a server process.

Its one job is the command line: ``cam-ffn --checkpoint DIR --rank N ...`` loads the rank's routed experts of every
MoE layer from a transformers checkpoint directory through :mod:`cam.convert` and serves them with
:func:`cam.serve_ffn` (:mod:`cam.serve.server`, re-exported here where users import it), under one
:class:`cam.serve.ServePolicy` (docs/connector.md, "cam-ffn"). ``cam-ffn --help`` answers without importing torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys

from .serve.policy import ServePolicy, add_row_budget_flag
from .serve.server import ServeResult, serve_ffn

__all__ = ["ServeResult", "main", "serve_ffn"]

log = logging.getLogger("cam.ffn")

# Exit codes of cam-ffn: a clean stop, a failure while serving (the plane aborted, a timeout, a refused message),
# a refused command line or checkpoint.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


# ----------------------------------------------------------------------------- cam-ffn


class _DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's default in --help, unless its help already says it in words."""

    def _get_help_string(self, action):
        return action.help if "default" in (action.help or "") else super()._get_help_string(action)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cam-ffn", description="Serve one FFN rank of an async AFD world: the routed "
                                "experts of a transformers checkpoint through cam's data plane (docs/connector.md).",
                                formatter_class=_DefaultsHelp)
    p.add_argument("--checkpoint", required=True, help="transformers checkpoint directory (config.json, *.safetensors)")
    p.add_argument("--rank", type=int, required=True, help="this FFN rank's global rank, in [A, A + F)")
    p.add_argument("--replicas", "-D", type=int, default=1, help="Attention DP replicas D")
    p.add_argument("--participants", "-P", type=int, default=1, help="Attention ranks per replica P")
    p.add_argument("--ffn-ranks", "-F", type=int, default=1,
                   help="FFN ranks F (the experts split contiguously: floor or ceil E / F each)")
    p.add_argument("--max-tokens", type=int, required=True, help="Bmax: tokens per Attention rank per MoE layer")
    p.add_argument("--slots", type=int, default=2, help="rounds in flight per Attention rank")
    p.add_argument("--capacity", type=int, default=None, help="rows per work item (default: the worst case)")
    p.add_argument("--master-addr", default="127.0.0.1", help="the world's rendezvous host (rank 0's store)")
    p.add_argument("--master-port", type=int, default=29555, help="the world's rendezvous port")
    p.add_argument("--group", default="afd", help="the world's name in the store")
    p.add_argument("--graph", action="store_true", help="replay one captured FFN iteration instead of eager ops")
    add_row_budget_flag(p, help="serve batches of ready work items up to this many rows (one W1 and one W2 launch "
                                "each; at least one work item's rows; None: one work item per iteration)")
    p.add_argument("--timeout", type=float, default=300.0, help="bound of device waits and the rendezvous (s)")
    p.add_argument("--idle-poll", type=float, default=0.05, help="idle receive poll (s): shutdown latency")
    p.add_argument("--max-serve", type=float, default=None, help="stop after this many seconds (default: never)")
    p.add_argument("--weights", choices=["w8a8", "w4a8"], default="w8a8",
                   help="the routed experts' format; w4a8: int4 values (cam.quantize_weight(bits=4)) held packed "
                        "(half the bytes) and run by the int4 kernels (docs/gmm.md §9)")
    p.add_argument("--group-size", type=int, default=None,
                   help="with --weights w4a8: scales per group of this many K rows (a multiple of 64 dividing H and "
                        "I); default per output channel")
    p.add_argument("--log-level", default="INFO", help="logging level of the server's messages (stderr)")
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
    policy = ServePolicy(row_budget=args.row_budget, graph=args.graph, swiglu_limit=info["swiglu_limit"],
                         weights=args.weights).validated(topo, f"{args.row_budget_flag} {args.row_budget}")
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
    return cfg, w1, w2, info, policy


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s cam-ffn[%(process)d] %(levelname)s %(message)s")
    if not os.path.isdir(args.checkpoint):
        log.error("--checkpoint %s is not a directory", args.checkpoint)
        return EXIT_USAGE
    try:
        cfg, w1, w2, info, policy = _load(args)
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
        result = serve_ffn(connector, w1, w2, policy, max_serve_s=args.max_serve)
    except Exception as e:  # noqa: BLE001 - logged by serve_ffn or here, then a failing exit status
        log.error("ffn rank %d: %s: %s", args.rank, type(e).__name__, e)
        return EXIT_FAILED
    finally:
        connector.close()
    print(json.dumps(dataclasses.asdict(result)), flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
