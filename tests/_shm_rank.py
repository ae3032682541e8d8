"""One rank of a processes-as-ranks data plane over POSIX shared memory (run by tests/test_shm.py)."""

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


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--topology", required=True)
    p.add_argument("--counts", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--mode", choices=["round_trip", "wait_for_kill"], default="round_trip")
    args = p.parse_args()
    topo = cam.Topology(**json.loads(args.topology))
    counts = json.loads(args.counts)
    store = FileStore(args.store, topo.world_size)
    with cam.Comm(topo, args.rank, transport="shm", store=store, group="plane", shm_prefix=args.prefix,
                  timeout_s=60, join_timeout_s=60) as comm:
        open(args.out + ".ready", "w").close()
        if args.mode == "wait_for_kill":
            # every rank idles until the parent killed the victim; the victim itself just sleeps
            deadline = time.monotonic() + 60
            while not os.path.exists(args.out + ".go") and time.monotonic() < deadline:
                time.sleep(0.02)
            return 0
        rounds = make_rounds(topo, counts, seed=21)
        if comm.is_attention:
            result = attention_body(rounds[args.rank], in_flight=2)(comm)
        else:
            log = ffn_server(topo, topo.D * len(counts[0]))(comm)
            result = [(s.replica, s.seq, s.layer, s.rows, s.scales, s.counts) for s in log.served]
        torch.save(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
