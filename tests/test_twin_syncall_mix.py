"""The hard SyncAll of a 1:2 mixed launch (docs/twin.md, "Mixed kernels and cross-core flags"). Each case runs a
test-only mixed kernel (tests/twin/syncall_mix.cpp: every vector core writes a value to GM, every core meets at
SyncAll<false>, every vector core then reads all vector cores' values, of its own AI core and of the other) that breaks
one rule, and checks that the twin names the rule, the kernel and the offending line or core; the control runs the
exchange correctly and checks every vector core's maximum; the timing case checks that the model costs the mixed
barrier as it costs a vector-only one (tests/twin/timing.cpp, syncall_join), with the same constants."""

import os
import re
import subprocess

import pytest
from _twin_build import build_twin_program

pytestmark = [pytest.mark.slow]

# case: (rule, the core the message names as breaking it: the reporting core, or the one that left the kernel)
CASES = {
    "vector_aiv_only": ("syncall-mix-aiv-only", "(on a vector core)"),
    "cube_aiv_only": ("syncall-mix-aiv-only", "(on a cube core)"),
    "vector_skips": ("syncall-exit", "vector core 1 of AI core 0"),
    "cube_skips": ("syncall-exit", "the cube core of AI core 1"),
    # the launch's AI cores are held to the platform's when it declares its kernel type, before any SyncAll
    "too_many_ai_cores": ("cube-cores", "> 2 AI cores of platform twin"),
    "no_batch_mode": ("syncall-batch-mode", None),
}
MARKED = {"vector_aiv_only", "cube_aiv_only", "too_many_ai_cores", "no_batch_mode"}


@pytest.fixture(scope="module")
def binary(source_root, tmp_path_factory):
    return build_twin_program(source_root, str(tmp_path_factory.mktemp("twin") / "syncall_mix"), "syncall_mix.cpp")


def marker_lines(source_root, case):
    """The lines marked for `case` (a rule every core breaks at its own call: whichever reports first)."""
    with open(os.path.join(source_root, "tests", "twin", "syncall_mix.cpp")) as f:
        return [number for number, line in enumerate(f, start=1)
                if re.search(rf"@case:{case}\b", line) and not line.lstrip().startswith("//")]


def run(binary, case, timeout_s="20"):
    env = dict(os.environ, CAM_TWIN_PLATFORM="twin", CAM_TWIN_SYNC_TIMEOUT_S=timeout_s)
    return subprocess.run([binary, case], capture_output=True, text=True, timeout=120, env=env)


def test_vector_cores_of_different_ai_cores_exchange_through_the_barrier(binary):
    result = run(binary, "good_exchange")
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_mixed_syncall_violation_is_reported(binary, source_root, case):
    rule, core = CASES[case]
    result = run(binary, case)
    message = result.stdout.strip()
    assert result.returncode == 1, f"the twin accepted a broken mixed barrier: {message!r} {result.stderr}"
    assert f"rule '{rule}' broken" in message, message
    assert f"in kernel {case} block" in message, message
    if core is not None:
        assert core in message, message
    if case in MARKED:
        lines = marker_lines(source_root, case)
        assert lines, case
        assert any(re.search(rf"tests/twin/syncall_mix\.cpp:{line}\b", message) for line in lines), message


def test_mixed_barrier_wait_is_bounded(binary):
    """The cube core of AI core 1 neither reaches the barrier nor leaves: the other cores' wait ends by the bound."""
    result = run(binary, "stuck", timeout_s="2")
    message = result.stdout.strip()
    assert result.returncode == 1 and "rule 'syncall-timeout' broken" in message, message + result.stderr
    assert "in kernel stuck block" in message, message


def test_mixed_barrier_is_costed_as_the_vector_only_one(binary):
    """One vector core arrives late; the launch ends at its arrival plus syncall_cycles plus one Adds, the closed form
    of the vector-only join, and the early cores' wait is a SyncAll stall."""
    result = run(binary, "join")
    assert result.returncode == 0 and result.stdout.strip().endswith("OK"), result.stdout + result.stderr
    assert "cube 2" in result.stdout, result.stdout
