"""GPU CONV_3D and CONV_3D_TRANSPOSE (kernels_glsl/conv3d.glsl) against the numpy reference in every
precision (auto included): the reference's cases (tests/ops/test_conv3d.py: paddings, strides and dilations per
dim, batches, windows larger than the input), bias and activations, channels that are not a
multiple of 4 and more output slices than one invocation computes, an epilogue fused into it,
random geometry, and what stays on the CPU (a filter or an output_shape computed at run time)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate import GpuDelegate
from gles_delegate.tflite import ModelBuilder
from tests.gpu.gpulib import PRECISIONS, check_gpu
from tests.oplib import SAME, VALID, In, run_ours
from tests.ops.test_conv3d import CASES, TRANSPOSE_CASES, conv3d_inputs, conv3d_options, fits, transpose_inputs

ALL_PRECISIONS = PRECISIONS + ("auto",)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
@pytest.mark.parametrize("x_shape, kernel, out_channels, strides, dilations, padding",
                         [(*case, SAME) for case in CASES] + [(*case, VALID) for case in CASES if fits(case)])
def test_conv3d(x_shape, kernel, out_channels, strides, dilations, padding, precision):
    rng = np.random.default_rng(sum(x_shape) + padding)
    check_gpu("CONV_3D", conv3d_inputs(rng, x_shape, kernel, out_channels),
              conv3d_options(padding, strides, dilations), precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("activation", [0, 1, 3])
@pytest.mark.parametrize("bias", [True, False])
def test_conv3d_bias_activation_and_wide_outputs(bias, activation, precision):
    """37 output channels (10 slices, the last partial) from 6 input channels."""
    rng = np.random.default_rng(activation + 10 * bias)
    check_gpu("CONV_3D", conv3d_inputs(rng, (2, 3, 5, 4, 6), (3, 3, 2), 37, bias=bias),
              conv3d_options(activation=activation), precision)


def conv3d_relu_add_model(x_shape, w):
    """x -> CONV_3D (SAME) -> ADD of x' channels-sized constant -> RELU: an epilogue to fuse."""
    b = ModelBuilder()
    x = b.input("x", x_shape)
    out_shape = x_shape[:4] + (w.shape[4],)
    conv, added, y = (b.tensor(n, out_shape) for n in ("conv", "added", "y"))
    b.op("CONV_3D", [x, b.const("w", w), -1], [conv], **conv3d_options())
    b.op("ADD", [conv, b.const("shift", np.linspace(-1, 1, w.shape[4], dtype=np.float32))], [added],
         fused_activation_function=0)
    b.op("RELU", [added], [y])
    b.output(y)
    return b.build()


@pytest.mark.parametrize("precision", PRECISIONS)
def test_conv3d_takes_an_epilogue(precision):
    rng = np.random.default_rng(3)
    x_shape, w = (1, 4, 5, 5, 3), rng.normal(0, 0.5, (3, 3, 3, 3, 8)).astype(np.float32)
    x = rng.normal(0, 1, x_shape).astype(np.float32)
    model = conv3d_relu_add_model(x_shape, w)
    with GpuDelegate(precision=precision) as delegate:
        (gpu,) = run_ours(model, [x], experimental_delegates=[delegate])
        assert delegate.summary()["gpu_nodes"] == 3
        # the ADD and RELU run in the convolution's dispatch (the other converts the input)
        assert delegate.partitions[0].plan.labels == ["convert_in tensor 0", "#0 (CONV_3D)"]
    if precision != "fp32":
        x = x.astype(np.float16).astype(np.float32)
    (reference,) = run_ours(model, [x])
    tolerance = 1e-5 if precision == "fp32" else 4e-3
    np.testing.assert_allclose(gpu, reference, atol=tolerance * np.abs(reference).max(), rtol=0)


def test_a_runtime_filter_stays_on_the_cpu():
    rng = np.random.default_rng(4)
    inputs = conv3d_inputs(rng, (1, 3, 4, 4, 2), (2, 2, 2), 3)
    inputs[1] = In(inputs[1].value)  # computed at run time
    check_gpu("CONV_3D", inputs, conv3d_options(), gpu_nodes=0)


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 2), st.integers(1, 5), st.integers(1, 6), st.integers(1, 6), st.integers(1, 9),
       st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)), st.integers(1, 9),
       st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 2)),
       st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 2)), st.sampled_from([SAME, VALID]),
       st.sampled_from(ALL_PRECISIONS))
def test_conv3d_random(n, d, h, w, c, kernel, out_channels, strides, dilations, padding, precision):
    """Random geometry: any extents, kernel, strides and dilations per dim (VALID where it fits)."""
    if padding == VALID and not fits(((n, d, h, w, c), kernel, out_channels, strides, dilations)):
        padding = SAME
    rng = np.random.default_rng(n * d * h * w * c + out_channels)
    check_gpu("CONV_3D", conv3d_inputs(rng, (n, d, h, w, c), kernel, out_channels),
              conv3d_options(padding, strides, dilations), precision)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_shape, kernel, out_shape, strides, dilations, padding", TRANSPOSE_CASES)
def test_conv3d_transpose(x_shape, kernel, out_shape, strides, dilations, padding, bias, precision):
    rng = np.random.default_rng(sum(out_shape) + bias)
    check_gpu("CONV_3D_TRANSPOSE", transpose_inputs(rng, x_shape, kernel, out_shape, bias),
              conv3d_options(padding, strides, dilations, activation=3 if bias else 0), precision,
              output_dtypes=[np.float32])


def test_a_runtime_output_shape_stays_on_the_cpu():
    rng = np.random.default_rng(9)
    inputs = transpose_inputs(rng, (1, 2, 4, 4, 3), (2, 2, 2), (1, 4, 8, 8, 5), const_shape=False)
    check_gpu("CONV_3D_TRANSPOSE", inputs, conv3d_options(strides=(2, 2, 2)), gpu_nodes=0, output_dtypes=[np.float32])
