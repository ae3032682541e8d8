"""Sanitizer builds: the library built from this checkout with -DCAM_SANITIZE=address (ASan + UBSan) and
-DCAM_SANITIZE=thread (TSan), and the C++ SDK test programs (tests/sdk, tests/sdk_dataplane, tests/sdk_executor)
plus the graph timeout/teardown program (tests/sdk_graph_timeout) built with the same flags against it, each run
to a clean exit with no sanitizer report.

The sanitized runs take a library build each (tens of minutes on a loaded 2-CPU machine), so they run only with
CAM_SANITIZE_TESTS=1 (a CI stage of their own); CAM_SANITIZE_BUILD_DIR keeps the builds between runs. There is no
`sanitize` marker: the suite runs with --strict-markers and markers are registered in pyproject.toml / conftest.py.
The graph timeout program's plain run (against the installed wheel) is in the default tier."""

import os
import pathlib
import platform
import shutil
import subprocess

import pytest

import cam

ROOT = pathlib.Path(__file__).resolve().parent.parent
SANITIZE = os.environ.get("CAM_SANITIZE_TESTS") == "1"
# Flags as cmake/CamCompilerFlags.cmake gives the library, for the programs built here with g++ directly.
FLAGS = {
    "address": ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"],
    "thread": ["-fsanitize=thread", "-fno-omit-frame-pointer"],
}
REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "WARNING: ThreadSanitizer",
           "ThreadSanitizer: ")
ENV = {
    # Leaks are reported: the programs free what they make. UBSan is fatal through -fno-sanitize-recover.
    "address": {"ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1",
                "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"},
    "thread": {"TSAN_OPTIONS": "halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0"},
}


def _tools():
    cmake, gxx = shutil.which("cmake"), shutil.which("g++")
    if cmake is None or gxx is None:
        pytest.skip("cmake and g++ are needed")
    return cmake, gxx


def _generator():
    return ["-G", "Ninja"] if shutil.which("ninja") else []


def _run(cmd, env=None, timeout=600):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def _sdk_programs(cmake: str, gxx: str, cam_dir: str, include: str, libdir: str, build: pathlib.Path, flags,
                  sanitize: str):
    """Builds every SDK test program into `build` and returns their paths."""
    programs = []
    for project, names in (("sdk", ("cam_sdk_test", "cam_sdk_gmm_test", "cam_sdk_graph_test")),
                           ("sdk_graph_timeout", ("cam_sdk_graph_timeout",))):
        out = build / project
        r = _run([cmake, "-S", str(ROOT / "tests" / project), "-B", str(out), *_generator(), f"-Dcam_DIR={cam_dir}",
                  "-DCMAKE_BUILD_TYPE=RelWithDebInfo", f"-DCAM_SANITIZE={sanitize}"])
        assert r.returncode == 0, r.stdout + r.stderr
        r = _run([cmake, "--build", str(out)], timeout=900)
        assert r.returncode == 0, r.stdout + r.stderr
        programs += [out / n for n in names]
    for source in ("sdk_dataplane/round_trip.cpp", "sdk_dataplane/act_dtype.cpp", "sdk_executor/executor.cpp"):
        exe = build / pathlib.Path(source).stem
        r = _run([gxx, "-std=c++20", "-O1", "-g", *flags, "-I", include, str(ROOT / "tests" / source), "-L", libdir,
                  "-lcam_aclnn", f"-Wl,-rpath,{libdir}", "-pthread", "-o", str(exe)], timeout=900)
        assert r.returncode == 0, r.stdout + r.stderr
        programs.append(exe)
    return programs


def test_graph_timeout_program_passes_against_the_installed_sdk(tmp_path):
    cmake, _ = _tools()
    build = tmp_path / "gt"
    r = _run([cmake, "-S", str(ROOT / "tests" / "sdk_graph_timeout"), "-B", str(build), *_generator(),
              f"-Dcam_DIR={cam.cmake_dir()}", "-DCMAKE_BUILD_TYPE=Release"])
    assert r.returncode == 0, r.stdout + r.stderr
    r = _run([cmake, "--build", str(build)], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = _run([str(build / "cam_sdk_graph_timeout")], timeout=300)
    assert out.returncode == 0 and "PASSED" in out.stdout, out.stdout + out.stderr


@pytest.mark.slow
@pytest.mark.skipif(not SANITIZE, reason="sanitizer builds run with CAM_SANITIZE_TESTS=1 (a CI stage of their own)")
@pytest.mark.timeout(5400)
@pytest.mark.parametrize("sanitize", ["address", "thread"])
def test_sdk_programs_run_clean_under_the_sanitizer(sanitize, tmp_path_factory):
    cmake, gxx = _tools()
    base = os.environ.get("CAM_SANITIZE_BUILD_DIR")
    base = pathlib.Path(base) if base else tmp_path_factory.mktemp("sanitize")
    lib_build = base / {"address": "asan", "thread": "tsan"}[sanitize]
    prefix = lib_build / "prefix"
    r = _run([cmake, "-S", str(ROOT), "-B", str(lib_build), *_generator(), "-DCAM_BUILD_PYTHON=OFF",
              f"-DCAM_SANITIZE={sanitize}", "-DCMAKE_BUILD_TYPE=RelWithDebInfo", f"-DCMAKE_INSTALL_PREFIX={prefix}"])
    assert r.returncode == 0, r.stdout + r.stderr
    r = _run([cmake, "--build", str(lib_build)], timeout=5000)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-5000:]
    r = _run([cmake, "--install", str(lib_build)])
    assert r.returncode == 0, r.stdout + r.stderr
    cam_dir = str(prefix / "lib" / "cmake" / "cam")
    programs = _sdk_programs(cmake, gxx, cam_dir, str(prefix / "include"), str(prefix / "lib"),
                             lib_build / "programs", FLAGS[sanitize], sanitize)
    env = dict(os.environ, **ENV[sanitize])
    # TSan's shadow memory needs the fixed layout that address-space randomization breaks on newer kernels.
    prefix_cmd = ["setarch", platform.machine(), "-R"] if sanitize == "thread" and shutil.which("setarch") else []

    def report(exe):
        out = _run([*prefix_cmd, str(exe)], env=env, timeout=1200)
        text = out.stdout + out.stderr
        if out.returncode != 0 or any(s in text for s in REPORTS):
            return f"{exe.name}: exit {out.returncode}\n{text[-6000:]}"
        return None

    # Control: a program with the defect this sanitizer exists for, built and judged the same way, is reported.
    bug = lib_build / "control.cpp"
    bug.write_text(_CONTROL[sanitize])
    r = _run([gxx, "-std=c++20", "-O1", "-g", *FLAGS[sanitize], str(bug), "-pthread", "-o", str(lib_build / "control")])
    assert r.returncode == 0, r.stderr
    assert report(lib_build / "control") is not None, "the sanitizer run does not catch a planted defect"
    failed = [f for f in map(report, programs) if f]
    assert not failed, "\n\n".join(failed)


_CONTROL = {
    "address": "#include <cstdlib>\nint main() { int* p = static_cast<int*>(std::malloc(64)); std::free(p); "
               "return p[3]; }\n",
    "thread": "#include <thread>\nint x = 0;\nint main() { std::thread a([] { for (int i = 0; i < 100000; ++i) ++x; "
              "}); for (int i = 0; i < 100000; ++i) ++x; a.join(); return 0; }\n",
}
