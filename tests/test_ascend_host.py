"""The host library as a neighbour of the real ACL and its executor/communicator lifetime rules,
through the installed SDK: no ACL name is exported, the public headers are C and C++, executors
run once and only as their own op, a null stream is the default stream, and camCommDestroy refuses while an op of
the communicator is in flight."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import cam

pytestmark = pytest.mark.timeout(240)

HERE = pathlib.Path(__file__).parent


def _libdir() -> str:
    return os.path.join(os.path.dirname(cam.__file__), "lib")


def _dynamic_symbols(lib: str, which: str = "--defined-only") -> list[str]:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) not available")
    out = subprocess.run([nm, "-D", which, lib], capture_output=True, text=True, timeout=60, check=True)
    return [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]


def _exported(lib: str) -> list[str]:
    return _dynamic_symbols(lib)


def test_no_acl_symbol_is_exported():
    # Loaded beside torch_npu, an exported aclCreateTensor or aclrtSynchronizeStream would interpose on the real
    # ACL (or be interposed on). cam's own API keeps the aclnn naming convention, always as aclnnCam*.
    symbols = _exported(os.path.join(_libdir(), "libcam_aclnn.so"))
    assert "aclnnCamDynamicQuant" in symbols, "control: the listing sees cam's exports"
    assert "camTwinAclCreateTensor" in symbols, "control: the twin's ACL stand-ins exist under cam names"
    leaked = [s for s in symbols if s.lower().startswith("acl") and not s.startswith("aclnnCam")]
    assert leaked == []
    # Nor does the twin build import one (it would bind to torch_npu's libascendcl when both are loaded), and the
    # Python module exports nothing but its init.
    imported = _dynamic_symbols(os.path.join(_libdir(), "libcam_aclnn.so"), "--undefined-only")
    assert [s for s in imported if s.lower().startswith(("acl", "hccl"))] == []
    module = cam._C.__file__
    assert [s for s in _exported(module) if s.lower().startswith("acl")] == []
    assert [s for s in _dynamic_symbols(module, "--undefined-only")
            if s.lower().startswith(("acl", "hccl")) and not s.startswith("aclnnCam")] == []


def test_library_and_module_need_no_cann_library():
    # Neither the library nor the bindings module lists a CANN library as a dependency (an Ascend build dlopens
    # libascendcl/libhccl: test_ascend_headers.py checks its objects), so both load on a machine without CANN.
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) not available")
    for lib in (os.path.join(_libdir(), "libcam_aclnn.so"), cam._C.__file__):
        out = subprocess.run([readelf, "-d", lib], capture_output=True, text=True, timeout=60, check=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
        assert any(n.startswith("libc.so") or n.startswith("libstdc++") for n in needed), f"control: {needed}"
        assert [n for n in needed if "ascend" in n or "hccl" in n or n.startswith("libacl")] == [], (lib, needed)
    # and the module imports with no CANN in the environment (no ASCEND_* variables, no library path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND", "LD_LIBRARY_PATH"))}
    res = subprocess.run([sys.executable, "-c", "import cam._C as c; print(hasattr(c, 'Comm'))"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "True", res.stdout + res.stderr


def _compile(tmp_path, source: pathlib.Path, name: str) -> pathlib.Path:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not available")
    exe = tmp_path / name
    subprocess.run([gxx, "-std=c++20", "-O1", "-Wall", "-I", cam.include_dir(), str(source), "-L", _libdir(),
                    "-lcam_aclnn", f"-Wl,-rpath,{_libdir()}", "-pthread", "-o", str(exe)], check=True, timeout=180)
    return exe


def test_executors_run_once_and_destroy_refuses_in_flight(tmp_path):
    exe = _compile(tmp_path, HERE / "sdk_executor" / "executor.cpp", "executor")
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


PUBLIC_HEADERS = sorted(p.name for p in (pathlib.Path(__file__).parent.parent / "host" / "include" / "cam").glob("*.h"))


@pytest.mark.parametrize("lang", ["c", "c++"])
def test_public_headers_compile_alone(tmp_path, lang):
    # Each header on its own, with warnings as errors: C callers get plain C (static inline forwarders, no C++).
    compiler = shutil.which("gcc" if lang == "c" else "g++")
    if compiler is None:
        pytest.skip(f"{lang} compiler not available")
    std = "-std=c99" if lang == "c" else "-std=c++17"
    for header in PUBLIC_HEADERS:
        src = tmp_path / ("probe." + ("c" if lang == "c" else "cpp"))
        src.write_text(f"#include <cam/{header}>\nint main(void) {{ return 0; }}\n")
        res = subprocess.run([compiler, std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", "-I",
                              cam.include_dir(), str(src)], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, header + ": " + res.stderr


def test_acl_error_failure_is_aclnn_exact():
    # The value the review found wrong (500000 is ACL_ERROR_INTERNAL_ERROR); the full comparison against the real
    # headers is tests/test_ascend_headers.py.
    text = (pathlib.Path(cam.include_dir()) / "cam" / "acl_compat.h").read_text()
    assert re.search(r"#define ACL_ERROR_FAILURE 500001\b", text)
    assert re.search(r"#define ACL_ERROR_INTERNAL_ERROR 500000\b", text)


def test_ascend_plane_check(tmp_path):
    # docs/ascend.md "Peer memory": the HCCL window must hold the topology's window and the longest device wait must
    # end before the AI Core op timeout. Expected sizes come from the Python topology (cam.topology), not the C code.
    import math

    from cam.topology import Topology

    exe = _compile(tmp_path, HERE / "sdk_ascend" / "plane_check.cpp", "plane_check")
    example = Topology(D=8, P=2, F=4, E=256, K=8, H=7168, Bmax=4096, L=1, quantized=True)  # protocol.md §3
    need_mib = math.ceil(example.window_bytes / 2**20)
    assert 850 < need_mib < 950  # the 0.88 GiB of protocol.md

    def check(topo, timeout_s, idle_s, hccl_mib, op_timeout_s):
        args = [str(v) for v in topo.as_c_fields()] + [str(int(timeout_s * 1e9)), str(int(idle_s * 1e9)),
                                                       str(hccl_mib), str(op_timeout_s)]
        out = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60, check=True).stdout
        status, _, message = out.strip().partition(" ")
        return int(status), message

    assert check(example, 300, 0.05, 200, 1091)[0] == 161002  # HCCL's default 200 MB window is too small
    assert f"HCCL_BUFFSIZE to at least {need_mib}" in check(example, 300, 0.05, 200, 1091)[1]
    assert check(example, 300, 0.05, need_mib, 1091) == (0, "")
    assert check(example, 300, 0.05, need_mib - 1, 1091)[0] == 161002
    status, message = check(example, 1031, 0.05, need_mib, 1091)  # 1031 + 0.05 + 60 > 1091
    assert status == 161002 and "AI Core op timeout of 1091 s" in message
    assert check(example, 1030, 0.5, need_mib, 1091) == (0, "")

    # Overflow: the two int64 bounds are summed without overflow. INT64_MAX twice wrapped to a negative wait
    # that passed; each is far beyond the op timeout, so the check refuses and says by how much.
    big = 2**63 - 1

    def check_ns(timeout_ns, idle_ns):
        args = [str(v) for v in example.as_c_fields()] + [str(timeout_ns), str(idle_ns), str(need_mib), "1091"]
        out = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60, check=True).stdout
        status, _, message = out.strip().partition(" ")
        return int(status), message

    for timeout_ns, idle_ns in ((big, big), (big, 1), (1, big)):
        status, message = check_ns(timeout_ns, idle_ns)
        assert status == 161002 and "AI Core op timeout of 1091 s" in message, (timeout_ns, idle_ns, message)
    status, message = check_ns(-1, 0)
    assert status == 161002 and "config->timeoutNs is -1" in message
    status, message = check_ns(0, -(2**63))
    assert status == 161002 and f"config->idlePollNs is {-(2**63)}" in message
    assert check_ns(300 * 10**9, 5 * 10**7) == (0, "")  # control: the defaults pass


def test_code_tables_come_from_the_headers():
    # cam/errors.py and cam/_tensor.py read their codes from _C, which reads them from the C headers: every status
    # code a header defines is in the table, with the header's value.
    include = pathlib.Path(cam.include_dir()) / "cam"
    defined = {}
    for header in ("cam_status.h", "acl_compat.h"):
        defined.update((n, int(v)) for n, v in re.findall(r"#define ((?:CAM_ERR|ACLNN)_\w+) (\d+)",
                                                          (include / header).read_text()))
    assert cam._C.status_codes() == defined
    from cam import _tensor, errors

    assert errors._BY_STATUS[defined["CAM_ERR_COMM_TIMEOUT"]] is cam.CommTimeoutError
    assert errors.from_status(defined["CAM_ERR_DEVICE_ARGUMENT"], "m").__class__ is cam.DeviceArgumentError
    import torch

    enum = dict((n, int(v)) for n, v in re.findall(r"(ACL_[A-Z0-9]+) = (-?\d+)", (include / "acl_compat.h").read_text()))
    assert _tensor.ACL_DTYPE[torch.bfloat16] == enum["ACL_BF16"] and _tensor.ACL_DTYPE[torch.int8] == enum["ACL_INT8"]
    assert set(_tensor.ACL_DTYPE.values()) <= set(enum.values())
