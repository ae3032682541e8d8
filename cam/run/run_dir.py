"""cam-run's run directories and who owns them (docs/connector.md, "Trust model"). A run directory the launcher made
(``make_run_dir``, mode 0700) names its launcher; a SIGKILLed launcher's directory is removed by its ranks when they
see it gone (``remove_if_orphaned``) and, if they died too, by the next launcher (``reap_stale_run_dirs``). Torch-free:
the launcher makes its directory before anything heavy loads."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from typing import List, Optional

from .._proc import start_ticks

RUN_DIR_PREFIX = "cam-run-"
# In a run directory the launcher made (not a --keep one): "<pid> <process start ticks>" of the launcher.
OWNER_FILE = "launcher.owner"


def process_identity(pid: int) -> str:
    """``"<pid> <start ticks>"`` of a live process, "" when it is gone. A zombie is gone: a SIGKILLed launcher stays
    one until its own parent reaps it, and its ranks, which see it die at once (re-parented), must not mistake it for
    alive then, or none of them removes its run directory."""
    ticks = start_ticks(pid)
    return "" if ticks is None else f"{pid} {ticks}"


def make_run_dir() -> str:
    """A fresh run directory (mode 0700, mkdtemp) owned by this launcher, after removing stale ones."""
    reap_stale_run_dirs()
    path = tempfile.mkdtemp(prefix=RUN_DIR_PREFIX)
    with open(os.path.join(path, OWNER_FILE), "w") as f:
        f.write(process_identity(os.getpid()))
    return path


def owner_gone(run_dir: str) -> bool:
    """True when ``run_dir`` is a launcher-made run directory whose launcher process no longer exists."""
    try:
        with open(os.path.join(run_dir, OWNER_FILE)) as f:
            owner = f.read().strip()
    except OSError:
        return False  # not launcher-made (--keep), or already removed
    try:
        pid = int(owner.split()[0])
    except (ValueError, IndexError):
        return False
    return process_identity(pid) != owner


def remove_if_orphaned(run_dir: str) -> bool:
    """Removes ``run_dir`` when its launcher is gone (a rank's last act after a SIGKILLed launcher)."""
    if owner_gone(run_dir):
        shutil.rmtree(run_dir, ignore_errors=True)
        return True
    return False


def reap_stale_run_dirs(parent: Optional[str] = None) -> List[str]:
    """Removes this user's launcher-made run directories under ``parent`` (the temp dir) whose launcher is gone."""
    parent = parent or tempfile.gettempdir()
    removed = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(RUN_DIR_PREFIX)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue  # never another user's, never through a symlink
        if remove_if_orphaned(path):
            removed.append(path)
    return removed


def check_keep_dir(path: str) -> None:
    """ValueError naming ``--keep`` when ``path`` cannot hold a kept run: it exists and is not a directory, or the
    directory it is or would be made in does not take a new entry (``/proc/x``, a read-only mount). Writability is
    probed by making and removing an empty directory there (permission bits say nothing to root, nor of /proc), so
    nothing is left behind."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"--keep {path!r} exists and is not a directory")
    where = os.path.abspath(path)
    while not os.path.exists(where):
        where = os.path.dirname(where)
    if not os.path.isdir(where):
        raise ValueError(f"--keep {path!r} cannot be made: {where!r} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".cam-keep-probe-", dir=where))
    except OSError as e:
        made = "written in" if where == os.path.abspath(path) else "made in"
        raise ValueError(f"--keep {path!r} cannot be {made} {where!r}: {e.strerror or e}") from None
