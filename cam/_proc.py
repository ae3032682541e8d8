"""A process's identity on Linux: its pid and its start time in clock ticks (``/proc/<pid>/stat`` field 22), which
tells a reused pid apart. Torch-free, so the command-line tools' launchers can use it before anything heavy loads."""

from __future__ import annotations

import os
import time
from typing import Optional


def start_ticks(pid: int) -> Optional[str]:
    """The start time of live process ``pid``, or None when it is gone or a zombie (a SIGKILLed process stays one
    until its parent reaps it; whoever watches it must see it dead at once) or /proc cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def process_start_time(pid: int = 0) -> float:
    """When process `pid` (0: this one) started, on the time.time() clock (Linux /proc, 10 ms resolution); nan
    elsewhere. Lets the wall-time profile count a process's interpreter start and imports, which run before any of
    its code can take a timestamp."""
    try:
        with open(f"/proc/{pid or 'self'}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")
    # The start is in clock ticks since boot: anchor it on the uptime read now (btime is whole seconds).
    return time.time() - up + ticks / os.sysconf("SC_CLK_TCK")
