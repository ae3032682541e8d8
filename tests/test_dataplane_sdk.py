"""The data plane from C++ through the installed SDK (headers + libcam_aclnn), without Python in the loop."""

import os
import pathlib
import shutil
import subprocess

import pytest

import cam

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def build_and_run(tmp_path, name: str) -> None:
    """Compiles tests/sdk_dataplane/<name>.cpp against the installed SDK and runs it (about 10 s of g++ each)."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not available")
    src = pathlib.Path(__file__).parent / "sdk_dataplane" / f"{name}.cpp"
    libdir = os.path.join(os.path.dirname(cam.__file__), "lib")
    exe = tmp_path / name
    subprocess.run([gxx, "-std=c++20", "-O1", "-I", cam.include_dir(), str(src), "-L", libdir, "-lcam_aclnn",
                    f"-Wl,-rpath,{libdir}", "-pthread", "-o", str(exe)], check=True, timeout=180)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


def test_sdk_round_trip_and_bounded_wait(tmp_path):
    build_and_run(tmp_path, "round_trip")


def test_sdk_batch_apis_under_a_placement_table(tmp_path):
    build_and_run(tmp_path, "batch")
