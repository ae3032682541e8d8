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
import threading
import time

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
    p.add_argument("--timeout", type=float, default=300.0, help="bound of device waits (s)")
    p.add_argument("--join-timeout", type=float, default=JOIN_TIMEOUT_S,
                   help="bound of waiting for the world's store and every peer to join (s); default 1800 s: an "
                        "engine joins after loading and profiling its model (the largest documented checkpoint, "
                        "DeepSeek-V3's 1.3 TB, at 1 GB/s); peers still missing are reported every 5 s meanwhile")
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


# --join-timeout's default: long enough for the largest checkpoint docs/integrations.md names (DeepSeek-V3, 671 B
# parameters, about 1.3 TB in bf16) to be read at 1 GB/s by an engine that then profiles its model before it joins.
JOIN_TIMEOUT_S = 1800.0
# How often a rank that waits for the world's store says so (who, since when, the bound).
REPORT_S = 5.0


class _EarlyStatus:
    """This rank's status in the world's store from before it loads anything (cam.rank_status): a background
    thread connects to the store (reporting every REPORT_S while it cannot, up to --join-timeout) and publishes
    the rank's description and state as soon as it can; states set before that are published on connecting."""

    def __init__(self, args, description: dict):
        # torch imported here, on the caller's thread: a first import racing the main thread's breaks both
        import torch.distributed  # noqa: F401

        self.args, self.description = args, description
        self.pub = self.store = None
        self.state_now = ("starting", "")
        self.since = time.time()
        self.deadline = time.monotonic() + args.join_timeout
        self._lock = threading.Lock()
        self.connected = threading.Event()
        self.stopped = threading.Event()
        self._thread = threading.Thread(target=self._connect, daemon=True, name="cam-ffn-status")
        self._thread.start()

    def _connect(self) -> None:
        from datetime import timedelta

        import torch.distributed

        from .rank_status import StatusPublisher
        from .serve.store import RUN_SECRET_ENV, SignedStore

        a = self.args
        next_report = time.monotonic() + REPORT_S
        while time.monotonic() < self.deadline and not self.stopped.is_set():
            try:
                store = torch.distributed.TCPStore(a.master_addr, a.master_port, None, is_master=False,
                                                   timeout=timedelta(seconds=min(2.0, a.join_timeout)),
                                                   wait_for_workers=False)
                store.set_timeout(timedelta(seconds=a.timeout))
                break
            except Exception:  # noqa: BLE001 - not up yet: retried and reported, never a store stack trace
                if time.monotonic() >= next_report:
                    next_report = time.monotonic() + REPORT_S
                    log.warning("ffn rank %d: the world's store at %s:%d not reachable since %s (%.0f s of "
                                "--join-timeout %.0f s)", a.rank, a.master_addr, a.master_port,
                                time.strftime("%H:%M:%S", time.localtime(self.since)), time.time() - self.since,
                                a.join_timeout)
                self.stopped.wait(0.2)
        else:
            return
        if self.stopped.is_set():
            return
        secret = os.environ.get(RUN_SECRET_ENV)
        signed = SignedStore(store, bytes.fromhex(secret), a.group) if secret else store
        with self._lock:
            self.store = store
            self.pub = StatusPublisher.publish(signed, a.group, "ffn", os.getpid(), a.rank, self.description)
            self.pub.set_state(*self.state_now)
        self.connected.set()

    def state(self, state: str, detail: str = "") -> None:
        with self._lock:
            self.state_now = (state, detail)
            if self.pub is not None:
                self.pub.set_state(state, detail)

    def refused(self, reason: str, wait_s: float = 1.0) -> None:
        """Publishes the refusal if the store is (or within ``wait_s`` becomes) reachable, so the peers name it."""
        self.connected.wait(wait_s)
        with self._lock:
            if self.pub is not None:
                self.pub.close("refused", reason)

    def stop(self) -> None:
        """Ends the connecting thread (this rank exits) and the heartbeat."""
        self.stopped.set()
        with self._lock:
            if self.pub is not None:
                self.pub.close()

    def wait_store(self):
        """The connected store, or None once --join-timeout passed without one."""
        self.connected.wait(max(0.0, self.deadline - time.monotonic()))
        return self.store


def _description(args) -> dict:
    """What this rank expects of its world, in cam.Comm's plane-description names: compared with every peer's."""
    return {"D": args.replicas, "P": args.participants, "F": args.ffn_ranks, "Bmax": args.max_tokens,
            "slots": args.slots}


def _store_listening(args) -> bool:
    """Whether anything listens at the store's address (a plain connect: no torch import for a refused rank)."""
    import socket

    try:
        with socket.create_connection((args.master_addr, args.master_port), timeout=1.0):
            return True
    except OSError:
        return False


def _precheck(args) -> None:
    """The command line against itself and config.json, before torch or a weight is loaded: a wrong --rank or
    topology is refused in well under a second (ValueError naming the flag)."""
    from . import checkpoint_config as ckpt

    for flag, v in (("--replicas", args.replicas), ("--participants", args.participants),
                    ("--ffn-ranks", args.ffn_ranks), ("--max-tokens", args.max_tokens), ("--slots", args.slots)):
        if v < 1:
            raise ValueError(f"{flag} {v} must be >= 1")
    A = args.replicas * args.participants
    if not A <= args.rank < A + args.ffn_ranks:
        raise ValueError(f"--rank {args.rank} is not an FFN rank: with -D {args.replicas} -P {args.participants} "
                         f"-F {args.ffn_ranks} the Attention ranks are [0, {A}) and the FFN ranks [{A}, "
                         f"{A + args.ffn_ranks})")
    who = f"--checkpoint {args.checkpoint}"
    experts = ckpt.config_int(ckpt.model_section(ckpt.read_config(args.checkpoint, who=who)), "experts",
                              who=f"{who}: config.json")
    if args.ffn_ranks > experts:
        raise ValueError(f"--ffn-ranks {args.ffn_ranks}: more FFN ranks than the checkpoint's {experts} routed experts")


def _load(args, early=None):
    """Topology and this rank's weights from the command line and the checkpoint; ValueError on refusal."""
    import torch

    from . import checkpoint_identity, convert
    from .connector import ConnectorConfig
    from .ffn_weights import load_rank_experts
    from .placement import Placement
    from .topology import Topology

    topo = Topology.from_checkpoint(args.checkpoint, D=args.replicas, P=args.participants, F=args.ffn_ranks,
                                    Bmax=args.max_tokens, slots=args.slots, capacity=args.capacity)
    if not topo.A <= args.rank < topo.world_size:
        raise ValueError(f"--rank {args.rank} is not an FFN rank: FFN ranks are [{topo.A}, {topo.world_size})")
    f = args.rank - topo.A
    _, topo_limit = convert.checkpoint_config(args.checkpoint, who="cam-ffn")
    policy = ServePolicy(row_budget=args.row_budget, graph=args.graph, swiglu_limit=topo_limit,
                         weights=args.weights).validated(topo, f"{args.row_budget_flag} {args.row_budget}")
    if args.group_size is not None and args.weights != "w4a8":
        raise ValueError("--group-size needs --weights w4a8")
    # F not dividing E: the contiguous placement's table (floor or ceil E / F experts per rank), on every rank
    placement = None if topo.contiguous_placement else Placement.contiguous(topo.E, topo.F, topo.L)
    held = [e for e in placement.slot_experts(0, f) if e >= 0] if placement else [f * topo.R, (f + 1) * topo.R - 1]
    # Only this rank's experts are read from the files (cam.ffn_weights.load_rank_experts), not the whole model.
    loaded = {}
    experts, info = load_rank_experts(args.checkpoint, range(held[0], held[-1] + 1), loaded=loaded,
                                      progress=None if early is None else
                                      lambda n, total: early.state("loading", f"MoE layer {n} of {total}"))
    ident = checkpoint_identity.identity(args.checkpoint)
    checked = checkpoint_identity.check_loaded(ident, loaded, f"ffn rank {args.rank}")
    log.info("ffn rank %d: %d expert tensors loaded, their content hashes the checkpoint identity's (%s)", args.rank,
             checked, ident["digest"][:12])
    w1, w2 = convert.layer_weights(experts, range(0, held[-1] + 1 - held[0]), bits=4 if args.weights == "w4a8" else 8,
                                   group_size=args.group_size, slots=topo.R)
    cfg = ConnectorConfig(topology=topo, master_addr=args.master_addr, master_port=args.master_port,
                          dtype=torch.bfloat16, timeout_s=args.timeout, idle_poll_s=args.idle_poll, group=args.group,
                          placement=placement, checkpoint={k: v for k, v in ident.items() if k != "tensors"},
                          join_timeout_s=args.join_timeout)
    return cfg, w1, w2, info, policy


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s cam-ffn[%(process)d] %(levelname)s %(message)s")
    if not os.path.isdir(args.checkpoint):
        log.error("--checkpoint %s is not a directory", args.checkpoint)
        return EXIT_USAGE
    try:
        _precheck(args)
    except ValueError as e:
        log.error("refused: %s", e)
        if _store_listening(args):  # tell the peers why, so they name this rank instead of waiting for it
            status = _EarlyStatus(args, _description(args))
            status.refused(f"{e}", wait_s=5.0)
            status.stop()
        return EXIT_USAGE
    # The store's C++ client logs each failed connect attempt with a stack trace (at ERROR): this rank retries and
    # reports the wait itself (_EarlyStatus), so a refusal or a late store never comes after a C++ stack trace.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    early = _EarlyStatus(args, _description(args))
    try:
        return _serve(args, early)
    finally:
        early.stop()


def _serve(args, early) -> int:
    try:
        cfg, w1, w2, info, policy = _load(args, early)
    except (ValueError, KeyError, TypeError, OSError) as e:
        log.error("refused: %s", e)
        early.refused(f"{e}")
        return EXIT_USAGE
    early.state("joining")
    log.info("checkpoint %s: %s, MoE layers %s, weights %s%s", args.checkpoint, info["model_type"],
             json.dumps(info["layers"]), args.weights,
             "" if args.group_size is None else f" (groups of {args.group_size} K rows)")
    from .connector import AsyncAFDConnector

    store = early.wait_store()
    if store is None:
        log.error("ffn rank %d: the world's store at %s:%d was not reachable within --join-timeout %g s", args.rank,
                  args.master_addr, args.master_port, args.join_timeout)
        return EXIT_FAILED
    connector = AsyncAFDConnector(args.rank, "ffn", cfg)
    try:
        connector.init_afd_connector(store)
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
