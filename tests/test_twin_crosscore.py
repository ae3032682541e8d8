"""The 1:2 mixed kernel type and the cross-core flags (docs/twin.md, "Mixed kernels and cross-core flags"). Each case
runs a test-only mixed kernel (tests/twin/crosscore.cpp: a cube core hands a tile to its two vector cores through a
two-slot GM ring) that breaks one rule, and checks that the twin names the rule, the kernel and the offending line;
the controls run the same hand-off correctly (and check every tile the vector cores copied out)."""

import os
import re
import subprocess

import pytest
from _twin_build import build_twin_program

pytestmark = [pytest.mark.slow]

CASES = {
    # case: (rule, the core that breaks it as the message names it, or None)
    "read_before_flag": ("cross-core-read-before-flag", "vector core"),
    "set_on_wrong_pipe": ("cross-core-read-before-flag", "vector core"),
    "write_before_free": ("cross-core-write-before-free", "cube core"),
    "flag_id_range": ("cross-core-flag-id", "cube core"),
    "wait_unmatched": ("cross-core-wait-unmatched", "vector core"),
    "counter": ("cross-core-counter", "cube core"),
    "mode0": ("cross-core-mode", "cube core"),
    "not_mixed": ("cross-core-kernel-type", None),
}


@pytest.fixture(scope="module")
def crosscore_binary(source_root, tmp_path_factory):
    return build_twin_program(source_root, str(tmp_path_factory.mktemp("twin") / "crosscore"), "crosscore.cpp")


def marker_line(source_root, case):
    with open(os.path.join(source_root, "tests", "twin", "crosscore.cpp")) as f:
        for number, line in enumerate(f, start=1):
            if re.search(rf"@case:{case}\b", line) and not line.lstrip().startswith("//"):
                return number
    return None


def run(binary, *args, timeout_s="20"):
    env = dict(os.environ, CAM_TWIN_PLATFORM="twin", CAM_TWIN_SYNC_TIMEOUT_S=timeout_s)
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("case", ["good_mixed", "good_counter"])
def test_correct_mixed_kernel_passes(crosscore_binary, case):
    result = run(crosscore_binary, case)
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_cross_core_violation_is_reported(crosscore_binary, source_root, case):
    rule, core = CASES[case]
    result = run(crosscore_binary, case)
    message = result.stdout.strip()
    assert result.returncode == 1, f"the twin accepted a broken mixed kernel: {message!r} {result.stderr}"
    assert f"rule '{rule}' broken" in message, message
    assert f"in kernel {case} block" in message, message
    if core is not None:
        assert f"({core}" in message, message
    line = marker_line(source_root, case)
    assert line is not None, case
    assert re.search(rf"tests/twin/crosscore\.cpp:{line}\b", message), message


def test_set_never_waited_is_refused_at_the_end(crosscore_binary):
    """The cube skips its last two waits for "slot free": those sets stay on its counter past the kernel's end."""
    result = run(crosscore_binary, "set_never_waited")
    message = result.stdout.strip()
    assert result.returncode == 1 and "rule 'cross-core-unmatched-set' broken" in message, message + result.stderr
    assert "in kernel set_never_waited AI core" in message and "flag 1 " in message, message


def test_wait_without_a_set_times_out_by_name(crosscore_binary, source_root):
    """The cube waits for its vector cores, they wait for the cube: nobody ends, so only the bound ends it."""
    result = run(crosscore_binary, "wait_timeout", timeout_s="2")
    message = result.stdout.strip()
    assert result.returncode == 1 and "rule 'cross-core-wait-timeout' broken" in message, message + result.stderr
    assert "CAM_TWIN_SYNC_TIMEOUT_S" in message, message


def test_model_costs_the_wait_edges(crosscore_binary):
    """With timing on, the vector cores wait on the cube's flag (its Mmad and Fixpipe come first) and the cube on the
    vector cores' "slot free" flags: both appear as CrossCoreWaitFlag stalls, and the launch counts its two cube
    cores."""
    result = run(crosscore_binary, "good_mixed", "timing")
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(l for l in result.stdout.splitlines() if l.startswith("cores "))
    fields = dict(zip(line.split()[0::2], line.split()[1::2]))
    assert fields["cores"] == "2" and fields["cube"] == "2", line
    assert float(fields["aiv_wait"]) > 0, line
    assert float(fields["seconds"]) > 0, line
