"""SOFTMAX / LOG_SOFTMAX reference kernels (ops/softmax.py) against LiteRT's builtin kernels."""
import numpy as np
import pytest

from tests.oplib import In, assert_rejected, check_op

OUTPUT_QUANT = {np.int8: (1 / 256, -128), np.uint8: (1 / 256, 0)}


def random_shape(rng, rank):
    return tuple(int(d) for d in rng.integers(1, 7, rank))


@pytest.mark.parametrize("beta", [1.0, 0.5, 2.7, 0.0])
def test_softmax_float(beta):
    rng = np.random.default_rng(1)
    for rank in range(1, 6):
        x = rng.uniform(-10, 10, random_shape(rng, rank)).astype(np.float32)
        check_op("SOFTMAX", [In(x)], {"beta": beta})


def test_softmax_float_large_logits_do_not_overflow():
    x = np.array([[1000.0, 999.0, -1000.0], [88.0, 89.0, 90.0]], np.float32)
    ours, _ = check_op("SOFTMAX", [In(x)], {"beta": 1.0})
    assert np.isfinite(ours[0]).all()


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("beta", [1.0, 0.3, 4.0])
def test_softmax_quantized(dtype, beta):
    rng = np.random.default_rng(2)
    info = np.iinfo(dtype)
    for rank in range(1, 5):
        x = rng.integers(info.min, info.max + 1, random_shape(rng, rank)).astype(dtype)
        in_quant = (float(rng.uniform(0.01, 0.3)), int(rng.integers(info.min, info.max + 1)))
        ours, theirs = check_op("SOFTMAX", [In(x, quant=in_quant)], {"beta": beta},
                                output_quant=[OUTPUT_QUANT[dtype]], quantum=1)
        # The float32 table arithmetic is LiteRT's own, so the outputs agree exactly.
        assert np.array_equal(ours[0], theirs[0])


def test_softmax_quantized_long_rows():
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (3, 1000)).astype(np.int8)
    check_op("SOFTMAX", [In(x, quant=(0.05, 0))], {"beta": 1.0}, output_quant=[OUTPUT_QUANT[np.int8]], quantum=1)


def test_log_softmax():
    rng = np.random.default_rng(4)
    for rank in range(1, 6):
        x = rng.uniform(-20, 20, random_shape(rng, rank)).astype(np.float32)
        check_op("LOG_SOFTMAX", [In(x)])


@pytest.mark.parametrize("op,x,out_dtype,in_quant,out_quant,match", [
    ("SOFTMAX", np.zeros((2, 3), np.int8), np.int8, (0.1, 0), (0.1, -128), "scale 1/256"),
    ("SOFTMAX", np.zeros((2, 3), np.uint8), np.uint8, (0.1, 0), (1 / 256, 128), "zero point 0"),
    ("SOFTMAX", np.zeros((2, 3), np.int8), np.int16, (0.1, 0), (1 / 32768, 0), "only float32, int8 and uint8"),
    ("SOFTMAX", np.zeros((2, 3), np.int32), np.int32, None, None, "only float32, int8 and uint8"),
    ("SOFTMAX", np.zeros((), np.float32), np.float32, None, None, "rank >= 1"),
    ("LOG_SOFTMAX", np.zeros((2, 3), np.int8), np.int8, (0.1, 0), (16 / 256, 127), "only float32"),
])
def test_softmax_support_refusals(op, x, out_dtype, in_quant, out_quant, match):
    options = {"beta": 1.0} if op == "SOFTMAX" else {}
    assert_rejected(op, [In(x, quant=in_quant)], options, match, outputs=[(x.shape, out_dtype, out_quant)])

