"""cam-sim's row budget is the serving path's: the simulated deployment is checked with ServePolicy's rule (C's,
docs/protocol.md §6.2: a budget holds one work item, recv_rows = min(capacity, P * min(Bmax, window) * K) rows)
and refused by the flag's name where cam-ffn would refuse it; cam-sim prints progress on a long run only."""

import math

import numpy as np
import pytest

from cam.sim import CostModel, ModelShape, OpCost, SimTopology, SimWorkload, simulate
from cam.sim import cli as sim_cli


def _shape(top_k):
    return ModelShape(layers=2, first_dense=0, hidden=64, experts=8, top_k=top_k, moe_intermediate=8,
                      shared_experts=0, shared_intermediate=0, dense_intermediate=8, attn_params=0, attn_pair_flops=0)


def _item_rows(capacity, P, step_tokens, K):
    """One work item's rows, by hand: Bmax is the largest step's tokens per participant, the window Bmax."""
    worst = P * math.ceil(step_tokens / P) * K
    return worst if capacity is None else min(capacity, worst)


@pytest.mark.parametrize("P,capacity,budget_tokens,K", [(1, None, 100, 1), (1, None, 40, 3), (2, None, 41, 2),
                                                      (1, 50, 100, 2), (3, 7, 64, 4), (2, 1000, 30, 2)])
def test_the_simulator_refuses_exactly_the_budgets_the_serving_path_refuses(P, capacity, budget_tokens, K):
    m = _shape(K)
    c = CostModel({"w1": OpCost(fixed_s=0.01, per_row_s=1e-4)}, name="test")
    wl = SimWorkload(np.array([0.0, 0.0]), np.array([5, 9]), np.array([0, 1]), token_budget=budget_tokens)
    topo = SimTopology(D=2, F=2, P=P, capacity=capacity)
    rows = _item_rows(capacity, P, budget_tokens, K)
    for budget in (rows - 1, rows, rows + 1):
        if budget < rows:
            with pytest.raises(ValueError, match=f"batch_rows = {budget} is below one work item's rows"):
                simulate(m, topo, wl, c, batch_rows=budget)
        else:
            assert simulate(m, topo, wl, c, batch_rows=budget)["launches"] >= 1


def test_a_prompt_longer_than_the_budget_sizes_bmax_unless_chunked():
    # Unchunked, a 30-token prompt runs alone in a 30-token step (Bmax 30); chunked, the step is the budget (10).
    m, c = _shape(1), CostModel({"w1": OpCost(fixed_s=0.01)}, name="test")
    topo = SimTopology(D=1, F=1)
    whole = SimWorkload(np.array([0.0]), np.array([30]), np.array([0]), token_budget=10)
    chunked = SimWorkload(np.array([0.0]), np.array([30]), np.array([0]), token_budget=10, chunked=True)
    with pytest.raises(ValueError, match="below one work item's rows"):
        simulate(m, topo, whole, c, batch_rows=10)
    assert simulate(m, topo, chunked, c, batch_rows=10)["launches"] >= 1


def test_cam_sim_refuses_the_row_budget_by_the_flag_typed_and_says_what_holds(capsys):
    # DeepSeek-V3 (top-8), 16384-token steps, no capacity: one work item is 131072 rows, above the default 8192.
    base = ["--batch-items", "--requests", "4", "-D", "2", "-F", "2", "--quiet"]
    assert sim_cli.main(base) == 2
    err = capsys.readouterr().err
    assert "--row-budget 8192 (D=2 F=2) is below one work item's rows" in err, err
    assert "capacity <= 8192" in err and ">= 131072" in err, err
    assert sim_cli.main(base + ["--batch-rows", "4096"]) == 2
    err = capsys.readouterr().err
    assert "--batch-rows 4096 (D=2 F=2)" in err and "deprecated" in err, err
    assert sim_cli.main(base + ["--capacity", "8192"]) == 0
    assert sim_cli.main(base + ["--row-budget", "131072"]) == 0


def test_cam_sim_prints_progress_on_a_long_run_and_nothing_on_a_short_one(capsys, monkeypatch):
    argv = ["--model", "tiny", "-D", "2", "-F", "2", "--requests", "8", "--mean-len", "64", "--costs", "twin-cpu",
            "--mode", "all", "--loads", "1.0", "--slo", "0.005", "--sustain", "0.5"]
    assert sim_cli.main(argv) == 0
    assert "cam-sim: [" not in capsys.readouterr().err  # well under PROGRESS_AFTER_S
    # The same run, as if each simulation took longer than the thresholds: the bisection and every run say so.
    monkeypatch.setattr(sim_cli, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(sim_cli, "PROGRESS_EVERY_S", 0.0)
    assert sim_cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "sustained rate (N=4 DP4xTP1): its closed batch" in err, err
    assert "run 1/3: async D=2 F=2" in err and "run 3/3: colocated N=4 DP4xTP1" in err, err
    assert sim_cli.main(argv + ["--quiet"]) == 0
    assert "cam-sim: [" not in capsys.readouterr().err
