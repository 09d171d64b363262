"""GPU elementwise unary ops (kernels_glsl/elementwise.glsl) against the numpy reference, in every
precision: every op code, LEAKY_RELU's alpha, GELU's two forms, PRELU's slope as a constant of
every broadcast shape or a runtime tensor, on shapes with padded channels, batches, 1x1 and rank 0-4."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gpu.gpulib import PRECISIONS, check_gpu
from tests.oplib import In
from tests.tolerance import F16_U, F16_ULPS, F32_U, F32_ULPS

OPS = ["RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LOGISTIC", "TANH", "EXP", "LOG", "SQRT", "RSQRT",
       "ABS", "NEG", "SQUARE", "SIGN", "HARD_SWISH", "ELU", "SIN", "COS", "FLOOR", "CEIL", "ROUND"]
# Periodic ops: the GPU reduces the argument in its float precision, so the error grows with |x|.
PERIODIC = ("SIN", "COS")
SHAPES = [(1, 5, 6, 7), (2, 3, 4, 1), (1, 1, 1, 9), (3, 8), (13,), ()]


def sample(op, rng, shape):
    """Inputs in the op's domain: positive for LOG / SQRT / RSQRT, |x| < 5 for EXP (its result
    fits half floats), else spread over the clamps and the curved parts (|x| up to ~12, about
    four periods of SIN / COS)."""
    x = rng.normal(0, 4, shape).astype(np.float32)
    if op in ("LOG", "SQRT", "RSQRT"):
        return np.abs(x) + np.float32(0.01)
    if op == "EXP":
        return np.clip(x, np.float32(-5), np.float32(5))  # float32 bounds: numpy 1.x promotes to float64
    if op in ("FLOOR", "CEIL", "ROUND"):
        # Every third value a half or an integer: where the rounding rules differ.
        return np.where(np.arange(x.size).reshape(x.shape) % 3 == 0, np.round(x * 2) / 2, x).astype(np.float32)
    return x


def argument_allowance(op, x, precision):
    """What sin / cos of x may lose on a GPU on top of tolerance(): the error of reducing x
    into one period in the shader's precision, as many of its ulps at |x| as tolerance() allows
    at the output (128 float32, 10 half ulps), so about 8e-6 |x| in FP32 and 5e-3 |x| in FP16."""
    if op not in PERIODIC:
        return 0.0
    return np.abs(x) * (F32_ULPS * F32_U if precision == "fp32" else F16_ULPS * F16_U)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", OPS)
def test_unary(op, precision):
    rng = np.random.default_rng(sum(map(ord, op)))
    for shape in SHAPES:
        x = sample(op, rng, shape)
        check_gpu(op, [In(x)], {}, precision, extra=argument_allowance(op, x, precision))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", ["TANH", "ELU", "GELU"])
@pytest.mark.parametrize("scale", [1e-2, 1e-4, 1e-6])
def test_small_arguments_keep_relative_precision(op, scale, precision):
    """Near 0 tanh(x) and exp(x) - 1 are about x, and TFLite's std::tanh / std::expm1 keep them
    to float precision relative to x; built from exp they carry exp's absolute error (about 6e-8,
    5.7e-4 of tanh(1e-4): found by gles-fuzz-graphs seed 3), far over the tolerance of an output
    that small."""
    x = (np.random.default_rng(3).uniform(-1, 1, (1, 3, 4, 10)) * scale).astype(np.float32)
    check_gpu(op, [In(x)], {}, precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("approximate", [False, True])
def test_gelu(approximate, precision):
    rng = np.random.default_rng(int(approximate))
    for shape in [(1, 4, 5, 6), (2, 9)]:
        # Far tails included: exact GELU there is 0.5 x erfc(-x / sqrt 2), tiny but not 0.
        x = rng.normal(0, 4, shape).astype(np.float32)
        check_gpu("GELU", [In(x)], {"approximate": approximate}, precision)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_approximate_gelu_of_negative_arguments_keeps_relative_precision(precision):
    """For x < -1 the tanh form's 1 + tanh(z) cancels: in half math (precision 'fp16') it kept
    an absolute error of about a half ulp of 1, 1.7e-2 of the largest output of a GELU of
    LOG_SOFTMAX values (gles-fuzz-graphs seed 122 case 299). x * sigmoid(2z), its equal, does
    not cancel."""
    x = np.random.default_rng(122).uniform(-4.5, -1.0, (1, 2, 3, 16)).astype(np.float32)
    check_gpu("GELU", [In(x)], {"approximate": True}, precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("alpha", [0.2, 0.0, -1.5, 3.0])
def test_leaky_relu(alpha, precision):
    x = np.random.default_rng(7).normal(0, 3, (2, 3, 4, 5)).astype(np.float32)
    check_gpu("LEAKY_RELU", [In(x)], {"alpha": alpha}, precision)


PRELU_CASES = [  # (input shape, alpha shape, alpha constant)
    ((1, 6, 6, 8), (1, 1, 8), True),     # MediaPipe: one slope per channel
    ((1, 5, 4, 7), (7,), True),
    ((2, 3, 4, 5), (2, 3, 4, 5), True),  # a slope per element
    ((1, 3, 3, 6), (1,), True),          # one slope for every channel
    ((2, 3, 4, 5), (3, 1, 5), True),
    ((2, 3, 4, 5), (3, 1, 5), False),    # slope computed at run time
    ((3, 10), (10,), False),
]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("x_shape,alpha_shape,const", PRELU_CASES)
def test_prelu(x_shape, alpha_shape, const, precision):
    rng = np.random.default_rng(len(x_shape) + len(alpha_shape))
    x = rng.normal(0, 3, x_shape).astype(np.float32)
    alpha = rng.uniform(-0.5, 1.5, alpha_shape).astype(np.float32)
    check_gpu("PRELU", [In(x), In(alpha, const=const)], {}, precision)


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(OPS + ["GELU", "LEAKY_RELU"]), st.lists(st.integers(1, 9), min_size=1, max_size=4),
       st.sampled_from(PRECISIONS), st.integers(0, 2 ** 31))
def test_unary_random_shapes(op, shape, precision, seed):
    rng = np.random.default_rng(seed)
    options = {"GELU": {"approximate": bool(seed % 2)}, "LEAKY_RELU": {"alpha": 0.1}}.get(op, {})
    x = sample(op, rng, tuple(shape))
    check_gpu(op, [In(x)], options, precision, extra=argument_allowance(op, x, precision))

