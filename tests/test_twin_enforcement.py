"""The twin must refuse what the hardware would punish. Each case runs a test-only kernel (tests/twin/violations.cpp)
that breaks one rule and checks that the twin names the rule, the kernel, the block and the offending line; the
controls prove a correct kernel passes, so the checks are not tautologies."""

import glob
import os
import re
import shutil
import subprocess

import pytest

pytestmark = [pytest.mark.slow]

CASES = {
    # case: (rule the twin must report, block that breaks it or None when any block may)
    "ub_overflow": ("ub-capacity", None),
    "copy_length": ("copy-align", 0),
    "copy_ub_address": ("copy-align", 0),
    "vector_misaligned": ("vector-align", 0),
    "read_before_deque": ("queue-discipline", 0),
    "deque_empty": ("queue-discipline", 0),
    "alloc_exhausted": ("queue-discipline", 0),
    "use_after_free": ("queue-discipline", 0),
    "leak": ("queue-discipline", 0),
    "syncall_exit": ("syncall-exit", None),
    "syncall_cores": ("syncall-cores", None),
    "gm_bounds": ("gm-bounds", 0),
    # cube path (twin/cube.h)
    "cube_cores": ("cube-cores", None),
    "l0a_overflow": ("cube-capacity", 0),
    "cube_buffer_in_vector_kernel": ("core-kind", 0),
    "ub_in_cube_kernel": ("core-kind", 0),
    "vector_in_cube_kernel": ("core-kind", 0),
    "mmad_enqueued_operand": ("queue-discipline", 0),
    "mmad_l0_bounds": ("l0-bounds", 0),
}


@pytest.fixture(scope="module")
def violations_binary(source_root, tmp_path_factory):
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the twin self-test")
    out = str(tmp_path_factory.mktemp("twin") / "violations")
    sources = [os.path.join(source_root, "tests", "twin", "violations.cpp")]
    sources += sorted(glob.glob(os.path.join(source_root, "kernels", "twin", "src", "*.cpp")))
    cmd = [compiler, "-std=c++20", "-O1", "-ffp-contract=off", "-pthread",
           "-I", os.path.join(source_root, "kernels", "twin", "include"), *sources, "-o", out]
    subprocess.run(cmd, check=True, timeout=300)
    return out


def marker_line(source_root, case):
    path = os.path.join(source_root, "tests", "twin", "violations.cpp")
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            if f"@case:{case}" in line and not line.lstrip().startswith("//"):
                return number
    return None


def run_case(binary, case):
    env = dict(os.environ, CAM_TWIN_PLATFORM="twin", CAM_TWIN_SYNC_TIMEOUT_S="20")
    return subprocess.run([binary, case], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("case", ["good_copy", "good_copy_48_cores", "stream", "good_cube"])
def test_correct_kernel_passes(violations_binary, case):
    result = run_case(violations_binary, case)
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_violation_is_reported(violations_binary, source_root, case):
    rule, block = CASES[case]
    result = run_case(violations_binary, case)
    message = result.stdout.strip()
    assert result.returncode == 1, f"the twin accepted a broken kernel: {message!r} {result.stderr}"
    assert f"rule '{rule}' broken" in message, message
    assert f"in kernel {case} block" in message, message
    if block is not None:
        assert f" block {block}/" in message, message
    line = marker_line(source_root, case)
    if line is not None:
        assert re.search(rf"tests/twin/violations\.cpp:{line}\b", message), message
