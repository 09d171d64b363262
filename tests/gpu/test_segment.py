"""GPU UNSORTED_SEGMENT_SUM / PROD / MAX / MIN (kernels_glsl/segment.glsl) against the numpy
reference in every precision: the cases the reference is checked against LiteRT with (ids of rank
1-3, negative ids dropped, empty segments keeping the identity, repeated ids in data order;
runtime and constant ids), int32 data over the whole range (exact, wrapping), NaN never winning a
max or a min, signed zeros in data order; an id past num_segments fails the invoke."""
import numpy as np
import pytest

from tests.gpu.gpulib import PRECISIONS, check_gpu, fails_then_runs
from tests.gpu.test_float_view import INT_SPECIALS, check_exact
from tests.oplib import single_op_model
from tests.ops.test_segment import OPS, segment_inputs

CASES = [((6,), 1, 4), ((7, 3), 1, 3), ((4, 3, 2), 2, 5), ((2, 3, 2, 2), 3, 6), ((5, 2), 2, 1), ((3, 2, 3, 2, 4), 1, 2)]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", OPS)
def test_float_segments(op, precision):
    rng = np.random.default_rng(len(op))
    for shape, ids_rank, count in CASES:
        data = rng.uniform(0.5, 1.5, shape) if op.endswith("PROD") else rng.normal(0, 3, shape)
        ids = rng.integers(-1, count, shape[:ids_rank])
        check_gpu(op, segment_inputs(data.astype(np.float32), ids, count, const_ids=count % 2 == 1))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", OPS)
def test_int32_segments_are_exact(op, precision):
    rng = np.random.default_rng(7)
    data = np.resize(INT_SPECIALS, (8, 3)).astype(np.int32)
    data[4:] = rng.integers(-2 ** 31, 2 ** 31, (4, 3))
    check_exact(op, segment_inputs(data, [0, 2, 2, -1, 1, 0, 2, 1], 4), precision=precision, out_dtype=np.int32)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", ["UNSORTED_SEGMENT_MAX", "UNSORTED_SEGMENT_MIN"])
def test_nan_never_wins_and_signed_zeros_keep_data_order(op, precision):
    data = np.array([np.nan, 1.0, -np.inf, np.inf, np.nan, -0.0, 0.0, 0.0, -0.0, 3e4, 3e4], np.float32)
    reference, gpu = check_exact(op, segment_inputs(data, [0, 0, 1, 1, 2, 3, 3, 4, 4, 5, 5], 7), precision=precision,
                                 out_dtype=np.float32)
    np.testing.assert_array_equal(np.signbit(gpu[0]), np.signbit(reference[0]))
    assert not np.isnan(gpu[0][0]) and gpu[0][2] == reference[0][2]  # a lone NaN row: the identity


def test_an_id_past_num_segments_fails_the_invoke():
    model = single_op_model("UNSORTED_SEGMENT_SUM", segment_inputs(np.ones(3, np.float32), [0, 1, 1], 3,
                                                                   const_ids=False))
    data = np.array([1.0, 2.0, 4.0], np.float32)
    out = fails_then_runs(model, [[data, np.array([0, 3, 1], np.int32)]], [data, np.array([2, 0, 2], np.int32)],
                          r"#0 \(UNSORTED_SEGMENT_SUM\): a segment id is not below num_segments 3")
    np.testing.assert_array_equal(out, [2.0, 0.0, 5.0])
