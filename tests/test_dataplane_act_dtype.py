"""The C data-plane ops refuse activations whose dtype is not the communicator's actDtype, through the
installed SDK (headers + libcam_aclnn) without Python in the loop: tests/sdk_dataplane/act_dtype.cpp."""

import os
import pathlib
import shutil
import subprocess

import pytest

import cam

pytestmark = pytest.mark.timeout(300)


def test_sdk_data_plane_ops_check_the_comm_act_dtype(tmp_path):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not available")
    src = pathlib.Path(__file__).parent / "sdk_dataplane" / "act_dtype.cpp"
    libdir = os.path.join(os.path.dirname(cam.__file__), "lib")
    exe = tmp_path / "act_dtype"
    subprocess.run([gxx, "-std=c++20", "-O0", "-I", cam.include_dir(), str(src), "-L", libdir, "-lcam_aclnn",
                    f"-Wl,-rpath,{libdir}", "-pthread", "-o", str(exe)], check=True, timeout=240)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr
