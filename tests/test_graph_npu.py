"""cam's FFN iteration captured inside a graph the framework owns: the AFD plugin's FFN runner captures with
torch_npu's ``NPUGraph`` / ``torch.npu.graph(...)`` on torch_npu's current stream, where cam's ops on NPU tensors
run. Here torch_npu is tests/test_ascend_npu.py's stub, whose graph seam forwards the model-RI capture calls to the
twin runtime's (camTwinAclmdlRI*), which cam's capture registry does not see: cam adopts the capture from the
runtime, as it must on Ascend (docs/graph.md, "Inside a framework's graph"). The capture records without running
(the poisoned buffers stay poisoned), every busy replay's W2 output equals the eager ops on what it received (CPU
tensors, bit for bit), idle replays are no-ops, and the stop word ends the replay loop within a bound far below the
FFN rank's idle bound; a second stop is a no-op. Nothing here has run on an NPU or with the real torch_npu.
"""

import textwrap

import pytest

from test_ascend_npu import _run_with_stub, npu_device_lib  # noqa: F401 - the fixture, used by name

PROBE = textwrap.dedent('''
    import copy
    import threading
    import time

    import torch
    import torch_npu
    import cam
    from cam.connector import expert_weights, ffn_compute, ffn_work_item
    from cam.integrations.afd_plugin import FFNGraphLoop
    from cam.models import PRESETS, MoEModel
    from _dataplane_harness import raise_first, run_ranks

    NPU = torch.device("npu:0")
    IDLE_S, STOP_BOUND_S, KIND, ROWS = 20.0, 5.0, 0, 5
    # The plugin's names (torch.npu.NPUGraph / torch.npu.graph, as torch_npu patches them into torch) are the seam's.
    assert torch.npu.NPUGraph is torch_npu.npu.NPUGraph and torch.npu.graph is torch_npu.npu.graph
    for name in ("capture_begin", "capture_end", "replay", "reset"):
        assert callable(getattr(torch.npu.NPUGraph, name)), name

    model = MoEModel(PRESETS["tiny"])
    c = model.config
    topo = cam.Topology(D=1, P=1, F=1, E=c.num_experts, K=c.top_k, H=c.hidden, Bmax=8, L=len(c.moe_layers))
    w1, w2 = expert_weights(model, topo, 0)


    def on_npu(lw):
        # Checked and packed on the CPU (the stub device has no kernels for the value checks), then moved.
        moved = copy.copy(lw)
        moved.weights = tuple(w.to(NPU) for w in lw.weights)
        moved.scales = tuple(s.to(NPU) for s in lw.scales)
        return moved


    def make_round(seed, b):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(b, topo.H, generator=g).to(torch.bfloat16)
        ids = torch.argsort(torch.rand(b, topo.E, generator=g), dim=1)[:, :topo.K].to(torch.int32).contiguous()
        return seed % topo.L, x, ids, torch.softmax(torch.randn(b, topo.K, generator=g), -1)


    rounds = [make_round(s, b) for s, b in enumerate((5, 1, 8, 3, 0, 7))]
    ready, served = threading.Event(), threading.Event()


    def attention(comm):
        assert ready.wait(120)
        for layer, x, ids, w in rounds:
            cam.ops.dispatch_send(comm, x, ids, layer)
            cam.ops.combine_recv(comm, ids, w)
        served.set()


    def ffn(comm):
        loop = FFNGraphLoop(comm, on_npu(w1), on_npu(w2), device=NPU)
        static = (*loop.recv, loop.y, loop.y_scale, loop.out)
        for t in static:
            t.fill_(-1)
        g = torch.npu.NPUGraph()
        active = {v: k for k, v in cam._C.capture_statuses().items()}["active"]
        # thread_local: the Attention rank, a thread of this process, synchronizes its own stream meanwhile.
        pooled = []  # (bytes) of each workspace the capture took from cam's pool for adopted captures
        alloc = cam._C.capture_alloc
        cam._C.capture_alloc = lambda stream, nbytes: (pooled.append(nbytes), alloc(stream, nbytes))[1]
        with torch.npu.graph(g, capture_error_mode="thread_local"):
            # The stub began the runtime's capture, not cam's: cam reports it only by adopting it from the runtime.
            assert cam._C.capture_info(loop._stream)[0] == active, "cam does not see the framework's capture"
            loop.iteration()
            try:
                loop.release_graphs()
            except Exception as e:  # noqa: BLE001 - the refusal's words are what is checked
                assert "still captures" in str(e), e
            else:
                raise AssertionError("releasing the framework's graphs inside their capture was not refused")
        cam._C.capture_alloc = alloc
        assert all(bool((t.cpu() == -1).all()) for t in static), "the capture ran an op instead of recording it"
        assert pooled, "no recorded op took its workspace from the adopted capture's pool"
        print("adopted pool:", len(pooled), "workspaces,", sum(pooled), "bytes")
        ready.set()
        busy = idle = 0
        while busy < len(rounds):
            g.replay()
            loop.synchronize()
            item = loop.item.work_item.cpu()
            if int(item[KIND]) == 0:
                idle += 1
                continue
            busy += 1
            rows = int(item[ROWS])
            eager = ffn_compute(ffn_work_item(*(t.cpu() for t in loop.recv)), w1, w2)
            got = loop.out.cpu()
            assert torch.equal(got[:rows].view(torch.uint8), eager[:rows].view(torch.uint8)), busy

        def replay():
            g.replay()
            loop.synchronize()

        out = {}
        runner = threading.Thread(target=lambda: out.setdefault("n", loop.run(replay)), daemon=True)
        runner.start()
        assert served.wait(60)
        time.sleep(1.0)  # the loop is inside a replay's idle wait
        t0 = time.monotonic()
        first = loop.stop()
        runner.join(STOP_BOUND_S)
        took = time.monotonic() - t0
        if runner.is_alive():
            comm.abort()
            runner.join(60)
            raise AssertionError(f"the replay loop did not end within {STOP_BOUND_S} s of the stop")
        assert first is True and loop.stop() is False, "a second stop must be a no-op"
        g.reset()
        loop.release_graphs()  # else the Comm stays in flight (the recorded ops) and run_ranks cannot close it
        return busy, idle, took, out["n"]


    results, errors = run_ranks(topo, {0: attention, 1: ffn}, timeout=400, timeout_s=60.0, idle_poll_s=0.05,
                                rank_kw={1: {"idle_poll_s": IDLE_S}})
    if 1 in errors:  # the FFN rank's error first: the Attention rank only waits for it
        raise errors[1]
    raise_first(errors)
    busy, idle, took, n = results[1]
    assert busy == len(rounds) and took < STOP_BOUND_S and n >= 1, results[1]
    print("ok", results[1])
''')


@pytest.mark.timeout(1500)
def test_ffn_iteration_in_the_frameworks_npu_graph_replays_equal_eager_and_stops(
        tmp_path, npu_device_lib):  # noqa: F811 - the imported fixture
    out = _run_with_stub(tmp_path, npu_device_lib, PROBE, timeout=600)
    print(out.stdout)  # the adopted pool's figure (docs/graph.md)
    assert out.returncode == 0 and "ok" in out.stdout.strip().splitlines()[-1], out.stdout + out.stderr


ADOPTED_RULES = textwrap.dedent('''
    import copy

    import torch
    import torch_npu  # noqa: F401 - the stub: torch.npu.NPUGraph / graph
    import cam
    from cam import _C, _npu

    NPU = torch.device("npu:0")
    M, K, I, H, E, L = 48, 64, 32, 48, 3, 2
    g = torch.Generator().manual_seed(14)


    def weights(n, k):
        lw = cam.LayerWeights([torch.randint(-128, 128, (E, k, n), generator=g, dtype=torch.int8) for _ in range(L)],
                              [(torch.rand(E, n, generator=g) * 1e-2 + 1e-3).float() for _ in range(L)])
        moved = copy.copy(lw)
        moved.weights = tuple(w.to(NPU) for w in lw.weights)
        moved.scales = tuple(s.to(NPU) for s in lw.scales)
        return moved


    w1, w2 = weights(2 * I, K), weights(H, I)
    x = torch.randint(-128, 128, (M, K), generator=g, dtype=torch.int8).to(NPU)
    xs = (torch.rand(M, generator=g) * 1e-2 + 1e-3).float().to(NPU)
    gl = torch.tensor([16, 16, 16], dtype=torch.int64).to(NPU)
    li = torch.tensor([1], dtype=torch.int64).to(NPU)


    def outputs():
        return (torch.empty(M, I, dtype=torch.int8, device=NPU), torch.empty(M, dtype=torch.float32, device=NPU),
                torch.empty(M, H, dtype=torch.bfloat16, device=NPU))


    def chain(y, ys, out):
        cam.ops.gmm_swiglu_quant_multi_layer(x, xs, w1, gl, li, 1, out=(y, ys))
        cam.ops.gmm_multi_layer(y, ys, w2, gl, li, 1, out=out)


    def refused(call, words):
        try:
            call()
        except Exception as e:  # noqa: BLE001 - the refusal's words are what is checked
            assert words in str(e), e
            return
        raise AssertionError(f"not refused: {words}")


    static = outputs()
    chain(*static)  # warm-up: the address tables are built outside the capture
    stream = _npu.stream_and_workspace(NPU)[0]
    graph = torch.npu.NPUGraph()
    with torch.npu.graph(graph):
        chain(*static)
        # cam's rules hold in a capture it did not begin; cam refuses its own part and the capture goes on.
        refused(lambda: stream.synchronize(10.0), "a synchronize of the capturing stream")
        refused(lambda: _C.capture_begin(stream, 0), "already captures")
    # A bad layer index met during the framework's replay: the framework's replay reads no status record; cam's
    # synchronize of the captured stream does, with the eager sentence.
    li.fill_(7)
    try:
        chain(*outputs())
        raise AssertionError("the eager chain accepted layer_index 7")
    except cam.DeviceArgumentError as e:
        eager = str(e)
    graph.replay()
    try:
        stream.synchronize(60.0)
        raise AssertionError("the replay's bad layer index was not reported")
    except cam.DeviceArgumentError as e:
        assert str(e) == eager and "layer_index 7 outside [0, 2)" in eager, (str(e), eager)
    stream.synchronize(60.0)  # reported records are cleared
    li.fill_(1)
    graph.replay()
    stream.synchronize(60.0)
    want = outputs()
    chain(*want)
    assert torch.equal(static[2].cpu().view(torch.uint8), want[2].cpu().view(torch.uint8))
    graph.reset()
    _npu.release_framework_graphs(stream)
    print("ok")
''')


@pytest.mark.timeout(900)
def test_an_adopted_capture_keeps_cams_rules_and_its_replays_report_through_cams_synchronize(
        tmp_path, npu_device_lib):  # noqa: F811 - the imported fixture
    out = _run_with_stub(tmp_path, npu_device_lib, ADOPTED_RULES, timeout=600)
    assert out.returncode == 0 and "ok" in out.stdout.strip().splitlines()[-1], out.stdout + out.stderr
