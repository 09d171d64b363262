"""GPU reductions (kernels_glsl/reduce.glsl) against the numpy reference, in every precision: every
op over spatial, channel, batch and mixed axes, with and without keep_dims, in each of the
template's three variants (a loop per output, a workgroup per output, a gather into another
layout), and sums that would overflow half-float accumulators."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gpu.gpulib import PRECISIONS, check_gpu, dispatches
from tests.oplib import In

OPS = ["MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"]

CASES = [  # (x shape, axes, keep_dims, variant)
    ((1, 7, 7, 1280), [1, 2], False, "parallel"),  # MobileNet v2's global mean
    ((1, 72, 128, 16), [1, 2], True, "parallel"),  # selfie segmentation's squeeze-excite means
    ((2, 9, 16, 30), [2, 1], False, "parallel"),   # batch 2, padded channels
    ((1, 1, 1, 5), [1, 2], True, "loop"),          # 1x1 spatial
    ((2, 5, 6, 7), [3], True, "loop"),             # channels: padded lanes must not count
    ((1, 4, 4, 300), [-1], True, "parallel"),      # many channels
    ((1, 100, 100, 80), [3], True, "loop"),        # too many outputs for a workgroup each
    ((2, 5, 6, 7), [3], False, "gather"),          # [2, 5, 6]: the output's channels were W
    ((3, 4, 5, 6), [0], False, "loop"),            # batch
    ((2, 5, 6, 9), [1], False, "gather"),          # [2, 6, 9]: H dropped, batch becomes H
    ((2, 5, 6, 9), [1, 1, -3], True, "loop"),      # duplicated axes
    ((2, 5, 6, 9), [2, 3], True, "parallel"),      # W and channels: two runs in memory
    ((2, 5, 6, 9), [0, 2], False, "gather"),       # batch and W: two runs, [5, 9]
    ((2, 3, 40, 9), [0, 1, 2, 3], False, "parallel"),  # everything, to a scalar
    ((3, 9), [1], False, "gather"),
    ((4, 300), [0], False, "loop"),
    ((2, 3, 4), [0, 2], True, "loop"),
    ((13,), [0], False, "loop"),
]


def sample(op, rng, shape):
    """Random inputs; for REDUCE_PROD, values 1 + k / 1024 (|k| <= 8) that half floats hold exactly,
    so products of thousands of them stay in range and half storage adds no input error."""
    if op == "REDUCE_PROD":
        return (1 + rng.integers(-8, 9, shape) / 1024).astype(np.float32)
    return rng.normal(0, 3, shape).astype(np.float32)


def reduce_inputs(x, axes):
    return [In(x), In(np.asarray(axes, np.int32), const=True)]


def variant(d):
    return "parallel" if d.defines.get("PARALLEL") else "gather" if d.defines.get("GATHER") else "loop"


def test_cases_cover_every_variant():
    """Each case runs the variant it names, and the cases also cover two runs of elements and
    the masking of padded channels (max, min and product over channels)."""
    seen = set()
    for x_shape, axes, keep_dims, expected in CASES:
        x = np.zeros(x_shape, np.float32)
        (d,) = dispatches("REDUCE_MAX", reduce_inputs(x, axes), {"keep_dims": keep_dims})
        assert d.template == "reduce" and variant(d) == expected, (x_shape, axes)
        seen |= {(variant(d), f"RUNS {d.defines['RUNS']}", f"MASK_C {d.defines['MASK_C']}")}
    assert {"RUNS 2", "MASK_C 1"} <= {item for key in seen for item in key[1:]}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("x_shape,axes,keep_dims,expected", CASES)
@pytest.mark.parametrize("op", OPS)
def test_reduce(op, x_shape, axes, keep_dims, expected, precision):
    x = sample(op, np.random.default_rng(sum(x_shape)), x_shape)
    check_gpu(op, reduce_inputs(x, axes), {"keep_dims": keep_dims}, precision)


@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32acc"])
@pytest.mark.parametrize("x_shape", [(1, 64, 64, 3), (1, 5, 5, 3)])
def test_mean_near_half_limit(x_shape, precision):
    """Values near 60000: a half-float sum overflows after two of them."""
    x = np.random.default_rng(0).uniform(50000, 60000, x_shape).astype(np.float32)
    check_gpu("MEAN", reduce_inputs(x, [1, 2]), {"keep_dims": True}, precision)
    check_gpu("MEAN", reduce_inputs(x, [3]), {"keep_dims": True}, precision)


@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32acc"])
@pytest.mark.parametrize("size", [32, 6])
def test_sum_with_partial_sums_beyond_half_range(size, precision):
    """+-60000 (exact in half floats) that cancel: the running sums reach millions, the result is
    small. Channel 1 holds small integers, so the result is not all zero."""
    x = np.zeros((1, size, size, 2), np.float32)
    x[:, : size // 2, :, 0], x[:, size // 2:, :, 0] = 60000, -60000
    x[..., 1] = np.random.default_rng(size).integers(0, 4, (1, size, size))
    check_gpu("SUM", reduce_inputs(x, [1, 2]), {"keep_dims": False}, precision)


def with_nonfinite(x, rng):
    """x with NaN (every row's last element in some rows: the NaN that survives LiteRT's scan)
    and -inf / +inf scattered, and one row all -inf (the result is then LiteRT's start value,
    -FLT_MAX for REDUCE_MAX, not -inf)."""
    x = x.copy()
    x.reshape(-1, x.shape[-1])[0] = -np.inf
    x[rng.random(x.shape) < 0.05] = np.inf
    x[rng.random(x.shape) < 0.05] = -np.inf
    x[rng.random(x.shape) < 0.1] = np.nan
    x[..., -1][rng.random(x.shape[:-1]) < 0.3] = np.nan
    return x


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("x_shape,axes,keep_dims,expected", CASES)
@pytest.mark.parametrize("op", ["REDUCE_MAX", "REDUCE_MIN"])
def test_max_min_with_nan(op, x_shape, axes, keep_dims, expected, precision):
    """LiteRT's scan in row-major order (ops/reduce.py): a NaN is replaced by the next element,
    so only a NaN last in its run survives. GLSL's max / min on NaN are undefined (llvmpipe
    skipped every NaN), and the kernel visits elements in its own order; every variant."""
    rng = np.random.default_rng(sum(x_shape) + len(axes))
    x = with_nonfinite(sample(op, rng, x_shape), rng)
    check_gpu(op, reduce_inputs(x, axes), {"keep_dims": keep_dims}, precision)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_max_with_nan_rows(precision):
    """[[1, nan, 3, 2], [nan, -1, -5, nan]] over the last axis: LiteRT gives [3, nan] (the GPU
    gave [3, -1])."""
    x = np.array([[1, np.nan, 3, 2], [np.nan, -1, -5, np.nan]], np.float32)
    reference, _ = check_gpu("REDUCE_MAX", reduce_inputs(x, [1]), {"keep_dims": False}, precision)
    np.testing.assert_array_equal(reference[0], [3, np.nan])


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(OPS), st.lists(st.integers(1, 9), min_size=1, max_size=4), st.booleans(),
       st.sampled_from(PRECISIONS), st.integers(0, 2 ** 31))
def test_reduce_random(op, shape, keep_dims, precision, seed):
    rng = np.random.default_rng(seed)
    axes = rng.integers(-len(shape), len(shape), int(rng.integers(1, len(shape) + 2)))
    check_gpu(op, reduce_inputs(sample(op, rng, tuple(shape)), axes), {"keep_dims": keep_dims}, precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("x_shape,axes,keep_dims,expected", CASES)
@pytest.mark.parametrize("op", ["REDUCE_ALL", "REDUCE_ANY"])
def test_bool_reductions(op, x_shape, axes, keep_dims, expected, precision):
    """REDUCE_ALL / REDUCE_ANY of bool tensors in every variant, exactly: the op's neutral value
    everywhere (true for ALL) but a few elements, so that both answers occur where there are
    several outputs; padded channels never count."""
    rng = np.random.default_rng(sum(x_shape))
    neutral = op == "REDUCE_ALL"
    x = np.full(x_shape, neutral)
    outputs = np.prod([d for k, d in enumerate(x_shape) if k not in {a % len(x_shape) for a in axes}], dtype=int)
    x.reshape(-1)[rng.choice(x.size, max(1, outputs // 2), replace=False)] = not neutral
    reference, gpu = check_gpu(op, reduce_inputs(x, axes), {"keep_dims": keep_dims}, precision,
                               output_dtypes=[np.bool_])
    assert gpu[0].dtype == np.bool_ and np.array_equal(gpu[0], reference[0])
    assert len(set(reference[0].reshape(-1).tolist())) == min(2, outputs), "both answers occur"
