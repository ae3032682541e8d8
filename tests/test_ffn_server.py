"""cam.serve_ffn and cam-ffn: FFN ranks served eagerly and by graph replay over an in-process plane (threads as
ranks) return exactly what cam's ops compute in one process; the shutdown message stops every FFN rank within its
idle poll; a forged one is refused by name; cam-ffn processes serve a checkpoint directory and exit cleanly."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

import cam
from cam import convert
from cam.connector import AFDTransferContext, AFDTransferMetadata, AsyncAFDConnector, ConnectorConfig, post_shutdown
from cam.integrations.plane import routed_local

from _connector_harness import ServingFFNRanks, init_connectors

TIMEOUT_S = 60.0  # device waits and thread joins; a hung rank fails the test instead of blocking it
E, K, H, I, L, B = 8, 2, 64, 32, 2, 10
# DeepSeek-V4's clamped SwiGLU: W1's outputs here are about N(0, 1), so 0.5 clamps most of both halves and a server
# that dropped the limit would differ (each test checks that it does).
LIMIT = 0.5


def _experts(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [convert.ExpertFFN(torch.randn(E, H, 2 * I, generator=g) / H ** 0.5,
                              torch.randn(E, I, H, generator=g) / I ** 0.5) for _ in range(L)]


def _connectors(group, *, D=1, F=1):
    """Every rank's connector of an in-process plane, all on this thread: the test steps the FFN ranks itself."""
    topo = cam.Topology(D=D, P=1, F=F, E=E, K=K, H=H, Bmax=B, L=L)
    cfg = ConnectorConfig(topology=topo, timeout_s=TIMEOUT_S, idle_poll_s=0.01, group=group, transport="in_process")
    conns = [AsyncAFDConnector(r, "attention" if r < topo.A else "ffn", cfg) for r in range(topo.world_size)]
    init_connectors(conns, torch.distributed.HashStore(), TIMEOUT_S)
    return topo, conns


class _World:
    """Ranks as threads: D Attention connectors (returned to the caller) and F FFN ranks running serve_ffn."""

    def __init__(self, group, *, D=1, F=2, graph=False, secret=None, idle_poll_s=0.01, connector=None,
                 batched=False, swiglu_limit=None):
        self.topo = cam.Topology(D=D, P=1, F=F, E=E, K=K, H=H, Bmax=B, L=L)
        self.cfg = ConnectorConfig(topology=self.topo, timeout_s=TIMEOUT_S, idle_poll_s=idle_poll_s, group=group,
                                   transport="in_process", secret=secret)
        self.store = torch.distributed.HashStore()
        self.layers = _experts()
        # Two work items' rows: a batch serves both replicas' rounds at once.
        self.ffn = ServingFFNRanks(self.cfg, self.store, self.layers, timeout_s=TIMEOUT_S, graph=graph,
                                   row_budget=2 * self.topo.recv_rows if batched else None,
                                   swiglu_limit=swiglu_limit, connector=connector)
        self.results, self.errors, self.stopped_at = self.ffn.results, self.ffn.errors, self.ffn.stopped_at

    def start(self, wait_serving=True):
        self.ffn.start()
        conns = [AsyncAFDConnector(a, "attention", self.cfg) for a in range(self.topo.A)]
        init_connectors(conns, self.store, TIMEOUT_S)
        if not wait_serving:
            return conns
        # Rounds go out once every FFN rank serves, as the FFN ranks say through the store (a graph-mode rank
        # captures first, docs/integrations.md §3).
        for conn in conns:
            conn.wait_ffn_serving(TIMEOUT_S)
        return conns

    def join(self):
        self.ffn.join()

    def finish(self, conns):
        """Every Attention rank finishes, the FFN ranks stop on it, then the Attention ranks close."""
        try:
            for conn in conns:
                conn.finish()
            self.join()
        finally:
            for conn in conns:
                conn.close()


def _round(conn, layer, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, H, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(B)]).to(torch.int32)
    ids[0, 1] = -1  # an empty slot
    w = torch.rand(B, K, generator=g)
    conn.send_attn_output(x, AFDTransferContext(AFDTransferMetadata(layer_idx=layer)), topk_ids=ids, topk_weights=w)
    return x, ids, w


@pytest.mark.parametrize("limit", [None, LIMIT], ids=["swiglu", "clamped"])
@pytest.mark.parametrize("batched", [False, True], ids=["one-item", "batched"])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_served_rounds_equal_cams_ops_in_one_process(graph, batched, limit):
    """Every serving mode, with and without DeepSeek-V4's clamp in W1."""
    world = _World(f"serve-{graph}-{batched}-{limit}", D=2, graph=graph, batched=batched, swiglu_limit=limit)
    conns = world.start()
    got = {}
    try:
        for layer in range(L):
            # Both replicas' rounds are out before either is received, so a batched receive can take both.
            sent = [_round(conn, layer, 10 * layer + a) for a, conn in enumerate(conns)]
            for a, conn in enumerate(conns):
                got[(a, layer)] = (sent[a], conn.recv_ffn_output())
    finally:
        world.finish(conns)
    assert not world.errors, world.errors
    assert {r.reason for r in world.results.values()} == {"attention finished"}
    w1, w2 = convert.layer_weights(world.layers)
    for (a, layer), ((x, ids, w), out) in got.items():
        # Same quantizer, same row order, same kernels, same combine order: bit for bit.
        assert torch.equal(out, routed_local(x, ids, w, w1, w2, layer, swiglu_limit=limit)), (a, layer)
        if limit is not None:  # the clamp was applied: without it the same rounds differ
            assert not torch.equal(out, routed_local(x, ids, w, w1, w2, layer)), (a, layer)


def _reap(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(TIMEOUT_S)


def _one_round(conn, store, procs):
    """One round from Attention rank 0 once every FFN process serves (a graph rank captures first), then finish;
    returns the round's inputs, its output and every process's (stdout, stderr)."""
    conn.init_afd_connector(store)
    try:
        conn.wait_ffn_serving()
        x, ids, w = _round(conn, 1, 5)
        out = conn.recv_ffn_output()
        conn.finish()
    finally:
        conn.close()
    return x, ids, w, out, [p.communicate(timeout=TIMEOUT_S) for p in procs]


def test_one_batched_ffn_step_serves_both_replicas_ready_rounds():
    """Both replicas' rounds are published (dispatch_send returned) before the FFN rank's first receive: one
    batched iteration takes both, of different layers, and each replica gets exactly cam's one-process result."""
    topo, conns = _connectors("serve-batch-step", D=2)
    layers = _experts()
    w1, w2 = convert.layer_weights(layers)
    try:
        sent = [_round(conns[a], a, 7 + a) for a in range(topo.A)]  # replica a at MoE layer a
        with pytest.raises(ValueError, match="row_budget = 1 is below one work item's rows"):
            conns[2].ffn_step(w1, w2, row_budget=1)
        table = conns[2].ffn_step(w1, w2, row_budget=2 * topo.recv_rows)
        assert int((table[:, 0] != 0).sum()) == 2, table  # word 0: kind, 0 for an empty slot
        outs = [conns[a].recv_ffn_output() for a in range(topo.A)]
    finally:
        for conn in conns:
            conn.close()
    for a, ((x, ids, w), out) in enumerate(zip(sent, outs)):
        assert torch.equal(out, routed_local(x, ids, w, w1, w2, a)), a


def test_the_clamped_ffn_iteration_compiles_without_a_graph_break():
    """ffn_iteration with swiglu_limit under torch.compile(fullgraph=True): the limit is a constant of the W1 op, the
    check before the receive reads nothing from the device, so there is no graph break; the round it serves is
    cam's clamped result bit for bit."""
    from cam.connector import ffn_iteration

    _, conns = _connectors("serve-compile-limit")
    w1, w2 = convert.layer_weights(_experts())
    try:
        step = torch.compile(lambda: ffn_iteration(conns[1].comm, w1, w2, swiglu_limit=LIMIT), fullgraph=True,
                             backend="aot_eager")
        x, ids, w = _round(conns[0], 0, 11)
        step()
        out = conns[0].recv_ffn_output()
    finally:
        for conn in conns:
            conn.close()
    assert torch.equal(out, routed_local(x, ids, w, w1, w2, 0, swiglu_limit=LIMIT))
    assert not torch.equal(out, routed_local(x, ids, w, w1, w2, 0))


@pytest.mark.parametrize("batched", [False, True], ids=["one-item", "batched"])
def test_a_refused_swiglu_limit_takes_no_work_item(batched):
    """A bad limit is refused by name before the receive takes a work item: the round stays ready and the next
    step, with a valid limit, serves it with the clamp (had the refused step taken it, that round would never be
    answered and the receive below would time out). A capture with a bad limit is refused before it records."""
    topo, conns = _connectors(f"serve-bad-limit-{batched}")
    w1, w2 = convert.layer_weights(_experts())
    budget = topo.recv_rows if batched else None
    try:
        x, ids, w = _round(conns[0], 1, 3)
        for bad in (-1.0, float("nan"), "0.5", True):
            with pytest.raises(ValueError, match="swiglu_limit"):
                conns[1].ffn_step(w1, w2, budget, swiglu_limit=bad)
            with pytest.raises(ValueError, match="swiglu_limit"):
                conns[1].capture_ffn(w1, w2, budget, swiglu_limit=bad)
        conns[1].ffn_step(w1, w2, budget, swiglu_limit=LIMIT)
        out = conns[0].recv_ffn_output()
    finally:
        for conn in conns:
            conn.close()
    assert torch.equal(out, routed_local(x, ids, w, w1, w2, 1, swiglu_limit=LIMIT))
    assert not torch.equal(out, routed_local(x, ids, w, w1, w2, 1))


@pytest.mark.parametrize("batched", [False, True], ids=["one-item", "batched"])
def test_shutdown_request_stops_every_ffn_rank_within_its_idle_poll(batched):
    world = _World(f"serve-stop-{batched}", F=2, idle_poll_s=0.02, batched=batched)
    conns = world.start()
    try:
        _round(conns[0], 0, 1)
        conns[0].recv_ffn_output()
        with pytest.raises(ValueError, match="not received yet"):
            _round(conns[0], 1, 2)
            conns[0].finish()
        conns[0].recv_ffn_output()
        asked = time.monotonic()
        conns[0].request_shutdown("operator stop")
        world.join()
    finally:
        conns[0].close()
    assert not world.errors, world.errors
    assert {r.reason for r in world.results.values()} == {"operator stop"}
    # Each rank idles at most idle_poll_s per iteration before it reads the store; 5 s only guards a loaded machine.
    assert max(world.stopped_at.values()) - asked < 5.0


def test_a_forged_shutdown_is_refused_by_name():
    world = _World("serve-forged", F=1, secret=b"s" * 32)
    conns = world.start()
    try:
        wid = conns[0].world_id
        post_shutdown(world.store, "serve-forged", "not signed", world=wid)  # the raw store: no tag of the secret
        world.join()
    finally:
        conns[0].close()
    (err,) = world.errors.values()
    assert isinstance(err, PermissionError) and f"serve-forged/{wid}/serve/shutdown" in str(err)


def test_rounds_sent_while_graph_ranks_capture_are_served():
    """Rounds go out with no wait for serving, so they meet FFN ranks still capturing. A capture in the "global"
    mode was invalidated by another rank thread's synchronize (1 in 10 of these worlds lost a round, seen with the
    capture mode forced); 20 worlds of about 0.1 s each make that regression show. Bit-exactness is the test
    above's."""
    for n in range(20):
        world = _World(f"serve-race-{n}", D=2, F=2, graph=True)
        conns = world.start(wait_serving=False)
        try:
            for layer in range(L):
                for a, conn in enumerate(conns):
                    _round(conn, layer, a)
                    conn.recv_ffn_output()
        finally:
            world.finish(conns)
        assert not world.errors, (n, world.errors)


class _CaptureFails(AsyncAFDConnector):
    def capture_ffn(self, w1, w2, row_budget=None, *, swiglu_limit=None):
        raise cam.CaptureInvalidatedError("camStreamEndCapture: the capture was invalidated (a stand-in)")


def test_an_ffn_rank_that_fails_before_serving_is_named_at_the_first_round():
    """A graph-mode FFN rank whose capture fails tells the Attention ranks through the store: their wait names it
    and its reason at once, instead of a first round that would wait out the plane's timeout for it."""
    world = _World("serve-capture-fails", F=2, graph=True, connector=_CaptureFails)
    start = time.monotonic()
    # Both FFN ranks (1 and 2) fail; which one the store holds first when the wait polls is a race between threads.
    with pytest.raises(cam.FFNNotServingError, match=r"FFN rank [12] failed before serving: CaptureInvalidatedError"):
        world.start()
    assert time.monotonic() - start < TIMEOUT_S / 2  # named well before the plane's bound
    world.join()
    assert sorted(world.errors) == [1, 2] and all(isinstance(e, cam.CaptureInvalidatedError)
                                                  for e in world.errors.values())


def test_wait_ffn_serving_is_bounded_and_names_the_ranks_not_serving():
    _, conns = _connectors("serve-never")  # the FFN rank joins the plane but never serves
    try:
        start = time.monotonic()
        with pytest.raises(cam.FFNNotServingError, match=r"FFN rank\(s\) \[1\] not serving after 0.2 s"):
            conns[0].wait_ffn_serving(0.2)
        assert time.monotonic() - start < 5.0  # 0.2 s plus one poll; 5 s only guards a loaded machine
        with pytest.raises(ValueError, match="timeout_s"):
            conns[0].wait_ffn_serving(0)
        with pytest.raises(ValueError, match="attention rank"):
            conns[1].wait_ffn_serving(0.2)
        conns[1].mark_serving()
        conns[0].wait_ffn_serving(0.2)
    finally:
        for conn in conns:
            conn.close()


def test_serve_ffn_refuses_bad_arguments():
    world = _World("serve-args", F=1)
    conns = world.start()
    try:
        w1, w2 = convert.layer_weights(_experts())
        with pytest.raises(ValueError, match="FFN-rank"):
            cam.serve_ffn(conns[0], w1, w2)
    finally:
        conns[0].request_shutdown()
        world.join()
        conns[0].close()


# ----------------------------------------------------------------------------- cam-ffn processes


def _write_checkpoint(path, layers, *, model_type="qwen3_moe", **config):
    """A checkpoint directory as transformers writes one for Qwen3-MoE: config.json and per-expert safetensors keys
    (HF orientation: nn.Linear weights)."""
    from safetensors.torch import save_file

    tensors = {}
    inter = layers[0].w1.shape[2] // 2
    for j, x in enumerate(layers):
        for e in range(E):
            p = f"model.layers.{j}.mlp.experts.{e}."
            tensors[p + "gate_proj.weight"] = x.w1[e, :, :inter].T.contiguous()
            tensors[p + "up_proj.weight"] = x.w1[e, :, inter:].T.contiguous()
            tensors[p + "down_proj.weight"] = x.w2[e].T.contiguous()
    save_file(tensors, os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"model_type": model_type, "hidden_size": H, "moe_intermediate_size": inter, "num_experts": E,
                   "num_experts_per_tok": K, "hidden_act": "silu", **config}, f)


def _cam_ffn(args, env):
    return subprocess.Popen([sys.executable, "-m", "cam.ffn_server", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, stdin=subprocess.DEVNULL)


def test_cam_ffn_processes_serve_a_checkpoint(tmp_path):
    """Two cam-ffn processes (about 10 s each to import torch and cam on a loaded machine, in parallel) serve a
    checkpoint directory to an Attention rank in this process, over shm, and exit 0 once it finished."""
    from cam.connector import loopback_store

    _write_checkpoint(tmp_path, _experts())
    secret = os.urandom(16)
    env = dict(os.environ, CAM_RUN_SECRET=secret.hex())
    store = loopback_store(0, TIMEOUT_S)
    port = store.port
    topo = cam.Topology(D=1, P=1, F=2, E=E, K=K, H=H, Bmax=B, L=L)
    common = ["--checkpoint", str(tmp_path), "-D", "1", "-F", "2", "--max-tokens", str(B), "--master-port",
              str(port), "--group", "ffn-proc", "--idle-poll", "0.02", "--timeout", str(TIMEOUT_S)]
    # Rank 1 eager, one work item per iteration; rank 2 replays a captured batched iteration.
    batched = ["--graph", "--row-budget", str(2 * topo.recv_rows)]
    procs = [_cam_ffn(["--rank", str(r), *common] + (batched if r == 2 else []), env) for r in (1, 2)]
    try:
        cfg = ConnectorConfig(topology=topo, master_port=port, timeout_s=TIMEOUT_S, idle_poll_s=0.02,
                              group="ffn-proc", secret=secret)
        conn = AsyncAFDConnector(0, "attention", cfg)
        x, ids, w, out, outs = _one_round(conn, store, procs)
    finally:
        _reap(procs)
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr
        result = json.loads(stdout.strip().splitlines()[-1])
        assert result["reason"] == "attention finished" and result["iterations"] >= 1
        assert "serving experts" in stderr and "MoE layers [0, 1]" in stderr
    assert "graph replay" in outs[1][1] and f"batches of up to {2 * topo.recv_rows} rows" in outs[1][1]
    assert "one work item per iteration" in outs[0][1]
    w1, w2 = convert.layer_weights(_experts())
    assert torch.equal(out, routed_local(x, ids, w, w1, w2, 1))


def test_three_cam_ffn_processes_serve_eight_experts_by_the_contiguous_table(tmp_path):
    """cam-ffn -F 3 on 8 experts: each process serves its floor or ceil of E / F experts (3, 3, 2) in 3 slots, the
    Attention rank routes by the same contiguous table, and the routed output equals cam's ops in one process."""
    from cam.connector import loopback_store
    from cam.placement import Placement

    _write_checkpoint(tmp_path, _experts())
    secret = os.urandom(16)
    env = dict(os.environ, CAM_RUN_SECRET=secret.hex())
    store = loopback_store(0, TIMEOUT_S)
    topo = cam.Topology(D=1, P=1, F=3, E=E, K=K, H=H, Bmax=B, L=L, expert_slots=3)
    common = ["--checkpoint", str(tmp_path), "-D", "1", "-F", "3", "--max-tokens", str(B), "--master-port",
              str(store.port), "--group", "ffn-three", "--idle-poll", "0.02", "--timeout", str(TIMEOUT_S)]
    procs = [_cam_ffn(["--rank", str(r), *common], env) for r in (1, 2, 3)]
    try:
        cfg = ConnectorConfig(topology=topo, master_port=store.port, timeout_s=TIMEOUT_S, idle_poll_s=0.02,
                              group="ffn-three", secret=secret, placement=Placement.contiguous(E, 3, layers=L))
        conn = AsyncAFDConnector(0, "attention", cfg)
        x, ids, w, out, outs = _one_round(conn, store, procs)
    finally:
        _reap(procs)
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr
        assert json.loads(stdout.strip().splitlines()[-1])["reason"] == "attention finished"
    w1, w2 = convert.layer_weights(_experts())
    assert torch.equal(out, routed_local(x, ids, w, w1, w2, 1))


def test_cam_ffn_processes_serve_deepseek_v4s_clamp(tmp_path):
    """Two cam-ffn processes on a DeepSeek-V4 checkpoint (swiglu_limit 0.5), one eager, one replaying a captured
    batched iteration, serve with the clamp: the routed output equals cam's ops in one process with the limit, and
    differs from them without it."""
    from cam.connector import loopback_store

    limit = LIMIT
    _write_checkpoint(tmp_path, _experts(), model_type="deepseek_v4", swiglu_limit=limit)
    secret = os.urandom(16)
    env = dict(os.environ, CAM_RUN_SECRET=secret.hex())
    store = loopback_store(0, TIMEOUT_S)
    topo = cam.Topology(D=1, P=1, F=2, E=E, K=K, H=H, Bmax=B, L=L)
    common = ["--checkpoint", str(tmp_path), "-D", "1", "-F", "2", "--max-tokens", str(B), "--master-port",
              str(store.port), "--group", "ffn-v4", "--idle-poll", "0.02", "--timeout", str(TIMEOUT_S)]
    batched = ["--graph", "--row-budget", str(2 * topo.recv_rows)]
    procs = [_cam_ffn(["--rank", str(r), *common] + (batched if r == 2 else []), env) for r in (1, 2)]
    try:
        cfg = ConnectorConfig(topology=topo, master_port=store.port, timeout_s=TIMEOUT_S, idle_poll_s=0.02,
                              group="ffn-v4", secret=secret)
        conn = AsyncAFDConnector(0, "attention", cfg)
        x, ids, w, out, outs = _one_round(conn, store, procs)
    finally:
        _reap(procs)
    for p, (_, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr
        assert "clamped SwiGLU (swiglu_limit 0.5)" in stderr
    assert "graph replay" in outs[1][1] and f"batches of up to {2 * topo.recv_rows} rows" in outs[1][1]
    assert "eager" in outs[0][1] and "one work item per iteration" in outs[0][1]
    w1, w2 = convert.layer_weights(_experts())
    assert torch.equal(out, routed_local(x, ids, w, w1, w2, 1, swiglu_limit=limit))
    assert not torch.equal(out, routed_local(x, ids, w, w1, w2, 1))


@pytest.mark.parametrize("config, needle", [
    ({"model_type": "gpt_oss"}, "GPT-OSS"),
    # MiniMax-M3's limit clamps after the SiLU: not DeepSeek-V4's clamp (docs/integrations.md §1)
    ({"model_type": "minimax_m3_vl", "swiglu_limit": 7.0}, "swiglu_limit = 7.0 of model_type 'minimax_m3_vl'"),
])
def test_cam_ffn_refuses_an_unsupported_checkpoint(tmp_path, config, needle, caplog):
    _write_checkpoint(tmp_path, _experts())
    path = os.path.join(tmp_path, "config.json")
    with open(path) as f:
        full = json.load(f)
    with open(path, "w") as f:
        json.dump({**full, **config}, f)
    from cam import ffn_server

    assert ffn_server.main(["--checkpoint", str(tmp_path), "--rank", "1", "--max-tokens", "4"]) == 2
    assert needle in caplog.text


def _retensor(path, key, make):
    """Rewrites the checkpoint's safetensors file with tensor ``key`` replaced by ``make(tensor)``."""
    from safetensors.torch import load_file, save_file

    name = os.path.join(path, "model.safetensors")
    tensors = load_file(name)
    tensors[key] = make(tensors[key])
    save_file(tensors, name)


def _rewrite(path, name, data):
    with open(os.path.join(path, name), "wb") as f:
        f.write(data)


def _truncate(path):
    name = os.path.join(path, "model.safetensors")
    with open(name, "rb") as f:
        data = f.read()
    _rewrite(path, "model.safetensors", data[:len(data) // 2])


def _set_config(path, **changes):
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({**config, **changes}, f)


UP = "model.layers.1.mlp.experts.3.up_proj.weight"
DOWN = "model.layers.0.mlp.experts.2.down_proj.weight"


@pytest.mark.parametrize("spoil, file, needles", [
    (lambda p: _rewrite(p, "config.json", b"[1, 2]"), "config.json", ["holds a JSON list, not an object"]),
    (_truncate, "model.safetensors", ["not a readable safetensors file"]),
    (lambda p: _rewrite(p, "model.safetensors", os.urandom(4096)), "model.safetensors",
     ["not a readable safetensors file"]),
    (lambda p: _retensor(p, UP, lambda t: torch.zeros(I + 1, H)), "model.safetensors",
     [UP, f"has shape ({I + 1}, {H})"]),
    (lambda p: _retensor(p, DOWN, lambda t: t.reshape(-1)), "model.safetensors", [DOWN, "must be a 2-D"]),
    (lambda p: _set_config(p, hidden_size=str(H)), "config.json", [f"hidden_size is the string '{H}', not an int"]),
], ids=["config-list", "truncated", "garbage", "wrong-shape", "1-D", "string-hidden-size"])
def test_cam_ffn_refuses_a_broken_checkpoint_naming_the_file_and_tensor(tmp_path, spoil, file, needles, caplog):
    """A broken checkpoint is a refused command (exit 2) whose error names the file and, for a bad tensor, its key;
    never a traceback and exit 1."""
    _write_checkpoint(tmp_path, _experts())
    spoil(str(tmp_path))
    from cam import ffn_server

    assert ffn_server.main(["--checkpoint", str(tmp_path), "--rank", "1", "--max-tokens", "4"]) == 2
    refused = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused:")]
    assert refused, caplog.text
    assert os.path.join(str(tmp_path), file) in refused[0] and all(n in refused[0] for n in needles), refused[0]


def test_cam_ffn_refuses_a_row_budget_below_one_work_item(tmp_path, caplog):
    _write_checkpoint(tmp_path, _experts())
    from cam import ffn_server

    assert ffn_server.main(["--checkpoint", str(tmp_path), "--rank", "1", "--max-tokens", "4",
                            "--row-budget", "1"]) == 2
    assert "--row-budget 1 is below one work item's rows" in caplog.text


class _Device:
    """A shared device as the colocated mode holds it: counts how often serve_ffn held it, and checks it is never
    held twice at once."""

    def __init__(self):
        self.entered, self.held = 0, False

    def __enter__(self):
        assert not self.held
        self.held, self.entered = True, self.entered + 1

    def __exit__(self, *exc):
        self.held = False


@pytest.mark.parametrize("mode", ["eager", "batched", "graph"])
def test_serve_ffn_reports_phases_holds_the_device_and_fences_the_lost_ranks(mode):
    """The one loop's hooks, as cam-run uses them: each iteration's phase times and work items (on_iteration), the
    device held around compute, a shutdown message naming a lost Attention rank (fenced before it returns, its
    replica then reported), and the W1 + W2 launch count (None for a replay, which launches none)."""
    import threading

    from cam.serve import ServePolicy, serve_ffn

    topo, conns = _connectors(f"serve-hooks-{mode}", D=2)
    ffn = conns[topo.A]
    w1, w2 = convert.layer_weights(_experts(), range(topo.R))
    policy = ServePolicy(graph=mode == "graph", row_budget=2 * topo.recv_rows if mode == "batched" else None)
    device, seen, items, out = _Device(), [], [], {}

    def on_iteration(it):  # the records are read during the call: a replay's buffers are the next replay's too
        seen.append(it)
        items.append([(w.replica, w.layer) for w in cam.WorkItem.table(it.records) if not w.is_empty])

    def serve():
        try:
            out["result"] = serve_ffn(ffn, w1, w2, policy, device=device, on_iteration=on_iteration,
                                      max_serve_s=TIMEOUT_S)
        except BaseException as e:  # noqa: BLE001 - the test reads it
            out["error"] = e

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        conns[0].wait_ffn_serving(TIMEOUT_S)
        for layer in range(L):
            for a in range(topo.A):
                _round(conns[a], layer, a)
            for a in range(topo.A):
                conns[a].recv_ffn_output()
        conns[0].request_shutdown("run over", lost=[1])
        thread.join(TIMEOUT_S)
        assert not thread.is_alive() and "error" not in out, out
        result = out["result"]
        assert result.reason == "run over" and result.lost_ranks == (1,)
        assert set(ffn.lost_replicas) == {1} and ffn.lost_replicas[1].dead_rank == 1
        assert len(seen) == result.iterations and device.entered == result.iterations
        served = [item for its in items for item in its]
        assert sorted(served) == sorted((a, layer) for layer in range(L) for a in range(topo.A))
        assert all(it.start <= it.received <= it.computed <= it.end for it in seen)
        assert [it.served for it in seen] == [bool(its) for its in items]
        if mode == "graph":
            assert result.launches is None
        else:
            assert result.launches == 2 * result.iterations  # one W1 and one W2 per iteration, idle ones included
    finally:
        for conn in conns:
            conn.close()


def test_the_shutdown_message_carries_the_lost_ranks():
    from cam.serve.store import Shutdown

    assert Shutdown.parse("requested") == Shutdown("requested")
    assert Shutdown.parse(Shutdown("over", (3, 1)).text()) == Shutdown("over", (1, 3))
    assert Shutdown.parse('{"lost": [2]}') == Shutdown("run over", (2,))  # cam-run's launcher writes this form
    with pytest.raises(ValueError, match="lost must be a list of ranks"):
        Shutdown.parse('{"lost": "2"}')


def test_a_replayed_loop_synchronizes_once_per_check():
    """Without on_iteration, a captured loop replays items_per_check times between two synchronizes (and checks)."""
    import threading

    from cam.serve import ServePolicy, serve_ffn

    topo, conns = _connectors("serve-per-check", D=1)
    ffn = conns[topo.A]
    steps, graph_step = [], ffn.ffn_graph_step
    ffn.ffn_graph_step = lambda captured, items=1: (steps.append(items), graph_step(captured, items))
    w1, w2 = convert.layer_weights(_experts(), range(topo.R))
    out = {}
    thread = threading.Thread(target=lambda: out.update(result=serve_ffn(
        ffn, w1, w2, ServePolicy(graph=True, items_per_check=3), max_serve_s=TIMEOUT_S)), daemon=True)
    thread.start()
    try:
        conns[0].wait_ffn_serving(TIMEOUT_S)
        _round(conns[0], 0, 0)
        conns[0].recv_ffn_output()
        conns[0].finish()
        thread.join(TIMEOUT_S)
        assert not thread.is_alive()
        result = out["result"]
        assert result.reason == "attention finished" and steps and set(steps) == {3}
        assert result.iterations == 3 * len(steps)
    finally:
        for conn in conns:
            conn.close()
