"""One rank of a processes-as-ranks data plane over the NPU transport (ACL IPC; on the twin its POSIX-shm
stand-ins), run by tests/test_npu_transport.py. Mode round_trip writes its result, the stand-in call log and the
open-import count to --out (torch.save). Mode faults runs every handshake fault of FAULTS in one process, each on
its own group of the same store, and writes per fault the error, its time, the call log and the open imports to
--out (JSON, rewritten after each fault, so a rank that dies in the last one keeps the earlier ones)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import cam  # noqa: E402
from cam import _C  # noqa: E402
from _shm_rank import rank_args, round_trip  # noqa: E402

# In this order: the rank that dies in "death" cannot run anything after it.
FAULTS = ["tamper_key", "tamper_size", "tamper_pid", "topology", "no_peer_access", "store_timeout", "death"]
FAULT_JOIN_S = 30.0  # every fault but store_timeout must end far sooner: a peer's failure ends the wait at once
STORE_TIMEOUT_JOIN_S = 2.0
DEATH_EXIT = 17


def _world_key(key):
    """A handshake key without its world id (``{group}/{world}/{name}/{rank}`` -> ``{group}/{name}/{rank}``)."""
    parts = key.split("/")
    return "/".join(parts[:1] + parts[2:]) if len(parts) == 4 else key


class TamperingStore:
    """Alters this rank's published window record on its way into the store (what a corrupted or forged
    record looks like to the peers)."""

    def __init__(self, store, key, field):
        self._store, self._key, self._field = store, key, field

    def set(self, key, value):
        if _world_key(key) == self._key:
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


class DyingStore:
    """The process ends (no cleanup, as a crash) where it would tell the peers it imported their windows."""

    def __init__(self, store, key):
        self._store, self._key = store, key

    def set(self, key, value):
        if _world_key(key) == self._key:
            os._exit(DEATH_EXIT)
        return self._store.set(key, value)

    def __getattr__(self, name):
        return getattr(self._store, name)


def _barrier(store, name, world, timeout_s=120.0):
    """Every rank reaches fault `name` before any starts it (a rank racing ahead would meet the last fault's
    leftovers); bounded."""
    store.add(f"barrier/{name}", 1)
    deadline = time.monotonic() + timeout_s
    while int(store.add(f"barrier/{name}", 0)) < world:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {name}: not every rank arrived within {timeout_s} s")
        time.sleep(0.01)


def run_faults(args, topo, store) -> None:
    last = topo.world_size - 1
    results = {"pid": os.getpid()}
    with open(args.out, "w") as f:
        json.dump(results, f)
    for fault in FAULTS:
        _barrier(store, fault, topo.world_size)
        group = f"fault-{fault}"
        s, t, join_s = store, topo, FAULT_JOIN_S
        if fault.startswith("tamper_") and args.rank == 0:
            s = TamperingStore(store, f"{group}/ipc/0", fault.split("_")[1])
        elif fault == "topology" and args.rank == last:
            t = dataclasses.replace(topo, Bmax=topo.Bmax - 2)
        elif fault == "no_peer_access" and args.rank == 0:
            os.environ["CAM_TWIN_DENY_PEER_ACCESS"] = "0>2"  # this rank's device 0 cannot reach rank 2's
        elif fault == "store_timeout":
            join_s = STORE_TIMEOUT_JOIN_S
            if args.rank == last:
                results[fault] = {"skipped": True}
                continue
        elif fault == "death" and args.rank == last:
            s = DyingStore(store, f"{group}/mapped/{last}")
        _C.twin_ipc_calls(reset=True)
        start = time.monotonic()
        error = None
        try:
            with cam.Comm(t, args.rank, transport="npu", store=s, group=group, timeout_s=60, join_timeout_s=join_s):
                pass
        except Exception as e:  # noqa: BLE001 - the error is the result
            error = f"{type(e).__name__}: {e}"
        os.environ.pop("CAM_TWIN_DENY_PEER_ACCESS", None)
        results[fault] = {"error": error, "seconds": time.monotonic() - start, "pid": os.getpid(),
                          "calls": _C.twin_ipc_calls(reset=True), "open_imports": _C.twin_ipc_open_imports()}
        with open(args.out, "w") as f:
            json.dump(results, f)


def liveness_words(comm, topo, store, rank) -> dict:
    """After the round trip: rank 1 fences Attention rank 0's replica (the words land in the FFN ranks' windows),
    then the last rank aborts the plane (every window's abort word); each rank reads what it sees. On this transport
    every one of those words is a device copy, a peer's through this rank's own device memory."""
    out = {}
    _barrier(store, "fence", topo.world_size)
    if rank == 1:
        comm.fence_dead_rank(0)
    _barrier(store, "fenced", topo.world_size)
    out["fenced"] = comm.fenced_replicas
    out["dropped"] = comm.dropped_rounds
    _barrier(store, "abort", topo.world_size)
    if rank == topo.world_size - 1:
        comm.abort()
    _barrier(store, "aborted", topo.world_size)
    out["abort"] = comm.status()["abort"]
    return out


def main() -> int:
    args, topo, counts, store = rank_args(["round_trip", "faults"])
    _C.twin_ipc_calls(reset=True)
    if args.mode == "faults":
        run_faults(args, topo, store)
        return 0
    with cam.Comm(topo, args.rank, transport="npu", store=store, group="plane", timeout_s=60,
                  join_timeout_s=60) as comm:
        create_calls = _C.twin_ipc_calls(reset=True)
        window_bytes = comm.window_bytes
        result = round_trip(comm, topo, counts, args.rank)
        run_calls = _C.twin_ipc_calls(reset=True)
        liveness = liveness_words(comm, topo, store, args.rank)
        liveness_calls = _C.twin_ipc_calls(reset=True)
    torch.save({"result": result, "create_calls": create_calls, "run_calls": run_calls, "liveness": liveness,
                "liveness_calls": liveness_calls,
                "close_calls": _C.twin_ipc_calls(reset=True), "open_imports": _C.twin_ipc_open_imports(),
                "window_bytes": window_bytes, "pid": os.getpid()}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
