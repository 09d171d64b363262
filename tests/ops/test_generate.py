"""Generator and shape op reference kernels (ops/generate.py) against LiteRT's builtin kernels:
FILL, ZEROS_LIKE, RANGE, BROADCAST_TO, BROADCAST_ARGS, RANK, ONE_HOT on every dtype LiteRT runs,
with constant and runtime size inputs, and their refusals."""
import numpy as np
import pytest

from gles_delegate import ModelError
from gles_delegate.ops import output_shapes
from tests.litert import run_litert
from tests.oplib import (In, assert_kernel_error, assert_rejected, check_op, first_node, run_ours,
                         single_op_model)

ALL_DTYPES = [np.float32, np.int32, np.int64, np.int8, np.uint8, np.int16, np.bool_]
BROADCAST_TO_VERSION = 2  # LiteRT registers BROADCAST_TO from version 2


def value_of(dtype, rng):
    """A scalar of `dtype` that is not 0 or 1 where the type allows."""
    if np.dtype(dtype) == np.bool_:
        return np.array(True)
    return np.array(rng.integers(2, 100) * (1 if np.dtype(dtype).kind == "u" else -1), dtype) \
        if np.dtype(dtype).kind in "iu" else np.array(rng.normal(0, 10), dtype)


# -- FILL / ZEROS_LIKE ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
def test_fill_every_dtype(dtype):
    rng = np.random.default_rng(np.dtype(dtype).num)
    for dims_dtype, dims in [(np.int32, [2, 3]), (np.int64, [4]), (np.int32, []), (np.int32, [1, 2, 1, 3, 2])]:
        for const in (True, False):
            dims_value = np.array(dims, dims_dtype)
            # An empty constant buffer reads as "no data": an empty dims is fed at run time.
            check_op("FILL", [In(dims_value, const=const and len(dims) > 0), In(value_of(dtype, rng))],
                     output_dtypes=[dtype])


def test_fill_refusals():
    assert_kernel_error("FILL", [In(np.array([2, -3], np.int32)), In(np.array(1.0, np.float32))],
                        match="must be >= 0", output_dtypes=[np.float32])
    assert_rejected("FILL", [In(np.array([2], np.int32)), In(np.array([1.0], np.float32))], match="must be a scalar",
                    outputs=[((2,), np.float32, None)])
    assert_rejected("FILL", [In(np.array([2], np.float32)), In(np.array(1.0, np.float32))], match="dims must be",
                    outputs=[((2,), np.float32, None)])
    assert_rejected("FILL", [In(np.array([2], np.int32)), In(np.array(1.0, np.float64))], match="float64",
                    outputs=[((2,), np.float64, None)])


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_zeros_like(dtype):
    rng = np.random.default_rng(1)
    for rank in range(0, 5):
        check_op("ZEROS_LIKE", [In(rng.normal(0, 5, tuple(rng.integers(1, 5, rank))).astype(dtype))])


def test_zeros_like_refuses_what_litert_does_not_run():
    assert_rejected("ZEROS_LIKE", [In(np.ones((2, 3), np.int8))], match="int8 is not supported")


# -- RANGE ------------------------------------------------------------------------------------
RANGES = [(0, 10, 1), (3, 17, 4), (10, -5, -3), (-7, 7, 7), (5, 6, 10), (2, 2 ** 20, 2 ** 18)]
FLOAT_RANGES = [(0.0, 1.0, 0.1), (0.0, 1.0, 0.3), (5.0, 0.0, -1.5), (-1.25, 3.5, 0.25), (1e7, 1e7 + 64, 3.0),
                (0.0, 100.0, 0.7)]


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32])
def test_range(dtype):
    """Both directions, sizes that round up, and float ranges whose running sum drifts from
    start + k delta (TFLite adds delta to a running float32 value)."""
    for start, limit, delta in FLOAT_RANGES if dtype == np.float32 else RANGES:
        for const in (True, False):
            # Exactly: a drift of a few ulps is what tells a running sum from start + k delta.
            check_op("RANGE", [In(np.array(v, dtype), const=const) for v in (start, limit, delta)], bound=0.0)


@pytest.mark.parametrize("start,limit,delta,match", [(0, 5, 0, "non-zero"), (0, 5, -1, "does not lead"),
                                                     (5, 0, 1, "does not lead")])
def test_range_invalid_operands_fail_like_litert(start, limit, delta, match):
    inputs = [In(np.array(v, np.int32)) for v in (0, 5, 1)]
    model = single_op_model("RANGE", inputs)
    bad = [np.array(v, np.int32) for v in (start, limit, delta)]
    with pytest.raises(ModelError, match=r"#0 \(RANGE\).*" + match):
        run_ours(model, bad)
    with pytest.raises(RuntimeError):
        run_litert(model, bad, resolver="builtin")


def test_range_output_shape_needs_the_values():
    """A runtime start, limit or delta leaves the shape to invoke; constants give it, and a
    huge one fails before any array of that size exists."""
    node = first_node(single_op_model("RANGE", [In(np.array(v, np.int32)) for v in (0, 5, 1)]))
    assert output_shapes(node, [(), (), ()], [None, np.int32(5), np.int32(1)]) is None
    assert output_shapes(node, [(), (), ()], [np.int32(1), np.int32(5), np.int32(3)]) == [(2,)]
    model = single_op_model("RANGE", [In(np.array(v, np.int32)) for v in (0, 5, 1)])
    with pytest.raises(ModelError, match=r"#0 \(RANGE\).*would have shape \[2000000000\]"):
        run_ours(model, [np.array(v, np.int32) for v in (0, 2 * 10 ** 9, 1)])


def test_range_refuses_mixed_and_unsupported_dtypes():
    assert_rejected("RANGE", [In(np.array(0, np.int32)), In(np.array(5, np.int64)), In(np.array(1, np.int32))],
                    match="share one dtype", outputs=[((5,), np.int32, None)])
    assert_rejected("RANGE", [In(np.array(0, np.int8))] * 3, match="int8 is not supported",
                    outputs=[((5,), np.int8, None)])


# -- BROADCAST_TO / BROADCAST_ARGS ------------------------------------------------------------
BROADCASTS = [((2,), (3, 2)), ((1,), (4,)), ((3, 1), (2, 3, 5)), ((), (2, 2)), ((1, 4, 1), (1, 4, 3)),
              ((2, 1, 3), (2, 1, 2, 4, 3)), ((1, 1, 1, 1, 1, 1, 1, 2), (2, 1, 2, 1, 2, 1, 2, 2))]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
def test_broadcast_to(dtype):
    rng = np.random.default_rng(np.dtype(dtype).num)
    for k, (in_shape, shape) in enumerate(BROADCASTS):
        x = rng.integers(0, 100, in_shape).astype(dtype)
        shape_value = np.array(shape, np.int32 if k % 2 else np.int64)
        check_op("BROADCAST_TO", [In(x), In(shape_value, const=k % 3 != 0)], version=BROADCAST_TO_VERSION)


def test_broadcast_to_refusals():
    x = In(np.ones((2, 3), np.float32))
    for shape, match in [([3, 3], "does not broadcast"), ([3], "does not broadcast"),
                         ([1] * 9, "at most 8 dims"), ([2, -3], "none negative")]:
        assert_kernel_error("BROADCAST_TO", [x, In(np.array(shape, np.int32), const=True)], match=match,
                            version=BROADCAST_TO_VERSION)
    assert_rejected("BROADCAST_TO", [x, In(np.array([2, 3], np.float32))], match="shape must be",
                    version=BROADCAST_TO_VERSION)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_broadcast_args(dtype):
    for a, b in [((2, 1, 3), (4, 1)), ((1,), (5, 4)), ((3, 4), (3, 4)), ((0, 1), (1, 7)), ((1, 1), (2, 1, 6))]:
        for const in (True, False):
            check_op("BROADCAST_ARGS", [In(np.array(a, dtype), const=const), In(np.array(b, dtype))])


def test_broadcast_args_refusals():
    assert_kernel_error("BROADCAST_ARGS", [In(np.array([2, 3], np.int32), const=True),
                                           In(np.array([4, 3], np.int32), const=True)], match="do not broadcast")
    assert_rejected("BROADCAST_ARGS", [In(np.array([2], np.int32)), In(np.array([2], np.int64))],
                    match="share one dtype")


# -- RANK -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
def test_rank(dtype):
    for shape in [(), (3,), (2, 1), (1, 2, 3, 1, 2)]:
        check_op("RANK", [In(np.zeros(shape, dtype))], output_dtypes=[np.int32])


def test_rank_refuses_an_int64_output():
    """LiteRT writes an int32 into a declared int64 output (half of its bytes): refused."""
    assert_rejected("RANK", [In(np.zeros((2, 3), np.float32))], match="must be int32", outputs=[((), np.int64, None)])


# -- ONE_HOT ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.int8, np.uint8, np.bool_],
                         ids=lambda d: np.dtype(d).name)
def test_one_hot_every_axis_and_dtype(dtype):
    """Indices out of [0, depth) (negative ones included) give a row of off_value."""
    rng = np.random.default_rng(np.dtype(dtype).num)
    on_value, off_value = (np.array(True), np.array(False)) if dtype == np.bool_ else \
        (value_of(dtype, rng), np.array(7, dtype))
    for shape in [(), (5,), (2, 3), (2, 1, 3)]:
        depth = int(rng.integers(1, 6))
        indices = rng.integers(-1, depth + 2, shape)
        for axis in [-1, *range(len(shape) + 1)]:
            for index_dtype in (np.int32, np.int64):
                inputs = [In(indices.astype(index_dtype)), In(np.array(depth, np.int32), const=axis % 2 == 0),
                          In(on_value, const=True), In(off_value)]
                check_op("ONE_HOT", inputs, {"axis": axis}, output_dtypes=[dtype])


def test_one_hot_refusals():
    def inputs(depth=3, off=np.float32):
        return [In(np.array([0, 2], np.int32)), In(np.array(depth, np.int32), const=True),
                In(np.array(1, np.float32)), In(np.array(0, off))]
    assert_kernel_error("ONE_HOT", inputs(depth=-1), {"axis": -1}, match="depth -1 must be >= 0",
                        output_dtypes=[np.float32])
    assert_rejected("ONE_HOT", inputs(), {"axis": -2}, match="axis -2 is out of range",
                    outputs=[((2, 3), np.float32, None)])
    assert_rejected("ONE_HOT", inputs(), {"axis": 2}, match="axis 2 is out of range",
                    outputs=[((2, 3), np.float32, None)])
    assert_rejected("ONE_HOT", inputs(off=np.int32), {"axis": -1}, match="must share one dtype",
                    outputs=[((2, 3), np.float32, None)])
    int16 = [In(np.array([0, 2], np.int32)), In(np.array(3, np.int32)), In(np.array(1, np.int16)),
             In(np.array(0, np.int16))]
    assert_rejected("ONE_HOT", int16, {"axis": -1}, match="int16 is not supported", outputs=[((2, 3), np.int16, None)])
