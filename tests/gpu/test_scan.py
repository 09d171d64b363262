"""CUMSUM on the GPU (kernels_glsl/scan.glsl) against the numpy reference, in every precision:
every axis of ranks 1-4 (channels that are not a multiple of 4 too), exclusive and reverse,
int32 sums exact over the whole range (wrapping), and what the kernel refuses."""
import numpy as np
import pytest

from gles_delegate.gpu import kernels
from tests.gpu.gpulib import PRECISIONS, check_gpu
from tests.gpu.test_float_view import check_exact
from tests.oplib import In, node_with_output, single_op_node


def axis(value):
    return In(np.array(value, np.int32), const=True)


SHAPES_AXES = [((7,), 0), ((3, 5), 1), ((2, 6, 3), -2), ((1, 4, 5, 6), 3), ((2, 3, 4, 9), 1), ((2, 3, 4, 5), 0),
               ((1, 3, 17, 2), 2)]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape,axis_value", SHAPES_AXES)
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_cumsum_of_floats(shape, axis_value, exclusive, reverse, precision):
    x = np.random.default_rng(len(shape) + axis_value).standard_normal(shape).astype(np.float32)
    check_gpu("CUMSUM", [In(x), axis(axis_value)], {"exclusive": exclusive, "reverse": reverse}, precision)


def test_cumsum_of_floats_is_tflites_sequential_sum():
    """At fp32 the GPU adds in TFLite's order: the sums are the reference's bit for bit (values of
    mixed magnitudes, where another order rounds differently)."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((2, 33, 3)) * 10.0 ** rng.integers(-4, 5, (2, 33, 3))).astype(np.float32)
    for reverse in (False, True):
        reference, gpu = check_gpu("CUMSUM", [In(x), axis(1)], {"exclusive": False, "reverse": reverse}, "fp32")
        assert np.array_equal(gpu[0], reference[0])


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, True)])
def test_cumsum_of_int32_wraps_exactly(exclusive, reverse, precision):
    rng = np.random.default_rng(2)
    x = rng.integers(-2 ** 31, 2 ** 31, (2, 5, 7), dtype=np.int64).astype(np.int32)
    x[0, :, 0] = 2 ** 31 - 1  # a line that overflows at its second element
    check_exact("CUMSUM", [In(x), axis(1)], {"exclusive": exclusive, "reverse": reverse}, precision=precision,
                out_dtype=np.int32)


@pytest.mark.parametrize("inputs,reason", [
    ([In(np.zeros((2, 3), np.float32)), In(np.array(1, np.int32))], "axis must be constant"),
    ([In(np.zeros((2, 3), np.int64)), axis(1)], "int64"),
    ([In(np.zeros((2, 5000), np.float32)), axis(-1)], "5000 elements a line"),
])
def test_cumsum_refusals(inputs, reason):
    node = node_with_output("CUMSUM", inputs, inputs[0].value.shape, exclusive=False, reverse=False)
    assert reason in kernels.unsupported_reason(node)


# -- TOPK_V2 ----------------------------------------------------------------------------------
def gpu_topk(x, k, precision):
    """TOPK_V2 on the GPU: values and indices equal to the reference's on x as stored, exactly
    (ranks compare stored values; the picks copy them)."""
    reference, gpu = check_gpu("TOPK_V2", [In(x), In(np.array(k, np.int32), const=True)], None, precision,
                               output_dtypes=[np.float32, np.int32], n_outputs=2)
    for ours, theirs in zip(gpu, reference):
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs, equal_nan=True), (ours, theirs)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_topk_ties_values_and_nan(precision):
    """Many ties (the lower index first), -0.0 tying with 0.0, infinities, NaN after every number
    (NaNs by index), ranks 1-5, rows of 1 to 300 and k from 1 to the whole row."""
    rng = np.random.default_rng(9)
    for shape, k in [((7,), 7), ((3, 10), 1), ((2, 3, 16), 8), ((1, 300), 5), ((2, 1, 3, 2, 6), 6)]:
        gpu_topk(rng.integers(0, 5, shape).astype(np.float32), k, precision)
    specials = np.array([[0.0, -0.0, np.inf, 1.0, -np.inf, -0.0, np.nan, 0.0, np.nan, 2.5]], np.float32)
    gpu_topk(specials, 10, precision)
    noisy = rng.normal(0, 1, (4, 50)).astype(np.float32)
    noisy[rng.random(noisy.shape) < 0.2] = np.nan
    gpu_topk(noisy, 5, precision)


def test_topk_refusals_stay_on_the_cpu():
    x = np.ones((2, 5000), np.float32)

    def reason(inputs, index_dtype=np.int32):
        node = single_op_node("TOPK_V2", inputs, output_dtypes=[inputs[0].value.dtype, index_dtype], n_outputs=2)
        return kernels.SUPPORT["TOPK_V2"](node)
    three = In(np.array(3, np.int32), const=True)
    assert "at most 4096" in reason([In(x), three])
    assert "k must be constant" in reason([In(x[:, :8]), In(np.array(3, np.int32))])
    assert "(the GPU's: float32 into int32)" in reason([In(x[:, :8]), three], np.int16)
    assert "(the GPU's: float32 into int32)" in reason([In(x[:, :8].astype(np.int32)), three])
