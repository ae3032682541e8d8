"""A twin rule broken by one rank's data-plane kernel aborts the plane at once and leaves the rule's name beside every
rank's abort word (kernels/common/launch.h TwinAbortPlane / TwinAbortReason), whether the kernel body broke it or
the block's end-of-kernel checks did (before, only the body's rules raised the abort: a block-end rule such as
dcache-dirty-at-exit left the peers to their timeout). tests/twin/abort_reason.cpp runs rank 0's kernel while a
thread standing for rank 1 waits on its own abort word, bounded by 10 s."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from _twin_build import build_twin_program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build_twin_program(ROOT, str(tmp_path_factory.mktemp("abort-reason") / "abort_reason"), "abort_reason.cpp",
                              extra_includes=[os.path.join(ROOT, "kernels")])


def _run(program, case):
    res = subprocess.run([program, case], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    rank0 = re.search(r"^rank0: (.*)$", res.stdout, re.M).group(1)
    m = re.search(r"^rank1: abort (-?\d+) after (\d+) ms: (.*)$", res.stdout, re.M)
    return rank0, int(m.group(1)), int(m.group(2)), m.group(3)


@pytest.mark.parametrize("case, rule", [("dirty_exit", "dcache-dirty-at-exit"), ("peer_store", "peer-scalar-store")])
def test_violation_aborts_the_peer_naming_the_rule(program, case, rule):
    rank0, abort, waited_ms, reason = _run(program, case)
    assert f"rule '{rule}' broken in kernel store_word" in rank0, rank0
    assert abort == 1, (abort, reason)  # raised by rank 0 (1 + rank)
    assert reason == f"{rule} in store_word on rank 0", reason
    # The peer's wait is bounded by 10 s: ending well before it means the abort, not the bound, ended it (a loaded
    # machine can delay the launch by seconds, never by the whole bound).
    assert waited_ms < 8000, waited_ms


def test_control_leaves_the_plane_alone(program):
    rank0, abort, _, reason = _run(program, "clean")
    assert rank0 == "OK" and abort == 0 and reason == "", (rank0, abort, reason)
