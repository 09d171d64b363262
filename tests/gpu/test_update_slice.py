"""DYNAMIC_UPDATE_SLICE on the GPU (kernels_glsl/update_slice.glsl) against the numpy reference, in
every precision: ranks 1-4, start indices clamped as TFLite clamps them (negative, past the end),
a KV cache's one-row write, constant operands and updates, bool and int32 values exactly."""
import numpy as np
import pytest

from gles_delegate.gpu import kernels
from tests.gpu.gpulib import PRECISIONS, check_gpu
from tests.gpu.test_float_view import INT_SPECIALS, check_exact
from tests.oplib import In, node_with_output

CASES = [  # (operand shape, update shape, start)
    ((2, 5, 6, 7), (1, 2, 3, 4), [1, 2, 9, -3]),  # the last two clamped: 6 - 3, 0
    ((1, 16, 8), (1, 1, 8), [0, 5, 0]),            # a KV cache's row at position 5
    ((8, 16), (3, 16), [7, 0]),                    # clamped to 5
    ((9,), (4,), [-2]),
    ((3, 4), (3, 4), [1, 1]),                      # the whole operand: starts clamp to 0
]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("operand_shape,update_shape,start", CASES)
def test_update_slice(operand_shape, update_shape, start, precision):
    rng = np.random.default_rng(len(operand_shape))
    operand = rng.standard_normal(operand_shape).astype(np.float32)
    update = rng.standard_normal(update_shape).astype(np.float32)
    check_gpu("DYNAMIC_UPDATE_SLICE", [In(operand), In(update), In(np.array(start, np.int32))], {}, precision)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_constant_operand_or_update_and_exact_values(precision):
    """A zero cache as a constant (a converter's initial state), a constant update into a runtime
    operand; bool and int32 values over the whole range, moved exactly."""
    rng = np.random.default_rng(3)
    start = In(np.array([0, 2, 0], np.int32))
    check_gpu("DYNAMIC_UPDATE_SLICE", [In(np.zeros((1, 6, 4), np.float32), const=True),
                                       In(rng.standard_normal((1, 2, 4)).astype(np.float32)), start], {}, precision)
    check_gpu("DYNAMIC_UPDATE_SLICE", [In(rng.standard_normal((1, 6, 4)).astype(np.float32)),
                                       In(np.ones((1, 2, 4), np.float32), const=True), start], {}, precision)
    check_exact("DYNAMIC_UPDATE_SLICE", [In(rng.random((2, 5)) < 0.5), In(np.ones((1, 3), bool)),
                                         In(np.array([1, 1], np.int32))], precision=precision)
    check_exact("DYNAMIC_UPDATE_SLICE", [In(np.resize(INT_SPECIALS, (4, 5))), In(np.resize(INT_SPECIALS[::-1], (2, 2))),
                                         In(np.array([3, -1], np.int32))], precision=precision, out_dtype=np.int32)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_constant_start_indices(precision):
    """Start indices a converter wrote as a constant (one past the end: clamped)."""
    rng = np.random.default_rng(6)
    check_gpu("DYNAMIC_UPDATE_SLICE", [In(rng.standard_normal((2, 6, 5)).astype(np.float32)),
                                       In(rng.standard_normal((1, 3, 5)).astype(np.float32)),
                                       In(np.array([1, 4, 0], np.int32), const=True)], {}, precision)


@pytest.mark.parametrize("inputs,reason", [
    ([In(np.zeros((4, 5), np.float32)), In(np.zeros((2, 2), np.float32)), In(np.array([1, 1], np.int64))],
     "int64"),
    ([In(np.zeros((4, 5), np.int64)), In(np.zeros((2, 2), np.int64)), In(np.array([1, 1], np.int32))],
     "int64"),
])
def test_update_slice_refusals(inputs, reason):
    node = node_with_output("DYNAMIC_UPDATE_SLICE", inputs, (4, 5))
    assert reason in kernels.unsupported_reason(node)
