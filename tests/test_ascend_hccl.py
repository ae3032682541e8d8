"""Peer memory on Ascend (docs/ascend.md §5): the window_table MC2 op and the HCCL transport.

- The twin models the HCCL context an MC2 op's kernel reads (kernels/twin/include/twin/hccl.h). The real
  window_table kernel runs on it: with the context bound it writes every window (control); a plain launch, or a
  group index nothing was bound to, breaks rule hccl-context-unbound (a <<<>>> launch has no HCCL context).
- Through the SDK: the op turns a registered context into the peer table exactly, refuses a wrong rank count, a
  wrong rank id or a null window with a sentence and leaves the table untouched, and a plane built by
  camCommCreateInProcess (whose table now comes from this op) has every rank's window in it. The data-plane tests
  (tests/test_dataplane*.py) check every plane's results bit-exactly against the reference, on tables from this op.
- transport_hccl.cpp takes each HCCL entry point's type from the real prototype: a prototype that drifts in a copy
  of the wheel's hccl.h breaks its build (the control is the unmodified build in test_ascend_headers.py). It has
  never run: there is no HCCL here."""

import os
import pathlib
import re
import shutil
import subprocess

import pytest

import cam

from _parallel import run_all
from _twin_build import build_twin_program
from test_ascend_headers import _host_includes, _syntax_command, acl_inc  # noqa: F401 (acl_inc is a fixture)

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # compiles

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _gxx() -> str:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not available")
    return gxx


@pytest.fixture(scope="module")
def context_binary(tmp_path_factory) -> pathlib.Path:
    # The twin's objects are the session's (tests/_twin_build.py): only the test and the kernel compile here.
    out = tmp_path_factory.mktemp("hccl") / "hccl_context"
    return pathlib.Path(build_twin_program(str(ROOT), str(out), str(ROOT / "tests" / "sdk_ascend" / "hccl_context.cpp"),
                                           extra_sources=[ROOT / "kernels" / "window_table" / "window_table.cpp"],
                                           extra_includes=[ROOT / "kernels"]))


def _run(binary: pathlib.Path, case: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, CAM_TWIN_PLATFORM="twin", CAM_TWIN_SYNC_TIMEOUT_S="20")
    return subprocess.run([str(binary), case], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("case", ["bound", "bound_a3", "tiling_less_a2"])
def test_window_table_kernel_reads_the_bound_context(context_binary, case):
    # bound_a3: the same kernel reads the A3 layout (per-rank records) through the client, with its init tiling;
    # tiling_less_a2: the deprecated tiling-less Init is still right on the A2 flat layout.
    res = _run(context_binary, case)
    assert res.returncode == 0 and res.stdout.strip() == "OK", res.stdout + res.stderr


@pytest.mark.parametrize("case, rule, kernel", [("tiling_less_a3", "hccl-init-tiling", "tiling_less"),
                                                ("a2_ranks", "hccl-a2-ranks", "past_flat"),
                                                ("no_finalize", "hccl-finalize", "no_finalize")])
def test_hccl_client_rules(context_binary, case, rule, kernel):
    """The tiling-less Init on the A3 description reads the A2 layout (other fields' bytes as windows); the flat
    layout holds 32 windows; the client must be finalized. Controls: bound, bound_a3, tiling_less_a2 above."""
    res = _run(context_binary, case)
    message = res.stdout.strip()
    assert res.returncode == 1, message + res.stderr
    assert f"rule '{rule}' broken" in message and f"in kernel {kernel} block 0/1" in message, message
    line = next(n for n, text in enumerate((ROOT / "tests" / "sdk_ascend" / "hccl_context.cpp").read_text()
                                           .splitlines(), start=1) if f"@case:{case}" in text)
    assert re.search(rf"hccl_context\.cpp:{line}\b", message), message


@pytest.mark.parametrize("case", ["zeroed_a2", "a2_tiling_on_a3"])
def test_an_init_tiling_of_the_other_device_type_breaks_the_rule(context_binary, case):
    """The client reads the A2 flat context only for device type 1 (HCCL_ASCEND910B) in the init tiling, the A3
    records for any other: a zeroed tiling reads A3's layout on A2, and A2's tiling reads the
    flat layout on A3. The real kernel's Init is named. Controls: bound, bound_a3 (each SoC's own tiling)."""
    res = _run(context_binary, case)
    message = res.stdout.strip()
    assert res.returncode == 1, message + res.stderr
    assert "rule 'hccl-init-device-type' broken" in message and "in kernel cam_window_table block 0/1" in message
    assert re.search(r"window_table\.cpp:\d+", message), message


@pytest.mark.parametrize("case, kernel, where", [("unbound", "cam_window_table", r"window_table\.cpp:\d+"),
                                                 ("second_group", "second_group", r"hccl_context\.cpp:\d+")])
def test_a_launch_without_a_context_breaks_the_rule(context_binary, case, kernel, where):
    res = _run(context_binary, case)
    message = res.stdout.strip()
    assert res.returncode == 1, message + res.stderr
    assert "rule 'hccl-context-unbound' broken" in message and f"in kernel {kernel} block 0/1" in message, message
    assert re.search(where, message), message


def test_window_table_through_the_sdk(tmp_path):
    libdir = os.path.join(os.path.dirname(cam.__file__), "lib")
    exe = tmp_path / "window_table"
    subprocess.run([_gxx(), "-std=c++20", "-O1", "-I", cam.include_dir(),
                    str(ROOT / "tests" / "sdk_ascend" / "window_table.cpp"), "-L", libdir, "-lcam_aclnn",
                    f"-Wl,-rpath,{libdir}", "-pthread", "-o", str(exe)], check=True, timeout=180)
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr


# (prototype in the wheel's hccl.h, the same prototype with an argument dropped)
DRIFTS = [
    ("extern HcclResult HcclCommInitRootInfoConfig(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,",
     "extern HcclResult HcclCommInitRootInfoConfig(uint32_t nRanks, const HcclRootInfo *rootInfo,"),
    ("extern HcclResult HcclGetCommName(HcclComm comm, char* commName);",
     "extern HcclResult HcclGetCommName(char* commName);"),
]


DRIFT_IDS = ["HcclCommInitRootInfoConfig", "HcclGetCommName"]
TRANSPORT = ROOT / "host" / "src" / "transport_hccl.cpp"


@pytest.fixture(scope="module")
def transport_checks(tmp_path_factory, acl_inc):  # noqa: F811
    """The syntax check of transport_hccl.cpp on the unmodified headers (the control) and on each drifted copy,
    compiled side by side: {"control" or drift id: (the prototype was found in the copy, the compile)}."""
    base = acl_inc.parent.parent
    found, commands = {"control": True}, {"control": _syntax_command(TRANSPORT, _host_includes(acl_inc))}
    for (before, after), name in zip(DRIFTS, DRIFT_IDS):
        overlay = tmp_path_factory.mktemp(name) / "headers"
        shutil.copytree(base, overlay, symlinks=True)
        header = overlay / "hccl" / "inc" / "hccl" / "hccl.h"
        text = header.read_text()
        found[name] = before in text
        header.write_text(text.replace(before, after))
        commands[name] = _syntax_command(TRANSPORT, _host_includes(overlay / "acl" / "inc"))
    results = run_all(list(commands.values()), timeout=300, capture_output=True, text=True)
    return {name: (found[name], res) for name, res in zip(commands, results)}


@pytest.mark.parametrize("name", DRIFT_IDS, ids=DRIFT_IDS)
def test_hccl_signature_drift_is_a_compile_error(transport_checks, name):
    found, res = transport_checks[name]
    assert found, "control: the prototype was found"
    assert res.returncode != 0 and "transport_hccl.cpp" in res.stderr, res.stderr


def test_transport_compiles_against_the_real_headers(transport_checks):
    # The control of the drift tests: the same check on the unmodified headers passes.
    _, res = transport_checks["control"]
    assert res.returncode == 0, res.stderr[-3000:]
