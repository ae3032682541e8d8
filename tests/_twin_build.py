"""Builds a twin self-test program: one test source from tests/twin/ compiled with g++ against the twin's headers and,
by default, every twin source. Each self-test used to spell this out in its own fixture.

The twin sources are compiled to objects once per test session and flag set, and linked into every program that
asks for them: five self-test programs link the same ten twin sources, and compiling those is most of each build.
The objects are built as kernels/CMakeLists.txt builds the cam_twin library (the twin's include directory only;
the checkout root goes on the include path of the test source alone), with the program's flags, and the
independent compiles run side by side on the machine's cores."""

import atexit
import glob
import os
import shutil
import subprocess
import tempfile
import threading

import pytest

from _parallel import run_all

# The flags kernels/CMakeLists.txt gives the twin (CMake Release: -O3): for tests that prove the fast paths.
TWIN_FLAGS = ["-std=c++20", "-O3", "-ffp-contract=off", "-fno-trapping-math", "-pthread"]
# The enforcement self-tests' flags: the rules are checked, not timed, and -O1 builds faster.
SELFTEST_FLAGS = ["-std=c++20", "-O1", "-ffp-contract=off", "-pthread"]

_lock = threading.Lock()
_objects = {}  # (compiler, flags, source, its mtime and size) -> object file built this session
_obj_dir = None


def _object_dir() -> str:
    global _obj_dir
    if _obj_dir is None:
        _obj_dir = tempfile.mkdtemp(prefix="cam-twin-objects-")
        owner = os.getpid()
        # Removed when the session's process exits; not by a forked child that exits normally (the session may
        # still link against them).
        atexit.register(lambda d=_obj_dir: os.getpid() == owner and shutil.rmtree(d, True))
    return _obj_dir


def twin_objects(source_root: str, *, flags=SELFTEST_FLAGS, timeout: float = 300) -> list:
    """The session's objects of every twin source for `flags` (compiled now if this session has none yet)."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the twin")
    twin_include = ["-I", os.path.join(source_root, "kernels", "twin", "include")]
    paths = sorted(glob.glob(os.path.join(source_root, "kernels", "twin", "src", "*.cpp")))
    with _lock:
        objects, new, missing = _session_objects(compiler, flags, paths)
        run_all([[compiler, *flags, *twin_include, "-c", path, "-o", obj] for path, obj in missing],
                timeout=timeout, check=True)
        _objects.update(new)
    return objects


def twin_support_objects(source_root: str, exclude, *, flags=SELFTEST_FLAGS, timeout: float = 300) -> list:
    """The session's objects (`flags`) of every twin source except the basenames in `exclude`: the twin's runtime for
    a program that compiles the sources under test itself, with other flags (build_twin_program's twin_sources)."""
    paths = sorted(glob.glob(os.path.join(source_root, "kernels", "twin", "src", "*.cpp")))
    objects = twin_objects(source_root, flags=flags, timeout=timeout)
    return [obj for path, obj in zip(paths, objects) if os.path.basename(path) not in exclude]


def _session_objects(compiler: str, flags, paths):
    """(every path's object, the cache entries to add once they are built, the (path, object) pairs to build):
    an object is reused while its source's mtime and size and the flags are the same. Called under _lock."""
    objects, new, missing = [], [], []
    for path in paths:
        st = os.stat(path)
        key = (compiler, tuple(flags), path, st.st_mtime_ns, st.st_size)
        obj = _objects.get(key)
        if obj is None:
            obj = os.path.join(_object_dir(), f"{len(_objects) + len(new)}-{os.path.basename(path)}.o")
            new.append((key, obj))
            missing.append((path, obj))
        objects.append(obj)
    return objects, new, missing


def build_twin_program(source_root: str, out: str, test_source: str, *, flags=SELFTEST_FLAGS, twin_sources=None,
                       include_root: bool = False, extra_sources=(), extra_includes=(), timeout: float = 300,
                       program_flags=(), link_objects=()) -> str:
    """Compiles tests/twin/<test_source> (or an absolute path) into `out` and returns `out`. twin_sources: the twin
    .cpp files to link, as paths under kernels/twin/src (None: all of them). include_root: also put the checkout
    root on the include path of the test source (for tests that include kernels/common headers). extra_sources:
    more of the program's own sources (absolute paths, e.g. a kernel), compiled like the test source, with
    extra_includes after the twin's include directory. program_flags: more flags for the program's own sources only
    (a mutant's -D switch, tests/test_mutants.py), so the twin's objects stay shared. link_objects: more objects for
the link (twin_support_objects). Skips the test when there is
    no C++ compiler. `timeout` bounds each compiler run (the objects', the test source's, the link)."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip(f"no C++ compiler to build the twin self-test {test_source}")
    twin_include = ["-I", os.path.join(source_root, "kernels", "twin", "include")]
    twin_src = os.path.join(source_root, "kernels", "twin", "src")
    if twin_sources is None:
        twin_paths = sorted(glob.glob(os.path.join(twin_src, "*.cpp")))
    else:
        twin_paths = [os.path.join(twin_src, s) for s in twin_sources]
    program_include = (["-I", source_root] if include_root else []) + twin_include
    for d in extra_includes:
        program_include += ["-I", str(d)]
    program = [os.path.join(source_root, "tests", "twin", test_source), *map(str, extra_sources)]
    units = [(src, [*program_flags, *program_include], f"{out}.{i}.o") for i, src in enumerate(program)]
    program_objects = [obj for _, _, obj in units]
    with _lock:  # one build at a time: a second caller would otherwise compile the same objects again
        objects, new, missing = _session_objects(compiler, flags, twin_paths)
        units += [(path, twin_include, obj) for path, obj in missing]
        run_all([[compiler, *flags, *includes, "-c", source, "-o", obj] for source, includes, obj in units],
                timeout=timeout, check=True)
        _objects.update(new)
    subprocess.run([compiler, *flags, *program_objects, *objects, *link_objects, "-o", out], check=True,
                   timeout=timeout)
    return out
