"""One rank of a processes-as-ranks data plane over POSIX shared memory (run by tests/test_shm.py). Its bootstrap
(rank_args) and round-trip body (round_trip) are shared with tests/_npu_rank.py."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch.distributed import FileStore  # noqa: E402

import cam  # noqa: E402
from _dataplane_harness import attention_body, ffn_server, make_rounds  # noqa: E402


def rank_args(modes, extra=()):
    """The rank's command line (store, rank, topology, counts, out, mode, and each of ``extra``), its topology,
    counts and FileStore."""
    p = argparse.ArgumentParser()
    for name in ("--store", "--topology", "--counts", "--out", *extra):
        p.add_argument(name, required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--mode", choices=modes, default=modes[0])
    args = p.parse_args()
    topo = cam.Topology(**json.loads(args.topology))
    return args, topo, json.loads(args.counts), FileStore(args.store, topo.world_size)


def round_trip(comm, topo, counts, rank):
    """This rank's part of the harness's rounds: what an Attention rank received, or what an FFN rank served."""
    rounds = make_rounds(topo, counts, seed=21)
    if comm.is_attention:
        return attention_body(rounds[rank], in_flight=2)(comm)
    log = ffn_server(topo, topo.D * len(counts[0]))(comm)
    return [(s.replica, s.seq, s.layer, s.rows, s.scales, s.counts) for s in log.served]


def main() -> int:
    args, topo, counts, store = rank_args(["round_trip", "wait_for_kill"], extra=("--prefix",))
    with cam.Comm(topo, args.rank, transport="shm", store=store, group="plane", shm_prefix=args.prefix,
                  timeout_s=60, join_timeout_s=60) as comm:
        open(args.out + ".ready", "w").close()
        if args.mode == "wait_for_kill":
            # every rank idles until the parent killed the victim; the victim itself just sleeps
            deadline = time.monotonic() + 60
            while not os.path.exists(args.out + ".go") and time.monotonic() < deadline:
                time.sleep(0.02)
            return 0
        torch.save(round_trip(comm, topo, counts, args.rank), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
