"""Code tables Python uses come from the C headers through cam._C, never copied: the capture modes and statuses
cam.Graph takes and reports equal the enumerators of cam/cam_graph.h (read from the installed header here)."""

import pathlib
import re

import cam
from cam import _C, graph


def _enumerators(prefix):
    text = (pathlib.Path(cam.include_dir()) / "cam" / "cam_graph.h").read_text()
    return {name.lower(): int(v) for name, v in re.findall(rf"\bCAM_CAPTURE_{prefix}_(\w+) = (\d+)", text)}


def test_capture_modes_and_statuses_are_the_header_enumerators():
    modes = _enumerators("MODE")
    statuses = _enumerators("STATUS")
    assert modes == {"global": 0, "thread_local": 1, "relaxed": 2}  # ACL's aclmdlRICaptureMode values
    assert _C.capture_modes() == modes and graph.MODES == modes
    assert _C.capture_statuses() == {v: name for name, v in statuses.items()} == graph.STATUS_NAMES
