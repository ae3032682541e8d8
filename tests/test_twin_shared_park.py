"""Waits on the shm plane: a data-plane wait parked on a line of a window that another process writes is
woken by that process's write (twin/park.h, shared regions; tests/twin/shared_park.cpp, each case a fresh pair of
processes). With CAM_TWIN_SHARED_PARK=0 nothing is registered and the same cases must count no wake-up: the control
that shows the count comes from the cross-process wake and not from the waiter's own polls (before shared regions,
every such park slept its whole 50-200 µs interval). Every wait in the program is bounded (20 s)."""

import os
import subprocess

import pytest
from _twin_build import build_twin_program


@pytest.fixture(scope="module")
def shared_park_binary(source_root, tmp_path_factory):
    return build_twin_program(source_root, str(tmp_path_factory.mktemp("twin-shared-park") / "shared_park"),
                              "shared_park.cpp", include_root=True)


@pytest.mark.slow
@pytest.mark.parametrize("enabled", ["1", "0"])
@pytest.mark.parametrize("case", ["peer_write_wakes", "peer_neighbour_storm"])
def test_shared_park_case(shared_park_binary, case, enabled):
    result = subprocess.run([shared_park_binary, case], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, CAM_TWIN_PLATFORM="twin", CAM_TWIN_SHARED_PARK=enabled))
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr
