"""dynamic_quant: the Ascend C kernel on the twin must equal the golden bit for bit (docs/numerics.md)."""

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

import cam
from cam import _C
from cam._runtime import run
from cam._tensor import desc

DTYPES = [torch.bfloat16, torch.float16]


def assert_exact(x: torch.Tensor) -> None:
    q, scale = cam.ops.dynamic_quant(x)
    q_ref, scale_ref = cam.reference.dynamic_quant(x)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32
    assert q.shape == x.shape and scale.shape == (x.shape[0],)
    assert torch.equal(q, q_ref), f"q differs in {(q != q_ref).sum().item()} elements"
    # Bit equality of the scales; a NaN scale must be NaN in both, its payload is unspecified (docs/numerics.md).
    nan = torch.isnan(scale)
    assert torch.equal(nan, torch.isnan(scale_ref))
    assert torch.equal(scale[~nan].view(torch.int32), scale_ref[~nan].view(torch.int32))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "rows,cols",
    [
        (0, 64),
        (1, 1),
        (1, 16),
        (5, 300),  # H not a multiple of the 32-byte alignment
        (33, 7168),  # more rows than blocks, DeepSeek hidden size
        (3, 12289),  # just past one UB pass of the default platform
        (2, 40000),  # several UB passes per row
    ],
)
def test_matches_golden(dtype, rows, cols):
    torch.manual_seed(rows * 100003 + cols)
    assert_exact(torch.randn(rows, cols, dtype=dtype) * 3)


def test_readme_example():
    x = torch.randn(5, 300, dtype=torch.bfloat16)
    q, s = cam.ops.dynamic_quant(x)
    q_ref, s_ref = cam.reference.dynamic_quant(x)
    assert torch.equal(q, q_ref) and torch.equal(s, s_ref)


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_rows_give_zero_scale(dtype):
    x = torch.randn(6, 100, dtype=dtype)
    x[1] = 0
    x[4] = -0.0
    q, scale = cam.ops.dynamic_quant(x)
    assert torch.all(q[1] == 0) and torch.all(q[4] == 0)
    assert scale[1].item() == 0 and scale[4].item() == 0
    assert_exact(x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_extreme_magnitudes(dtype):
    info = torch.finfo(dtype)
    rows = [
        torch.full((64,), info.max),
        torch.linspace(-1, 1, 64) * info.max,
        torch.full((64,), info.tiny),  # smallest normal
        torch.full((64,), info.tiny / 4),  # subnormal
        torch.tensor([1e-37] * 8 + [0.0] * 56),  # amax normal in fp32, 127/amax overflows (bf16 only)
        torch.tensor([3e-37, -1e-37] * 32),
        torch.tensor([1.0] + [1e-30] * 63),
    ]
    x = torch.stack(rows).to(dtype)
    assert_exact(x)
    q, scale = cam.ops.dynamic_quant(x)
    assert q[0].eq(127).all() and q[1, 0] == -127 and q[1, -1] == 127


@pytest.mark.parametrize("dtype", DTYPES)
def test_non_finite_rows(dtype):
    """A row holding inf or NaN quantizes to 0 with a non-finite scale; other rows are untouched."""
    x = torch.randn(5, 70, dtype=dtype)
    x[0, 3] = math.inf
    x[1, 10] = -math.inf
    x[2, 5] = math.nan
    x[3, 1], x[3, 2] = math.inf, math.nan
    q, scale = cam.ops.dynamic_quant(x)
    assert torch.all(q[:4] == 0)
    assert scale[0].item() == math.inf and scale[1].item() == math.inf
    assert math.isnan(scale[2].item()) and math.isnan(scale[3].item())
    assert_exact(x)


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    rows=st.integers(0, 12),
    cols=st.integers(1, 2500),
    exponent=st.integers(-30, 30),
    seed=st.integers(0, 2**31 - 1),
)
def test_hypothesis_values(dtype, rows, cols, exponent, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, cols, generator=g) * (2.0**exponent)).to(dtype)
    assert_exact(x)


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from(DTYPES), rows=st.integers(1, 6), cols=st.integers(1, 700), seed=st.integers(0, 2**31 - 1))
def test_hypothesis_raw_bits(dtype, rows, cols, seed):
    """Every 16-bit pattern is a legal input: subnormals, infinities and NaNs included."""
    g = torch.Generator().manual_seed(seed)
    bits = torch.randint(-(2**15), 2**15, (rows, cols), generator=g, dtype=torch.int16)
    assert_exact(bits.view(dtype))


def test_tiling_at_ascend_size():
    """The same kernel tiled for a 48-core A2 description still matches (48 blocks as threads)."""
    try:
        _C.set_twin_platform("ascend910b")
        assert _C.platform()["aiv_cores"] == 48
        x = torch.randn(100, 2000, dtype=torch.bfloat16)
        assert_exact(x)
    finally:
        _C.set_twin_platform("twin")


@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda: torch.randn(4, 8), TypeError, "dynamic_quant: x must be bfloat16 or float16"),
        (lambda: torch.ones(4, 8, dtype=torch.int32), TypeError, "dynamic_quant: x must be bfloat16 or float16"),
        (lambda: torch.randn(8, dtype=torch.bfloat16), ValueError, "2-D"),
        (lambda: torch.randn(2, 4, 8, dtype=torch.bfloat16), ValueError, "2-D"),
        (lambda: torch.randn(8, 4, dtype=torch.bfloat16).t(), ValueError, "contiguous"),
        (lambda: torch.randn(3, 0, dtype=torch.bfloat16), ValueError, "at least one column"),
        (lambda: [[1.0, 2.0]], TypeError, "torch.Tensor"),
    ],
)
def test_bad_input_is_refused_before_launch(make, exc, match):
    with pytest.raises(exc, match=match):
        cam.ops.dynamic_quant(make())


def test_host_validation_names_the_argument():
    """The C API checks what the Python layer would not (here: a mis-shaped output) and names it."""
    x = torch.randn(4, 40, dtype=torch.bfloat16)
    q = torch.full((4, 41), 7, dtype=torch.int8)
    scale = torch.empty(4)
    with pytest.raises(cam.InvalidArgumentError, match=r"dynamic_quant: q must have shape \[4, 40\]"):
        run(_C.dynamic_quant, desc(x), desc(q), desc(scale))
    assert torch.all(q == 7), "nothing may be written when validation fails"
    with pytest.raises(cam.InvalidArgumentError, match="scale must be float32"):
        run(_C.dynamic_quant, desc(x), desc(q[:, :40].contiguous()), desc(scale.double()))


def test_torch_compile_fullgraph():
    x = torch.randn(7, 96, dtype=torch.float16)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def f(t):
        q, s = cam.ops.dynamic_quant(t)
        return q.float() * s[:, None]

    @torch.compile(fullgraph=True, backend="aot_eager")
    def g(t, q, s):  # static output buffers, as a captured loop uses them
        cam.ops.dynamic_quant(t, out=(q, s))
        return q.float() * s[:, None]

    expected_q, expected_s = cam.reference.dynamic_quant(x)
    expected = expected_q.float() * expected_s[:, None]
    assert torch.equal(f(x), expected)
    q, s = torch.full(x.shape, 5, dtype=torch.int8), torch.full(x.shape[:1], 5.0)
    assert torch.equal(g(x, q, s), expected)
    assert torch.equal(q, expected_q) and torch.equal(s, expected_s)


def test_out_buffers_are_written_and_returned():
    x = torch.randn(4, 40, dtype=torch.bfloat16)
    q, s = torch.full((4, 40), 9, dtype=torch.int8), torch.full((4,), 9.0)
    rq, rs = cam.ops.dynamic_quant(x, out=(q, s))
    assert rq is q and rs is s
    eq, es = cam.reference.dynamic_quant(x)
    assert torch.equal(q, eq) and torch.equal(s, es)


@pytest.mark.parametrize("out, error, match", [
    ((torch.zeros(4, 40, dtype=torch.int8),), TypeError, "out must be a tuple of 2"),
    (torch.zeros(4, 40, dtype=torch.int8), TypeError, "out must be a tuple of 2"),
    ((torch.zeros(4, 40, dtype=torch.int8), None), TypeError, r"out\[1\] must be a torch.Tensor"),
    ((torch.zeros(4, 40), torch.zeros(4)), TypeError, r"dynamic_quant: q must be int8"),
    ((torch.zeros(4, 41, dtype=torch.int8), torch.zeros(4)), ValueError, r"dynamic_quant: q must have shape \[4, 40\]"),
    ((torch.zeros(4, 40, dtype=torch.int8), torch.zeros(5)), ValueError, r"dynamic_quant: scale must have shape \[4\]"),
])
def test_bad_out_is_refused_naming_it(out, error, match):
    with pytest.raises(error, match=match):
        cam.ops.dynamic_quant(torch.randn(4, 40, dtype=torch.bfloat16), out=out)


@pytest.mark.parametrize("bad", [None, [[1.0, 2.0]], 3.0])
def test_non_tensor_input_is_a_type_error_naming_x(bad):
    with pytest.raises(TypeError, match="dynamic_quant: x must be a torch.Tensor"):
        cam.ops.dynamic_quant(bad)
