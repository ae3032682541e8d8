"""Issue 12, launch / waits / Python overhead: the twin's block pool and parking (tests/twin/launch.cpp, each case a
fresh process), and the per-call path of the Python ops (no torch._dynamo on the eager path, mutations visible to
autograd's version counters)."""

import glob
import os
import shutil
import subprocess
import sys

import pytest
import torch

import cam


@pytest.fixture(scope="module")
def launch_binary(source_root, tmp_path_factory):
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the twin launch test")
    out = str(tmp_path_factory.mktemp("twin-launch") / "launch")
    sources = [os.path.join(source_root, "tests", "twin", "launch.cpp")]
    sources += sorted(glob.glob(os.path.join(source_root, "kernels", "twin", "src", "*.cpp")))
    cmd = [compiler, "-std=c++20", "-O1", "-ffp-contract=off", "-pthread", "-I", source_root,
           "-I", os.path.join(source_root, "kernels", "twin", "include"), *sources, "-o", out]
    subprocess.run(cmd, check=True, timeout=300)
    return out


def run_case(binary, case, **env):
    full = dict(os.environ, CAM_TWIN_PLATFORM="twin", CAM_TWIN_SYNC_TIMEOUT_S="20")
    full.update(env)
    return subprocess.run([binary, case], capture_output=True, text=True, timeout=120, env=full)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["pool_reuse", "concurrent_streams", "ub_poison_after_reuse", "flag_wait_woken",
                                  "flag_wait_deadline", "fork_child"])
def test_launch_case(launch_binary, case):
    result = run_case(launch_binary, case)
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout + result.stderr


@pytest.mark.slow
def test_syncall_deadline_survives_parking(launch_binary):
    late = run_case(launch_binary, "syncall_timeout", CAM_TWIN_SYNC_TIMEOUT_S="1")
    assert late.returncode == 1 and "rule 'syncall-timeout' broken" in late.stdout, late.stdout + late.stderr
    control = run_case(launch_binary, "syncall_late_within_timeout", CAM_TWIN_SYNC_TIMEOUT_S="1")
    assert control.returncode == 0 and control.stdout.strip() == "OK", control.stdout + control.stderr


_EAGER_PROBE = """
import sys, torch, cam
x = torch.randn(2, 32).to(torch.bfloat16)
q, s = cam.ops.dynamic_quant(x)
ok = bool((q.abs() <= 127).all())
print(int("torch._dynamo" in sys.modules), int(ok))
"""


def test_eager_op_does_not_import_dynamo():
    # Importing torch._dynamo costs ~0.7 s at the first op of every process (issue 12); the eager path must not.
    res = subprocess.run([sys.executable, "-c", _EAGER_PROBE], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["0", "1"], res.stdout


def test_mutated_outputs_bump_version_counters():
    x = torch.randn(3, 40, dtype=torch.bfloat16)
    q, s = torch.empty(3, 40, dtype=torch.int8), torch.empty(3)
    vq, vs, vx = q._version, s._version, x._version
    cam.ops.dynamic_quant(x, out=(q, s))
    assert q._version > vq and s._version > vs  # written: autograd must see the change
    assert x._version == vx  # read only


def test_version_check_catches_a_saved_tensor_overwritten_by_an_op():
    # The control of the test above: autograd refuses a backward through a tensor an op overwrote after it was saved.
    s = torch.ones(3, requires_grad=True)
    x = torch.randn(3, 40, dtype=torch.bfloat16)
    q = torch.empty(3, 40, dtype=torch.int8)
    scale = torch.empty(3)
    y = s * scale  # saves `scale` for the backward of the multiplication
    cam.ops.dynamic_quant(x, out=(q, scale))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
