"""torch_npu integration (issue 11 item 6), tested against a stub torch_npu: the custom ops get "npu" kernels only
when torch_npu is importable, and those kernels pass the tensors and torch_npu's current stream (by handle) to the
aclnn API. The stub's stream handle is 0, the default stream, so on the twin the NPU path really runs the kernels
(on CPU tensors) and its results are compared with the CPU path. Nothing here has run on an NPU."""

import subprocess
import sys
import textwrap

import pytest
import torch

import cam

pytestmark = pytest.mark.timeout(240)

STUB = textwrap.dedent('''
    """Stand-in for torch_npu: names the PrivateUse1 backend "npu" and hands out a current stream whose handle is 0
    (ACL's default stream), recording the devices it was asked for."""
    import torch

    torch.utils.rename_privateuse1_backend("npu")
    CALLS = []


    class _Stream:
        npu_stream = 0


    class npu:
        @staticmethod
        def current_stream(device=None):
            CALLS.append(str(device))
            return _Stream()
''')

PROBE = textwrap.dedent('''
    import torch
    import torch_npu
    import cam
    from cam import _npu

    assert _npu.registered(), "registered at import"
    for name in _npu.IMPLEMENTATIONS:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"), name
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CUDA"), name
    assert cam.backend() == "twin"  # built for the twin: torch_npu alone does not make the backend Ascend

    x = (torch.randn(17, 273, generator=torch.Generator().manual_seed(1)) * 3).to(torch.bfloat16)
    q, scale = _npu.dynamic_quant(x)
    q_cpu, scale_cpu = cam.ops.dynamic_quant(x)
    assert torch.equal(q, q_cpu) and torch.equal(scale, scale_cpu)
    assert torch_npu.CALLS == ["cpu"], torch_npu.CALLS  # the stream came from torch_npu, for the tensors' device

    try:
        _npu.IMPLEMENTATIONS["cam::dispatch_send"]()
    except NotImplementedError as e:
        assert "HCCL transport" in str(e)
    else:
        raise AssertionError("data-plane ops on NPU must refuse until the HCCL transport exists")
    print("ok")
''')


def test_npu_kernels_registered_and_run_through_the_stub(tmp_path):
    pkg = tmp_path / "torch_npu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(STUB)
    env_path = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {env_path!r})\n" + PROBE],
                         capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


def test_without_torch_npu_nothing_is_registered():
    from cam import _npu

    assert _npu._torch_npu() is None, "control: torch_npu must not be importable on this machine"
    assert not _npu.registered() and _npu.register() is False
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("cam::dynamic_quant", "PrivateUse1")
    assert cam.backend() == "twin"


def test_wrapped_stream_is_never_destroyed():
    # A wrapped handle belongs to its owner (torch_npu): closing the wrapper must leave the stream usable.
    owned = cam._C.Stream()
    x = torch.ones(2, 8, dtype=torch.bfloat16)
    q, s = cam.ops.dynamic_quant(x)
    default = cam._C.Stream.wrap(0)
    default.close()
    again = cam._C.Stream.wrap(0)
    again.synchronize(10.0)  # the default stream still works after a wrapper closed
    owned.close()
    with pytest.raises(cam.InvalidArgumentError, match="closed"):
        owned.synchronize(1.0)
