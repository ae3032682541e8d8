"""Builds a twin self-test program: one test source from tests/twin/ compiled with g++ against the twin's headers and,
by default, every twin source. Each self-test used to spell this out in its own fixture."""

import glob
import os
import shutil
import subprocess

import pytest

# The flags kernels/CMakeLists.txt gives the twin (CMake Release: -O3): for tests that prove the fast paths.
TWIN_FLAGS = ["-std=c++20", "-O3", "-ffp-contract=off", "-fno-trapping-math", "-pthread"]
# The enforcement self-tests' flags: the rules are checked, not timed, and -O1 builds faster.
SELFTEST_FLAGS = ["-std=c++20", "-O1", "-ffp-contract=off", "-pthread"]


def build_twin_program(source_root: str, out: str, test_source: str, *, flags=SELFTEST_FLAGS, twin_sources=None,
                       include_root: bool = False, timeout: float = 300) -> str:
    """Compiles tests/twin/<test_source> into `out` and returns `out`. twin_sources: the twin .cpp files to link, as
    paths under kernels/twin/src (None: all of them). include_root: also put the checkout root on the include path
    (for tests that include kernels/common headers). Skips the test when there is no C++ compiler."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip(f"no C++ compiler to build the twin self-test {test_source}")
    twin_src = os.path.join(source_root, "kernels", "twin", "src")
    sources = [os.path.join(source_root, "tests", "twin", test_source)]
    if twin_sources is None:
        sources += sorted(glob.glob(os.path.join(twin_src, "*.cpp")))
    else:
        sources += [os.path.join(twin_src, s) for s in twin_sources]
    includes = (["-I", source_root] if include_root else []) + ["-I", os.path.join(source_root, "kernels", "twin",
                                                                                     "include")]
    subprocess.run([compiler, *flags, *includes, *sources, "-o", out], check=True, timeout=timeout)
    return out
