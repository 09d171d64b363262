"""L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION reference kernels (ops/normalization.py)
against LiteRT's builtin kernels, within tolerance.sum_bound: random shapes, every LRN option,
norms below TFLite's epsilon, squares that overflow or underflow float32; int8 / uint8
L2_NORMALIZATION exactly (TFLite's integer steps), and its fixed output grid."""
import numpy as np
import pytest

from tests.oplib import In, assert_rejected, check_op

LRN = "LOCAL_RESPONSE_NORMALIZATION"


def test_l2_normalization_random_shapes():
    rng = np.random.default_rng(1)
    for rank in range(1, 7):  # LiteRT takes any rank >= 1
        for scale in (1e-3, 1.0, 1e4):
            shape = tuple(int(d) for d in rng.integers(1, 7, rank))
            check_op("L2_NORMALIZATION", [In((rng.normal(0, 1, shape) * scale).astype(np.float32))])


def test_l2_normalization_epsilon_and_extremes():
    """Rows whose norm is below 1e-6 are divided by 1e-6 (zeros stay zeros); squares that
    overflow float32 give a norm of inf (outputs 0), squares that underflow a norm of 0."""
    rows = np.array([[3e-7, 4e-7, 0.0], [0.0, 0.0, 0.0], [3.0, -4.0, 12.0], [1e-3, 0.0, -1e-3], [3e19, 1.0, -1.0],
                     [1e-24, 2e-24, 0.0], [np.inf, 1.0, 2.0], [np.nan, 1.0, 2.0]], np.float32)
    check_op("L2_NORMALIZATION", [In(rows)])


L2_GRID = {np.int8: (1 / 128, 0), np.uint8: (1 / 128, 128)}  # l2norm.cc's required output grid


@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
def test_quantized_l2_normalization_is_exact(dtype):
    """TFLite's integer kernels step for step: zero points inside and at the ends of the range,
    an all-zero row (no epsilon: zeros), a lone nonzero channel (128 / 128, saturated to 127),
    one channel, hundreds of channels, rank 1 to 5."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(2)
    for shape in [(3, 7), (2, 3, 4, 5), (1,), (4, 1), (2, 300), (1, 2, 2, 1, 3)]:
        for zero_point in (0, 5, int(info.min) + 3, int(info.max)):
            q = rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)
            rows = q.reshape(-1, shape[-1])
            rows[0] = zero_point
            if len(rows) > 1:
                rows[1] = zero_point
                rows[1, -1] = zero_point - 1 if zero_point > info.min else zero_point + 1
            check_op("L2_NORMALIZATION", [In(q, quant=(0.05, zero_point))], output_quant=[L2_GRID[dtype]])


def test_quantized_l2_normalization_needs_tflites_output_grid():
    q = In(np.ones((2, 3), np.int8), quant=(0.1, 0))
    assert_rejected("L2_NORMALIZATION", [q], outputs=[((2, 3), np.int8, (1 / 256, 0))], match="scale 1/128")
    assert_rejected("L2_NORMALIZATION", [q], outputs=[((2, 3), np.int8, (1 / 128, 3))], match="zero point 0")
    u = In(np.ones((2, 3), np.uint8), quant=(0.1, 128))
    assert_rejected("L2_NORMALIZATION", [u], outputs=[((2, 3), np.uint8, (1 / 128, 0))], match="zero point 128")


def test_l2_normalization_refusals():
    x = In(np.ones((2, 3), np.float32))
    assert_rejected("L2_NORMALIZATION", [x], {"fused_activation_function": 1}, match="only NONE")
    assert_rejected("L2_NORMALIZATION", [In(np.ones((2, 3), np.int16))], match="only float32")
    assert_rejected("L2_NORMALIZATION", [In(np.array(2.0, np.float32))], match="at least one dimension")


LRN_OPTIONS = [dict(radius=2, bias=1.0, alpha=1e-4, beta=0.75), dict(radius=0, bias=1.0, alpha=0.5, beta=0.5),
               dict(radius=1, bias=2.0, alpha=0.3, beta=1.0), dict(radius=5, bias=0.5, alpha=0.1, beta=0.6),
               dict(radius=20, bias=1.0, alpha=1.0, beta=2.0), dict(radius=3, bias=1e-3, alpha=1.0, beta=0.75),
               dict(radius=2, bias=1.0, alpha=0.2, beta=-0.5)]


@pytest.mark.parametrize("options", LRN_OPTIONS, ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()))
def test_local_response_normalization(options):
    """Radius 0, within and beyond the depth; beta 1 and 0.5 (LiteRT's special cases), others."""
    rng = np.random.default_rng(options["radius"])
    for shape in [(1, 3, 4, 7), (2, 2, 3, 16), (1, 1, 1, 1)]:
        check_op(LRN, [In(rng.normal(0, 2, shape).astype(np.float32))], options)


def test_local_response_normalization_large_and_zero_values():
    """A large channel next to small ones (LiteRT's running window sum keeps its rounding) and
    all-zero pixels."""
    x = np.zeros((1, 2, 2, 9), np.float32)
    x[0, 0, 0] = [1e3, 1.0, -2.0, 0.5, 1e-3, 3.0, -1.0, 2.0, 1.0]
    x[0, 1, 1] = np.linspace(-5, 5, 9)
    for options in LRN_OPTIONS[:4]:
        check_op(LRN, [In(x)], options)


def test_local_response_normalization_refusals():
    options = dict(radius=1, bias=1.0, alpha=1.0, beta=0.5)
    assert_rejected(LRN, [In(np.ones((1, 2, 4), np.float32))], options, match="must be 4-D")
    assert_rejected(LRN, [In(np.ones((1, 1, 2, 4), np.float32))], {**options, "radius": -1}, match="radius -1")
    assert_rejected(LRN, [In(np.ones((1, 1, 2, 4), np.int8), quant=(0.1, 0))], options, match="only float32")
