"""A process's identity on Linux: its pid and its start time in clock ticks (``/proc/<pid>/stat`` field 22), which
tells a reused pid apart. Torch-free, so the command-line tools' launchers can use it before anything heavy loads."""

from __future__ import annotations

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
