"""GPU SOFTMAX and LOG_SOFTMAX (kernels_glsl/softmax.glsl) against the numpy reference, in every
precision: rank 1 to 4, classification logits ([1, 1001]) and per-pixel softmax, channels that are
not a multiple of 4 (padded lanes must stay out of the max and the sum), beta, logits whose exp
overflows without the max subtracted, and both variants (one invocation or one workgroup a pixel)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gpu.gpulib import PRECISIONS, check_gpu, dispatches
from tests.oplib import In

OPS = ["SOFTMAX", "LOG_SOFTMAX"]
CASES = [  # (shape, variant)
    ((1, 1001), "parallel"),     # classification logits
    ((3, 70), "parallel"),       # a few rows, padded lanes in the last slice
    ((1, 16, 16, 21), "loop"),   # per-pixel (segmentation)
    ((1, 100, 100, 70), "loop"),  # many channels but too many pixels for a workgroup each
    ((2, 3, 4, 5), "loop"),
    ((2, 4, 130), "parallel"),
    ((1, 1, 1, 1), "loop"),      # one channel: all ones (zeros for LOG_SOFTMAX)
    ((7,), "loop"),
]


def options(op, beta):
    return {"beta": beta} if op == "SOFTMAX" else {}


@pytest.mark.parametrize("shape,expected", CASES)
def test_cases_cover_both_variants(shape, expected):
    (d,) = dispatches("SOFTMAX", [In(np.zeros(shape, np.float32))], {"beta": 1.0})
    assert d.template == "softmax" and bool(d.defines["PARALLEL"]) == (expected == "parallel")


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape,expected", CASES)
@pytest.mark.parametrize("op", OPS)
def test_softmax(op, shape, expected, precision):
    x = np.random.default_rng(sum(shape)).normal(0, 3, shape).astype(np.float32)
    check_gpu(op, [In(x)], options(op, 1.0), precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("beta", [0.5, 2.0, 0.0])
@pytest.mark.parametrize("shape", [(1, 1001), (1, 5, 5, 10)])
def test_softmax_beta(shape, beta, precision):
    x = np.random.default_rng(int(beta * 10)).normal(0, 2, shape).astype(np.float32)
    check_gpu("SOFTMAX", [In(x)], {"beta": beta}, precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape", [(1, 1001), (1, 4, 4, 9)])
@pytest.mark.parametrize("op", OPS)
def test_large_logits(op, shape, precision):
    """exp(x) overflows float for x > 88 and half floats for x > 11: only exp(x - max) is safe.
    Half floats hold x in [10, 16) to 2^-7, so the half-storage modes see the same values."""
    rng = np.random.default_rng(1)
    if precision == "fp32":
        x = rng.uniform(200, 300, shape)
    else:
        x = 10 + rng.integers(0, 6 * 128, shape) / 128
    check_gpu(op, [In(x.astype(np.float32))], options(op, 1.0), precision)


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(OPS), st.lists(st.integers(1, 9), min_size=1, max_size=3), st.integers(1, 300),
       st.sampled_from(PRECISIONS), st.integers(0, 2 ** 31))
def test_softmax_random(op, outer, channels, precision, seed):
    x = np.random.default_rng(seed).normal(0, 3, tuple(outer) + (channels,)).astype(np.float32)
    check_gpu(op, [In(x)], options(op, 1.0), precision)
