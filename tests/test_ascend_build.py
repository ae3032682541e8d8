"""The CAM_ASCEND=ON build, where no toolkit exists: a stand-in `bisheng` on PATH logs its
arguments and writes an empty object, and the kernel targets are built. Each kernel's command line is checked:
Ascend C language, the A2/A3 arch, defines, and the include order (the toolkit's kernel_operator.h is found first;
the twin's include directory never appears). Without a toolkit, configure stops with one sentence."""

import json
import os
import re
import pathlib
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # compiles

ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNEL_SOURCES = sorted(p for p in (ROOT / "kernels").glob("*/*.cpp") if p.parent.name != "twin")


def auto_sync_option() -> str:
    """The compiler option the twin's table of automatic syncs stands for (kernels/twin/include/twin/pipes.h)."""
    import re
    text = (ROOT / "kernels" / "twin" / "include" / "twin" / "pipes.h").read_text()
    return re.search(r'kAutoSyncCompilerOption\[\] = "([^"]+)"', text).group(1)


def _cmake() -> str:
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake not installed (it is in the test extra)")
    return cmake


def _fake_toolkit(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    home = tmp_path / "Ascend" / "cann"
    tikcfw = home / "compiler" / "tikcpp" / "tikcfw"
    for d in (tikcfw / "impl", tikcfw / "interface", home / "include"):
        d.mkdir(parents=True)
    (tikcfw / "kernel_operator.h").write_text("/* stand-in: never compiled */\n")
    (tikcfw / "lib" / "hccl").mkdir(parents=True)  # the Hccl client's header window_table includes
    (tikcfw / "lib" / "hccl" / "hccl.h").write_text("/* stand-in: never compiled */\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "bisheng.log"
    stand_in = bindir / "bisheng"
    stand_in.write_text(
        f"#!{sys.executable}\n"
        "import json, os, subprocess, sys\n"
        "args = sys.argv[1:]\n"
        "with open(os.environ['CAM_BISHENG_LOG'], 'a') as f:\n"
        "    f.write(json.dumps(args) + '\\n')\n"
        "out = args[args.index('-o') + 1]\n"
        "subprocess.run(['cc', '-c', '-x', 'c', '/dev/null', '-o', out], check=True, timeout=60)\n"
        # What bisheng's host pass sees of the source (__CCE__ defined, the same includes and defines), beside the
        # object: how each kernel is launched is read from it.
        "flags = [a for a in args if a.startswith(('-I', '-D', '-std='))]\n"
        "subprocess.run(['c++', '-E', '-P', '-x', 'c++', '-D__CCE__', *flags, args[args.index('-c') + 1],\n"
        "                '-o', out + '.i'], check=True, timeout=60)\n")
    stand_in.chmod(0o755)
    return home, bindir, log


def _configure(tmp_path, env, *extra) -> subprocess.CompletedProcess:
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    return subprocess.run([_cmake(), "-S", str(ROOT), "-B", str(tmp_path / "build"), *generator, "-DCAM_ASCEND=ON",
                           "-DCAM_BUILD_PYTHON=OFF", "-DCMAKE_BUILD_TYPE=Release", *extra],
                          capture_output=True, text=True, timeout=240, env=env)


def _env_without_toolkit() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not (pathlib.Path(p) / "bisheng").exists())
    return env


@pytest.fixture(scope="module")
def stand_in_build(tmp_path_factory):
    """The kernel targets built with the stand-in bisheng: (the build tree, the fake toolkit's root, the log)."""
    if shutil.which("cc") is None or shutil.which("c++") is None:
        pytest.skip("cc / c++ not available for the stand-in's empty object and preprocessed source")
    tmp_path = tmp_path_factory.mktemp("bisheng")
    home, bindir, log = _fake_toolkit(tmp_path)
    env = _env_without_toolkit()
    env.update(ASCEND_HOME_PATH=str(home), PATH=str(bindir) + os.pathsep + env["PATH"], CAM_BISHENG_LOG=str(log))
    res = _configure(tmp_path, env)
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run([_cmake(), "--build", str(tmp_path / "build"), "--target", "cam_kernels"],
                         capture_output=True, text=True, timeout=240, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    return tmp_path / "build", home, log


def test_kernels_are_compiled_by_bisheng_as_ascend_c(stand_in_build):
    _, home, log = stand_in_build
    commands = [json.loads(line) for line in log.read_text().splitlines()]
    compiled = {pathlib.Path(c[c.index("-c") + 1]) for c in commands}
    assert compiled == set(KERNEL_SOURCES) and len(commands) == len(KERNEL_SOURCES)
    for args in commands:
        src = args[args.index("-c") + 1]
        assert args[args.index("-x") + 1] == "asc", src
        assert "--npu-arch=dav-2201" in args, src
        # The twin models bisheng's automatic sync only because the build asks for it, by the same spelling.
        assert auto_sync_option() == "--cce-auto-sync" and auto_sync_option() in args, src
        assert "-DNDEBUG" in args and not [a for a in args if a.startswith("-D") and "TWIN" in a.upper()], src
        includes = [pathlib.Path(a[2:]) for a in args if a.startswith("-I")]
        assert not [d for d in includes if "twin" in d.parts], src
        # The compiler's view: the first include directory that has kernel_operator.h is the toolkit's.
        first = next(d for d in includes if (d / "kernel_operator.h").is_file())
        assert first == home / "compiler" / "tikcpp" / "tikcfw", src
        assert includes.index(ROOT / "kernels") > includes.index(first), src


def _host_pass(build: pathlib.Path, source: pathlib.Path) -> str:
    rel = source.relative_to(ROOT / "kernels")
    found = list(build.rglob(f"bisheng/{rel}.o.i"))
    assert len(found) == 1, (source, found)
    return found[0].read_text()


# The expansion of CAM_DATAPLANE_LAUNCH (CAM_BATCH_KERNEL_LAUNCH) on Ascend: the kernel's symbol and the data-plane
# (batch kernel) launch descriptor, both batch mode.
CONFIGURED_LAUNCH = (r"::cam::kernels::LaunchWithDescriptor\(reinterpret_cast<const void\*>\(&cam_\w+\), \"cam_\w+\", "
                     r"[^;]*::cam::kernels::(kDataPlaneLaunch|kBatchKernelLaunch)")


def test_syncall_kernels_are_launched_with_their_schedule_mode(stand_in_build):
    """A kernel that calls SyncAll needs batch scheduling mode, which only a configured launch carries (the
    configuration's ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE; a <<<>>> launch takes none, docs/ascend.md §6). As bisheng's
    host pass sees each such kernel's source, its launch wrapper goes through cam::kernels::LaunchConfigured with
    a batch-mode descriptor (CAM_DATAPLANE_LAUNCH's, or CAM_BATCH_KERNEL_LAUNCH's) and nothing in it is a <<<>>>
    launch. Control: a kernel without SyncAll
    (dynamic_quant) is still a <<<>>> launch, which the check would see."""
    build, _, _ = stand_in_build
    syncall = [p for p in KERNEL_SOURCES
               if "CAM_DATAPLANE_LAUNCH" in p.read_text() or "CAM_BATCH_KERNEL_LAUNCH" in p.read_text()]
    assert {p.parent.name for p in syncall} == {"dispatch_send", "dispatch_recv", "combine_send", "combine_recv"}
    for source in KERNEL_SOURCES:
        text = _host_pass(build, source)
        uses_syncall = "SyncAll" in text
        assert uses_syncall == (source in syncall), source
        if uses_syncall:
            assert "<<<" not in text, f"{source.name}: a SyncAll kernel launched with <<<>>>"
            assert re.search(CONFIGURED_LAUNCH, text), source.name
    control = _host_pass(build, ROOT / "kernels" / "dynamic_quant" / "dynamic_quant.cpp")
    assert "<<<" in control and not re.search(CONFIGURED_LAUNCH, control)


def test_kernels_go_through_canns_ascendc_module_where_present(tmp_path):
    # A stand-in for CANN's ascendc_kernel_cmake/ascendc.cmake that records how cam calls it (ascendc_library and
    # ascendc_compile_definitions, the module's documented interface) and builds an empty library.
    home, bindir, log = _fake_toolkit(tmp_path)
    module_dir = home / "compiler" / "tikcpp" / "ascendc_kernel_cmake"
    module_dir.mkdir(parents=True)
    (module_dir / "empty.cpp").write_text("// stand-in kernel library\n")
    (module_dir / "ascendc.cmake").write_text(
        "set(_cam_stub_dir ${CMAKE_CURRENT_LIST_DIR})\n"
        "function(ascendc_library name type)\n"
        "  file(APPEND $ENV{CAM_ASCENDC_LOG} \"library;${name};${type};soc=${SOC_VERSION};${ARGN}\\n\")\n"
        "  add_library(${name} ${type} ${_cam_stub_dir}/empty.cpp)\n"
        "endfunction()\n"
        "function(ascendc_compile_definitions name scope)\n"
        "  file(APPEND $ENV{CAM_ASCENDC_LOG} \"definitions;${name};${scope};${ARGN}\\n\")\n"
        "endfunction()\n"
        "function(ascendc_compile_options name scope)\n"
        "  file(APPEND $ENV{CAM_ASCENDC_LOG} \"options;${name};${scope};${ARGN}\\n\")\n"
        "endfunction()\n")
    module_log = tmp_path / "ascendc.log"
    env = _env_without_toolkit()
    env.update(ASCEND_HOME_PATH=str(home), PATH=str(bindir) + os.pathsep + env["PATH"], CAM_BISHENG_LOG=str(log),
               CAM_ASCENDC_LOG=str(module_log))
    res = _configure(tmp_path, env)
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run([_cmake(), "--build", str(tmp_path / "build"), "--target", "cam_kernels"],
                         capture_output=True, text=True, timeout=240, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    calls = [line.split(";") for line in module_log.read_text().splitlines()]
    library = [c for c in calls if c[0] == "library"]
    assert len(library) == 1 and library[0][1:4] == ["cam_kernels", "STATIC", "soc=Ascend910B1"]
    assert sorted(pathlib.Path(p) for p in library[0][4:]) == KERNEL_SOURCES
    assert ["definitions", "cam_kernels", "PRIVATE", "NDEBUG"] in calls
    assert ["options", "cam_kernels", "PRIVATE", auto_sync_option()] in calls
    assert not log.exists(), "the module path must not also run cam's own bisheng commands"


def test_configure_without_toolkit_fails_with_one_sentence(tmp_path):
    res = _configure(tmp_path, _env_without_toolkit())
    assert res.returncode != 0
    assert "CAM_ASCEND=ON needs a CANN toolkit" in res.stderr
    assert "source the toolkit's set_env.sh" in res.stderr
