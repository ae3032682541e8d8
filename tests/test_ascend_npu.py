"""torch_npu integration, tested against a stub torch_npu that registers a real "npu" device: PrivateUse1 renamed
"npu", backed by host memory (tests/npu_stub/host_device.cpp: an allocator and the few aten kernels tensors need),
so ``x.to("npu")`` gives a plain ``torch.Tensor`` with ``device.type == "npu"`` whose data the twin's kernels can
read and write. Every op is called through ``torch.ops.cam`` with such tensors: the dispatcher picks the op's
PrivateUse1 kernel (the op's one body), which runs on torch_npu's current stream (by handle), and each result must
equal the CPU path's bit for bit. The stub's stream handles are twin streams (0, the default stream, on the main
thread; one of its own for any other thread, as torch_npu's current stream is per thread). Nothing here has run on
an NPU."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.utils.cpp_extension

import cam

STUB = textwrap.dedent('''
    """Stand-in for torch_npu: a real "npu" device (PrivateUse1 backed by host memory), a current stream per
    thread, recording the devices it was asked for, and torch_npu's graph capture (NPUGraph, graph) on it."""
    import ctypes
    import os
    import threading

    import torch
    import torch.utils.backend_registration as registration

    registration._setup_privateuseone_for_python_backend("npu")
    torch.ops.load_library(os.environ["CAM_TEST_NPU_DEVICE_LIB"])
    CALLS = []
    _local = threading.local()


    class _Stream:
        def __init__(self, handle):
            self.npu_stream = handle


    def _twin():
        """The twin's runtime (cam's library): what stands in for ACL here."""
        import cam

        lib = ctypes.CDLL(os.path.join(os.path.dirname(cam.__file__), "lib", "libcam_aclnn.so"))
        lib.camGetLastErrorMessage.restype = ctypes.c_char_p
        return lib


    def _thread_stream():
        if threading.current_thread() is threading.main_thread():
            return 0
        if getattr(_local, "handle", None) is None:
            handle = ctypes.c_void_p()
            assert _twin().camTwinAclrtCreateStream(ctypes.byref(handle)) == 0
            _local.handle = handle.value
        return _local.handle


    # torch_npu's graph seam. torch_npu.npu.NPUGraph captures the current stream with ACL's model-RI capture
    # (aclmdlRICaptureBegin(stream, mode), aclmdlRICaptureEnd(stream, &model), aclmdlRIExecuteAsync(model, stream),
    # aclmdlRIDestroy(model)), never through cam; on the twin those calls are the twin runtime's (cam/cam_graph.h,
    # camTwinAclmdlRI*: the same semantics and mode values), which cam's capture registry does not see either: cam
    # must adopt the capture from the runtime, as on Ascend. Every kernel queued on the stream between begin and end
    # is recorded, not run.
    _CAPTURE_MODES = {"global": 0, "thread_local": 1, "relaxed": 2}  # aclmdlRICaptureMode


    def _ok(status, what):
        if status != 0:
            raise RuntimeError(f"{what}: {_twin().camGetLastErrorMessage().decode()} (status {status})")


    def _acl_ok(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what}: ACL error {rc}")


    class NPUGraph:
        def __init__(self):
            self._model = None
            self._stream = None

        def capture_begin(self, pool=None, capture_error_mode="global"):
            self._stream = _thread_stream()
            _acl_ok(_twin().camTwinAclmdlRICaptureBegin(ctypes.c_void_p(self._stream),
                                                        _CAPTURE_MODES[capture_error_mode]), "NPUGraph.capture_begin")

        def capture_end(self):
            model = ctypes.c_void_p()
            _acl_ok(_twin().camTwinAclmdlRICaptureEnd(ctypes.c_void_p(self._stream), ctypes.byref(model)),
                    "NPUGraph.capture_end")
            self._model = model.value

        def replay(self):
            _acl_ok(_twin().camTwinAclmdlRIExecuteAsync(ctypes.c_void_p(self._model), ctypes.c_void_p(self._stream)),
                    "NPUGraph.replay")

        def reset(self):
            if self._model:
                _acl_ok(_twin().camTwinAclmdlRIDestroy(ctypes.c_void_p(self._model)), "NPUGraph.reset")
            self._model = None


    class graph:
        """torch_npu.npu.graph(npu_graph, pool=None, stream=None, capture_error_mode="global")."""

        def __init__(self, npu_graph, pool=None, stream=None, capture_error_mode="global"):
            assert stream is None, "the stub captures the current stream"
            self.npu_graph, self.mode = npu_graph, capture_error_mode

        def __enter__(self):
            self.npu_graph.capture_begin(capture_error_mode=self.mode)
            return self

        def __exit__(self, *exc):
            self.npu_graph.capture_end()
            return False


    def _synchronize():
        _ok(_twin().camTwinAclrtSynchronizeStreamWithTimeout(ctypes.c_void_p(_thread_stream()), 60000), "synchronize")


    class npu:
        @staticmethod
        def current_stream(device=None):
            CALLS.append((str(device), threading.current_thread().name))
            return _Stream(_thread_stream())

        @staticmethod
        def device_count():
            return 1  # the stub's one host-memory device

        @staticmethod
        def set_device(index):
            CALLS.append(("set_device", index))

        NPUGraph = NPUGraph
        graph = graph
        synchronize = staticmethod(_synchronize)


    for _name in ("NPUGraph", "graph", "synchronize"):  # torch.npu.<name>, as torch_npu patches it into torch
        setattr(torch.npu, _name, getattr(npu, _name))
''')

# Every op through torch.ops.cam on "npu" tensors, against the same op on CPU tensors (the direct path).
PROBE = textwrap.dedent('''
    import threading

    import torch
    import torch_npu
    import cam
    from cam import _npu
    from _dataplane_harness import raise_first, run_ranks

    assert _npu.registered(), "torch_npu found at import"
    assert cam.backend() == "twin"  # built for the twin: torch_npu alone does not make the backend Ascend
    NPU = torch.device("npu:0")
    g = torch.Generator().manual_seed(1)


    def npu(t):
        n = t.to(NPU)
        assert type(n) is torch.Tensor and n.device.type == "npu" and not n.is_cpu
        return n


    def same(npu_tensor, cpu_tensor, what):
        got = npu_tensor.cpu()
        assert got.dtype == cpu_tensor.dtype and torch.equal(got.view(torch.uint8), cpu_tensor.view(torch.uint8)), what


    seen = set()

    # dynamic_quant: the schema is (x, q, scale) with the outputs written in place.
    x = (torch.randn(17, 273, generator=g) * 3).to(torch.bfloat16)
    q, scale = cam.ops.dynamic_quant(x)
    qn, sn = npu(torch.zeros_like(q)), npu(torch.zeros_like(scale))
    torch.ops.cam.dynamic_quant(npu(x), qn, sn)
    same(qn, q, "q"), same(sn, scale, "scale")
    assert torch_npu.CALLS == [("npu:0", "MainThread")], torch_npu.CALLS  # the stream came from torch_npu
    seen.add("dynamic_quant")

    # The GMM pair.
    E, K, N, M = 2, 64, 96, 12
    lw = cam.LayerWeights([torch.randint(-9, 10, (E, K, N), generator=g, dtype=torch.int8) for _ in range(2)],
                          [torch.rand(E, N, generator=g) for _ in range(2)])
    xq = torch.randint(-50, 51, (M, K), generator=g, dtype=torch.int8)
    xs = torch.rand(M, generator=g)
    counts, layer = torch.tensor([5, 7]), torch.tensor([1])
    y, ys = cam.ops.gmm_swiglu_quant_multi_layer(xq, xs, lw, counts, layer)
    yn, ysn = npu(torch.zeros_like(y)), npu(torch.zeros_like(ys))
    wn, sn_ = [npu(w) for w in lw.weights], [npu(s) for s in lw.scales]
    torch.ops.cam.gmm_swiglu_quant_multi_layer(npu(xq), npu(xs), wn, sn_, npu(counts), npu(layer), 1, yn, ysn)
    same(yn, y, "y"), same(ysn, ys, "y_scale")
    seen.add("gmm_swiglu_quant_multi_layer")
    lw2 = cam.LayerWeights([torch.randint(-9, 10, (E, N // 2, 40), generator=g, dtype=torch.int8) for _ in range(2)],
                           [torch.rand(E, 40, generator=g) for _ in range(2)])
    out = cam.ops.gmm_multi_layer(y, ys, lw2, counts, layer)
    on = npu(torch.zeros_like(out))
    torch.ops.cam.gmm_multi_layer(yn, ysn, [npu(w) for w in lw2.weights], [npu(s) for s in lw2.scales], npu(counts),
                                  npu(layer), 1, on)
    same(on, out, "gmm_multi_layer out")
    seen.add("gmm_multi_layer")

    # The four data-plane ops: one round trip, ranks as threads, once on CPU tensors and once on npu tensors.
    topo = cam.Topology(D=1, P=1, F=1, E=4, K=2, H=64, Bmax=6, L=2)
    xr = (torch.randn(5, topo.H, generator=g) * 3).to(torch.bfloat16)
    ids = torch.tensor([[0, 1], [3, -1], [2, 2], [1, 0], [-1, 3]], dtype=torch.int32)
    wts = torch.rand(5, topo.K, generator=g)
    PLANE_WORD = 7  # work_item word 7 is the plane's id (docs/protocol.md §4.2): differs between two planes


    def plane(on_npu):
        dev = (lambda t: npu(t)) if on_npu else (lambda t: t)

        def attention(comm):
            torch.ops.cam.dispatch_send(comm.token, dev(xr), dev(ids), 1, comm.id)
            o = dev(torch.zeros(5, topo.H, dtype=torch.bfloat16))
            torch.ops.cam.combine_recv(comm.token, dev(ids), dev(wts), o, comm.id)
            # a second round, served by the batched mode (dispatch_recv_batch / combine_send_batch)
            torch.ops.cam.dispatch_send(comm.token, dev(xr), dev(ids), 0, comm.id)
            o2 = dev(torch.zeros(5, topo.H, dtype=torch.bfloat16))
            torch.ops.cam.combine_recv(comm.token, dev(ids), dev(wts), o2, comm.id)
            return o.cpu(), o2.cpu()

        def ffn(comm):
            n = topo.recv_rows
            outs = [dev(torch.zeros(n, topo.H, dtype=torch.int8 if topo.quantized else torch.bfloat16)),
                    dev(torch.zeros(n if topo.quantized else 1)),
                    dev(torch.zeros(topo.R, dtype=torch.int64)), dev(torch.zeros(topo.work_item_words,
                                                                                 dtype=torch.int64))]
            for _ in range(400):
                torch.ops.cam.dispatch_recv(comm.token, *outs, comm.id)
                if int(outs[3].cpu()[0]):
                    break
            else:
                raise AssertionError("no work item")
            # The expert: the dequantized rows times 0.5, in bf16 (any fixed function of the rows will do).
            rows = (outs[0].cpu().float() * (outs[1].cpu()[:, None] if topo.quantized else 1) * 0.5).to(torch.bfloat16)
            torch.ops.cam.combine_send(comm.token, dev(rows), outs[3], comm.id)
            item = outs[3].cpu()
            item[PLANE_WORD] = 0
            budget = 2 * n
            batch = [dev(torch.zeros(budget, topo.H, dtype=torch.int8)), dev(torch.zeros(budget)),
                     dev(torch.zeros(topo.R, 3, dtype=torch.int64)), dev(torch.zeros(budget, 3, dtype=torch.int64)),
                     dev(torch.zeros(1, topo.work_item_words, dtype=torch.int64))]
            for _ in range(400):
                torch.ops.cam.dispatch_recv_batch(comm.token, *batch, comm.id, budget)
                if int(batch[4].cpu()[0, 0]):
                    break
            else:
                raise AssertionError("no batch")
            rows2 = (batch[0].cpu().float() * batch[1].cpu()[:, None] * 0.5).to(torch.bfloat16)
            torch.ops.cam.combine_send_batch(comm.token, dev(rows2), batch[4], comm.id, budget)
            return [outs[0].cpu(), outs[1].cpu(), outs[2].cpu(), item, batch[0].cpu(), batch[2].cpu(),
                    batch[3].cpu()]

        results, errors = run_ranks(topo, {0: attention, 1: ffn}, timeout=120, timeout_s=10.0, idle_poll_s=0.05)
        raise_first(errors)
        return results


    before = len(torch_npu.CALLS)
    cpu_run = plane(False)
    assert len(torch_npu.CALLS) == before  # CPU tensors never ask torch_npu
    npu_run = plane(True)
    ranks = {name for _, name in torch_npu.CALLS[before:]}
    assert ranks == {"rank0", "rank1"}, ranks  # every rank's ops took torch_npu's stream, on its own thread
    same(npu_run[0][0], cpu_run[0][0], "combine_recv out")
    same(npu_run[0][1], cpu_run[0][1], "combine_recv out of the batched round")
    for i, name in enumerate(("expand_x", "scales", "expert_counts", "work_item", "batch expand_x", "group_table",
                              "origin")):
        same(npu_run[1][i], cpu_run[1][i], name)
    assert npu_run[1][3][5] == int((ids >= 0).sum()), "the round's rows reached the FFN rank"
    seen |= {"dispatch_send", "dispatch_recv", "combine_send", "combine_recv", "dispatch_recv_batch",
             "combine_send_batch"}

    ops = {n for n in dir(torch.ops.cam) if isinstance(getattr(torch.ops.cam, n), torch._ops.OpOverloadPacket)}
    assert seen == ops, (seen, ops)  # every op of the library was called
    print("ok")
''')


@pytest.fixture(scope="module")
def npu_device_lib(tmp_path_factory):
    """tests/npu_stub/host_device.cpp built against this torch (once per module: a few minutes on a loaded host)."""
    gxx = "g++"
    src = pathlib.Path(__file__).parent / "npu_stub" / "host_device.cpp"
    lib = tmp_path_factory.mktemp("npu_stub") / "libcam_test_npu_device.so"
    inc = [f"-I{p}" for p in torch.utils.cpp_extension.include_paths()]
    libs = [f for p in torch.utils.cpp_extension.library_paths() for f in (f"-L{p}", f"-Wl,-rpath,{p}")]
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    try:
        subprocess.run([gxx, "-shared", "-fPIC", "-std=c++17", "-O1", abi, *inc, str(src), *libs, "-lc10",
                        "-ltorch_cpu", "-o", str(lib)], check=True, timeout=840, capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("g++ not available")
    return lib


def _run_with_stub(tmp_path, lib, probe, timeout=300):
    pkg = tmp_path / "torch_npu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(STUB)
    paths = [str(tmp_path), str(pathlib.Path(__file__).resolve().parent)]
    # PYTHONPATH too: processes the probe starts (cam-qualify's rank processes) import the same stub
    env = {**os.environ, "CAM_TEST_NPU_DEVICE_LIB": str(lib),
           "PYTHONPATH": os.pathsep.join([*paths, *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-c", f"import sys; sys.path[:0] = {paths!r}\n" + probe],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env)


@pytest.mark.timeout(1200)
def test_every_op_through_torch_ops_cam_on_npu_tensors_matches_the_cpu_path(tmp_path, npu_device_lib):
    out = _run_with_stub(tmp_path, npu_device_lib, PROBE)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


@pytest.mark.timeout(1200)
def test_npu_tensors_are_refused_by_the_c_rules_with_the_cpu_words(tmp_path, npu_device_lib):
    # A refusal on npu tensors comes from the same C checks, before anything is launched: same class, same words.
    probe = textwrap.dedent('''
        import torch
        import torch_npu
        import cam

        x = torch.zeros(4, 8, dtype=torch.bfloat16)
        for q, s in ((torch.zeros(4, 8, dtype=torch.int16), torch.zeros(4)), (torch.zeros(4, 9, dtype=torch.int8),
                                                                               torch.zeros(4))):
            errors = []
            for dev in ("cpu", "npu"):
                try:
                    torch.ops.cam.dynamic_quant(x.to(dev), q.to(dev), s.to(dev))
                except cam.CamError as e:
                    errors.append((type(e), str(e)))
            assert len(errors) == 2 and errors[0] == errors[1], errors
        print("ok")
    ''')
    out = _run_with_stub(tmp_path, npu_device_lib, probe)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


def test_without_torch_npu_npu_tensors_cannot_run():
    from cam import _npu

    assert _npu._torch_npu() is None, "control: torch_npu must not be importable on this machine"
    assert not _npu.registered() and _npu.register() is False
    # The op's one body is registered for the NPU key regardless; without torch_npu there is no stream to run on.
    assert torch._C._dispatch_has_kernel_for_dispatch_key("cam::dynamic_quant", "PrivateUse1")
    with pytest.raises(ValueError, match="torch_npu is not importable"):
        _npu.stream_and_workspace(torch.device("privateuseone", 0))
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


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_qualify_dataplane_step_runs_on_the_npu_transport(tmp_path, npu_device_lib):
    # cam-qualify's own planned data-plane step for NPU tensors, with fewer rounds: its four ranks are processes on
    # the NPU transport (here the twin's ACL IPC stand-ins) with stub-NPU tensors, every round exact and every
    # payload's checksum the golden's. Six interpreters import torch (the probe, the step, four ranks): ~1 min.
    probe = textwrap.dedent('''
        from cam import qualify

        step = next(s for s in qualify.plan(qualify.detect(".", device="npu")) if s.kind == "dataplane")
        assert step.name == "dataplane_round_trip[transport=npu]", step.name
        argv = list(step.argv)
        argv[argv.index("--dataplane-rounds") + 1] = "3"
        ok, detail, _ = qualify.run_subprocess(qualify.Step(step.name, step.kind, tuple(argv), timeout_s=600))
        assert ok and "3 rounds on npu (transport npu, 4 processes as ranks): ok" in detail, detail
        print("ok")
    ''')
    out = _run_with_stub(tmp_path, npu_device_lib, probe, timeout=800)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr
