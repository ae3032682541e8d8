"""cam's host library against CANN's own public headers, as shipped in the torch-npu wheel:
(a) every enumerator, constant and ACL call acl_compat.h declares for the twin equals the real one (a probe compiled
in each mode prints values and function types; the outputs are diffed); (b) the public headers compile with
CAM_WITH_CANN as C++ and as C; (c) the Ascend backend and every other host source compile against them.

Each check runs against every header set of the matrix: torch-npu 2.6.0.post5, 2.8.0 and 2.14.0,
whose ACL/HCCL APIs differ. What a set declares is found per feature by the probes of cmake/cann_features/ (the
same sources cmake/CamCannFeatures.cmake compiles for a CMake build; a test checks both give the same header), and
the sources build each feature's fallback where it is absent. The expected features of each set are written below
from reading the headers, independently of the probes.

The headers come from `python .ci/fetch_acl_headers.py` (pinned wheels, extracted to .acl-headers/<version>/ or
$CAM_ACL_HEADERS/<version>/). Without them these tests skip, unless CAM_REQUIRE_ACL_HEADERS=1 (CI), where they
fail.

What the wheel lacks is checked against the public aclnn API reference instead: the ACLNN_* codes (table of return
codes, below) and aclnn's tensor calls, whose prototypes are in host/cann_shim/aclnn/acl_meta.h (written from that
reference; a toolkit build uses CANN's own header)."""

import hashlib
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest

from _parallel import run_all

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # compiles

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMPAT = ROOT / "host" / "include" / "cam" / "acl_compat.h"
SHIM = ROOT / "host" / "cann_shim"

# aclnn API reference, "公共接口返回码" (return codes of the common interfaces); ACLNN_ERR_INNER is the base of the
# documented 561xxx internal-error range.
ACLNN_DOCUMENTED = {"ACLNN_SUCCESS": 0, "ACLNN_ERR_PARAM_NULLPTR": 161001, "ACLNN_ERR_PARAM_INVALID": 161002,
                    "ACLNN_ERR_RUNTIME_ERROR": 361001, "ACLNN_ERR_INNER": 561000}


def _fetch_script():
    spec = importlib.util.spec_from_file_location("fetch_acl_headers", ROOT / ".ci" / "fetch_acl_headers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FETCH = _fetch_script()
HEADER_SETS = [version for version, _ in FETCH.MATRIX]
PINNED = HEADER_SETS[0]  # the set the single-set checks (test_ascend_hccl.py) use

FEATURE_PROBES = ROOT / "cmake" / "cann_features"
FEATURES_TEMPLATE = ROOT / "cmake" / "cam_cann_features.h.in"

# What each header set declares, from reading its acl_rt.h, rt_error_codes.h and hccl.h (not from the probes):
# 2.8.0's acl_rt.h has neither the launch configuration nor ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, and its hccl.h no
# HcclCommInitRootInfoConfig; only 2.14.0's acl_rt.h has aclrtLaunchKernelV2 and the aclrtIpcMem* calls.
EXPECTED_FEATURES = {
    "2.6.0.post5": {"CAM_CANN_HAS_LAUNCH_KERNEL_CFG": 1, "CAM_CANN_HAS_LAUNCH_KERNEL_V2": 0,
                    "CAM_CANN_HAS_STREAM_SYNC_TIMEOUT_CODE": 1, "CAM_CANN_HAS_IPC_MEM": 0,
                    "CAM_CANN_HAS_HCCL_COMM_CONFIG": 1},
    "2.8.0": {"CAM_CANN_HAS_LAUNCH_KERNEL_CFG": 0, "CAM_CANN_HAS_LAUNCH_KERNEL_V2": 0,
              "CAM_CANN_HAS_STREAM_SYNC_TIMEOUT_CODE": 0, "CAM_CANN_HAS_IPC_MEM": 0,
              "CAM_CANN_HAS_HCCL_COMM_CONFIG": 0},
    "2.14.0": {"CAM_CANN_HAS_LAUNCH_KERNEL_CFG": 1, "CAM_CANN_HAS_LAUNCH_KERNEL_V2": 1,
               "CAM_CANN_HAS_STREAM_SYNC_TIMEOUT_CODE": 1, "CAM_CANN_HAS_IPC_MEM": 1,
               "CAM_CANN_HAS_HCCL_COMM_CONFIG": 1},
}


def _set_inc(version: str) -> pathlib.Path:
    base = FETCH.header_set(version)
    inc = base / "acl" / "inc"
    if not (inc / "acl" / "acl_base.h").is_file() or not (base / "hccl" / "inc" / "hccl" / "hccl.h").is_file():
        message = f"CANN's ACL/HCCL headers of torch-npu {version} are not in {base}: run python .ci/fetch_acl_headers.py"
        if os.environ.get("CAM_REQUIRE_ACL_HEADERS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return inc


@pytest.fixture(scope="module")
def acl_inc() -> pathlib.Path:
    """The pinned header set's acl/inc."""
    return _set_inc(PINNED)


@pytest.fixture(scope="module", params=HEADER_SETS)
def matrix_inc(request) -> pathlib.Path:
    """Each header set's acl/inc in turn."""
    return _set_inc(request.param)


# Compiling every host source and the bindings is ~40 s per header set on 2 CPUs: the README's test tier compiles
# them against the newest set (every feature on), and CI's cann-compile-matrix stage (CAM_CANN_COMPILE_MATRIX=1)
# against every set of the matrix.
COMPILE_MATRIX = os.environ.get("CAM_CANN_COMPILE_MATRIX") == "1"


@pytest.fixture(scope="module", params=HEADER_SETS)
def compile_inc(request) -> pathlib.Path:
    """Each header set's acl/inc for the whole-source compile checks: only the newest one without
    CAM_CANN_COMPILE_MATRIX=1."""
    if not COMPILE_MATRIX and request.param != HEADER_SETS[-1]:
        pytest.skip(f"host sources against torch-npu {request.param}: CI's cann-compile-matrix stage "
                    f"(CAM_CANN_COMPILE_MATRIX=1)")
    return _set_inc(request.param)


def _compiler(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not available")
    return path


def _twin_branch(text: str) -> str:
    start = text.index("#else", text.index("#if defined(CAM_WITH_CANN)"))
    return text[start:text.index("#endif /* CAM_WITH_CANN */")]


def declared_names(text: str) -> tuple[list[str], list[str]]:
    """(constants, ACL calls) the twin branch of acl_compat.h declares: enumerators, ACL_* macros, the ACL names
    of the inline forwarders."""
    twin = _twin_branch(text)
    constants = []
    for body in re.findall(r"typedef enum \{(.*?)\}", twin, re.S):
        constants += re.findall(r"^\s*(ACL_\w+)\s*=", body, re.M)
    constants += re.findall(r"^#define (ACL_\w+) ", twin, re.M)
    calls = re.findall(r"^static inline [\w\s\*]+?\b(acl\w+)\(", twin, re.M)
    return constants, calls


def _probe_source(constants: list[str], calls: list[str]) -> str:
    lines = ["#include <cstdio>", "#include <cam/acl_compat.h>", "#ifdef CAM_WITH_CANN", "#include <acl/acl.h>",
             "#endif", "template <typename T> const char* TypeOf() { return __PRETTY_FUNCTION__; }", "int main() {"]
    for c in constants:
        lines.append(f'    std::printf("{c}=%lld\\n", static_cast<long long>({c}));')
    for f in calls:
        lines.append(f'    std::printf("{f}: %s\\n", TypeOf<decltype(&{f})>());')
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


def _run_probe(tmp_path: pathlib.Path, name: str, source: str, flags: list[str]) -> dict[str, str]:
    src = tmp_path / f"{name}.cpp"
    src.write_text(source)
    exe = tmp_path / name
    subprocess.run([_compiler("g++"), "-std=c++17", *flags, str(src), "-o", str(exe)], check=True, timeout=120)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True).stdout
    return dict(re.match(r"(\w+)[=:] ?(.*)", line).groups() for line in out.splitlines())


def _compare(tmp_path, acl_inc, include_dir: pathlib.Path, absent=frozenset()) -> dict[str, tuple[str, str]]:
    constants, calls = declared_names((include_dir / "cam" / "acl_compat.h").read_text())
    calls = [c for c in calls if c not in absent]
    source = _probe_source(constants, calls)
    twin = _run_probe(tmp_path, "twin", source, ["-I", str(include_dir)])
    cann = _run_probe(tmp_path, "cann", source,
                      ["-DCAM_WITH_CANN", "-I", str(acl_inc), "-I", str(SHIM), "-I", str(include_dir)])
    return {k: (twin[k], cann.get(k)) for k in twin if twin[k] != cann.get(k)}


def test_declarations_parsed():
    # Control for the parser: it sees the enums, macros and forwarders acl_compat.h really has.
    constants, calls = declared_names(COMPAT.read_text())
    assert {"ACL_BF16", "ACL_FORMAT_FRACTAL_NZ", "ACL_SUCCESS", "ACL_ERROR_FAILURE"} <= set(constants)
    assert {"aclCreateTensor", "aclGetViewShape", "aclrtSynchronizeStreamWithTimeout"} <= set(calls)
    assert len(constants) >= 20 and len(calls) >= 15


# The calls only an IPC-capable set declares (the NPU transport's, transport_ipc.cpp); read from the headers: 2.6.0.post5
# and 2.8.0 have aclrtMalloc/aclrtMemcpy/aclrtDeviceCanAccessPeer and the ACL_RT_IPC_MEM_* flags, not these.
IPC_ONLY_CALLS = {"aclrtDeviceGetBareTgid", "aclrtIpcMemGetExportKey", "aclrtIpcMemSetImportPid",
                  "aclrtIpcMemImportByKey", "aclrtIpcMemClose"}


def _absent_calls(acl_inc: pathlib.Path) -> frozenset:
    version = acl_inc.parent.parent.name
    return frozenset() if EXPECTED_FEATURES[version]["CAM_CANN_HAS_IPC_MEM"] else frozenset(IPC_ONLY_CALLS)


def test_constants_and_calls_equal_cann(tmp_path, matrix_inc):
    version = matrix_inc.parent.parent.name
    absent = _absent_calls(matrix_inc)
    rt = (matrix_inc / "acl" / "acl_rt.h").read_text()
    for name in IPC_ONLY_CALLS:  # the exclusion hides no mismatch: the set declares none of them, or all
        assert (re.search(rf"\b{name}\(", rt) is None) == (name in absent), (version, name)
    assert _compare(tmp_path, matrix_inc, ROOT / "host" / "include", absent) == {}


def test_probe_detects_a_wrong_value(tmp_path, acl_inc):
    # Negative control: the old ACL_ERROR_FAILURE (500000, really ACL_ERROR_INTERNAL_ERROR) is caught.
    inc = tmp_path / "inc"
    shutil.copytree(ROOT / "host" / "include", inc)
    header = inc / "cam" / "acl_compat.h"
    header.write_text(header.read_text().replace("#define ACL_ERROR_FAILURE 500001", "#define ACL_ERROR_FAILURE 500000"))
    assert _compare(tmp_path, acl_inc, inc, _absent_calls(acl_inc)) == {"ACL_ERROR_FAILURE": ("500000", "500001")}


def test_aclnn_codes_match_the_documented_table(tmp_path):
    # Not in the wheel (CANN keeps them in opdev/op_errno.h): compared with the API reference's table.
    src = tmp_path / "codes.cpp"
    src.write_text("#include <cstdio>\n#include <cam/acl_compat.h>\nint main() {\n" + "".join(
        f'    std::printf("{k}=%d\\n", (int)({k}));\n' for k in ACLNN_DOCUMENTED) + "}\n")
    exe = tmp_path / "codes"
    subprocess.run([_compiler("g++"), "-I", str(ROOT / "host" / "include"), str(src), "-o", str(exe)], check=True,
                   timeout=120)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True).stdout
    assert dict((k, int(v)) for k, v in (l.split("=") for l in out.split())) == ACLNN_DOCUMENTED


PUBLIC_HEADERS = sorted(p.name for p in (ROOT / "host" / "include" / "cam").glob("*.h"))


@pytest.mark.parametrize("lang", ["c++", "c"])
def test_public_headers_compile_with_cann(tmp_path, matrix_inc, lang):
    # C callers never see aclnn/acl_meta.h (C++ only in CANN): acl_compat.h declares its opaque types for them.
    compiler = _compiler("g++" if lang == "c++" else "gcc")
    std, ext, extra = ("-std=c++17", "cpp", ["-I", str(SHIM)]) if lang == "c++" else ("-std=c99", "c", [])
    commands = []
    for i, header in enumerate(PUBLIC_HEADERS):
        src = tmp_path / f"probe{i}.{ext}"
        src.write_text(f"#include <cam/{header}>\nint main(void) {{ return 0; }}\n")
        commands.append([compiler, std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", "-DCAM_WITH_CANN",
                         "-I", str(matrix_inc), *extra, "-I", str(ROOT / "host" / "include"), str(src)])
    for header, res in zip(PUBLIC_HEADERS, run_all(commands, timeout=120, capture_output=True, text=True)):
        assert res.returncode == 0, header + ": " + res.stderr


# Twin-only sources, and the one file that needs CANN's opdev headers (not in the wheel).
NOT_CHECKED = {"tensor_list_ascend.cpp"}  # the twin backend is host/twin/, outside host/src


def _syntax_command(source: pathlib.Path, includes: list[pathlib.Path], obj: pathlib.Path = None) -> list[str]:
    """The compile check of one source: syntax only, or (``obj``) code generation into that object too."""
    flags = ["-std=c++20", *(["-c", "-O0", "-fPIC", "-o", str(obj)] if obj else ["-fsyntax-only"]), "-Wall", "-Werror",
             "-DCAM_WITH_CANN"]
    for d in includes:
        flags += ["-I", str(d)]
    return [_compiler("g++"), *flags, str(source)]


def _syntax_check(source: pathlib.Path, includes: list[pathlib.Path]) -> subprocess.CompletedProcess:
    return subprocess.run(_syntax_command(source, includes), capture_output=True, text=True, timeout=300)


def _syntax_check_all(sources: list[pathlib.Path], includes: list[pathlib.Path], objdir: pathlib.Path = None) -> list:
    """_syntax_check of each source, side by side (independent compiles); with ``objdir``, each compiled to
    objdir/<name>.o."""
    return run_all([_syntax_command(s, includes, objdir / f"{s.stem}.o" if objdir else None) for s in sources],
                   timeout=300, capture_output=True, text=True)


def third_party_root(acl_inc: pathlib.Path) -> pathlib.Path:
    """The wheel's hccl.h includes "third_party/hccl/inc/hccl/hccl_types.h" and "third_party/acl/inc/acl/acl.h"
    (its own tree's paths): a directory whose third_party is the extracted headers' root resolves them."""
    base = acl_inc.parent.parent
    root = pathlib.Path(tempfile.gettempdir()) / f"cam-acl-root-{abs(hash(str(base.resolve())))}"
    link = root / "third_party"
    if not link.is_symlink() or link.resolve() != base.resolve():
        root.mkdir(exist_ok=True)
        tmp = root / f"third_party.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(base.resolve(), target_is_directory=True)
        os.replace(tmp, link)
    return root


def _cann_includes(acl_inc: pathlib.Path) -> list[pathlib.Path]:
    return [acl_inc, acl_inc.parent.parent / "hccl" / "inc", third_party_root(acl_inc)]


def probe_features(acl_inc: pathlib.Path) -> dict[str, int]:
    """{feature: 1 or 0}: whether each probe of cmake/cann_features/ compiles against these headers."""
    probes = sorted(FEATURE_PROBES.glob("*.cpp"))
    flags = [f"-I{d}" for d in _cann_includes(acl_inc)]
    commands = [[_compiler("g++"), "-std=c++17", "-fsyntax-only", *flags, str(p)] for p in probes]
    results = run_all(commands, timeout=120, capture_output=True, text=True)
    return {p.stem: int(r.returncode == 0) for p, r in zip(probes, results)}


def features_header(features: dict[str, int]) -> str:
    """cam_cann_features.h as CMake's configure_file writes it from the template (#cmakedefine01 NAME)."""
    return re.sub(r"^#cmakedefine01 (\w+)$", lambda m: f"#define {m.group(1)} {features[m.group(1)]}",
                  FEATURES_TEMPLATE.read_text(), flags=re.M)


_FEATURE_DIRS: dict[str, pathlib.Path] = {}


def features_dir(acl_inc: pathlib.Path) -> pathlib.Path:
    """A directory holding cam_cann_features.h for these headers (probed once per header tree)."""
    key = str(acl_inc.resolve())
    if key not in _FEATURE_DIRS:
        digest = hashlib.sha1(key.encode()).hexdigest()[:16]
        out = pathlib.Path(tempfile.gettempdir()) / f"cam-cann-features-{digest}-{os.getpid()}"
        out.mkdir(exist_ok=True)
        (out / "cam_cann_features.h").write_text(features_header(probe_features(acl_inc)))
        _FEATURE_DIRS[key] = out
    return _FEATURE_DIRS[key]


def _host_includes(acl_inc: pathlib.Path) -> list[pathlib.Path]:
    return [*_cann_includes(acl_inc), features_dir(acl_inc), SHIM, ROOT / "host" / "include", ROOT / "host" / "src",
            ROOT / "kernels", ROOT / "tiling" / "include"]


# The ACL/HCCL entry points the NPU transport resolves by name at run time (docs/ascend.md §5), from the list
# of the device-memory IPC calls it uses, not from the transport's table.
IPC_ENTRY_POINTS = ["aclrtMalloc", "aclrtFree", "aclrtMemcpy", "aclrtGetDevice", "aclrtDeviceGetBareTgid",
                    "aclrtDeviceCanAccessPeer", "aclrtIpcMemGetExportKey", "aclrtIpcMemSetImportPid",
                    "aclrtIpcMemImportByKey", "aclrtIpcMemClose"]


# aclnn's tensor API (host/cann_shim/aclnn/acl_meta.h, CANN's libnnopbase): the one part of CANN an Ascend build
# links by name, in the library's tensor.cpp and the bindings (the ops take aclTensor* from their caller, who has
# loaded it). Named here so
# nothing else can join it unnoticed; docs/ascend.md §2 states what it means for loading without CANN.
ACLNN_TENSOR_API = set(re.findall(r"\b(acl[A-Z]\w*)\(", (SHIM / "aclnn" / "acl_meta.h").read_text()))


def _cann_references(obj: pathlib.Path) -> list[str]:
    """The undefined symbols of an object that a CANN library would have to provide: C names starting acl/hccl,
    cam's own aclnnCam* API excepted."""
    out = subprocess.run([_compiler("nm"), "-u", "--format=just-symbols", str(obj)], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    return [s for s in out if s.lower().startswith(("acl", "hccl")) and not s.startswith("aclnnCam")]


def _needed(shared: pathlib.Path) -> list[str]:
    out = subprocess.run([_compiler("readelf"), "-d", str(shared)], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def test_host_sources_compile_with_cann(compile_inc, tmp_path):
    # Compiled to objects (not only parsed), so the same compile proves an Ascend build loads where CANN is absent:
    # no object needs an ACL or HCCL symbol from the linker (every entry point comes from dlopen/dlsym), a shared
    # library made of them needs no CANN library, and the NPU transport names each IPC entry point it resolves.
    sources = sorted(p for p in (ROOT / "host" / "src").glob("*.cpp") if p.name not in NOT_CHECKED)
    assert any(p.name == "backend_ascend.cpp" for p in sources)
    for source, res in zip(sources, _syntax_check_all(sources, _host_includes(compile_inc), tmp_path)):
        assert res.returncode == 0, source.name + ": " + res.stderr[-3000:]
    objects = [tmp_path / f"{s.stem}.o" for s in sources]
    assert "aclGetDataType" in ACLNN_TENSOR_API, "control: the aclnn tensor API was parsed"
    for obj in objects:
        refs = _cann_references(obj)
        if obj.name == "tensor.o":
            assert refs and set(refs) <= ACLNN_TENSOR_API, refs
        else:
            assert refs == [], obj.name
    shared = tmp_path / "libcam_ascend_probe.so"
    subprocess.run([_compiler("g++"), "-shared", "-o", str(shared), *map(str, objects)], check=True, timeout=300)
    needed = _needed(shared)
    assert "libstdc++.so.6" in needed, f"control: the listing sees the library's dependencies: {needed}"
    assert [n for n in needed if "ascend" in n or "hccl" in n or n.startswith("libacl")] == [], needed
    ipc = (tmp_path / "transport_ipc.o").read_bytes()
    if b"the NPU transport is off in this build" not in ipc:  # a header set without the IPC calls builds the refusal
        missing = [n for n in IPC_ENTRY_POINTS if b"\0" + n.encode() + b"\0" not in ipc]
        assert missing == [], f"transport_ipc.o resolves no {missing} by name"
    # control: an object that calls ACL directly is seen
    direct = tmp_path / "direct.cpp"
    direct.write_text("#include <acl/acl.h>\nint f() { int32_t d = 0; return aclrtGetDevice(&d); }\n")
    subprocess.run(_syntax_command(direct, _host_includes(compile_inc), tmp_path / "direct.o"), check=True, timeout=120)
    assert _cann_references(tmp_path / "direct.o") == ["aclrtGetDevice"]


def test_bindings_compile_with_cann(compile_inc, tmp_path):
    # cam._C for an Ascend build: the same bindings over CANN's types, needing no ACL/HCCL symbol from the linker.
    pybind11 = pytest.importorskip("pybind11")
    import sysconfig

    includes = _host_includes(compile_inc) + [pathlib.Path(pybind11.get_include()),
                                          pathlib.Path(sysconfig.get_paths()["include"])]
    sources = sorted((ROOT / "bindings").glob("*.cpp"))
    for source, res in zip(sources, _syntax_check_all(sources, includes, tmp_path)):
        assert res.returncode == 0, source.name + ": " + res.stderr[-3000:]
        refs = _cann_references(tmp_path / f"{source.stem}.o")
        assert set(refs) <= ACLNN_TENSOR_API, (source.name, refs)  # no runtime or HCCL call: those are dlsym'd


def _overlay(tmp_path: pathlib.Path, acl_inc: pathlib.Path, edit) -> pathlib.Path:
    """A copy of a header set's tree with acl_rt.h changed by edit(text); its acl/inc."""
    overlay = tmp_path / "overlay"
    shutil.copytree(acl_inc.parent.parent, overlay, symlinks=True)
    rt = overlay / "acl" / "inc" / "acl" / "acl_rt.h"
    text = rt.read_text()
    changed = edit(text)
    assert changed != text, "control: the declaration was found"
    rt.write_text(changed)
    return overlay / "acl" / "inc"


def test_backend_signature_drift_is_a_compile_error(tmp_path, matrix_inc):
    # Negative control for (c): the backend takes each runtime call's type from CANN's prototype, so a prototype
    # that changes (here aclrtMemcpyAsync losing its destMax) breaks the build instead of the call at run time.
    inc = _overlay(tmp_path, matrix_inc, lambda text: re.sub(r"aclrtMemcpyAsync\(void \*dst,\s*size_t destMax,",
                                                             "aclrtMemcpyAsync(void *dst,", text))
    res = _syntax_check(ROOT / "host" / "src" / "backend_ascend.cpp", _host_includes(inc))
    assert res.returncode != 0 and "memcpyAsync" in res.stderr, res.stderr


def test_feature_probes_find_what_each_header_set_declares(matrix_inc):
    version = matrix_inc.parent.parent.name
    assert probe_features(matrix_inc) == EXPECTED_FEATURES[version]


def test_every_probe_is_in_the_template():
    # The generated header has one line per probe: a probe missing from the template would never reach the sources.
    listed = re.findall(r"^#cmakedefine01 (\w+)$", FEATURES_TEMPLATE.read_text(), re.M)
    assert sorted(listed) == sorted(p.stem for p in FEATURE_PROBES.glob("*.cpp")) and len(listed) == 5


def test_launch_kernel_v2_drift_is_a_compile_error(tmp_path):
    # The batch-scheduling launch is typed from aclrtLaunchKernelV2's prototype: a changed prototype (its cfg
    # argument gone) still passes the probe (declared) and so breaks backend_ascend.cpp's build, not a launch.
    inc = _overlay(tmp_path, _set_inc("2.14.0"), lambda text: text.replace(
        "const void *argsData, size_t argsSize,\n                                                 aclrtLaunchKernelCfg *cfg, aclrtStream stream);",
        "const void *argsData, size_t argsSize,\n                                                 aclrtStream stream);"))
    assert probe_features(inc)["CAM_CANN_HAS_LAUNCH_KERNEL_V2"] == 1
    res = _syntax_check(ROOT / "host" / "src" / "backend_ascend.cpp", _host_includes(inc))
    assert res.returncode != 0 and "LaunchKernelV2" in res.stderr, res.stderr


def test_a_header_set_without_the_launch_config_builds_the_fallback(tmp_path):
    # 2.14.0's headers with the configuration type renamed away: the probe turns the feature off (with the launch
    # call that needs it), and the backend still builds: the fallback path is what 2.8.0 compiles.
    inc = _overlay(tmp_path, _set_inc("2.14.0"), lambda text: text.replace("aclrtLaunchKernelCfg", "camGoneCfg"))
    features = probe_features(inc)
    assert features["CAM_CANN_HAS_LAUNCH_KERNEL_CFG"] == 0 and features["CAM_CANN_HAS_LAUNCH_KERNEL_V2"] == 0
    res = _syntax_check(ROOT / "host" / "src" / "backend_ascend.cpp", _host_includes(inc))
    assert res.returncode == 0, res.stderr[-3000:]


def test_cmake_probe_writes_the_same_header(tmp_path, matrix_inc):
    # The CMake build's header (cmake/CamCannFeatures.cmake) equals the one these checks compile with.
    cmake = _compiler("cmake")
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.21)\nproject(probe LANGUAGES CXX)\n"
        f"list(APPEND CMAKE_MODULE_PATH \"{ROOT / 'cmake'}\")\ninclude(CamCannFeatures)\n"
        "cam_cann_features_header(${CMAKE_BINARY_DIR}/cam_cann_features.h ${CAM_PROBE_INCLUDES})\n")
    includes = ";".join(str(d) for d in _cann_includes(matrix_inc))
    res = subprocess.run([cmake, "-S", str(project), "-B", str(tmp_path / "build"), f"-DCAM_PROBE_INCLUDES={includes}"],
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "build" / "cam_cann_features.h").read_text() == features_header(probe_features(matrix_inc))
