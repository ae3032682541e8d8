"""The C++ SDK inside the installed wheel: a CMake project finds it with find_package(cam), links cam::cam_aclnn and
runs dynamic_quant through the aclnn pair (tests/sdk/)."""

import os
import shutil
import subprocess
import sys

import pytest

import cam

pytestmark = [pytest.mark.slow]


def test_cmake_dir_cli(tmp_path):
    # Run outside the checkout so the installed package, not the source tree, answers.
    out = subprocess.run([sys.executable, "-m", "cam", "--cmake-dir"], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert out.returncode == 0
    assert os.path.isfile(os.path.join(out.stdout.strip(), "camConfig.cmake"))


def test_sdk_program_builds_and_passes(source_root, tmp_path):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake not installed (it is in the test extra)")
    build = tmp_path / "build"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(
        [cmake, "-S", os.path.join(source_root, "tests", "sdk"), "-B", str(build), *generator,
         f"-Dcam_DIR={cam.cmake_dir()}", "-DCMAKE_BUILD_TYPE=Release"],
        check=True, timeout=300, capture_output=True,
    )
    subprocess.run([cmake, "--build", str(build)], check=True, timeout=300, capture_output=True)
    for program in ("cam_sdk_test", "cam_sdk_gmm_test", "cam_sdk_graph_test"):
        result = subprocess.run([str(build / program)], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, program + ": " + result.stdout + result.stderr
        assert "PASSED" in result.stdout, program
