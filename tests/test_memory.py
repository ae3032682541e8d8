"""cam.plan_memory against what cam allocates on the twin for the same topology: the windows the Comms map, the
static buffers of a captured FFN iteration, and the expert weights' LayerWeights, int8 and int4."""

import threading
from datetime import timedelta

import pytest
import torch

import cam
from cam import convert
from cam.connector import AsyncAFDConnector, ConnectorConfig, expert_weights
from cam.models import PRESETS, MoEModel

JOIN_S = 120


def _world(topo, group):
    store = torch.distributed.HashStore()
    store.set_timeout(timedelta(seconds=JOIN_S))
    cfg = ConnectorConfig(topo, timeout_s=60.0, idle_poll_s=0.01, group=group)
    conns = [AsyncAFDConnector(r, "attention" if r < topo.A else "ffn", cfg) for r in range(topo.world_size)]
    errors = []

    def init(c):
        try:
            c.init_afd_connector(store=store)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=init, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
    assert not errors, errors
    return conns


def _nbytes(ts):
    return sum(t.numel() * t.element_size() for t in ts)


@pytest.mark.parametrize("P, slots", [(1, 2), (2, 1)])
def test_plan_equals_what_the_twin_allocates(P, slots):
    model = MoEModel(PRESETS["tiny"])
    c = model.config
    topo = cam.Topology(D=2, P=P, F=2, E=c.num_experts, K=c.top_k, H=c.hidden, Bmax=16, L=len(c.moe_layers),
                        slots=slots)
    plan = cam.plan_memory(topo, "int8", intermediate=c.moe_intermediate)
    conns = _world(topo, f"mem-{P}-{slots}")
    try:
        assert conns[0].comm.window_bytes == plan.attention["window"]
        ffn = conns[topo.A]
        assert ffn.comm.window_bytes == plan.ffn["window"]
        w1, w2 = expert_weights(model, topo, 0)
        assert _nbytes(t for w in (w1, w2) for _, t in w.named_tensors()) == plan.ffn["expert weights"]
        captured = ffn.capture_ffn(w1, w2)
        assert _nbytes(captured.recv) == plan.ffn["receive buffers"]
        assert _nbytes((captured.y, captured.y_scale)) == plan.ffn["W1 output"]
        assert _nbytes((captured.out,)) == plan.ffn["W2 output"]
        captured.close()
    finally:
        for x in conns:
            x.close()
    assert plan.hccl_window_bytes == max(plan.attention["window"], plan.ffn["window"])
    assert "HCCL" in plan.note and "HCCL_BUFFSIZE" in str(plan)


def test_int4_weights_and_extra_slots():
    model = MoEModel(PRESETS["tiny"])
    c = model.config
    topo = cam.Topology(D=1, P=1, F=2, E=c.num_experts, K=c.top_k, H=c.hidden, Bmax=8, L=len(c.moe_layers))
    layers = [convert.ExpertFFN(torch.randn(c.num_experts, c.hidden, 2 * c.moe_intermediate),
                                torch.randn(c.num_experts, c.moe_intermediate, c.hidden)) for _ in range(topo.L)]
    for bits, fmt, slots in ((4, "w4a8", None), (8, "int8", topo.R + 2)):
        w1, w2 = convert.layer_weights(layers, range(0, topo.R), bits=bits, slots=slots or topo.R)
        plan = cam.plan_memory(topo, fmt, slots, intermediate=c.moe_intermediate)
        assert _nbytes(t for w in (w1, w2) for _, t in w.named_tensors()) == plan.ffn["expert weights"], fmt


@pytest.mark.parametrize("args, kwargs, match", [
    (("int2",), {"intermediate": 8}, "weight_format must be one of"),
    (("int8", 1), {"intermediate": 8}, "slots must be an int >= the topology's 4"),
    (("int8",), {"intermediate": 0}, "intermediate must be a positive int"),
])
def test_bad_arguments_are_named(args, kwargs, match):
    topo = cam.Topology(D=1, P=1, F=2, E=8, K=2, H=64, Bmax=8, L=1)
    with pytest.raises(ValueError, match=match):
        cam.plan_memory(topo, *args, **kwargs)


def test_cam_qualify_plan_prints_the_plugin_recipes(capsys):
    from cam import qualify

    assert qualify.main(["--plan", "--window-tokens", "4096"]) == 0
    out = capsys.readouterr().out
    # The recipes' shapes as the plugin publishes them: DeepSeek-V3.2 W8A8 on DP3 PCP8 + EP8 (MBT 140000, the
    # 10-layer cut with 7 MoE layers); DeepSeek-V4-Flash W8A8 on DP2 TP4 + EP8 (MBT 8192, 43 MoE layers).
    v32 = cam.Topology(D=3, P=8, F=8, E=256, K=8, H=7168, Bmax=140000, L=7, window_tokens=4096)
    v4 = cam.Topology(D=2, P=4, F=8, E=256, K=6, H=4096, Bmax=8192, L=43, window_tokens=4096)
    for topo in (v32, v4):
        assert str(cam.plan_memory(topo, "int8", intermediate=2048)) in out
    assert out.count("HCCL_BUFFSIZE") == 2
    assert qualify.main(["--plan", "--window-tokens", "-1"]) == 2
    assert "window_tokens" in capsys.readouterr().err
    assert qualify.main(["--window-tokens", "8"]) == 2
