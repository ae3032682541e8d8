"""Bad input around a rebalance's objects, each refused naming the argument before anything is built: LayerWeights
scales (NaN, inf, negative), Placement indices (float, bool) and counts (F = 0), slot_experts out of range, and
quantize_weight's input (empty K, float8, a column too small for a normal fp32 scale)."""

from __future__ import annotations

import pytest
import torch

import cam
from cam.placement import Placement, PlacementError


def _weights(scales):
    return cam.LayerWeights([torch.ones(2, 16, 32, dtype=torch.int8)], [scales])


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), -0.5])
def test_layer_weights_refuse_a_scale_that_is_not_finite_and_non_negative(bad):
    s = torch.full((2, 32), 0.25)
    s[1, 7] = bad
    with pytest.raises(ValueError, match=r"scales\[0\] must be finite and >= 0, got .* at \[1, 7\]"):
        _weights(s)


def test_layer_weights_accept_zero_and_positive_scales():
    s = torch.full((2, 32), 0.25)
    s[0] = 0.0  # an empty slot
    assert _weights(s).num_experts == 2


@pytest.mark.parametrize("f, j, what", [(0.0, 0, "FFN index is 0.0"), (1.7, 0, "FFN index is 1.7"),
                                        (True, 0, "FFN index is the bool True"), (0, 1.0, "slot is 1.0"),
                                        (0, False, "slot is the bool False")])
def test_placement_refuses_a_float_or_bool_index(f, j, what):
    with pytest.raises(PlacementError, match=f"layer 0 expert 1 has a replica whose {what}"):
        Placement(2, 2, 2, [[[(0, 0)], [(f, j)]]])


def test_placement_takes_integer_indices_of_any_integer_type():
    import numpy as np

    p = Placement(2, 2, 1, [[[(np.int64(0), torch.tensor(0))], [(1, 0)]]])
    assert p.replicas(0, 0) == ((0, 0),) and type(p.replicas(0, 0)[0][0]) is int


@pytest.mark.parametrize("kw, name", [(dict(experts=4, ffn_ranks=0, layers=1), "ffn_ranks"),
                                      (dict(experts=0, ffn_ranks=2, layers=1), "experts"),
                                      (dict(experts=4, ffn_ranks=2, layers=0), "layers"),
                                      (dict(experts=4, ffn_ranks=2.0, layers=1), "ffn_ranks"),
                                      (dict(experts=4, ffn_ranks=2, layers=1, slots_per_rank=0), "slots_per_rank")])
def test_balanced_refuses_a_count_below_one(kw, name):
    with pytest.raises(PlacementError, match=f"Placement.balanced: {name} must be an int >= 1"):
        Placement.balanced(**kw)


def test_balanced_refuses_a_replicate_entry_that_is_not_an_expert_id():
    with pytest.raises(PlacementError, match="replicate must hold expert ids"):
        Placement.balanced(4, 2, 1, replicate=[1.0])


def test_contiguous_refuses_zero_ffn_ranks():
    with pytest.raises(PlacementError, match="Placement.contiguous: ffn_ranks must be an int >= 1"):
        Placement.contiguous(4, 0, 1)


@pytest.mark.parametrize("layer, f, name", [(0, 7, "ffn_index"), (0, -1, "ffn_index"), (0, 1.0, "ffn_index"),
                                            (3, 0, "layer"), (-1, 0, "layer")])
def test_slot_experts_refuses_an_index_out_of_range(layer, f, name):
    p = Placement.balanced(3, 2, 2)
    with pytest.raises(ValueError, match=f"slot_experts: {name} must be an int in"):
        p.slot_experts(layer, f)
    assert p.slot_experts(0, 1) == [1, -1]


def test_quantize_weight_refuses_an_empty_dimension():
    for shape in ((2, 0, 4), (0, 3, 4), (2, 3, 0)):
        with pytest.raises(ValueError, match=r"weight must be \[E, K, N\] with E, K, N >= 1"):
            cam.quantize_weight(torch.zeros(shape))


def test_quantize_weight_refuses_float8_and_integer_input():
    w = torch.rand(1, 4, 4)
    for dtype in [d for d in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)) if d]:
        with pytest.raises(TypeError, match=f"weight must be float16, bfloat16, float32 or float64, got {dtype}"):
            cam.quantize_weight(w.to(dtype))
    with pytest.raises(TypeError, match="weight must be float16"):
        cam.quantize_weight(torch.ones(1, 4, 4, dtype=torch.int8))
    with pytest.raises(TypeError, match="weight must be a torch.Tensor"):
        cam.quantize_weight([[[1.0]]])


@pytest.mark.parametrize("tiny", [1e-45, 1e-40, 1e-37, 1e-50])
def test_quantize_weight_refuses_a_column_too_small_for_a_normal_scale(tiny):
    """A denormal (or, in float64, an fp32-underflowing) column would get a zero or subnormal scale and break
    |q * scale - w| <= scale / 2; refused naming the column. A tiny value in a column with a normal largest value
    is fine, and so is an all-zero column."""
    dtype = torch.float64 if tiny < 1e-45 else torch.float32
    w = torch.zeros(2, 3, 4, dtype=dtype)
    w[1, 2, 3] = tiny
    with pytest.raises(ValueError, match=r"weight column \[1, :, 3\] has largest magnitude"):
        cam.quantize_weight(w)
    w[1, 0, 3] = 1.0
    q, s = cam.quantize_weight(w)
    assert (s > 0).sum() == 1 and (cam.dequantize_weight(q, s) - w.float()).abs().max() <= s.max() / 2
