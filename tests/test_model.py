"""The reference MoE model and workloads used by the end-to-end run."""

import pytest
import torch

from cam.models import PRESETS, ModelConfig, MoEModel
from cam.run.workload import WorkloadSpec, make_workload


@pytest.fixture(scope="module")
def model():
    return MoEModel(PRESETS["tiny"])


def test_weights_are_a_function_of_the_config():
    a, b = MoEModel(PRESETS["tiny"]), MoEModel(PRESETS["tiny"])
    assert torch.equal(a.w1[0], b.w1[0]) and torch.equal(a.embed, b.embed)
    c = MoEModel(ModelConfig(seed=1))
    assert not torch.equal(a.w1[0], c.w1[0])


def test_forward_is_independent_of_batch_composition(model):
    """Requests never see each other: a prompt's states do not depend on what it is batched with, up to the fp32
    GEMM reassociation CPU BLAS applies for different row counts (~1e-6 relative), which can move a value across an
    int8 rounding boundary in the routed experts (one quant level: < 1% of a row's max)."""
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 512, (n,), generator=g) for n in (4, 11, 1)]
    together = model.forward_reference(prompts)
    for prompt, joint in zip(prompts, together):
        alone = model.forward_reference([prompt])[0]
        assert torch.isfinite(alone).all()
        diff = (alone - joint).abs()
        assert diff.max() < 0.05 and diff.mean() < 1e-3, (diff.max(), diff.mean())


def test_routed_reference_matches_a_dense_float_model(model):
    """The int8 routed experts approximate the float experts they were quantized from (sanity of the golden)."""
    g = torch.Generator().manual_seed(4)
    h = torch.randn(6, model.config.hidden, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(model.config.num_experts, generator=g)[:2] for _ in range(6)]).to(torch.int32)
    w = torch.softmax(torch.randn(6, 2, generator=g), dim=-1)
    routed = model.routed_reference(0, h, ids, w).float()
    expected = torch.zeros(6, model.config.hidden)
    for t in range(6):
        for k in range(2):
            e = int(ids[t, k])
            w1 = model.w1[0][e].float() * model.w1_scale[0][e]
            w2 = model.w2[0][e].float() * model.w2_scale[0][e]
            a, gate = (h[t].float() @ w1).chunk(2)
            expected[t] += w[t, k] * ((torch.nn.functional.silu(a) * gate) @ w2)
    # Two int8 activation quantizations (x and the SwiGLU output): ~1% relative error per element.
    assert torch.allclose(routed, expected, atol=0.05 * expected.abs().max().item(), rtol=0.05)


@pytest.mark.parametrize("bad", [dict(hidden=130), dict(top_k=9), dict(first_dense_layers=5), dict(num_experts=0)])
def test_bad_config(bad):
    with pytest.raises(ValueError):
        ModelConfig(**bad)


def test_workload_batches_depend_on_the_seed_only():
    spec = WorkloadSpec(num_requests=10, max_batch_tokens=40, skew=2.0, seed=5)
    a, b = make_workload(spec, 3, 512), make_workload(spec, 3, 512)
    assert a.batches == b.batches
    assert sorted(r for rep in a.batches for batch in rep for r in batch) == list(range(10))
    for rep in a.batches:
        for batch in rep:
            total = sum(a.requests[r].tokens.numel() for r in batch)
            assert total <= 40 or len(batch) == 1
    lengths = [sum(a.requests[r].tokens.numel() for r in range(10) if a.requests[r].replica == d) for d in range(3)]
    assert lengths[2] > lengths[0], "skew makes the last replica's prompts longer"
