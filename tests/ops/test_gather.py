"""GATHER_ND, SCATTER_ND, EMBEDDING_LOOKUP, DYNAMIC_UPDATE_SLICE (ops/gather.py) against LiteRT's
builtin kernels on one-op models: every dtype and index dtype they take, indices fed at run time,
and out-of-range indices refused where LiteRT refuses them."""
import numpy as np
import pytest

from tests.ops.test_layout import rand, rand_shape
from tests.oplib import In, assert_refused_like_litert, assert_rejected, check_op

I16, I32, I64 = np.int16, np.int32, np.int64
F32 = np.float32
# (dtype, quantization): the values these ops move unchanged.
DTYPES = [(np.float32, None), (np.float16, None), (np.int8, (0.05, -3)), (np.uint8, (0.1, 128)), (np.int16, None),
          (np.int32, None), (np.int64, None), (np.bool_, None)]


def check_move(op, inputs, source, options=None):
    """check_op for an op whose output holds values of input `source` (its dtype and quantization)."""
    spec = inputs[source]
    return check_op(op, inputs, options, output_dtypes=[spec.value.dtype], output_quant=[spec.quant])


def supported(dtypes, kernel_types):
    return [(d, q) for d, q in dtypes if np.dtype(d) in kernel_types]


# -- GATHER_ND ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,quant", DTYPES)
@pytest.mark.parametrize("index_dtype", [I16, I32, I64])
def test_gather_nd(dtype, quant, index_dtype):
    rng = np.random.default_rng(1)
    for rank in range(1, 5):
        params = rand(rng, rand_shape(rng, rank), dtype)
        depth = int(rng.integers(1, rank + 1))
        rows = rand_shape(rng, int(rng.integers(0, 3)), 1, 3)
        indices = np.stack([rng.integers(0, d, rows) for d in params.shape[:depth]], axis=-1)
        check_move("GATHER_ND", [In(params, quant=quant), In(indices.astype(index_dtype))], 0)


@pytest.mark.parametrize("indices, match", [
    ([[0, 4]], "index \\[0, 4\\] is out of range"),  # inside the flat params, not inside dim 1
    ([[3, 0]], "out of range"), ([[1, -1]], "out of range"), (np.zeros((2, 0)), "innermost size 0")])
def test_gather_nd_refuses_indices_out_of_range(indices, match):
    params, indices = In(np.arange(12, dtype=F32).reshape(3, 4)), In(np.asarray(indices, I32))
    outputs = [(indices.value.shape[:-1] + params.value.shape[indices.value.shape[-1]:], F32, None)]
    assert_refused_like_litert("GATHER_ND", [params, indices], outputs, match=match)


def test_gather_nd_rejects_float_indices():
    assert_rejected("GATHER_ND", [In(np.zeros((3, 4), F32)), In(np.zeros((1, 2), F32))], match="indices of type")


# -- SCATTER_ND -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,quant", supported(DTYPES, (np.float32, np.int8, np.uint8, np.int32, np.int64,
                                                           np.bool_)))
@pytest.mark.parametrize("const_shape", [True, False], ids=["const_shape", "runtime_shape"])
def test_scatter_nd(dtype, quant, const_shape):
    """Indices that repeat (their updates add up) and indices that leave elements at zero."""
    rng = np.random.default_rng(2)
    for rank in range(1, 5):
        shape = rand_shape(rng, rank)
        depth = int(rng.integers(1, rank + 1))
        rows = rand_shape(rng, int(rng.integers(1, 3)), 1, 4)
        indices = np.stack([rng.integers(0, d, rows) for d in shape[:depth]], axis=-1).astype(I32)
        updates = rand(rng, rows + shape[depth:], dtype)  # 8-bit sums of duplicates wrap around, as in C
        check_move("SCATTER_ND", [In(indices), In(updates, quant=quant), In(np.array(shape, I32), const=const_shape)],
                   1)


@pytest.mark.parametrize("indices", [[[3]], [[-1]], [[0, 4]]])
def test_scatter_nd_refuses_indices_out_of_range(indices):
    indices = np.asarray(indices, I32)
    updates = np.ones((1,) + (3, 4)[indices.shape[-1]:], F32)
    assert_refused_like_litert("SCATTER_ND", [In(indices), In(updates), In(np.array([3, 4], I32), const=True)],
                               [((3, 4), F32, None)], match="scatter_nd index .* is out of range")


def test_scatter_nd_refuses_updates_that_do_not_fit_the_shape():
    assert_refused_like_litert("SCATTER_ND", [In(np.zeros((2, 1), I32)), In(np.ones((2, 3), F32)),
                                              In(np.array([3, 4], I32), const=True)], [((3, 4), F32, None)],
                               match="do not fit the output shape")


def test_scatter_nd_rejects_what_litert_cannot_run():
    """int64 indices (LiteRT reads only int32) and int16 updates."""
    shape = In(np.array([3], I64), const=True)
    assert_rejected("SCATTER_ND", [In(np.zeros((1, 1), I64)), In(np.ones(1, F32)), shape], match="indices must be",
                    outputs=[((3,), F32, None)])
    assert_rejected("SCATTER_ND", [In(np.zeros((1, 1), I32)), In(np.ones(1, I16)), In(np.array([3], I32))],
                    match="updates of type", outputs=[((3,), I16, None)])


# -- EMBEDDING_LOOKUP -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype,quant", supported(DTYPES, (np.float32, np.int8, np.uint8, np.int32, np.int64,
                                                           np.bool_)))
def test_embedding_lookup(dtype, quant):
    rng = np.random.default_rng(3)
    for rank in range(2, 5):
        value = rand(rng, rand_shape(rng, rank), dtype)
        lookup = rng.integers(0, value.shape[0], int(rng.integers(1, 6))).astype(I32)
        check_move("EMBEDDING_LOOKUP", [In(lookup), In(value, quant=quant)], 1)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_row", [False, True])
def test_embedding_lookup_dequantizes_8_bit_rows(dtype, per_row):
    """TFLite's hybrid lookup: 8-bit rows (whole range, uint8 read as int8) times their scale into float32."""
    rng = np.random.default_rng(4)
    info = np.iinfo(dtype)
    value = rng.integers(info.min, info.max + 1, (5, 3, 2)).astype(dtype)
    scales = rng.uniform(0.001, 3, 5) if per_row else 0.037
    lookup = rng.integers(0, 5, 7).astype(I32)
    check_op("EMBEDDING_LOOKUP", [In(lookup), In(value, quant=(scales, 0, 0))], output_dtypes=[F32])


def test_embedding_lookup_refuses():
    value = In(np.arange(12, dtype=F32).reshape(4, 3))
    for lookup in ([4], [-1]):
        assert_refused_like_litert("EMBEDDING_LOOKUP", [In(np.array(lookup, I32)), value], [((1, 3), F32, None)],
                                   match="out of range")
    assert_rejected("EMBEDDING_LOOKUP", [In(np.array([1], I64)), value], match="lookup must be",
                    outputs=[((1, 3), F32, None)])
    assert_rejected("EMBEDDING_LOOKUP", [In(np.array([1], I32)), In(np.zeros((4, 3), np.int8), quant=(0.5, 3))],
                    match="zero point of 0", outputs=[((1, 3), F32, None)])


# -- DYNAMIC_UPDATE_SLICE -------------------------------------------------------------------
@pytest.mark.parametrize("dtype,quant", DTYPES)
@pytest.mark.parametrize("index_dtype", [I32, I64])
def test_dynamic_update_slice(dtype, quant, index_dtype):
    """Starts from below 0 to past the end: TFLite clamps them so that the update fits."""
    rng = np.random.default_rng(5)
    for rank in range(1, 5):
        operand = rand(rng, rand_shape(rng, rank), dtype)
        update = rand(rng, [int(rng.integers(0, d + 1)) for d in operand.shape], dtype)
        start = np.array([rng.integers(-3, d + 3) for d in operand.shape], index_dtype)
        check_move("DYNAMIC_UPDATE_SLICE", [In(operand, quant=quant), In(update, quant=quant), In(start)], 0)


def test_dynamic_update_slice_refuses_an_update_that_does_not_fit():
    operand, start = In(np.zeros((4, 5), F32)), In(np.zeros(2, I32))
    assert_refused_like_litert("DYNAMIC_UPDATE_SLICE", [operand, In(np.ones((5, 1), F32)), start],
                               [((4, 5), F32, None)], match="does not fit")
    assert_refused_like_litert("DYNAMIC_UPDATE_SLICE", [operand, In(np.ones(2, F32)), start],
                               [((4, 5), F32, None)], match="does not fit")
    assert_refused_like_litert("DYNAMIC_UPDATE_SLICE", [operand, In(np.ones((1, 1), F32)), In(np.zeros(1, I32))],
                               [((4, 5), F32, None)], match="start_indices holds 1 values, expected 2")
