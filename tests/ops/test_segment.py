"""UNSORTED_SEGMENT_SUM / PROD / MAX / MIN (ops/segment.py) against LiteRT's builtin kernels."""
import numpy as np
import pytest

from tests.oplib import In, assert_kernel_error, assert_refused_like_litert, assert_rejected, check_op

OPS = ["UNSORTED_SEGMENT_SUM", "UNSORTED_SEGMENT_PROD", "UNSORTED_SEGMENT_MAX", "UNSORTED_SEGMENT_MIN"]


def segment_inputs(data, ids, count, const_ids=True, vector_count=False):
    num = np.asarray([count] if vector_count else count, np.int32)
    return [In(data), In(np.asarray(ids, np.int32), const=const_ids), In(num, const=True)]


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("op", OPS)
def test_unsorted_segments_match_litert(op, dtype):
    """ids of rank 1 to 3 (a prefix of data's shape), negative ids dropped, empty segments
    keeping the identity, repeated ids folded in data order."""
    rng = np.random.default_rng(41)
    for data_shape, ids_rank, count in [((6,), 1, 4), ((7, 3), 1, 3), ((4, 3, 2), 2, 5), ((2, 3, 2, 2), 3, 6),
                                        ((5, 2), 2, 1)]:
        if dtype == np.float32:
            data = rng.uniform(0.5, 1.5, data_shape) if op.endswith("PROD") else rng.normal(0, 3, data_shape)
        else:
            data = rng.integers(-100000, 100000, data_shape)  # PROD and SUM wrap
        ids = rng.integers(-1, count, data_shape[:ids_rank])
        check_op(op, segment_inputs(data.astype(dtype), ids, count, const_ids=count % 2 == 1,
                                    vector_count=count == 3))


@pytest.mark.parametrize("op", ["UNSORTED_SEGMENT_MAX", "UNSORTED_SEGMENT_MIN", "UNSORTED_SEGMENT_SUM"])
def test_special_values(op):
    """A NaN never wins a max or a min (std::max(acc, NaN) keeps acc); +-inf do."""
    data = np.array([np.nan, 1.0, -np.inf, np.inf, np.nan, -0.0, 0.0, 3e38, 3e38], np.float32)
    ids = [0, 0, 1, 1, 2, 3, 3, 4, 4]
    ours, _ = check_op(op, segment_inputs(data, ids, 6))
    if op != "UNSORTED_SEGMENT_SUM":
        assert not np.isnan(ours[0][0])


def test_ids_past_num_segments_fail_like_litert():
    assert_refused_like_litert("UNSORTED_SEGMENT_SUM", segment_inputs(np.ones(3, np.float32), [0, 3, 1], 3),
                               [((3,), np.float32, None)], match="segment id 3 is not below num_segments 3")


def test_bad_segment_inputs_are_refused():
    assert_kernel_error("UNSORTED_SEGMENT_MAX", segment_inputs(np.ones((3, 2), np.float32), [0, 1], 2),
                        match="not a prefix")
    assert_kernel_error("UNSORTED_SEGMENT_MAX", segment_inputs(np.ones(3, np.float32), [0, 1, 0], -1),
                        match="num_segments -1 is negative")
    assert_rejected("UNSORTED_SEGMENT_SUM", segment_inputs(np.ones(3, np.int8), [0, 1, 0], 2), match="float32 or int32",
                    outputs=[((2,), np.int8, None)])
    inputs = [In(np.ones(3, np.float32)), In(np.zeros(3, np.int64), const=True), In(np.int32(2), const=True)]
    assert_rejected("UNSORTED_SEGMENT_SUM", inputs, match="must be int32", outputs=[((2,), np.float32, None)])
