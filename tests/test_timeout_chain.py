"""The timeout chain is written once, in C (cam/cam_timeouts.h), and Python reads it through cam._C: the
constants agree with the header's macros, and every configuration the Python side accepts (device wait under the
host sync bound, sync bound under the AI Core op timeout less the drain) also passes the C library's Ascend check
(device wait + follower margin under the AI Core op timeout)."""

import ctypes
import os
import pathlib
import re

import pytest

import cam
from cam import _C, _runtime
from cam.topology import Topology

pytestmark = pytest.mark.timeout(60)

HEADER = pathlib.Path(cam.include_dir()) / "cam" / "cam_timeouts.h"


def _macros():
    text = HEADER.read_text()
    return {name: float(v) for name, v in re.findall(r"#define CAM_(\w+_S) (\d+)\b", text)}


def test_python_constants_are_the_c_header_values():
    macros = _macros()
    assert set(macros) == {"FOLLOWER_MARGIN_S", "SYNC_MARGIN_S", "DRAIN_S", "AICORE_OP_TIMEOUT_S"}
    chain = _C.timeout_chain()
    assert chain == {name.lower(): value for name, value in macros.items()}
    assert (_runtime.SYNC_MARGIN_S, _runtime.DRAIN_S, _runtime.AICORE_OP_TIMEOUT_S) == (
        macros["SYNC_MARGIN_S"], macros["DRAIN_S"], macros["AICORE_OP_TIMEOUT_S"])
    # Ascend's default AI Core op execution timeout (docs/ascend.md), the outermost link.
    assert macros["AICORE_OP_TIMEOUT_S"] == 1091


def _ascend_plane_check(timeout_s, idle_s, aicore_s):
    lib = ctypes.CDLL(os.path.join(os.path.dirname(cam.__file__), "lib", "libcam_aclnn.so"))
    topo = Topology(D=1, P=1, F=1, E=2, K=1, H=64, Bmax=4, L=1)
    c_fields = topo.as_c_fields()
    fields = (ctypes.c_int64 * len(c_fields))(*c_fields)
    config = (ctypes.c_int64 * 3)(int(timeout_s * 1e9), int(idle_s * 1e9), _C.acl_dtypes()["bfloat16"])
    lib.camCheckAscendPlane.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32]
    lib.camGetLastErrorMessage.restype = ctypes.c_char_p
    status = lib.camCheckAscendPlane(ctypes.addressof(fields), ctypes.addressof(config), 4096, int(aicore_s))
    # The last-error message is only set by a failure (an older one stays on the thread after a success).
    return status, lib.camGetLastErrorMessage().decode() if status else ""


def test_what_python_accepts_the_ascend_check_accepts(monkeypatch):
    chain = _C.timeout_chain()
    aicore, drain, sync_margin = chain["aicore_op_timeout_s"], chain["drain_s"], chain["sync_margin_s"]
    # The largest host sync bound Python allows, and the largest device wait under it.
    sync_bound = aicore - drain - 0.5
    monkeypatch.setenv("CAM_SYNC_TIMEOUT_S", str(sync_bound))
    idle = 0.5
    timeout = sync_bound - sync_margin - idle - 0.5
    _runtime.check_timeout_chain("test", timeout, idle)  # accepted
    assert _ascend_plane_check(timeout, idle, aicore) == (0, "")
    # Control: the C check does refuse a wait that the follower margin pushes past the AI Core op timeout.
    past = aicore - chain["follower_margin_s"] - idle + 1
    status, message = _ascend_plane_check(past, idle, aicore)
    assert status == _C.status_codes()["ACLNN_ERR_PARAM_INVALID"]
    assert f"AI Core op timeout of {int(aicore)} s" in message
    # And Python refuses a sync bound whose drain would end past the AI Core op timeout.
    monkeypatch.setenv("CAM_SYNC_TIMEOUT_S", str(aicore - drain))
    with pytest.raises(ValueError, match="AI Core op timeout"):
        _runtime.sync_timeout_s()
