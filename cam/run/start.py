"""How the ``cam-run`` launcher starts its rank processes (docs/run.md, "Wall time").

``fork`` (the default on Linux): the launcher has imported torch and cam once; it forks every rank from that
state before it has started any thread of its own or run any torch op, so no rank pays the interpreter start and
``import torch`` again (on a 2-CPU machine, four ranks importing torch at once took most of a run's wall time).
Each child waits (bounded) for the launcher's "go" on a pipe, sent once the store is up, then runs
``cam.run.worker.main`` and leaves with ``os._exit`` and the worker's exit code: the interpreter's finalization
belongs to the launcher, and the worker's ``finally`` has already closed everything it opened.

``exec`` (``CAM_RUN_START=exec``, or no ``os.fork``): each rank is a fresh interpreter (``worker_command``).

Both give the launcher the same handle (``pid``, ``poll``, ``wait``, ``kill``, exit codes as ``subprocess.Popen``
reports them: ``-N`` for a death by signal ``N``), and every rank starts with the default signal dispositions and
stdin from ``/dev/null``.

Trust (docs/connector.md, "Trust model"): the launcher's store listens on 127.0.0.1 only (``launcher_store``), and
every run has its own secret, handed to the ranks in their environment (``$CAM_RUN_SECRET``), never through the
store or a file: their rendezvous refuses a value not signed with it. Run directories: ``cam.run.run_dir``.
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import subprocess
import sys
import time
import traceback
from typing import Callable, Dict, List, Optional, Tuple

START_ENV = "CAM_RUN_START"


def launcher_store(port: int, timeout_s: float):
    """The launcher's TCPStore, listening on 127.0.0.1 only (cam.connector.loopback_store)."""
    from ..connector import loopback_store

    return loopback_store(port, timeout_s)


# `python -m cam.run.worker` would put the working directory first on sys.path: started from the root of a source
# checkout, the worker would import the checkout's uncompiled `cam/` instead of the installed package. `-c` puts ''
# there instead (unless safe-path mode already left it out, Python 3.11+), and the bootstrap drops it before
# importing cam. `-I` would too, but it also drops PYTHONPATH and user site-packages, where cam may be installed.
WORKER_BOOTSTRAP = (
    "import sys\n"
    "if not getattr(sys.flags, 'safe_path', False):\n"
    "    del sys.path[0]\n"
    "from cam.run.worker import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def worker_command(config_path: str, rank: int) -> list:
    """The command line of one worker process: never imports cam from the caller's working directory."""
    return [sys.executable, "-c", WORKER_BOOTSTRAP, config_path, str(rank)]


def start_method() -> str:
    method = os.environ.get(START_ENV, "") or ("fork" if hasattr(os, "fork") else "exec")
    if method not in ("fork", "exec"):
        raise ValueError(f"{START_ENV} must be 'fork' or 'exec', got {method!r}")
    if method == "fork" and not hasattr(os, "fork"):
        raise ValueError(f"{START_ENV}=fork: this platform has no fork")
    return method


class ForkedRank:
    """A forked rank, with the part of ``subprocess.Popen``'s interface the launcher uses."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its code is lost, and it is not a success
                self.returncode = -255
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout)
            time.sleep(0.005)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def start_ranks(method: str, config_path: str, world: int, timeout_s: float,
                secret: Optional[str] = None) -> Tuple[Dict[int, object], Callable[[], None]]:
    """Starts ranks 0..world-1 of the run whose config is at `config_path`; returns their handles and ``go``, which
    the launcher calls once its store is up (a forked rank waits for it, at most `timeout_s`; ``go(False)`` tells
    the ranks to leave instead). On an exception every rank already started is killed and reaped. Every rank gets
    the run's fresh secret in ``$CAM_RUN_SECRET`` (its environment only: the launcher's own stays unchanged)."""
    from ..connector import RUN_SECRET_ENV

    secret = secrets.token_hex(32) if secret is None else secret
    if method == "exec":
        procs: Dict[int, object] = {}
        env = dict(os.environ, **{RUN_SECRET_ENV: secret})
        try:
            for rank in range(world):
                procs[rank] = subprocess.Popen(worker_command(config_path, rank), stdin=subprocess.DEVNULL, env=env)
        except BaseException:
            kill_and_reap(list(procs.values()))
            raise
        return procs, lambda run=True: None
    return _fork_ranks(config_path, world, timeout_s, (RUN_SECRET_ENV, secret))


def start_joiner(config_path: str, rank: int, secret: str):
    """Restarts rank ``rank`` as a new process that joins the running world ($CAM_RUN_KILL_FFN, docs/connector.md
    "Rejoin"): an exec'd worker (the launcher has threads by now, so it does not fork) with the run's secret."""
    from ..connector import RUN_SECRET_ENV

    return subprocess.Popen(worker_command(config_path, rank) + ["join"], stdin=subprocess.DEVNULL,
                            env=dict(os.environ, **{RUN_SECRET_ENV: secret}))


def kill_and_reap(procs) -> None:
    """Kills every rank still running (SIGKILL) and reaps each, at most 30 s per rank."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass


def _fork_ranks(config_path: str, world: int, timeout_s: float, secret_env: Optional[Tuple[str, str]] = None):
    # Buffered output would be written once more by every child.
    sys.stdout.flush()
    sys.stderr.flush()
    go_r, go_w = os.pipe()
    procs: Dict[int, ForkedRank] = {}
    try:
        for rank in range(world):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child never returns; its exit code is what the tests check
                if secret_env:
                    os.environ[secret_env[0]] = secret_env[1]
                _child(config_path, rank, go_r, go_w, timeout_s)
            procs[rank] = ForkedRank(pid)
    except BaseException:
        os.close(go_w)
        os.close(go_r)
        kill_and_reap(list(procs.values()))
        raise
    os.close(go_r)
    sent: List[bool] = []

    def go(run: bool = True) -> None:
        if not sent:
            sent.append(True)
            try:
                if run:
                    os.write(go_w, b"g" * world)  # one byte each: every child reads exactly one
            except BrokenPipeError:
                pass  # every rank is gone already: their exit codes say why (the launcher's loop reports them)
            finally:
                os.close(go_w)

    # go(False), or a launcher that dies before go(): the children read end-of-file and leave.
    return procs, go


def _child(config_path: str, rank: int, go_r: int, go_w: int, timeout_s: float) -> None:
    code = 1
    try:
        os.close(go_w)  # only the launcher may hold the write end, so its death is an end-of-file here
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        ready, _, _ = select.select([go_r], [], [], timeout_s)
        got = os.read(go_r, 1) if ready else b""
        os.close(go_r)
        if got != b"g":
            print(f"[rank {rank}] the cam-run launcher never started the run "
                  f"({'it gave up or is gone' if ready else f'no go within {timeout_s:g} s'})", file=sys.stderr, flush=True)
        else:
            from .worker import main

            code = main([config_path, str(rank)])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - whatever it is, this process must end here with a failure code
        traceback.print_exc()
        code = 3
    finally:
        exit_now(code if isinstance(code, int) and 0 <= code < 256 else 1)


def exit_now(code: int) -> None:
    """Flushes what this process printed and ends it at once: no interpreter finalization (torch's teardown), no
    atexit handlers. For a process whose work has closed everything it opened."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
