"""GPU STABLEHLO_REDUCE_WINDOW / REDUCE_WINDOW (kernels_glsl/reduce_window.glsl) against the numpy
reference in every precision (auto included): the float cases the reference is checked against
LiteRT with (padding, cropping, dilations, strides, windows along any dimension, ranks 1-4,
inits that are not the op's identity), NaN and signed zeros in window order (max and min exactly
LiteRT's), a litert-torch average pool (ceil_mode) running whole on the GPU, and what stays on
the CPU: integer windows, ranks past 4, a runtime init value."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.gpu import shader
from tests.gpu.gpulib import PRECISIONS, assert_gpu_matches, run_gpu
from tests.oplib import first_node, run_ours
from tests.ops.test_reduce_window import FLOAT_CASES, case_id
from tests.reduce_window_models import Window, avg_pool_ceil_model, deprecated_window_model, window_model

ALL_PRECISIONS = PRECISIONS + ("auto",)
GPU_CASES = [case for case in FLOAT_CASES if len(case[0]) <= 4]


def stored(x, precision):
    return x if precision == "fp32" else x.astype(np.float16).astype(np.float32)


def check(model, x, precision):
    """The model's one node on the GPU, within tolerance of the reference on x as stored."""
    gpu, summary = run_gpu(model, [x], precision)
    assert (summary["gpu_nodes"], summary["cpu_nodes"]) == (1, 0), summary
    x = stored(x, precision)
    (reference,) = run_ours(model, [x], cpu_backend="reference")
    node = first_node(model)
    inputs = [x] + [np.asarray(t.data) for t in node.inputs[1:]]
    assert_gpu_matches(reference, gpu[0], precision, node.op, node, inputs)
    return reference, gpu[0]


def test_template_is_highp_in_every_precision():
    assert shader.full_precision("reduce_window")


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
@pytest.mark.parametrize("case", GPU_CASES, ids=case_id)
def test_float_windows(case, precision):
    shape, window, op, init = case
    x = np.random.default_rng(len(shape)).normal(0, 2, shape).astype(np.float32)
    check(window_model(shape, window, op, init), x, precision)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
@pytest.mark.parametrize("function,init", [("add", 0.0), ("max", -np.inf), ("mul", 1.0)])
def test_deprecated_reduce_window(function, init, precision):
    x = np.random.default_rng(5).normal(0, 1, (1, 6, 5, 3)).astype(np.float32)
    window = Window((1, 2, 3, 1), (1, 2, 1, 1), window_dilations=(1, 1, 2, 1))
    check(deprecated_window_model(x.shape, window, function, init), x, precision)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
def test_nan_and_signed_zeros_in_window_order(precision):
    x = np.arange(12, dtype=np.float32).reshape(1, 12)
    x[0, 2], x[0, 7] = np.nan, np.nan
    x[0, 9:] = [0.0, -0.0, 0.0]
    for op, init in (("MAXIMUM", -np.inf), ("MINIMUM", np.inf), ("MAXIMUM", -0.0), ("MINIMUM", 0.0)):
        reference, gpu = check(window_model((1, 12), Window((1, 3)), op, init), x, precision)
        np.testing.assert_array_equal(np.signbit(gpu), np.signbit(reference))


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
def test_average_pool_as_litert_torch_writes_it(precision):
    """avg_pool2d(3, 2, 1, ceil_mode=True, count_include_pad=False): the window sums, DIV by the
    window counts (a reduce window of a constant, folded at load): one GPU partition."""
    shape = (1, 9, 10, 6)
    model, out_shape = avg_pool_ceil_model(shape)
    values = np.random.default_rng(8).normal(0, 1, shape).astype(np.float32)
    with GpuDelegate(precision=precision) as delegate:
        (gpu,) = run_ours(model, [values], experimental_delegates=[delegate])
        summary = delegate.summary()
    assert (summary["gpu_nodes"], summary["cpu_nodes"], summary["partitions"]) == (2, 0, 1), summary
    padded = np.pad(stored(values, precision)[0], ((1, 2), (1, 2), (0, 0)), constant_values=np.nan)
    expected = np.stack([np.stack([np.nanmean(padded[2 * i:2 * i + 3, 2 * j:2 * j + 3], axis=(0, 1))
                                   for j in range(out_shape[2])]) for i in range(out_shape[1])])
    assert_gpu_matches(expected[None].astype(np.float32), gpu, precision, "average pool", extra=9 * 2.0 ** -20 * 3)


@pytest.mark.parametrize("model,why", [
    (window_model((1, 4, 4, 2), Window((1, 2, 2, 1)), "ADD", 0, np.int32), "the GPU reduces float32"),
    (window_model((1, 2, 4, 4, 2), Window((1, 1, 2, 2, 1))), "rank 5"),
    # A crop of 2^33 before and a pad of 2^33 after: a 4-wide input, positions past int32.
    (window_model((1, 4), Window((1, 2), padding=(0, 0, -2 ** 33, 2 ** 33))), "int32 positions"),
])
def test_what_stays_on_the_cpu(model, why):
    from gles_delegate.gpu import kernels
    assert why in kernels.SUPPORT["STABLEHLO_REDUCE_WINDOW"](first_node(model))
