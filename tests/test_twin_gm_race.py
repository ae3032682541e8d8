"""Rule gm-unordered-access (docs/twin.md, "GM accesses no synchronization orders"): two cores of one launch that
access overlapping GM bytes, one of them writing, with no SyncAll, cross-core flag or GM-word wait ordering them.
Each case runs a test-only kernel (tests/twin/gm_race.cpp) in both real-time orders of the two accesses (a host-side
atomic forces which runs first): the twin must refuse a race whichever order the threads ran in, and accept the
same hand-off once a synchronization the hardware honours orders it."""

import os
import re
import subprocess

import pytest
from _twin_build import build_twin_program

pytestmark = [pytest.mark.slow]

ORDERS = ["write_first", "read_first"]
# case: (the writer, the reader) as the message names them
RACES = {
    "vec_race": ("vector core 0 of AI core", "vector core 1 of AI core"),
    "cube_flag_early": ("vector core", "the cube core of AI core"),
    "aiv_word_early": ("block 0", "block 1"),
}
CONTROLS = ["vec_syncall", "vec_flag", "cube_flag", "aiv_word", "aiv_scalar_word"]


@pytest.fixture(scope="module")
def gm_race_binary(source_root, tmp_path_factory):
    return build_twin_program(source_root, str(tmp_path_factory.mktemp("twin") / "gm_race"), "gm_race.cpp",
                              include_root=True)


def marker_lines(source_root, marker):
    with open(os.path.join(source_root, "tests", "twin", "gm_race.cpp")) as f:
        return [n for n, line in enumerate(f, start=1) if f"// {marker}" in line]


def run(binary, case, order, **env):
    env = dict(os.environ, CAM_TWIN_PLATFORM="twin", CAM_TWIN_SYNC_TIMEOUT_S="20", **{"CAM_TWIN_GM_RACE": "1", **env})
    return subprocess.run([binary, case, order], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("case", sorted(RACES))
def test_unordered_gm_access_is_refused_in_either_order(gm_race_binary, source_root, case, order):
    writer, reader = RACES[case]
    writes = "|".join(str(n) for n in marker_lines(source_root, "@write"))
    reads = "|".join(str(n) for n in marker_lines(source_root, "@read"))
    for _ in range(3):  # the verdict does not depend on the threads' timing: the same every run
        result = run(gm_race_binary, case, order)
        message = result.stdout.strip()
        assert result.returncode == 1, f"the twin accepted a GM race: {message!r} {result.stderr}"
        assert "rule 'gm-unordered-access' broken" in message, message
        assert f"in kernel {case} at" in message, message
        assert re.search(rf"{writer}[^:]*wrote GM \[0x[0-9a-f]+, 0x[0-9a-f]+\) at tests/twin/gm_race\.cpp:({writes})\b",
                         message), message
        assert re.search(rf"and {reader}[^:]* read it", message), message
        assert re.search(rf"at tests/twin/gm_race\.cpp:({reads}):", message), message


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("case", CONTROLS)
def test_synchronized_gm_hand_off_passes(gm_race_binary, case, order):
    result = run(gm_race_binary, case, order)
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr


def test_the_check_is_off_outside_tests(gm_race_binary):
    """Without CAM_TWIN_GM_RACE=1 (tests/conftest.py sets it for every test) the race runs to its end."""
    result = run(gm_race_binary, "vec_race", "write_first", CAM_TWIN_GM_RACE="0")
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr
