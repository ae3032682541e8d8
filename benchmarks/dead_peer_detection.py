"""How fast the survivors of an shm plane learn that a peer died, and whether each names it.

A plane of processes (D=2 replicas x P=1, F=2 FFN ranks) runs rounds; once every rank is busy one rank is
SIGKILLed (an FFN rank, then an Attention rank). Every survivor is inside an op (Attention ranks in combine_recv,
FFN ranks in dispatch_recv polls).

A killed FFN rank (and, without replica isolation, a killed Attention rank: the victim role attention-no-isolate, or
--no-isolate for every role) makes the plane's liveness watchdog raise the
abort word naming the dead rank. The figure is the time from the kill to each survivor's error, against the same
run's device timeout (timeout_s, set far above on purpose: detection must not depend on it).

A killed Attention rank under the default replica isolation (Comm(isolate_replicas=True), docs/protocol.md §9)
fences its replica instead, and the survivors are expected to go on: the FFN ranks compute golden expert outputs,
the surviving Attention rank checks every combine output against cam.reference.round_trip, and each survivor
reports the fenced replicas, the rounds it completed after the fence, and (FFN ranks) the rounds of the lost replica
it dropped. The figure is the time from the kill to each survivor's watchdog finding the death.

Nothing here is a test assertion; tests/test_liveness.py runs one plane per victim role (default isolation) and
tests/test_isolation.py one with --no-isolate, and check who reports what.

    python benchmarks/dead_peer_detection.py --runs 2 --json benchmarks/results/dead-peer-detection.json

records the three victim roles (ffn, attention, attention-no-isolate) in one file.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

TOPOLOGY = dict(D=2, P=1, F=2, E=4, K=2, H=64, Bmax=8, L=2, slots=2)
TIMEOUT_S = 120.0


def worker(args) -> int:
    import torch
    from torch.distributed import FileStore

    import cam

    topo = cam.Topology(**TOPOLOGY)
    store = FileStore(args.store, topo.world_size)
    out = os.path.join(args.dir, f"rank{args.rank}")
    with cam.Comm(topo, args.rank, transport="shm", store=store, group="plane", shm_prefix=args.prefix,
                  timeout_s=TIMEOUT_S, join_timeout_s=60, liveness_poll_s=args.liveness_poll,
                  isolate_replicas=not args.no_isolate) as comm:
        g = torch.Generator().manual_seed(args.rank)
        if args.isolate:
            return isolated_survivor(args, topo, comm, g, out)

        def step():  # one round (Attention) or one work item (FFN): (replica, seq) served, or None
            if comm.is_attention:
                x = torch.randn((topo.Bmax, topo.H), generator=g).to(torch.bfloat16)
                ids = torch.randint(0, topo.E, (topo.Bmax, topo.K), generator=g, dtype=torch.int32)
                w = torch.rand((topo.Bmax, topo.K), generator=g)
                cam.ops.dispatch_send(comm, x, ids, 0)
                cam.ops.combine_recv(comm, ids, w)
                return (args.rank, 1)
            _, _, _, wi = cam.ops.dispatch_recv(comm)
            cam.ops.combine_send(comm, torch.zeros((topo.recv_rows, topo.H), dtype=torch.bfloat16), wi)
            return (int(wi[1]), int(wi[3])) if int(wi[0]) == 1 else None

        # Warm-up on every rank: the first call of each torch op pays one-off set-up (seconds) that is not
        # detection time. Every Attention rank completes its first round, so every FFN rank serves round 1 of
        # every replica (and whatever later rounds come first) before it counts as ready.
        firsts = set()
        while len(firsts) < (1 if comm.is_attention else topo.D):
            item = step()
            if item is not None and item[1] == 1:
                firsts.add(item[0])
        open(out + ".ready", "w").close()
        if args.rank == args.victim:
            time.sleep(300)  # killed by the launcher
            return 1
        end = time.monotonic() + 2 * TIMEOUT_S
        rounds = 0
        try:
            while time.monotonic() < end:
                step()
                rounds += 1
            result = {"rank": args.rank, "error": None, "rounds": rounds}
        except cam.CamError as e:
            result = {"rank": args.rank, "error": str(e), "type": type(e).__name__, "t_error": time.time(),
                      "t_found": comm.dead_rank_found_at, "rounds": rounds}
        with open(out + ".json", "w") as f:
            json.dump(result, f)
    return 0


def _experts(e, rows, scales):
    # Golden-checkable experts: dequantize, scale by global expert + 1 (every routing mistake changes the output).
    import torch
    v = rows.to(torch.float32)
    if scales is not None:
        v = v * scales[:, None]
    return (v * (e.to(torch.float32) + 1)[:, None]).to(torch.bfloat16)


ISOLATED_ROUNDS = 20  # rounds the surviving Attention rank completes after the fence
FFN_IDLE_END_S = 3.0  # an FFN rank that saw the fence and then nothing for this long is done


def isolated_survivor(args, topo, comm, g, out) -> int:
    """--isolate: Attention ranks run golden-checked rounds, FFN ranks serve with _experts; once every rank is
    ready the victim is killed, and the survivors must keep going after its replica is fenced."""
    import torch

    import cam
    from cam.reference.dispatch_combine import round_trip
    from cam.reference.dynamic_quant import dynamic_quant

    def attention_round():
        x = torch.randn((topo.Bmax, topo.H), generator=g).to(torch.bfloat16)
        ids = torch.randint(0, topo.E, (topo.Bmax, topo.K), generator=g, dtype=torch.int32)
        w = torch.rand((topo.Bmax, topo.K), generator=g)
        cam.ops.dispatch_send(comm, x, ids, 0)
        got = cam.ops.combine_recv(comm, ids, w)
        (gold,) = round_trip(topo, [(x, ids, w)], _experts, quant_fn=dynamic_quant if topo.quantized else None,
                             global_ids=True)
        if not torch.equal(got, gold):
            raise AssertionError(f"rank {args.rank}: combine output differs from the golden round trip")

    def ffn_item():
        ex, sc, cnt, wi = cam.ops.dispatch_recv(comm)
        n, f = int(wi[5]), comm.rank - topo.A
        y = torch.zeros((topo.recv_rows, topo.H), dtype=torch.bfloat16)
        e = torch.repeat_interleave(torch.arange(topo.R), cnt) + f * topo.R
        y[:n] = _experts(e, ex[:n], sc[:n] if topo.quantized else None)
        cam.ops.combine_send(comm, y, wi)
        return (int(wi[1]), int(wi[3])) if int(wi[0]) == 1 else None

    # Warm-up as in worker(): every Attention rank completes a round, every FFN rank serves round 1 of each replica.
    firsts = set()
    while len(firsts) < (1 if comm.is_attention else topo.D):
        if comm.is_attention:
            attention_round()
            firsts.add(args.rank)
        else:
            item = ffn_item()
            if item is not None and item[1] == 1:
                firsts.add(item[0])
    open(out + ".ready", "w").close()
    if args.rank == args.victim:
        time.sleep(300)  # killed by the launcher
        return 1
    end = time.monotonic() + TIMEOUT_S
    after, idle_since, error = 0, None, None
    try:
        while time.monotonic() < end:
            fenced = bool(comm.fenced_replicas)
            if comm.is_attention:
                attention_round()
                after += fenced
                if after >= ISOLATED_ROUNDS:
                    break
            elif ffn_item() is not None:
                after += fenced
                idle_since = None
            elif fenced and after > 0:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > FFN_IDLE_END_S:
                    break
    except cam.CamError as e:
        error = str(e)
    result = {"rank": args.rank, "error": error, "fenced": comm.fenced_replicas, "rounds_after": after,
              "t_found": comm.dead_rank_found_at, "dropped": comm.dropped_rounds,
              "lost": [str(lost) for lost in comm.lost_replicas.values()]}
    with open(out + ".json", "w") as f:
        json.dump(result, f)
    return 0


def one_run(victim: int, liveness_poll: float, isolate: bool, no_isolate: bool) -> dict:
    world = TOPOLOGY["D"] * TOPOLOGY["P"] + TOPOLOGY["F"]
    with tempfile.TemporaryDirectory(prefix="cam-liveness-") as d:
        prefix = f"camlive-{os.getpid()}-{victim}-{int(time.time() * 1000) % 100000}"
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--rank", str(r), "--dir", d,
                                   "--store", os.path.join(d, "store"), "--prefix", prefix, "--victim", str(victim),
                                   "--liveness-poll", str(liveness_poll)] + (["--isolate"] if isolate else [])
                                  + (["--no-isolate"] if no_isolate else []),
                                  stdin=subprocess.DEVNULL)
                 for r in range(world)]
        try:
            deadline = time.monotonic() + 180
            while not all(os.path.exists(os.path.join(d, f"rank{r}.ready")) for r in range(world)):
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError("the plane did not come up")
                time.sleep(0.05)
            time.sleep(1.0)  # every survivor is inside an op
            t_kill = time.time()
            procs[victim].send_signal(signal.SIGKILL)
            survivors = {}
            for r, p in enumerate(procs):
                if r == victim:
                    p.wait(30)
                    continue
                p.wait(TIMEOUT_S / 2)  # well below the device timeout: detection must not wait for it
                with open(os.path.join(d, f"rank{r}.json")) as f:
                    survivors[r] = json.load(f)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(30)
    latency = {r: s["t_error"] - t_kill for r, s in survivors.items() if s.get("t_error")}
    found = {r: s["t_found"] - t_kill for r, s in survivors.items() if s.get("t_found")}
    named = {r: f"rank {victim} died" in (s.get("error") or "") for r, s in survivors.items()}
    if isolate:
        return {"victim": victim, "survivors": survivors, "watchdog_found_s": found,
                "ok": all(s["error"] is None and s["fenced"] and s["rounds_after"] > 0 for s in survivors.values())}
    return {"victim": victim, "latency_s": latency, "watchdog_found_s": found, "all_named": all(named.values()), "named": named,
            "errors": {r: s.get("error") for r, s in survivors.items()}}


# Victim roles: an FFN rank; an Attention rank under replica isolation (survivors go on); an Attention rank on a
# plane without it (the plane aborts naming it).
ROLES = ("ffn", "attention", "attention-no-isolate")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1, help="planes per victim role")
    p.add_argument("--victims", nargs="+", choices=ROLES, default=list(ROLES),
                   help="victim roles, one plane each per run (attention-no-isolate: an Attention victim on a plane "
                        "without replica isolation)")
    p.add_argument("--liveness-poll", type=float, default=0.25, help="Comm(liveness_poll_s=...)")
    p.add_argument("--no-isolate", action="store_true",
                   help="Comm(isolate_replicas=False) for every role: an Attention victim aborts the plane too")
    p.add_argument("--isolate", action="store_true", help=argparse.SUPPRESS)  # worker: survivors go on
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--prefix", help=argparse.SUPPRESS)
    p.add_argument("--victim", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.runs < 1 or not 0 < args.liveness_poll <= 60:
        p.error("--runs must be >= 1 and --liveness-poll in (0, 60]")
    A = TOPOLOGY["D"] * TOPOLOGY["P"]
    runs = []
    for role in args.victims:
        for _ in range(args.runs):
            victim = A + 1 if role == "ffn" else 0
            no_isolate = args.no_isolate or role == "attention-no-isolate"
            isolate = role != "ffn" and not no_isolate
            r = one_run(victim, args.liveness_poll, isolate, no_isolate)
            r["role"], r["isolated"] = role, isolate
            runs.append(r)
            if isolate:
                print(f"killed Attention rank {victim}, replica isolation: watchdogs found it after "
                      + ", ".join(f"{v:.3f}" for v in sorted(r["watchdog_found_s"].values())) + " s; survivors "
                      + ", ".join(f"rank {k}: {v['rounds_after']} rounds after the fence, dropped {v['dropped']}, "
                                  f"error {v['error']}" for k, v in r["survivors"].items()), flush=True)
                continue
            lat = sorted(r["latency_s"].values())
            print(f"killed {role} rank {victim}: survivors' errors after "
                  + ", ".join(f"{v:.3f}" for v in lat) + " s (their watchdogs found it after "
                  + ", ".join(f"{v:.3f}" for v in sorted(r["watchdog_found_s"].values()))
                  + f" s); all name the dead rank: {r['all_named']}", flush=True)
    summary = {}
    for role in args.victims:
        found = [v for r in runs if r["role"] == role and r["isolated"] for v in r["watchdog_found_s"].values()]
        if found:
            summary[role] = {"isolated": True, "found_median_s": statistics.median(found), "found_max_s": max(found),
                             "survivors_went_on": all(r["ok"] for r in runs if r["role"] == role)}
            print(f"{role} victim (replica isolation): found after median {statistics.median(found):.3f} s, max "
                  f"{max(found):.3f} s (timeout_s {TIMEOUT_S:g} s, liveness_poll_s {args.liveness_poll:g} s)")
        lat = [v for r in runs if r["role"] == role for v in r.get("latency_s", {}).values()]
        if lat:
            summary[role] = {"median_s": statistics.median(lat), "max_s": max(lat), "survivor_errors": len(lat),
                             "all_named": all(r["all_named"] for r in runs if r["role"] == role)}
            print(f"{role} victim: median {summary[role]['median_s']:.3f} s, max {summary[role]['max_s']:.3f} s "
                  f"(timeout_s {TIMEOUT_S:g} s, liveness_poll_s {args.liveness_poll:g} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"topology": TOPOLOGY, "timeout_s": TIMEOUT_S, "liveness_poll_s": args.liveness_poll,
                       "summary": summary, "runs": runs}, f, indent=2)
    ok = all(r["ok"] if r["isolated"] else r["all_named"] and len(r["latency_s"]) == len(r["named"]) for r in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
