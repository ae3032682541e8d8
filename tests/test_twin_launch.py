"""Launch, waits and Python overhead: the twin's block pool and parking (tests/twin/launch.cpp, each case a
fresh process), and the per-call path of the Python ops (no torch._dynamo on the eager path, mutations visible to
autograd's version counters)."""

import os
import subprocess
import sys

import pytest
from _twin_build import build_twin_program
import torch

import cam


@pytest.fixture(scope="module")
def launch_binary(source_root, tmp_path_factory):
    return build_twin_program(source_root, str(tmp_path_factory.mktemp("twin-launch") / "launch"), "launch.cpp",
                              include_root=True)


def run_case(binary, case, **env):
    full = dict(os.environ, CAM_TWIN_PLATFORM="twin", CAM_TWIN_SYNC_TIMEOUT_S="20")
    full.update(env)
    return subprocess.run([binary, case], capture_output=True, text=True, timeout=120, env=full)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["pool_reuse", "concurrent_streams", "ub_poison_after_reuse", "flag_wait_woken",
                                  "flag_wait_deadline", "fork_child", "run_here", "run_here_keeps_order",
                                  "run_here_poison_and_capture"])
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
    # Importing torch._dynamo costs ~0.7 s at the first op of every process; the eager path must not.
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


def _activity():
    return cam._C.host_activity()["caller_run_tasks"]


def test_compute_ops_run_on_the_calling_thread_when_the_stream_is_idle():
    # dynamic_quant: one launch; the GMM pair: status reset, cube, epilogue, status read. Each ran by the caller.
    x = torch.randn(4, 64).to(torch.bfloat16)
    before = _activity()
    q, s = cam.ops.dynamic_quant(x)
    assert _activity() - before == 1
    ref_q, ref_s = cam.reference.dynamic_quant(x)
    assert torch.equal(q, ref_q) and torch.equal(s, ref_s)
    # Control: a launch the caller does not synchronize at once (the C API path) goes to the stream's worker.
    from cam import _runtime
    from cam._tensor import desc

    q2, s2 = torch.empty_like(q), torch.empty_like(s)
    stream = _runtime.default_stream()
    before = _activity()
    cam._C.dynamic_quant(desc(x), desc(q2), desc(s2), stream, lambda nbytes: None)  # no workspace: never called
    stream.synchronize(60.0)
    assert _activity() == before and torch.equal(q2, q) and torch.equal(s2, s)


def test_combine_send_runs_on_the_calling_thread_and_the_peer_waits_do_not():
    # combine_send waits on no peer (it checks the item, writes the rows, signals): its launch, status check and
    # in-flight token run on the FFN rank's own thread. dispatch_send / dispatch_recv / combine_recv wait on other
    # ranks: they stay on the Comm's stream worker, where a synchronize can give up on a wedged kernel (the control).
    import threading
    import uuid

    topo = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=64, Bmax=4, L=1, slots=2)
    group = f"run-here-{uuid.uuid4().hex[:8]}"
    x = torch.randn(4, 64).to(torch.bfloat16)
    ids = torch.tensor([[0], [1], [0], [1]], dtype=torch.int32)
    weights = torch.ones(4, 1)
    counts, errors = {}, []
    sent, ffn_done, attention_counted = threading.Event(), threading.Event(), threading.Event()

    def attention():
        with cam.Comm(topo, 0, group=group, dtype=torch.bfloat16) as comm:
            before = _activity()
            cam.ops.dispatch_send(comm, x, ids, 0)
            sent.set()
            out = cam.ops.combine_recv(comm, ids, weights)
            # combine_recv returns once the rows land, while the FFN rank's status check and in-flight token may still
            # run: count once it says its combine_send is done, and it holds its Comm open until then.
            assert ffn_done.wait(60)
            counts["attention"] = _activity() - before
            attention_counted.set()
            return out

    def ffn():
        with cam.Comm(topo, 1, group=group, dtype=torch.bfloat16) as comm:
            assert sent.wait(60)
            before = _activity()
            expand_x, scales, _, item = cam.ops.dispatch_recv(comm)
            counts["dispatch_recv"] = _activity() - before
            assert int(item[5]) == 4
            rows = (expand_x.float() * scales[:, None]).to(torch.bfloat16)
            before = _activity()
            cam.ops.combine_send(comm, rows, item)
            counts["combine_send"] = _activity() - before
            ffn_done.set()
            assert attention_counted.wait(60)

    results = {}

    def run(name, fn):
        try:
            results[name] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
            for event in (sent, ffn_done, attention_counted):
                event.set()

    threads = [threading.Thread(target=run, args=(n, f), daemon=True) for n, f in (("a", attention), ("f", ffn))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank did not finish within 60 s"
    if errors:
        raise errors[0]
    # caller_run_tasks is process-wide: each rank's count covers only its own calls while the other rank waited
    # (the attention rank's includes the FFN rank's combine_send, which ran while it sat in combine_recv).
    assert counts["dispatch_recv"] == 0
    assert counts["combine_send"] == 3  # the launch, the status check, the in-flight token
    assert counts["attention"] == 3  # the FFN rank's combine_send only: dispatch_send and combine_recv ran on the worker
    # K = 1, weight 1: each token comes back as its own dequantized row.
    q, sc = cam.reference.dynamic_quant(x)
    assert torch.equal(results["a"], (q.float() * sc[:, None]).to(torch.bfloat16))


def _vm_flags(address: int) -> list:
    """The VmFlags of the mapping holding `address` (/proc/self/smaps)."""
    current = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                lo, hi = (int(v, 16) for v in head.split("-"))
                current = lo <= address < hi
            elif current and line.startswith("VmFlags:"):
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps") or not os.path.exists("/sys/kernel/mm/transparent_hugepage"),
                    reason="reads the mapping's flags from /proc/self/smaps; a kernel without THP refuses the advice")
def test_in_process_windows_of_2_mib_or_more_are_advised_for_huge_pages():
    # The data plane streams tens of MiB through the windows per round: a window of 2 MiB or more is 2 MiB aligned and
    # madvise(MADV_HUGEPAGE)d (VmFlags "hg"), this mapping only. A smaller window is left alone (the control).
    import threading
    import uuid

    for H, Bmax, want in ((4096, 512, True), (64, 4, False)):  # want: a window of this plane is >= 2 MiB
        topo = cam.Topology(D=1, P=1, F=1, E=2, K=1, H=H, Bmax=Bmax, L=1, slots=2)
        group, seen, errors = f"thp-{uuid.uuid4().hex[:8]}", {}, []

        def rank(r):
            try:
                with cam.Comm(topo, r, group=group, dtype=torch.bfloat16) as comm:
                    w = comm.window
                    seen[r] = (w.numel(), w.data_ptr() % (2 << 20), "hg" in _vm_flags(w.data_ptr()))
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)

        threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors and len(seen) == 2, errors
        for nbytes, offset, advised in seen.values():
            assert advised == (nbytes >= 2 << 20), (H, nbytes, advised)
            assert offset == 0 or nbytes < 2 << 20, (H, nbytes, offset)
        assert any(advised for _, _, advised in seen.values()) == want, (H, seen)


def _count_dispatches(monkeypatch):
    import sys

    op = sys.modules["cam.ops.dynamic_quant"]._dynamic_quant
    calls = []
    real = op._overload
    monkeypatch.setattr(op, "_overload", lambda *a: (calls.append(1), real(*a))[1])
    return calls


def test_eager_call_skips_the_dispatcher_only_when_nothing_could_observe_it(monkeypatch):
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = _count_dispatches(monkeypatch)
    x = torch.randn(3, 40).to(torch.bfloat16)
    q0, s0 = cam.ops.dynamic_quant(x)
    assert calls == []  # plain CPU tensors, no mode, no grad: straight to the kernel

    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Record():
        q1, s1 = cam.ops.dynamic_quant(x)
    assert "cam.dynamic_quant.default" in seen and len(calls) == 1  # a mode sees the op

    xg = x.clone().requires_grad_(True)
    q2, s2 = cam.ops.dynamic_quant(xg)  # autograd must see the call
    assert len(calls) == 2
    with torch.no_grad():
        cam.ops.dynamic_quant(xg)  # nothing to record: direct again
    assert len(calls) == 2
    for q, s in ((q1, s1), (q2, s2)):
        assert torch.equal(q, q0) and torch.equal(s, s0)


def _bad_dynamic_quant_calls():
    bf = torch.bfloat16
    x = torch.randn(4, 64).to(bf)
    q, s = torch.empty(4, 64, dtype=torch.int8), torch.empty(4)
    return {
        "x dtype": (x.float(), (q, s)),
        "x rank": (x.reshape(4, 8, 8), (q, s)),
        "x no columns": (torch.empty(4, 0, dtype=bf), (q, s)),
        "x not contiguous": (x.t().contiguous().t(), (q, s)),
        "q dtype": (x, (q.to(torch.int16), s)),
        "q shape": (x, (q[:, :32].contiguous(), s)),
        "q not contiguous": (x, (torch.empty(64, 4, dtype=torch.int8).t(), s)),
        "scale dtype": (x, (q, s.double())),
        "scale shape": (x, (q, torch.empty(5))),
    }


@pytest.mark.parametrize("case", sorted(_bad_dynamic_quant_calls()))
def test_direct_call_refuses_exactly_as_the_dispatcher_path(case, monkeypatch):
    # The direct path lets the C API validate and runs the Python checker only to word a refusal: every refusal
    # must be the one the dispatcher path (Python checks first) raises, and nothing may be written.
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    calls = _count_dispatches(monkeypatch)
    x, (q, s) = _bad_dynamic_quant_calls()[case]
    q.fill_(7)
    before = q.clone()
    with pytest.raises(Exception) as direct:
        cam.ops.dynamic_quant(x, out=(q, s))
    assert calls == []
    with Passthrough(), pytest.raises(Exception) as dispatched:
        cam.ops.dynamic_quant(x, out=(q, s))
    assert len(calls) == 1
    assert type(direct.value) is type(dispatched.value) and str(direct.value) == str(dispatched.value)
    assert "dynamic_quant:" in str(direct.value)
    assert torch.equal(q, before)
