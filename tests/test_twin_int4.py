"""The twin's int4 cube path (docs/twin.md, "int4 operands"): int4 x int4 through the copies, LoadData and Mmad
gives the integer product (controls), and each int4 rule the hardware imposes is refused by name at the offending
line (tests/twin/cube_int4.cpp)."""

import os
import re
import subprocess

import pytest
from _twin_build import build_twin_program

pytestmark = [pytest.mark.slow]

# case: the rule the twin must report
CASES = {
    "mmad_int8_by_int4": "mmad-int4-pair",
    "mmad_int4_by_int8": "mmad-int4-pair",
    "mmad_int4_k": "mmad-int4-k",
    "int4_odd_offset": "int4-pair",
    "nd2nz_odd_dvalue": "int4-pair",
    "cast_int4_odd_count": "int4-pair",  # the vector Cast half -> int4b_t of an odd count
}


@pytest.fixture(scope="module")
def int4_binary(source_root, tmp_path_factory):
    return build_twin_program(source_root, str(tmp_path_factory.mktemp("twin") / "cube_int4"), "cube_int4.cpp")


def run_case(binary, case):
    env = dict(os.environ, CAM_TWIN_PLATFORM="twin", CAM_TWIN_SYNC_TIMEOUT_S="20")
    return subprocess.run([binary, case], capture_output=True, text=True, timeout=120, env=env)


def marker_line(source_root, case):
    with open(os.path.join(source_root, "tests", "twin", "cube_int4.cpp")) as f:
        for number, line in enumerate(f, start=1):
            if f"@case:{case}" in line:
                return number
    return None


@pytest.mark.parametrize("case", ["good_int4", "good_int4_k96", "cast_int4"])
def test_int4_matmul_gives_the_integer_product(int4_binary, case):
    result = run_case(int4_binary, case)
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_int4_rule_is_reported(int4_binary, source_root, case):
    result = run_case(int4_binary, case)
    message = result.stdout.strip()
    assert result.returncode == 1, f"the twin accepted a broken int4 kernel: {message!r} {result.stderr}"
    assert f"rule '{CASES[case]}' broken" in message, message
    assert "in kernel int4_cube block 0/" in message, message
    line = marker_line(source_root, case)
    if line is not None:
        assert re.search(rf"tests/twin/cube_int4\.cpp:{line}\b", message), message
