"""A hard SyncAll needs batch scheduling mode in every launch (rule syncall-batch-mode, docs/twin.md), not only in the
data plane's: on Ascend a launch in normal mode whose blocks share the cores with other streams' kernels can deadlock
in the barrier (asc-devkit SyncAll.md). tests/twin/batch_launch.cpp launches a tiny exchange kernel (every vector core
writes a value, all cores meet at the barrier, every vector core copies its neighbour's value) through the production
launch macros of kernels/common/launch.h: CAM_KERNEL_LAUNCH (no batch mode) is refused at the barrier's line, for a
vector-only kernel's SyncAll<true> and for a mixed kernel's SyncAll<false>; CAM_BATCH_KERNEL_LAUNCH (the control)
runs the exchange and its values are checked."""

import os
import re
import subprocess

import pytest

from _twin_build import build_twin_program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "tests", "twin", "batch_launch.cpp")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build_twin_program(ROOT, str(tmp_path_factory.mktemp("batch-launch") / "batch_launch"), "batch_launch.cpp",
                              extra_includes=[os.path.join(ROOT, "kernels")])


def _run(program, case):
    env = dict(os.environ, CAM_TWIN_PLATFORM="twin", CAM_TWIN_SYNC_TIMEOUT_S="20")
    return subprocess.run([program, case], capture_output=True, text=True, timeout=60, env=env)


def _marked_lines(case):
    with open(SOURCE) as f:
        return [n for n, line in enumerate(f, 1) if re.search(rf"@case:{case}\b", line)]


@pytest.mark.parametrize("case, kernel", [("vector_kernel_launch", "cam_test_vector_exchange"),
                                          ("mixed_kernel_launch", "cam_test_mixed_exchange")])
def test_hard_syncall_in_a_kernel_launch_without_batch_mode_is_refused(program, case, kernel):
    result = _run(program, case)
    message = result.stdout.strip()
    assert result.returncode == 1, f"the twin accepted a hard SyncAll without batch mode: {message!r} {result.stderr}"
    assert "rule 'syncall-batch-mode' broken" in message, message
    assert f"in kernel {kernel} block" in message, message
    lines = _marked_lines(case)
    assert lines and any(f"batch_launch.cpp:{n}:" in message for n in lines), (lines, message)


@pytest.mark.parametrize("case", ["vector_batch_launch", "mixed_batch_launch"])
def test_the_same_kernel_launched_in_batch_mode_runs(program, case):
    result = _run(program, case)
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr
