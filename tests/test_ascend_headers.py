"""cam's host library against CANN's own public headers, as shipped in the torch-npu wheel (issue 11 item 2):
(a) every enumerator, constant and ACL call acl_compat.h declares for the twin equals the real one (a probe compiled
in each mode prints values and function types; the outputs are diffed); (b) the public headers compile with
CAM_WITH_CANN as C++ and as C; (c) the Ascend backend and every other host source compile against them.

The headers come from `python .ci/fetch_acl_headers.py` (pinned wheel, extracted to .acl-headers/ or
$CAM_ACL_HEADERS). Without them these tests skip, unless CAM_REQUIRE_ACL_HEADERS=1 (CI), where they fail.

What the wheel lacks is checked against the public aclnn API reference instead: the ACLNN_* codes (table of return
codes, below) and aclnn's tensor calls, whose prototypes are in host/cann_shim/aclnn/acl_meta.h (written from that
reference; a toolkit build uses CANN's own header)."""

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


@pytest.fixture(scope="module")
def acl_inc() -> pathlib.Path:
    base = pathlib.Path(os.environ.get("CAM_ACL_HEADERS") or ROOT / ".acl-headers")
    inc = base / "acl" / "inc"
    if not (inc / "acl" / "acl_base.h").is_file() or not (base / "hccl" / "inc" / "hccl" / "hccl.h").is_file():
        message = f"CANN's ACL/HCCL headers are not in {base}: run python .ci/fetch_acl_headers.py"
        if os.environ.get("CAM_REQUIRE_ACL_HEADERS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return inc


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


def _compare(tmp_path, acl_inc, include_dir: pathlib.Path) -> dict[str, tuple[str, str]]:
    constants, calls = declared_names((include_dir / "cam" / "acl_compat.h").read_text())
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


def test_constants_and_calls_equal_cann(tmp_path, acl_inc):
    assert _compare(tmp_path, acl_inc, ROOT / "host" / "include") == {}


def test_probe_detects_a_wrong_value(tmp_path, acl_inc):
    # Negative control: the old ACL_ERROR_FAILURE (500000, really ACL_ERROR_INTERNAL_ERROR) is caught.
    inc = tmp_path / "inc"
    shutil.copytree(ROOT / "host" / "include", inc)
    header = inc / "cam" / "acl_compat.h"
    header.write_text(header.read_text().replace("#define ACL_ERROR_FAILURE 500001", "#define ACL_ERROR_FAILURE 500000"))
    assert _compare(tmp_path, acl_inc, inc) == {"ACL_ERROR_FAILURE": ("500000", "500001")}


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
def test_public_headers_compile_with_cann(tmp_path, acl_inc, lang):
    # C callers never see aclnn/acl_meta.h (C++ only in CANN): acl_compat.h declares its opaque types for them.
    compiler = _compiler("g++" if lang == "c++" else "gcc")
    std, ext, extra = ("-std=c++17", "cpp", ["-I", str(SHIM)]) if lang == "c++" else ("-std=c99", "c", [])
    commands = []
    for i, header in enumerate(PUBLIC_HEADERS):
        src = tmp_path / f"probe{i}.{ext}"
        src.write_text(f"#include <cam/{header}>\nint main(void) {{ return 0; }}\n")
        commands.append([compiler, std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", "-DCAM_WITH_CANN",
                         "-I", str(acl_inc), *extra, "-I", str(ROOT / "host" / "include"), str(src)])
    for header, res in zip(PUBLIC_HEADERS, run_all(commands, timeout=120, capture_output=True, text=True)):
        assert res.returncode == 0, header + ": " + res.stderr


# Twin-only sources, and the one file that needs CANN's opdev headers (not in the wheel).
NOT_CHECKED = {"backend_twin.cpp", "acl_twin.cpp", "tensor_list_ascend.cpp"}


def _syntax_command(source: pathlib.Path, includes: list[pathlib.Path]) -> list[str]:
    flags = ["-std=c++20", "-fsyntax-only", "-Wall", "-Werror", "-DCAM_WITH_CANN"]
    for d in includes:
        flags += ["-I", str(d)]
    return [_compiler("g++"), *flags, str(source)]


def _syntax_check(source: pathlib.Path, includes: list[pathlib.Path]) -> subprocess.CompletedProcess:
    return subprocess.run(_syntax_command(source, includes), capture_output=True, text=True, timeout=300)


def _syntax_check_all(sources: list[pathlib.Path], includes: list[pathlib.Path]) -> list:
    """_syntax_check of each source, side by side (independent compiles)."""
    return run_all([_syntax_command(s, includes) for s in sources], timeout=300, capture_output=True, text=True)


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


def _host_includes(acl_inc: pathlib.Path) -> list[pathlib.Path]:
    return [acl_inc, acl_inc.parent.parent / "hccl" / "inc", third_party_root(acl_inc), SHIM,
            ROOT / "host" / "include", ROOT / "host" / "src", ROOT / "kernels", ROOT / "tiling" / "include"]


def test_host_sources_compile_with_cann(acl_inc):
    sources = sorted(p for p in (ROOT / "host" / "src").glob("*.cpp") if p.name not in NOT_CHECKED)
    assert any(p.name == "backend_ascend.cpp" for p in sources)
    for source, res in zip(sources, _syntax_check_all(sources, _host_includes(acl_inc))):
        assert res.returncode == 0, source.name + ": " + res.stderr[-3000:]


def test_bindings_compile_with_cann(acl_inc):
    # cam._C for an Ascend build: the same bindings over CANN's types.
    pybind11 = pytest.importorskip("pybind11")
    import sysconfig

    includes = _host_includes(acl_inc) + [pathlib.Path(pybind11.get_include()),
                                          pathlib.Path(sysconfig.get_paths()["include"])]
    sources = sorted((ROOT / "bindings").glob("*.cpp"))
    for source, res in zip(sources, _syntax_check_all(sources, includes)):
        assert res.returncode == 0, source.name + ": " + res.stderr[-3000:]


def test_backend_signature_drift_is_a_compile_error(tmp_path, acl_inc):
    # Negative control for (c): the backend takes each runtime call's type from CANN's prototype, so a prototype
    # that changes (here aclrtMemcpyAsync losing its destMax) breaks the build instead of the call at run time.
    overlay = tmp_path / "overlay"
    shutil.copytree(acl_inc, overlay)
    rt = overlay / "acl" / "acl_rt.h"
    text = rt.read_text()
    drifted = re.sub(r"aclrtMemcpyAsync\(void \*dst,\s*size_t destMax,", "aclrtMemcpyAsync(void *dst,", text)
    assert drifted != text, "control: the prototype was found"
    rt.write_text(drifted)
    res = _syntax_check(ROOT / "host" / "src" / "backend_ascend.cpp", _host_includes(overlay))
    assert res.returncode != 0 and "memcpyAsync" in res.stderr, res.stderr
