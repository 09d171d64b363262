"""SELECT, SELECT_V2, WHERE, ARG_MAX and ARG_MIN reference kernels against LiteRT's builtin
kernels: every dtype LiteRT runs, broadcasting, every axis, ties and NaN."""
import numpy as np
import pytest

from gles_delegate import ops
from tests.oplib import In, assert_rejected, broadcast_shapes, check_op, run_ours, single_op_model, single_op_node

SELECT_DTYPES = [np.float32, np.int32, np.int64, np.int8, np.uint8, np.int16, np.bool_]
ARG_DTYPES = [np.float32, np.int32, np.int8, np.uint8, np.bool_]
INT32, INT64 = 2, 4  # the schema's TensorType codes (ArgMaxOptions.output_type)
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3e38, -3e38, 1e-30], np.float32)


def values(rng, shape, dtype, low=-3, high=4):
    """Random values of `dtype` from a small range (ties are likely), bools half true."""
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype == np.float32:
        return rng.integers(low, high, shape).astype(np.float32) + rng.choice([0, 0.5], shape).astype(np.float32)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, low), min(info.max, high), shape, endpoint=True).astype(dtype)


def three_shapes(rng, rank):
    """Three shapes that broadcast to one of `rank` dims (oplib.broadcast_shapes)."""
    return broadcast_shapes(rng, rank, 3, high=4)


# -- SELECT_V2 / SELECT -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", SELECT_DTYPES)
def test_select_v2_broadcasts_like_litert(dtype):
    rng = np.random.default_rng(np.dtype(dtype).num)
    for rank in range(0, 7):
        shapes = three_shapes(rng, rank)
        condition, x, y = values(rng, shapes[0], np.bool_), values(rng, shapes[1], dtype), values(rng, shapes[2], dtype)
        check_op("SELECT_V2", [In(condition, const=rank % 3 == 1), In(x), In(y, const=rank % 2 == 1)],
                 output_dtypes=[dtype])


@pytest.mark.parametrize("dtype", SELECT_DTYPES)
def test_select_v1_takes_full_scalar_and_per_row_conditions(dtype):
    rng = np.random.default_rng(3)
    for shape in [(5,), (2, 3), (3, 1, 4), (2, 2, 3, 2)]:
        x, y = values(rng, shape, dtype), values(rng, shape, dtype)
        for condition_shape in (shape, (), shape[:1]):
            check_op("SELECT", [In(values(rng, condition_shape, np.bool_)), In(x), In(y)], output_dtypes=[dtype])


def test_select_special_values_are_copied():
    condition = np.arange(SPECIALS.size) % 3 == 0
    check_op("SELECT_V2", [In(condition), In(SPECIALS), In(SPECIALS[::-1].copy())], output_dtypes=[np.float32])


# -- WHERE --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.bool_, np.float32, np.int32, np.int64, np.int8, np.uint8])
def test_where_lists_true_coordinates(dtype):
    rng = np.random.default_rng(5)
    for shape in [(7,), (3, 4), (2, 3, 4), (2, 1, 3, 2), (1, 2, 2, 1, 3)]:
        check_op("WHERE", [In(values(rng, shape, dtype, -1, 1))], output_dtypes=[np.int64])



def test_where_of_nothing_true_is_empty():
    """No true element: a [0, rank] output (LiteRT's Python binding cannot read an empty tensor
    back, so the check is against the definition)."""
    x = np.zeros((2, 3), bool)
    (ours,) = run_ours(single_op_model("WHERE", [In(x)], output_dtypes=[np.int64]), [x])
    assert ours.dtype == np.int64 and ours.shape == (0, 2)


def test_where_of_special_floats():
    """NaN is true, -0 is false."""
    check_op("WHERE", [In(SPECIALS.reshape(2, 5))], output_dtypes=[np.int64])


# -- ARG_MAX / ARG_MIN --------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["ARG_MAX", "ARG_MIN"])
@pytest.mark.parametrize("dtype", ARG_DTYPES)
def test_arg_extreme_every_axis(op, dtype):
    """Every axis (negative too, int32 or int64, constant or fed), both output types; values
    from a small range, so ties are common (the first index wins)."""
    rng = np.random.default_rng(7)
    for shape in [(6,), (3, 5), (2, 3, 4), (2, 3, 1, 5), (1, 2, 3, 2, 3)]:
        for axis in range(-len(shape), len(shape)):
            axis_dtype = np.int32 if axis % 2 else np.int64
            out_type, out_dtype = (INT32, np.int32) if axis >= 0 else (INT64, np.int64)
            check_op(op, [In(values(rng, shape, dtype)), In(np.array([axis], axis_dtype), const=axis != 0)],
                     {"output_type": out_type}, output_dtypes=[out_dtype])


@pytest.mark.parametrize("op", ["ARG_MAX", "ARG_MIN"])
def test_arg_extreme_nan_and_infinities(op):
    """A NaN later never wins; a NaN first stays the extreme over the last axis and yields to
    the first number over the others; infinities and -0 compare as IEEE numbers."""
    rows = np.array([[np.nan, 1, 5, 5], [1, np.nan, 5, 2], [3, 3, 1, np.inf], [-np.inf, -np.inf, np.nan, -np.inf],
                     [0.0, -0.0, 0.0, -0.0], [np.nan, np.nan, np.nan, np.nan], [-3e38, 3e38, np.inf, -np.inf],
                     [np.nan, np.nan, -np.inf, np.nan]], np.float32)
    for x in (rows, rows[:, None, :], rows[:, :, None], rows[None]):
        for axis in range(x.ndim):
            check_op(op, [In(np.ascontiguousarray(x)), In(np.array([axis], np.int32), const=True)],
                     {"output_type": INT32}, output_dtypes=[np.int32])


# -- refusals -----------------------------------------------------------------------------------
@pytest.mark.parametrize("op,inputs,options,outputs,match", [
    ("SELECT_V2", [np.zeros(3, np.int32), np.zeros(3, np.float32), np.zeros(3, np.float32)], {},
     [((3,), np.float32, None)], "condition must be bool"),
    ("SELECT_V2", [np.zeros(3, bool), np.zeros(3, np.float32), np.zeros(3, np.int32)], {},
     [((3,), np.float32, None)], "dtypes differ"),
    ("SELECT_V2", [np.zeros(3, bool), np.zeros(3, np.float16), np.zeros(3, np.float16)], {},
     [((3,), np.float16, None)], "float16 is not supported"),
    ("SELECT_V2", [np.zeros(2, bool), np.zeros(3, np.float32), np.zeros(3, np.float32)], {},
     [((3,), np.float32, None)], "broadcast"),
    ("SELECT", [np.zeros((1, 2), bool), np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float32)], {},
     [((2, 2), np.float32, None)], "one value per row"),
    ("WHERE", [np.zeros(3, np.int16)], {}, [((0, 1), np.int64, None)], "int16 is not supported"),
    ("WHERE", [np.zeros(3, bool)], {}, [((0, 1), np.int32, None)], "must be int64"),
    ("ARG_MAX", [np.zeros((2, 3), np.int64), np.array([1], np.int32)], {"output_type": INT32},
     [((2,), np.int32, None)], "int64 is not supported"),
    ("ARG_MIN", [np.zeros((2, 3), np.float32), np.array([1], np.int32)], {"output_type": 0},
     [((2,), np.int32, None)], "output_type 0"),
    ("ARG_MAX", [np.zeros((2, 3), np.float32), np.array([1], np.int32)], {"output_type": INT64},
     [((2,), np.int32, None)], "output_type says int64"),
    ("ARG_MAX", [np.zeros((2, 3), np.float32), np.array([1.0], np.float32)], {"output_type": INT32},
     [((2,), np.int32, None)], "axis must be"),
])
def test_unsupported_nodes_are_rejected(op, inputs, options, outputs, match):
    assert_rejected(op, [In(v) for v in inputs], options, match, outputs=outputs)


def test_out_of_range_axis_is_rejected():
    assert_rejected("ARG_MAX", [In(np.zeros((2, 3), np.float32)), In(np.array([2], np.int32), const=True)],
                    {"output_type": INT32}, "axis 2 is out of range", outputs=[((2,), np.int32, None)])


def test_output_shape_rules_agree_with_the_kernels():
    """ops.output_shapes (shape propagation after a resize) against the kernels' outputs;
    WHERE's row count is known only for a known condition."""
    rng = np.random.default_rng(11)
    cases = [("SELECT_V2", [In(values(rng, (2, 1, 3), np.bool_)), In(values(rng, (4, 1), np.float32)),
                            In(values(rng, (3,), np.float32))], {}),
             ("SELECT", [In(values(rng, (3,), np.bool_)), In(values(rng, (3, 2), np.int8)),
                         In(values(rng, (3, 2), np.int8))], {}),
             ("ARG_MIN", [In(values(rng, (2, 3, 4), np.float32)), In(np.array([-2], np.int32))], {"output_type": INT32}),
             ("WHERE", [In(values(rng, (3, 4), np.bool_))], {})]
    for op, inputs, options in cases:
        out_dtype = {"ARG_MIN": np.int32, "WHERE": np.int64}.get(op, inputs[-1].value.dtype)
        node = single_op_node(op, inputs, options, output_dtypes=[out_dtype])
        arrays = [s.value for s in inputs]
        expected = [tuple(r.shape) for r in ops.run_node(node, arrays)]
        assert ops.output_shapes(node, [a.shape for a in arrays], arrays) == expected, op
    assert ops.output_shapes(node, [(3, 4)], [None]) is None


# -- UNIQUE -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.int16, np.int32, np.int64, np.uint8])
def test_unique_matches_litert(dtype):
    rng = np.random.default_rng(61)
    for n, levels in [(1, 1), (10, 3), (40, 12), (25, 40)]:
        x = rng.integers(0, levels, n).astype(dtype) * (dtype(3) if np.dtype(dtype).kind == "f" else 1)
        for index_type, index_dtype in [(2, np.int32), (4, np.int64)]:
            check_op("UNIQUE", [In(x)], {"idx_out_type": index_type}, output_dtypes=[np.dtype(dtype), index_dtype],
                     n_outputs=2)


def test_unique_signed_zeros_keep_the_first_seen():
    x = np.array([-0.0, 1.0, 0.0, np.inf, -np.inf, 1.0, np.inf], np.float32)
    ours, theirs = check_op("UNIQUE", [In(x)], {"idx_out_type": 2}, output_dtypes=[np.float32, np.int32], n_outputs=2)
    assert np.array_equal(np.signbit(ours[0]), np.signbit(theirs[0])) and np.signbit(ours[0][0])


def test_unique_refusals():
    assert_rejected("UNIQUE", [In(np.zeros((2, 2), np.float32))], {"idx_out_type": 2}, match="takes a vector",
                    outputs=[((4,), np.float32, None), ((2, 2), np.int32, None)])
    assert_rejected("UNIQUE", [In(np.zeros(3, np.float32))], {"idx_out_type": 4}, match="does not match idx_out_type",
                    outputs=[((3,), np.float32, None), ((3,), np.int32, None)])
    for dtype in (np.bool_, np.uint16):  # LiteRT 2.3's UNIQUE fails on uint16 at invoke
        assert_rejected("UNIQUE", [In(np.zeros(3, dtype))], {"idx_out_type": 2}, match="not supported",
                        outputs=[((3,), dtype, None), ((3,), np.int32, None)])
