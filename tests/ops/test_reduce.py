"""Reduction reference kernels (ops/reduce.py) against LiteRT's builtin kernels."""
import numpy as np
import pytest

from gles_delegate import Interpreter
from gles_delegate.ops import reduce as reduce_ops
from tests.oplib import (In, assert_kernel_error, assert_rejected, check_nodes_on_real_models, check_op,
                         single_op_model)

OPS = ["MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"]


def random_axes(rng, rank):
    """1 to rank+1 axes, negative ones and duplicates included."""
    count = int(rng.integers(1, rank + 2))
    return rng.integers(-rank, rank, count).astype(np.int32)


def check_reduce(op, x, axes, keep_dims, quant=None, out_quant=None, **kwargs):
    # An empty axis list is fed at run time: our reader takes an empty constant buffer for "no
    # data", which makes a zero-element constant look like an unwritten activation.
    axes = np.asarray(axes, np.int32)
    inputs = [In(x, quant=quant), In(axes, const=axes.size > 0)]
    return check_op(op, inputs, {"keep_dims": keep_dims}, output_quant=[out_quant], **kwargs)


@pytest.mark.parametrize("op", OPS)
def test_float_reductions(op):
    rng = np.random.default_rng(1)
    for rank in range(1, 6):
        for keep_dims in (False, True):
            shape = tuple(int(d) for d in rng.integers(1, 6, rank))
            # Products of many values overflow or vanish: keep them near 1.
            x = rng.uniform(0.5, 1.5, shape) if op == "REDUCE_PROD" else rng.uniform(-4, 4, shape)
            check_reduce(op, x.astype(np.float32), random_axes(rng, rank), keep_dims)


@pytest.mark.parametrize("op", ["MEAN", "SUM"])
def test_large_float_reductions_stay_within_tolerance(op):
    # 2^18 terms: TFLite's running float32 sum and numpy's pairwise one differ by rounding only.
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, (1, 512, 512, 2)).astype(np.float32)
    check_reduce(op, x, [1, 2], True)
    check_reduce(op, x, [0, 1, 2, 3], False)


@pytest.mark.parametrize("op", OPS)
def test_reductions_over_no_axes_and_scalars(op):
    x = np.array([[1.5, -2.0, 3.0]], np.float32)
    ours, _ = check_reduce(op, x, np.zeros(0, np.int32), False)
    assert np.array_equal(ours[0], x)  # an empty axis list reduces nothing
    check_reduce(op, np.array(2.5, np.float32), [0], True)


@pytest.mark.parametrize("op", ["SUM", "REDUCE_PROD"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_sum_and_prod_wrap_as_litert(op, dtype):
    """reduce.cc accumulates int32 / int64 in the type itself: products and sums past its range
    wrap, checked exactly against LiteRT (values up to 2^20, so that 5-element products wrap)."""
    rng = np.random.default_rng(4)
    for rank in range(1, 5):
        for keep_dims in (False, True):
            shape = tuple(int(d) for d in rng.integers(1, 6, rank))
            x = rng.integers(-(1 << 20), 1 << 20, shape).astype(dtype)
            check_reduce(op, x, random_axes(rng, rank), keep_dims)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_mean_truncates_toward_zero_as_litert(dtype):
    """reference_ops::Mean of ints: the sum (int32 values past half their range, so that an int32
    sum would wrap), divided truncating toward zero (negative means too); 0 over an empty axis."""
    rng = np.random.default_rng(5)
    for rank in range(1, 5):
        for keep_dims in (False, True):
            shape = tuple(int(d) for d in rng.integers(1, 6, rank))
            x = rng.integers(-(1 << 31), 1 << 31, shape).astype(dtype)
            check_reduce("MEAN", x, random_axes(rng, rank), keep_dims)
    check_reduce("MEAN", np.array([[1, 2, 2], [-1, -2, -2], [7, 7, 8], [-7, -7, -8]], dtype), [1], False)
    check_reduce("MEAN", np.zeros((2, 0), dtype), [1], False)


@pytest.mark.parametrize("op", ["REDUCE_MAX", "REDUCE_MIN"])
@pytest.mark.parametrize("dtype,quant", [(np.int8, (0.1, -4)), (np.uint8, (0.2, 120)), (np.int32, None)])
def test_integer_max_min(op, dtype, quant):
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    for rank in range(1, 5):
        x = rng.integers(max(info.min, -1000), min(info.max, 1000) + 1,
                         tuple(int(d) for d in rng.integers(1, 5, rank))).astype(dtype)
        check_reduce(op, x, random_axes(rng, rank), bool(rank % 2), quant=quant, out_quant=quant)


@pytest.mark.parametrize("op", ["REDUCE_ANY", "REDUCE_ALL"])
def test_logical_reductions(op):
    rng = np.random.default_rng(6)
    for rank in range(1, 6):
        for keep_dims in (False, True):
            shape = tuple(int(d) for d in rng.integers(1, 5, rank))
            # Mostly one value, so that both outcomes appear along the reduced axes.
            x = rng.random(shape) < (0.15 if op == "REDUCE_ANY" else 0.85)
            check_reduce(op, x, random_axes(rng, rank), keep_dims)
    check_reduce(op, np.array([[True, False]]), np.zeros(0, np.int32), False)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_quantized_mean_is_exact(dtype):
    # Both TFLite formulas (the general one and the optimized 4-D mean over H and W) are
    # reproduced bit for bit, so require equality rather than the one-step tolerance.
    rng = np.random.default_rng(4)
    info = np.iinfo(dtype)
    axes_cases = [[1, 2], [2, -3], [1], [0, 3], [-1], [1, 2, 3], [0, 1, 2, 3]]
    for k in range(40):
        axes = axes_cases[k % len(axes_cases)]
        x = rng.integers(info.min, info.max + 1, tuple(int(d) for d in rng.integers(1, 7, 4))).astype(dtype)
        quant_in, quant_out = [(float(rng.uniform(0.005, 0.5)), int(rng.integers(info.min, info.max + 1)))
                               for _ in range(2)]
        ours, theirs = check_reduce("MEAN", x, axes, k % 3 != 1, quant=quant_in, out_quant=quant_out, quantum=1)
        assert np.array_equal(ours[0], theirs[0]), (axes, quant_in, quant_out)


def test_quantized_mean_other_ranks_and_no_axes():
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (3, 5, 2)).astype(np.int8)
    check_reduce("MEAN", x, [1], False, quant=(0.1, 3), out_quant=(0.05, -7), quantum=1)
    # No axes: still requantized to the output's scale (a mean over one element).
    ours, theirs = check_reduce("MEAN", x, np.zeros(0, np.int32), False, quant=(0.1, 3), out_quant=(0.05, -7))
    assert np.array_equal(ours[0], theirs[0])


def test_empty_inputs_give_tflite_fill_values():
    # LiteRT's Python API cannot feed an empty tensor, so check the values TFLite documents:
    # NaN for MEAN, the neutral element (numeric_limits lowest/max for max/min) for the others.
    expected = {"MEAN": np.nan, "SUM": 0.0, "REDUCE_PROD": 1.0, "REDUCE_MAX": np.finfo(np.float32).min,
                "REDUCE_MIN": np.finfo(np.float32).max, "REDUCE_ANY": False, "REDUCE_ALL": True}
    for op, value in expected.items():
        dtype = np.bool_ if isinstance(value, bool) else np.float32
        x = np.zeros((2, 0, 3), dtype)
        node_inputs = [In(x), In(np.array([1], np.int32), const=True)]
        model = single_op_model(op, node_inputs, {"keep_dims": False})
        interp = Interpreter(model_content=model, cpu_backend="fallback")
        interp.allocate_tensors()
        interp.invoke()
        out = interp.get_tensor(interp.get_output_details()[0]["index"])
        expected = np.full((2, 3), value, dtype)
        assert out.shape == (2, 3) and np.array_equal(out, expected, equal_nan=dtype != np.bool_), op


def test_reduce_rejects_bad_axes():
    x = In(np.zeros((2, 3), np.float32))
    assert_kernel_error("SUM", [x, In(np.array([0, 2], np.int32), const=True)], {"keep_dims": False},
                        match="axis 2 is out of range")


@pytest.mark.parametrize("op,x,axes,quant,out_quant,match", [
    ("SUM", np.zeros((2, 3), np.int8), np.array([0], np.int32), (0.1, 0), (0.1, 0), "not one of"),
    ("REDUCE_PROD", np.zeros((2, 3), np.int16), np.array([0], np.int32), None, None, "not one of"),
    ("REDUCE_ANY", np.zeros((2, 3), np.float32), np.array([0], np.int32), None, None, "not one of"),
    ("MEAN", np.zeros((2, 3), np.float32), np.array([0], np.int64), None, None, "axis must be an int32"),
    ("MEAN", np.zeros((2, 3), np.int8), np.array([0], np.int32), None, None, "per-tensor quantization"),
    ("REDUCE_MAX", np.zeros((2, 3), np.uint8), np.array([0], np.int32), (0.1, 0), (0.2, 0), "share scale"),
])
def test_reduce_support_refusals(op, x, axes, quant, out_quant, match):
    assert_rejected(op, [In(x, quant=quant), In(axes, const=True)], {"keep_dims": False}, match,
                    outputs=[((1,), x.dtype, out_quant)])


def test_reduction_nodes_of_real_models(mediapipe_models):
    assert check_nodes_on_real_models(mediapipe_models, reduce_ops.KERNELS) > 0


@pytest.mark.parametrize("op", ["REDUCE_MAX", "REDUCE_MIN"])
def test_max_min_with_nan_follow_litert_order(op):
    """LiteRT's builtin REDUCE_MAX / MIN keep acc = x unless x < acc (x > acc), in row-major
    order: a NaN is replaced by the next element, so only a NaN last in its run survives (its
    reference kernel, which skips NaN, and numpy, which propagates it, both differ). Random
    shapes, axes and NaN / +-inf / FLT_MAX placements."""
    rng = np.random.default_rng(8)
    specials = np.array([np.nan, np.inf, -np.inf, 3.4028235e38, -3.4028235e38], np.float32)
    for rank in range(1, 5):
        for _ in range(6):
            shape = tuple(int(d) for d in rng.integers(1, 5, rank))
            x = rng.normal(size=shape).astype(np.float32)
            mask = rng.random(shape) < 0.3
            x[mask] = rng.choice(specials, int(mask.sum()))
            with np.errstate(invalid="ignore"):
                check_reduce(op, x, random_axes(rng, rank), bool(rng.integers(0, 2)))
