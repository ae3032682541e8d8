"""Runs independent commands of one test side by side (compiles, mostly): the suite runs on two cores and a compile
leaves the other idle. Each command keeps its own bound, as subprocess.run would give it."""

import concurrent.futures
import os
import subprocess


def jobs() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def run_all(commands, *, timeout: float, **kwargs) -> list:
    """subprocess.run(command, timeout=timeout, **kwargs) for each command, at most jobs() at a time; returns the
    CompletedProcesses in the order of `commands`. The first exception (CalledProcessError with check=True,
    TimeoutExpired) is raised after every command has ended: none is left running."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs()) as pool:
        futures = [pool.submit(subprocess.run, c, timeout=timeout, **kwargs) for c in commands]
        concurrent.futures.wait(futures)
    return [f.result() for f in futures]
