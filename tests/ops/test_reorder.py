"""REVERSE_V2, SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND (ops/reorder.py) against LiteRT's builtin
kernels on one-op models: every dtype they take, parameters constant and fed at run time, and
the parameters LiteRT refuses refused too."""
import numpy as np
import pytest

from tests.ops.test_layout import rand, rand_shape
from tests.oplib import In, assert_kernel_error, assert_refused_like_litert, assert_rejected, check_op

I32, I64, F32 = np.int32, np.int64, np.float32
# (dtype, quantization); the 8-bit ones with a zero point that SPACE_TO_BATCH_ND pads with.
DTYPES = [(np.float32, None), (np.int8, (0.05, -3)), (np.uint8, (0.1, 128)), (np.int16, None), (np.int32, None),
          (np.int64, None), (np.bool_, None)]


def check_reorder(op, x, quant, params, const):
    """check_op of op(x, *params) where the output keeps x's dtype and quantization."""
    inputs = [In(x, quant=quant)] + [In(np.asarray(p, I32), const=const) for p in params]
    return check_op(op, inputs, output_dtypes=[x.dtype], output_quant=[quant])


# -- REVERSE_V2 -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,quant", DTYPES)
def test_reverse_v2(dtype, quant):
    """One run of consecutive axes, in any order, negative or not, constant or fed at run time."""
    rng = np.random.default_rng(1)
    for rank in range(1, 5):
        x = rand(rng, rand_shape(rng, rank), dtype)
        first = int(rng.integers(0, rank))
        axes = np.arange(first, int(rng.integers(first + 1, rank + 1)))
        axes = rng.permutation(np.where(rng.random(axes.size) < 0.5, axes - rank, axes))
        check_reorder("REVERSE_V2", x, quant, [axes], const=bool(rank % 2))


@pytest.mark.parametrize("axes, match", [([0, 2], "not contiguous"), ([1, 1], "not contiguous"),
                                         ([3], "axis 3 is out of range")])
def test_reverse_v2_refuses_axes_litert_refuses(axes, match):
    x = In(np.zeros((2, 3, 4), F32))
    assert_refused_like_litert("REVERSE_V2", [x, In(np.array(axes, I32), const=True)], [((2, 3, 4), F32, None)],
                               match=match)


def test_reverse_v2_refuses_what_litert_cannot_run():
    x = In(np.zeros((2, 3), F32))
    # LiteRT reads past an empty axis list (it crashed LiteRT 2.3), and refuses int64 axes.
    assert_kernel_error("REVERSE_V2", [x, In(np.zeros(0, I32), const=True)], match="non-empty 1-D")
    assert_rejected("REVERSE_V2", [x, In(np.array([0], I64), const=True)], match="axis must be an int32")


# -- SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND --------------------------------------------------
def block_case(rng, rank):
    """(block_shape, edges, spatial sizes) of a 3-D or 4-D case whose padded sizes divide."""
    block = [int(b) for b in rng.integers(1, 4, rank - 2)]
    edges = [[int(e) for e in rng.integers(0, 3, 2)] for _ in block]
    sizes = [int(rng.integers(1, 3)) * b - before - after for b, (before, after) in zip(block, edges)]
    sizes = [s + b * int(np.ceil(max(1 - s, 0) / b)) for s, b in zip(sizes, block)]  # at least 1
    return block, edges, sizes


@pytest.mark.parametrize("dtype,quant", DTYPES)
@pytest.mark.parametrize("const", [True, False], ids=["const", "runtime"])
def test_space_to_batch_nd(dtype, quant, const):
    rng = np.random.default_rng(2)
    for rank in (3, 4, 4):
        block, pads, sizes = block_case(rng, rank)
        x = rand(rng, [int(rng.integers(1, 3))] + sizes + [int(rng.integers(1, 4))] * (rank - 1 - len(block)), dtype)
        check_reorder("SPACE_TO_BATCH_ND", x, quant, [block, pads], const)


@pytest.mark.parametrize("dtype,quant", DTYPES)
@pytest.mark.parametrize("const", [True, False], ids=["const", "runtime"])
def test_batch_to_space_nd(dtype, quant, const):
    rng = np.random.default_rng(3)
    for rank in (3, 4, 4):
        block, crops, _ = block_case(rng, rank)
        sizes = [int(rng.integers(1, 4)) for _ in block]
        # Crops up to the whole joined extent but one (see test_batch_to_space_nd_to_an_empty_output).
        crops = [[min(c, d * b - 1), min(c2, d * b - 1 - min(c, d * b - 1))] for (c, c2), d, b in zip(crops, sizes, block)]
        x = rand(rng, [int(np.prod(block)) * int(rng.integers(1, 3))] + sizes +
                 [int(rng.integers(1, 4))] * (rank - 1 - len(block)), dtype)
        check_reorder("BATCH_TO_SPACE_ND", x, quant, [block, crops], const)


def test_batch_to_space_nd_to_an_empty_output():
    """Crops as large as the joined extent leave nothing. (LiteRT cannot hand out an empty
    output whose shape it computed at invoke, so the crops are constant here.)"""
    x = np.arange(16, dtype=F32).reshape(4, 2, 2, 1)
    ours, _ = check_reorder("BATCH_TO_SPACE_ND", x, None, [[2, 2], [[3, 1], [0, 1]]], const=True)
    assert ours[0].shape == (1, 0, 3, 1)


@pytest.mark.parametrize("op, shape, block, edges, out, match", [
    ("SPACE_TO_BATCH_ND", (1, 4, 6, 1), [3, 2], [[0, 0], [0, 0]], (6, 1, 3, 1), "not multiples of block_shape"),
    ("SPACE_TO_BATCH_ND", (1, 4, 6, 1), [2], [[0, 0]], (2, 2, 6, 1), "must be \\[2\\] and \\[2, 2\\]"),
    ("SPACE_TO_BATCH_ND", (1, 1, 4, 6, 1), [2, 2], [[0, 0], [0, 0]], (4, 1, 2, 3, 1), "3-D or 4-D"),
    ("BATCH_TO_SPACE_ND", (6, 2, 2, 1), [2, 2], [[0, 0], [0, 0]], (1, 4, 4, 1), "multiple of 4"),
    ("BATCH_TO_SPACE_ND", (4, 2, 2, 1), [2, 2], [[0, 0], [-1, 0]], (1, 4, 5, 1), ">= 0"),
    ("BATCH_TO_SPACE_ND", (4, 2, 2, 1), [2, 2], [[3, 2], [0, 0]], (1, 0, 4, 1), ">= 0"),
], ids=["indivisible", "block_count", "rank5", "batch", "negative_crop", "crops_past_the_extent"])
def test_block_ops_refuse_what_litert_refuses(op, shape, block, edges, out, match):
    inputs = [In(np.zeros(shape, F32)), In(np.array(block, I32), const=True), In(np.array(edges, I32), const=True)]
    assert_refused_like_litert(op, inputs, [(out, F32, None)], match=match)


def test_space_to_batch_nd_refuses_negative_paddings():
    """LiteRT 2.3 crops with them; newer TFLite refuses them (space_to_batch_nd.cc), as we do."""
    inputs = [In(np.zeros((1, 4, 4, 1), F32)), In(np.array([2, 2], I32), const=True),
              In(np.array([[-2, 0], [0, 0]], I32), const=True)]
    assert_kernel_error("SPACE_TO_BATCH_ND", inputs, match="paddings .* >= 0")


def test_block_ops_reject_int64_parameters():
    """LiteRT reads block_shape and paddings as int32 whatever their type."""
    inputs = [In(np.zeros((1, 4, 4, 1), F32)), In(np.array([2, 2], I64), const=True),
              In(np.zeros((2, 2), I64), const=True)]
    assert_rejected("SPACE_TO_BATCH_ND", inputs, match="block_shape must be an int32", outputs=[((4, 2, 2, 1), F32, None)])


# -- REVERSE_SEQUENCE, MATRIX_SET_DIAG --------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int16, np.int32, np.int64])
def test_reverse_sequence_matches_litert(dtype):
    """Every (seq_dim, batch_dim) pair of ranks 2 to 4, lengths from 0 to the whole dimension
    (negative ones reverse nothing), int32 and int64 lengths, constant or fed."""
    rng = np.random.default_rng(71)
    for rank in (2, 3, 4):
        shape = tuple(int(d) for d in rng.integers(1, 5, rank))
        x = rng.integers(0, 100, shape).astype(dtype)
        for seq_dim in range(rank):
            for batch_dim in set(range(rank)) - {seq_dim}:
                lengths = rng.integers(-1, shape[seq_dim] + 1, shape[batch_dim])
                length_type = np.int64 if (seq_dim + batch_dim) % 2 else np.int32
                check_op("REVERSE_SEQUENCE", [In(x), In(lengths.astype(length_type), const=rank == 3)],
                         {"seq_dim": seq_dim, "batch_dim": batch_dim})


def test_reverse_sequence_refusals():
    x = np.zeros((2, 3), np.float32)
    assert_refused_like_litert("REVERSE_SEQUENCE", [In(x), In(np.array([4, 1], np.int32))],
                               [((2, 3), np.float32, None)], {"seq_dim": 1, "batch_dim": 0}, match="exceed dimension 1")
    assert_rejected("REVERSE_SEQUENCE", [In(x), In(np.array([1, 1], np.int32))], {"seq_dim": 0, "batch_dim": 0},
                    match="two different dimensions")
    assert_rejected("REVERSE_SEQUENCE", [In(x.astype(np.int8)), In(np.array([1, 1], np.int32))],
                    {"seq_dim": 1, "batch_dim": 0}, match="not supported")


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.int8, np.uint8, np.int16])
def test_matrix_set_diag_matches_litert(dtype):
    rng = np.random.default_rng(72)
    for shape in [(3, 3), (2, 5), (4, 2, 3), (2, 2, 4, 1), (1, 3, 2, 2, 3)]:
        x = rng.integers(0, 100, shape).astype(dtype)
        diagonal = rng.integers(0, 100, shape[:-2] + (min(shape[-2:]),)).astype(dtype)
        check_op("MATRIX_SET_DIAG", [In(x), In(diagonal, const=len(shape) == 3)])


def test_matrix_set_diag_refusals():
    assert_rejected("MATRIX_SET_DIAG", [In(np.zeros((2, 3), np.float32)), In(np.zeros(3, np.float32))],
                    match="does not fit")
    assert_rejected("MATRIX_SET_DIAG", [In(np.zeros(3, np.float32)), In(np.zeros(3, np.float32))], match="does not fit")
    # LiteRT 2.3 scrambles a bool MATRIX_SET_DIAG (ones where the diagonal and input say zero)
    assert_rejected("MATRIX_SET_DIAG", [In(np.zeros((2, 2), np.bool_)), In(np.ones(2, np.bool_))],
                    match="not supported")
