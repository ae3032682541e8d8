"""``cam-launch``: one command for an async AFD deployment on one host (docs/integrations.md §0).

It hosts the world's store (loopback only, signed with a fresh run secret), starts the ``cam-ffn`` ranks and the
Attention engines (by default ``vllm serve`` with cam's plugin, one engine per replica, configured through
``$CAM_VLLM_CONFIG``), streams every process's output with a prefix naming it (``[ffn 2]``, ``[engine 0]``), and
prints one line per phase. It stops every process when one fails, on Ctrl-C or SIGTERM, and when every engine has
exited cleanly it waits (bounded) for the FFN ranks, which stop once every Attention rank finished. Every wait is
bounded: the FFN ranks' join and device waits by ``--timeout``, a stop by ``--grace`` then a kill.

The engine command is a template (``--engine``); ``{checkpoint}``, ``{replica}``, ``{port}`` and ``{max_tokens}``
are filled in per replica.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import List, Optional

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

# What a default engine is: vLLM's OpenAI server on the checkpoint, eager (the plugin's MoE method runs on the host),
# bf16 (the plane's activation dtype), with the plane's Bmax as its batch bound.
DEFAULT_ENGINE = ("vllm serve {checkpoint} --port {port} --dtype bfloat16 --enforce-eager --max-model-len {max_tokens} "
                  "--max-num-batched-tokens {max_tokens} --skip-tokenizer-init")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cam-launch", description="Start an async AFD deployment on this host: the "
                                "store, the cam-ffn ranks and one engine per Attention replica with cam's plugin.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--config", default=None, help="a JSON file of these options (keys as the long flags, '-' or "
                   "'_'); flags given on the command line win")
    p.add_argument("--checkpoint", default=None, help="transformers checkpoint directory (both sides load it)")
    p.add_argument("--replicas", "-D", type=int, default=1, help="Attention replicas D (one engine each)")
    p.add_argument("--ffn-ranks", "-F", type=int, default=1, help="cam-ffn ranks F")
    p.add_argument("--max-tokens", type=int, default=256, help="Bmax: tokens per engine step (the plane's bound)")
    p.add_argument("--master-port", type=int, default=0, help="the store's port (0: a free one)")
    p.add_argument("--group", default="afd", help="the world's name in the store")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="bound of the FFN ranks' join and device waits (s): an engine joins at its first MoE call, "
                        "after loading and profiling its model")
    p.add_argument("--engine", default=DEFAULT_ENGINE, help="the engine command template, per replica")
    p.add_argument("--engine-port", type=int, default=8000, help="replica d's {port} is this + d")
    p.add_argument("--ffn-arg", action="append", default=[], help="one more argument to every cam-ffn (repeat)")
    p.add_argument("--grace", type=float, default=10.0, help="seconds a stopped process gets before it is killed")
    return p


def _args(argv) -> argparse.Namespace:
    p = _parser()
    args = p.parse_args(argv)
    if args.config is not None:
        try:
            with open(args.config) as f:
                given = json.load(f)
        except (OSError, ValueError) as e:
            p.error(f"--config {args.config}: {e}")
        if not isinstance(given, dict):
            p.error(f"--config {args.config}: a JSON object of options, not {type(given).__name__}")
        known = {a.dest for a in p._actions}
        for key, value in given.items():
            dest = key.replace("-", "_")
            if dest not in known or dest in ("config", "help"):
                p.error(f"--config {args.config}: unknown option {key!r}")
        # flags typed on the command line win over the file: parse again with the file's values as defaults
        p.set_defaults(**{k.replace("-", "_"): v for k, v in given.items()})
        args = p.parse_args(argv)
    if args.checkpoint is None or not os.path.isdir(args.checkpoint):
        p.error(f"--checkpoint {args.checkpoint!r} is not a directory")
    for flag, v in (("--replicas", args.replicas), ("--ffn-ranks", args.ffn_ranks), ("--max-tokens", args.max_tokens)):
        if v < 1:
            p.error(f"{flag} {v} must be >= 1")
    if not args.timeout > 0 or not args.grace > 0:
        p.error("--timeout and --grace must be > 0 seconds")
    try:
        _engine_argv(args, 0)
    except (KeyError, ValueError) as e:
        p.error(f"--engine {args.engine!r}: {e}")
    return args


def _engine_argv(args, replica: int) -> List[str]:
    words = shlex.split(args.engine.format(checkpoint=args.checkpoint, replica=replica,
                                           port=args.engine_port + replica, max_tokens=args.max_tokens))
    if not words:
        raise ValueError("empty command")
    return words


class _Proc:
    """One child: its prefix, the process, and a thread copying its output line by line under the prefix."""

    def __init__(self, name: str, argv: List[str], env: dict, out_lock: threading.Lock):
        self.name = name
        self.argv = argv
        # its own process group: a stop reaches an engine's own children (vLLM's engine core) too
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  stdin=subprocess.DEVNULL, start_new_session=True, bufsize=1)
        self._lock = out_lock
        self.tail: List[str] = []
        self.reader = threading.Thread(target=self._copy, daemon=True, name=f"cam-launch-{name}")
        self.reader.start()

    def _copy(self) -> None:
        for line in self.p.stdout:
            self.tail = (self.tail + [line])[-20:]
            with self._lock:
                sys.stdout.write(f"[{self.name}] {line}")
                sys.stdout.flush()

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                pass


def _say(lock, text: str) -> None:
    with lock:
        print(f"cam-launch: {text}", flush=True)


def _stop_all(procs, grace: float, lock) -> None:
    for pr in procs:
        pr.stop()
    deadline = time.monotonic() + grace
    for pr in procs:
        try:
            pr.p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _say(lock, f"{pr.name} did not stop within --grace {grace:g} s: killed")
            pr.stop(signal.SIGKILL)
            pr.p.wait(grace)
    for pr in procs:
        pr.reader.join(grace)


def main(argv=None) -> int:
    args = _args(argv)
    lock = threading.Lock()
    stop = threading.Event()
    interrupted = []

    def on_signal(signum, _frame):
        interrupted.append(signal.Signals(signum).name)
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    procs: List[_Proc] = []
    try:
        return _run(args, lock, stop, interrupted, procs)
    finally:
        if procs:
            _stop_all(procs, args.grace, lock)
        for s, h in old.items():
            signal.signal(s, h)


def _ask_ffn_ranks_to_stop(store, group: str) -> bool:
    """Posts the signed shutdown to the world the ranks of ``group`` agreed (a supervisor has no Comm: it reads the
    world from the store). False when no world was agreed yet: there is no plane to address."""
    from .. import world
    from .store import post_shutdown

    current = world.current(store, group)
    if current is None:
        return False
    post_shutdown(store, group, "cam-launch: engines exited", world=current)
    return True


def _run(args, lock, stop, interrupted, procs) -> int:
    from .store import SignedStore, loopback_store

    t0 = time.monotonic()
    secret = os.urandom(16)
    store = loopback_store(args.master_port, args.timeout)
    port = store.port
    _say(lock, f"store on 127.0.0.1:{port}, world {args.group!r}: {args.replicas} engine(s), {args.ffn_ranks} "
               f"cam-ffn rank(s), {args.checkpoint}")
    env = dict(os.environ, CAM_RUN_SECRET=secret.hex(), PYTHONUNBUFFERED="1",
               # third-party progress bars (transformers' loading bar, tqdm) off in rank processes
               HF_HUB_DISABLE_PROGRESS_BARS="1", TQDM_DISABLE="1")
    common = ["--checkpoint", args.checkpoint, "-D", str(args.replicas), "-F", str(args.ffn_ranks), "--max-tokens",
              str(args.max_tokens), "--master-port", str(port), "--group", args.group, "--timeout", str(args.timeout),
              *args.ffn_arg]
    for r in range(args.replicas, args.replicas + args.ffn_ranks):
        procs.append(_Proc(f"ffn {r}", [sys.executable, "-m", "cam.ffn_server", "--rank", str(r), *common], env, lock))
    _say(lock, f"started cam-ffn rank(s), pids {' '.join(str(p.p.pid) for p in procs)}")
    engines = []
    for d in range(args.replicas):
        cfg = {"rank": d, "replicas": args.replicas, "ffn_ranks": args.ffn_ranks, "max_tokens": args.max_tokens,
               "master_port": port, "group": args.group, "timeout_s": args.timeout, "store_client": True}
        argv = _engine_argv(args, d)
        if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
            _say(lock, f"engine {d}: {argv[0]!r} is not on PATH (install the engine: docs/integrations.md)")
            return EXIT_USAGE
        engines.append(_Proc(f"engine {d}", argv, dict(env, CAM_VLLM_CONFIG=json.dumps(cfg)), lock))
    procs.extend(engines)
    _say(lock, f"started engine(s), pids {' '.join(str(p.p.pid) for p in engines)}; the plane joins at their "
               f"first MoE call")
    ffn = procs[:args.ffn_ranks]
    engines_done = ffn_done = None
    while not stop.wait(0.2):
        failed = [p for p in procs if p.p.poll() not in (None, 0)]
        if failed:
            first = failed[0]
            _say(lock, f"{first.name} exited with status {first.p.returncode}: stopping every process")
            return EXIT_FAILED
        if engines_done is None and all(p.p.poll() == 0 for p in engines):
            engines_done = time.monotonic()
            _say(lock, "every engine exited 0: waiting for the cam-ffn ranks to stop")
            if not _ask_ffn_ranks_to_stop(SignedStore(store, secret, args.group), args.group):
                _say(lock, "no world was agreed on the store: the cam-ffn ranks never joined one")
        if engines_done is not None:
            if all(p.p.poll() == 0 for p in ffn):
                _say(lock, f"done in {time.monotonic() - t0:.1f} s")
                return EXIT_OK
            if time.monotonic() - engines_done > args.grace + 5:
                _say(lock, "cam-ffn rank(s) still running after the engines exited: stopping them")
                return EXIT_FAILED
        elif ffn_done is None and all(p.p.poll() == 0 for p in ffn):
            # An FFN rank stops cleanly once every Attention rank finished, which an engine does as it exits: the
            # engines are on their way out (bounded by --timeout).
            ffn_done = time.monotonic()
            _say(lock, "every cam-ffn rank stopped (the engines finished): waiting for the engines to exit")
        elif ffn_done is not None and time.monotonic() - ffn_done > args.timeout:
            _say(lock, f"engine(s) still running {args.timeout:g} s after every cam-ffn rank stopped: stopping them")
            return EXIT_FAILED
    _say(lock, f"{interrupted[0] if interrupted else 'stop'}: stopping every process")
    return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
