"""cam.bench.floors: the least time an output-stationary GMM schedule can take in the timing model's memory rule."""

import random

import pytest

from cam.bench.bounds import op_bound
from cam.bench.floors import gmm_schedule_floor

# A toy device whose rates make the arithmetic below checkable by hand.
TOY = {"hbm_bytes_per_s_die": 1.0, "l2_bytes_per_s_die_lo": 2.0, "l2_bytes_per_s_die_hi": 4.0, "aic_per_die": 1,
       "cube_int8_macs_per_cycle": 4, "core_clock_hz": 1.0}


def test_toy_w2_floor_by_hand():
    # W2 with K = I = 64, N = H = 32, one expert of 3 rows and one empty; L0C holds 32 int32 (tm * tn <= 32, so the
    # tiles are 1 x 16, 2 x 16, 1 x 32); L1 holds 64 bytes (x resident over K only at tm = 1).
    # Bytes every tile shape moves: first reads 64*32 + 32*4 (weight, column scales) + 3*(64 + 4) (x, row scales)
    # = 2380; writes 3*32*4 (accumulator) + 3*32*2 (bf16 out) = 576; the accumulator read back 384 (an L2 hit).
    # 1 x 16: the weight read 3 times, x once: re-reads 2*2048 = 4096 -> 2956 + (4096 + 384) / 2 = 5196.
    # 2 x 16: the weight twice, x twice (not resident): re-reads 2048 + 192 = 2240 -> 2956 + 2624 / 2 = 4268.
    # 1 x 32: as 1 x 16 -> 5196. Cube: 3 * 64 * 32 MACs at 4 a cycle = 1536 s.
    f = gmm_schedule_floor("gmm_multi_layer", [3, 0], H=32, I=64, device=TOY, l0c_bytes=128, l1_bytes=64)
    assert (f["tm"], f["tn"]) == (2, 16)
    assert f["memory_s"] == pytest.approx(4268.0)
    assert f["cube_s"] == pytest.approx(1536.0)
    assert f["floor_s"] == pytest.approx(4268.0) and f["limit"] == "memory"
    assert f["hbm_bytes"] == 2956 and f["l2_bytes"] == 2624
    # At the L2 range's high end (4 B/s) the same shape wins: 2956 + 2624 / 4 = 3612 (1 x 16: 2956 + 4480 / 4).
    hi = gmm_schedule_floor("gmm_multi_layer", [3, 0], H=32, I=64, device=TOY, l2="hi", l0c_bytes=128, l1_bytes=64)
    assert hi["floor_s"] == pytest.approx(3612.0) and (hi["tm"], hi["tn"]) == (2, 16)


def test_toy_w1_cube_binds_when_memory_is_fast():
    # W1 with H = K = 16, I = 16 (N = 32), 4 rows; fast memory makes the cube's 4 * 16 * 32 / 4 = 512 s bind.
    fast = dict(TOY, hbm_bytes_per_s_die=1e9, l2_bytes_per_s_die_lo=1e9)
    f = gmm_schedule_floor("gmm_swiglu_quant_multi_layer", [4], H=16, I=16, device=fast)
    assert f["limit"] == "cube" and f["floor_s"] == pytest.approx(512.0)


def _device():
    # A3-like rates (docs/twin.md's constants table) for the property below; the floor's claim holds for any rates.
    return {"hbm_bytes_per_s_die": 1.6e12, "l2_bytes_per_s_die_lo": 3.2e12, "l2_bytes_per_s_die_hi": 6.4e12,
            "aic_per_die": 24, "cube_int8_macs_per_cycle": 8192, "core_clock_hz": 1.8e9,
            "link_bytes_per_s_rank": 1.96e11}


@pytest.mark.parametrize("op", ["gmm_swiglu_quant_multi_layer", "gmm_multi_layer"])
def test_floor_is_never_below_the_ops_bound(op):
    """The floor moves every byte the bound counts (and more), so it is never below the bound."""
    rng = random.Random(5)
    dev = _device()
    for _ in range(6):
        groups = [rng.choice([0, rng.randint(1, 600)]) for _ in range(rng.randint(1, 8))]
        H, I = rng.choice([(7168, 2048), (4096, 1024), (512, 256)])
        f = gmm_schedule_floor(op, groups, H=H, I=I, device=dev)
        b = op_bound(op, tokens=sum(groups), H=H, I=I, E=len(groups), K=1, F=1, rows=sum(groups), pairs=sum(groups),
                     pairs_total=sum(groups), active_experts=sum(1 for g in groups if g), device=dev)
        assert f["floor_s"] >= b["bound_s"] * (1 - 1e-12), (groups, H, I, f, b)


def test_more_rows_per_expert_than_one_tile_holds_cost_a_weight_reread():
    # One expert: 100 rows fit one tile (a single weight read); 300 rows need at least two row tiles at L0C's cap.
    dev = _device()
    small = gmm_schedule_floor("gmm_multi_layer", [100], H=7168, I=2048, device=dev)
    big = gmm_schedule_floor("gmm_multi_layer", [300], H=7168, I=2048, device=dev)
    weight = 2048 * 7168
    assert small["l2_bytes"] < weight <= big["l2_bytes"]


@pytest.mark.parametrize("kwargs, match", [
    ({"op": "dispatch_send"}, "op"),
    ({"l2": "mid"}, "l2"),
    ({"group_rows": [3, -1]}, "group_rows"),
    ({"H": 0}, "H"),
    ({"l0c_bytes": 32}, "l0c_bytes"),
])
def test_bad_arguments_are_named(kwargs, match):
    args = {"op": "gmm_multi_layer", "group_rows": [3], "H": 32, "I": 64, "device": TOY}
    args.update(kwargs)
    op = args.pop("op")
    rows = args.pop("group_rows")
    with pytest.raises(ValueError, match=match):
        gmm_schedule_floor(op, rows, **args)


def test_predict_prints_each_gmm_floor_beside_its_bound(capsys):
    """cam-bench predict's report: one row per GMM op with its schedule floor, the floor's best tile and the
    prediction's ratio to it, and the chain with W1 and W2 at their floors; a record without floors prints none."""
    from cam.bench import predict

    def op(pred_s, bound_s, floor=None):
        cost = {"predicted_s": pred_s, "block_dim": 24, "critical_core_busy_fraction": {"M": 0.5},
                "critical_pipe": "M", "stalls_s": {}}
        o = {"l2_lo": cost, "l2_hi": cost, "bound": {"bound_s": bound_s, "limit": "cube", "link_bytes": 0},
             "ratio_lo": pred_s / bound_s}
        if floor is not None:
            o["schedule_floor"] = {"lo": {"floor_s": floor, "tm": 145, "tn": 224, "limit": "memory"}}
            o["ratio_floor_lo"] = pred_s / floor
        return o

    def record(with_floors):
        ops = {"gmm_swiglu_quant_multi_layer": op(3e-3, 1e-3, 2e-3 if with_floors else None),
               "gmm_multi_layer": op(1e-3, 0.5e-3, 0.8e-3 if with_floors else None)}
        chain = {"predicted_s_l2_lo": 4e-3, "predicted_s_l2_hi": 4e-3, "bound_s": 1.5e-3}
        if with_floors:
            chain["floor_gmm_schedules_s"] = 2.8e-3
        return {"routing": "uniform", "shape": {"K": 8}, "rounds": [
            {"tokens": 8, "wall_s": 1.0, "ffn_rank_rows": 8, "devices": {"a3": {"ops": ops, "ffn_chain": chain}}}]}

    predict.print_prediction(record(True), "a3")
    out = capsys.readouterr().out
    w1 = next(line for line in out.splitlines() if line.startswith("gmm_swiglu_quant_multi_layer schedule floor"))
    assert "tile 145x224" in w1 and "2000.0" in w1 and "1.50" in w1 and "memory" in w1
    w2 = next(line for line in out.splitlines() if line.startswith("gmm_multi_layer schedule floor"))
    assert "800.0" in w2 and "1.25" in w2
    chain = next(line for line in out.splitlines() if line.startswith("FFN chain floor (W1, W2 schedule floors)"))
    assert "2800.0" in chain and "1.4" in chain
    predict.print_prediction(record(False), "a3")
    assert "schedule floor" not in capsys.readouterr().out
