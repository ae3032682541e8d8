"""Waits: a data-plane wait parked on a GM line (twin::ParkOn) is woken by a write to that line and by no
other (tests/twin/park.cpp, each case a fresh process). The old shard scheme woke about half of all waiters on every
2 KiB payload copy: `write_to_neighbour_lines` and `neighbour_storm` fail against it; `write_to_watched_line` and the
same-line cases are their controls (a wake-up that never comes would fail them). A wait on several signal lines
(`range_*`) is woken by a write to any of them (a wait that watched only the first line slept through the others'
writes until its interval ended) and by no line outside them. A long wait's park interval grows (`long_wait_polls`:
a 60 ms wait polls at most 150 times; with the fixed 50 µs / 200 µs schedule it polled about 490 times)."""

import os
import subprocess

import pytest
from _twin_build import build_twin_program


@pytest.fixture(scope="module")
def park_binary(source_root, tmp_path_factory):
    return build_twin_program(source_root, str(tmp_path_factory.mktemp("twin-park") / "park"), "park.cpp",
                              include_root=True)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["write_to_watched_line", "write_to_same_line_other_word",
                                  "write_range_covering_line", "write_to_neighbour_lines",
                                  "write_before_watched_line", "no_write", "range_last_line", "range_line_after",
                                  "range_line_before", "neighbour_storm", "long_wait_polls"])
def test_park_case(park_binary, case):
    result = subprocess.run([park_binary, case], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, CAM_TWIN_PLATFORM="twin"))
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr
