"""ONE_HOT on the GPU (kernels_glsl/one_hot.glsl) against the numpy reference, in every precision:
the new axis first, inside and last, indices outside [0, depth) (negative too: a line of
off_value), float32, bool and int32 outputs (int32 on / off values over the whole range), and
what the kernel refuses."""
import numpy as np
import pytest

from gles_delegate.gpu import kernels
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.test_float_view import check_exact
from tests.oplib import In, node_with_output


def one_hot_inputs(indices, depth, on, off, dtype):
    return [In(np.asarray(indices, np.int32)), In(np.array(depth, np.int32), const=True),
            In(np.array(on, dtype), const=True), In(np.array(off, dtype), const=True)]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape,axis", [((5,), -1), ((2, 6), -1), ((2, 6), 0), ((2, 3, 4), 1), ((1, 2, 3), 3)])
def test_one_hot_of_floats(shape, axis, precision):
    depth = 7
    indices = np.random.default_rng(sum(shape)).integers(-2, depth + 3, shape)  # some off the axis
    check_exact("ONE_HOT", one_hot_inputs(indices, depth, 2.5, -0.25, np.float32), {"axis": axis},
                precision=precision, out_dtype=np.float32)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_one_hot_of_bools_and_int32(precision):
    indices = np.array([[0, 3, 9], [2, -1, 2]])
    check_exact("ONE_HOT", one_hot_inputs(indices, 4, True, False, np.bool_), {"axis": -1}, precision=precision)
    check_exact("ONE_HOT", one_hot_inputs(indices, 5, 2 ** 31 - 1, -2 ** 31, np.int32), {"axis": 1},
                precision=precision, out_dtype=np.int32)


@pytest.mark.parametrize("k,reason", [(1, "depth"), (2, "on_value")])
def test_one_hot_needs_constant_depth_and_values(k, reason):
    inputs = one_hot_inputs([1, 2], 3, 1.0, 0.0, np.float32)
    inputs[k] = In(inputs[k].value)  # computed at run time
    node = node_with_output("ONE_HOT", inputs, (2, 3), axis=-1)
    assert reason in kernels.unsupported_reason(node)
