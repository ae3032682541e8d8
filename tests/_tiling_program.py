"""Tiling self-test programs: a source from tests/twin/ that runs a kernel's tiling (tiling/src/) for a platform and a
shape given on its command line and prints what it decided, built against the kernels' and the tiling's headers and
run to its closing "OK". tests/twin/gmm_row_tiles.cpp also walks a mixed GMM kernel's row tiles over a group_list
(run_gmm_tiles); each test states what it expects on its own, the two mixed kernels' row tiles from launch_row_tiles,
the rule written here apart from the kernels' code."""

import os
import subprocess

from _twin_build import build_twin_program

# One A3 die (docs/twin.md, "Core kinds and memories": L1 512 KiB (128 bytes reserved), L0A / L0B 64 KiB, L0C
# 128 KiB, UB 192 KiB; 24 AI cores, "Timing model" aic_per_die) and the twin's own description (2 AI cores, same
# memories).
A3 = dict(aic=24, l1=524288 - 128, l0a=65536, l0b=65536, l0c=131072, ub=196608)
TWIN = dict(A3, aic=2)


def build_tiling_program(source_root, tmp_path_factory, name, tiling_source, *, tiling_private=False):
    """tests/twin/<name>.cpp linked with tiling/src/<tiling_source> (and tiling/src/ on the include path when the
    program reads the tiling's private headers)."""
    includes = [os.path.join(source_root, "kernels"), os.path.join(source_root, "tiling", "include")]
    if tiling_private:
        includes.append(os.path.join(source_root, "tiling", "src"))
    return build_twin_program(
        source_root, str(tmp_path_factory.mktemp("twin") / name), name + ".cpp", include_root=True,
        extra_sources=[os.path.join(source_root, "tiling", "src", tiling_source)], extra_includes=includes)


def run_tiling_program(binary, args, timeout=120):
    """The program's output lines; it must end with "OK"."""
    r = subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, CAM_TWIN_PLATFORM="twin"))
    assert r.returncode == 0 and r.stdout.rstrip().endswith("OK"), r.stdout + r.stderr
    return r.stdout.split("\n")


def run_gmm_tiles(binary, kernel, platform, m, k, n, counts):
    """tests/twin/gmm_row_tiles.cpp for `kernel` ("w1" or "w2"): the tiling's sizes as a dict, and per AI core the
    tuples of its tiles' (w1: group, row0, rows) or units' (w2: group, row0, rows, n-tile, first) numbers in order."""
    p = platform
    lines = run_tiling_program(binary, [kernel, p["aic"], p["l1"], p["l0a"], p["l0b"], p["l0c"], p["ub"], m, k, n,
                                        *counts])
    sizes = dict(zip(lines[0].split()[0::2], map(int, lines[0].split()[1::2])))
    got = {}
    for line in lines[1:]:
        if line.startswith(("tile ", "unit ")):
            core, *rest = map(int, line.split()[1:])
            got.setdefault(core, []).append(tuple(rest))
    return sizes, got


def launch_row_tiles(counts, tm):
    """The row tiles of a group_list of counts, (group, row0, rows) in the launch's order (groups in order, tiles in
    row order), as both mixed GMM kernels cut them (docs/gmm.md §5): a group of R rows is ceil(R / tm) tiles whose
    heights differ by at most one row, the taller ones first; an empty group has none."""
    launch = []
    start = 0
    for g, rows in enumerate(counts):
        if rows:
            n = -(-rows // tm)
            heights = [rows // n + 1] * (rows % n) + [rows // n] * (n - rows % n)
            launch += [(g, start + sum(heights[:j]), h) for j, h in enumerate(heights)]
        start += rows
    return launch
