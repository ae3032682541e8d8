"""One rank of a processes-as-ranks data plane over the NPU transport (ACL IPC; on the twin its POSIX-shm
stand-ins), run by tests/test_npu_transport.py. Writes its result, the stand-in call log and the open-import count
to --out (torch.save), or the error it failed with (mode tamper_*)."""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch.distributed import FileStore  # noqa: E402

import cam  # noqa: E402
from cam import _C  # noqa: E402
from _dataplane_harness import attention_body, ffn_server, make_rounds  # noqa: E402


class TamperingStore:
    """Alters this rank's published window record on its way into the store (what a corrupted or forged
    record looks like to the peers)."""

    def __init__(self, store, key, field):
        self._store, self._key, self._field = store, key, field

    def set(self, key, value):
        if key == self._key:
            rec = json.loads(value)
            if self._field == "key":  # the last digit of the nonce: a key the owner never exported
                rec["key"] = rec["key"][:-1] + ("0" if rec["key"][-1] != "0" else "1")
            elif self._field == "pid":  # a record claiming another process than the one the peers allowed
                rec["pid"] += 1
            else:
                rec["window_bytes"] += 128
            value = json.dumps(rec)
        return self._store.set(key, value)

    def __getattr__(self, name):
        return getattr(self._store, name)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--topology", required=True)
    p.add_argument("--counts", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--mode", choices=["round_trip", "tamper_key", "tamper_size", "tamper_pid"], default="round_trip")
    p.add_argument("--victim", type=int, default=0)
    args = p.parse_args()
    topo = cam.Topology(**json.loads(args.topology))
    counts = json.loads(args.counts)
    store = FileStore(args.store, topo.world_size)
    if args.mode != "round_trip" and args.rank == args.victim:
        store = TamperingStore(store, f"plane/ipc/{args.rank}", args.mode.split("_")[1])
    _C.twin_ipc_calls(reset=True)
    if args.mode != "round_trip":
        try:
            with cam.Comm(topo, args.rank, transport="npu", store=store, group="plane", timeout_s=60,
                          join_timeout_s=20):
                pass
        except Exception as e:  # noqa: BLE001 - the error is the result
            torch.save({"error": f"{type(e).__name__}: {e}", "open_imports": _C.twin_ipc_open_imports()}, args.out)
            return 0
        torch.save({"error": None, "open_imports": _C.twin_ipc_open_imports()}, args.out)
        return 0
    with cam.Comm(topo, args.rank, transport="npu", store=store, group="plane", timeout_s=60,
                  join_timeout_s=60) as comm:
        create_calls = _C.twin_ipc_calls(reset=True)
        window_bytes = comm.window_bytes
        rounds = make_rounds(topo, counts, seed=21)
        if comm.is_attention:
            result = attention_body(rounds[args.rank], in_flight=2)(comm)
        else:
            log = ffn_server(topo, topo.D * len(counts[0]))(comm)
            result = [(s.replica, s.seq, s.layer, s.rows, s.scales, s.counts) for s in log.served]
        run_calls = _C.twin_ipc_calls(reset=True)
    torch.save({"result": result, "create_calls": create_calls, "run_calls": run_calls,
                "close_calls": _C.twin_ipc_calls(reset=True), "open_imports": _C.twin_ipc_open_imports(),
                "window_bytes": window_bytes, "pid": os.getpid()}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
