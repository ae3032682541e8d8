"""torch_npu integration (issue 11 item 6), tested against a stub torch_npu: the custom ops get "npu" kernels only
when torch_npu is importable, and those kernels pass the tensors and torch_npu's current stream (by handle) to the
aclnn API. The stub's stream handles are twin streams (0, the default stream, on the main thread), so on the twin
the NPU path really runs the kernels on CPU tensors: dynamic_quant is compared with the CPU path, and the four
data-plane ops run a whole round trip checked against the golden. Nothing here has run on an NPU."""

import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch

import cam

pytestmark = pytest.mark.timeout(240)

STUB = textwrap.dedent('''
    """Stand-in for torch_npu: names the PrivateUse1 backend "npu" and hands out a current stream, recording the
    devices it was asked for. As in torch, the current stream is per thread: the main thread's handle is 0 (ACL's
    default stream); any other thread gets a stream of its own (a twin stream made through libcam_aclnn's export),
    so ranks running as threads do not queue behind each other's waits."""
    import ctypes
    import os
    import threading

    import torch

    torch.utils.rename_privateuse1_backend("npu")
    CALLS = []
    _local = threading.local()


    class _Stream:
        def __init__(self, handle):
            self.npu_stream = handle


    def _thread_stream():
        if threading.current_thread() is threading.main_thread():
            return 0
        if getattr(_local, "handle", None) is None:
            import cam

            lib = ctypes.CDLL(os.path.join(os.path.dirname(cam.__file__), "lib", "libcam_aclnn.so"))
            handle = ctypes.c_void_p()
            assert lib.camTwinAclrtCreateStream(ctypes.byref(handle)) == 0
            _local.handle = handle.value
        return _local.handle


    class npu:
        @staticmethod
        def current_stream(device=None):
            CALLS.append((str(device), threading.current_thread().name))
            return _Stream(_thread_stream())
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
    assert torch_npu.CALLS == [("cpu", "MainThread")], torch_npu.CALLS  # the stream came from torch_npu

    # The data-plane ops through their NPU implementations (made the CPU kernels here, so the stub's CPU tensors
    # reach them): a round trip of a 2-replica plane, ranks as threads, checked against the golden bit for bit.
    from _dataplane_harness import make_rounds, run_round_trip

    for op in ("dispatch_send", "dispatch_recv", "combine_send", "combine_recv"):
        torch.library.register_kernel(f"cam::{op}", "cpu", _npu.IMPLEMENTATIONS[f"cam::{op}"])
    topo = cam.Topology(D=2, P=1, F=2, E=8, K=3, H=96, Bmax=6, L=3, slots=2)
    run_round_trip(topo, make_rounds(topo, [[6, 0, 3], [2, 6, 6]], seed=3))
    ranks = {name for _, name in torch_npu.CALLS[1:]}
    assert ranks == {f"rank{r}" for r in range(topo.world_size)}, ranks  # every rank's ops took torch_npu's stream
    print("ok")
''')


def test_npu_kernels_registered_and_run_through_the_stub(tmp_path):
    pkg = tmp_path / "torch_npu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(STUB)
    paths = [str(tmp_path), str(pathlib.Path(__file__).resolve().parent)]
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.path[:0] = {paths!r}\n" + PROBE],
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
