"""GPU L2_NORMALIZATION (kernels_glsl/softmax.glsl, OP 2) against the numpy reference, in every
precision (auto included): ranks 1 to 6, one channel, channels that are not a multiple of 4
(padded lanes must stay out of the sum, and stay zero after the epilogue), hundreds of channels
(a workgroup a pixel), tiny and huge magnitudes (squares a half-float sum would overflow), norms
below TFLite's epsilon, zeros, NaN and infinities; uint8 through the float view against LiteRT; a
model where it sits between GPU ops runs as one partition with its neighbours' steps fused."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.gpu import shader
from gles_delegate.gpu.kernels import softmax
from gles_delegate.tflite import ModelBuilder
from tests.gpu.gpulib import PRECISIONS, assert_gpu_matches, check_gpu, dispatches
from tests.gpu.test_quantized_models import assert_within_one_step
from tests.litert import run_litert
from tests.oplib import In, run_ours

OP = "L2_NORMALIZATION"
ALL_PRECISIONS = PRECISIONS + ("auto",)
CASES = [  # (shape, variant)
    ((7,), "loop"),
    ((1,), "loop"),                  # one channel: its sign (zero stays zero)
    ((1, 1, 1, 1), "loop"),
    ((3, 5), "loop"),                # padded lanes in the one slice
    ((2, 4, 4, 6), "loop"),
    ((2, 3, 4, 1), "loop"),
    ((1, 512), "parallel"),          # an embedding (face recognition, retrieval)
    ((3, 70), "parallel"),           # padded lanes in the last slice
    ((2, 2, 3, 130), "parallel"),
    ((1, 2000), "parallel"),         # 500 slices over 128 lanes
    ((1, 100, 100, 70), "loop"),     # too many pixels for a workgroup each
    ((2, 1, 3, 2, 5), "loop"),       # rank 5: leading dims merged into the batch
    ((1, 2, 1, 2, 3, 9), "loop"),    # rank 6
    ((2, 3, 2, 2, 300), "parallel"),
]


def sample(shape, seed, scale=3.0):
    return (np.random.default_rng(seed).normal(0, 1, shape) * scale).astype(np.float32)


@pytest.mark.parametrize("shape,expected", CASES)
def test_cases_cover_both_variants(shape, expected):
    (d,) = dispatches(OP, [In(np.zeros(shape, np.float32))])
    assert d.template == "softmax" and d.defines["OP"] == softmax.TEMPLATE_CODES[OP]
    assert bool(d.defines["PARALLEL"]) == (expected == "parallel")


def test_template_is_highp_in_every_precision():
    """The sum of squares (and the square of a half above 256) overflows fp16 math: the template
    is compiled highp in the half modes too. llvmpipe runs mediump as fp32, so test_magnitudes
    alone cannot see a mediump template; GPUs that honour mediump (NVIDIA's GLES) would."""
    (d,) = dispatches(OP, [In(np.zeros((1, 8), np.float32))])
    assert shader.full_precision(d.template)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
@pytest.mark.parametrize("shape,expected", CASES)
def test_l2_normalization(shape, expected, precision):
    check_gpu(OP, [In(sample(shape, sum(shape)))], None, precision)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
@pytest.mark.parametrize("shape", [(4, 9), (2, 600)])
def test_magnitudes(shape, precision):
    """Rows scaled from 1e-4 (half floats hold it as a normal number) to 6e4, whose squares
    (3.6e9) and their sum overflow any half-float arithmetic: the sum must be highp. In FP32
    also 1e-12 (the norm is below 1e-6: x / 1e-6), 1e15 and 1e19 (squares overflow float32:
    the norm is inf and the row 0, as in TFLite)."""
    rows = shape[0] * 2
    scales = [1e-4, 1.0, 3e4, 6e4 / 4] if precision != "fp32" else [1e-12, 1e-4, 1.0, 6e4, 1e15, 1e19]
    x = np.concatenate([sample((rows,) + shape[1:], k, 1.0) * s for k, s in enumerate(scales)])
    if precision != "fp32":
        x = np.clip(x, -6e4, 6e4)
    check_gpu(OP, [In(x.astype(np.float32))], None, precision)


def special_rows(channels):
    """Rows of zeros (0 / epsilon), one NaN (a NaN row), +inf (NaN there, 0 elsewhere), -inf and
    +inf together, a lone nonzero channel, and an ordinary row."""
    rows = np.tile(np.linspace(-2, 3, channels, dtype=np.float32), (7, 1))
    rows[0] = 0.0
    rows[1, channels // 2] = np.nan
    rows[2, -1] = np.inf
    rows[3, 0], rows[3, -1] = -np.inf, np.inf
    rows[4] = 0.0
    rows[4, channels // 3] = -5.0
    return rows


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
@pytest.mark.parametrize("channels", [1, 3, 8, 130])
def test_zeros_nan_and_infinities(channels, precision):
    reference, gpu = check_gpu(OP, [In(special_rows(channels))], None, precision)
    assert not np.any(gpu[0][0]) and np.isnan(gpu[0][1]).all()


def test_norms_below_epsilon():
    """Norms of 1e-7 to 1e-6 are replaced by 1e-6 (TFLite's), so the row is x / 1e-6, not x / norm."""
    x = np.array([[3e-7, 4e-7, 0.0], [0.0, 6e-7, 8e-7], [1e-24, 2e-24, 0.0], [3e-6, 4e-6, 0.0]], np.float32)
    reference, gpu = check_gpu(OP, [In(x)], None, "fp32")
    np.testing.assert_allclose(gpu[0][:2], x[:2] * 1e6, rtol=1e-5)
    np.testing.assert_allclose(gpu[0][3], [0.6, 0.8, 0.0], rtol=1e-5)


def chain_model(shape, channels, scalar=0.5):
    """x -> CONV_2D (3x3, `channels` out) -> L2_NORMALIZATION -> ADD a scalar -> SUM over the
    channels: the scalar ADD would turn the padded lanes of its output to `scalar` unless they are
    zeroed after the epilogue, and the SUM reads them."""
    b = ModelBuilder()
    x = b.input("x", shape)
    rng = np.random.default_rng(5)
    w = b.const("w", rng.normal(0, 0.5, (channels, 3, 3, shape[-1])).astype(np.float32))
    bias = b.const("bias", rng.normal(0, 0.1, channels).astype(np.float32))
    conv = b.tensor("conv", shape[:3] + (channels,))
    b.op("CONV_2D", [x, w, bias], [conv], padding=0, stride_w=1, stride_h=1, dilation_w_factor=1,
         dilation_h_factor=1, fused_activation_function=1)
    unit = b.tensor("unit", shape[:3] + (channels,))
    b.op(OP, [conv], [unit])
    shifted = b.tensor("shifted", shape[:3] + (channels,))
    b.op("ADD", [unit, b.const("half", np.array([scalar], np.float32))], [shifted])
    total = b.tensor("total", shape[:3] + (1,))
    b.op("SUM", [shifted, b.const("axis", np.array([3], np.int32))], [total], keep_dims=True)
    b.output(total)
    return b.build()


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
@pytest.mark.parametrize("channels", [6, 70])
def test_between_gpu_ops_in_one_partition(channels, precision):
    """The model runs as one GPU partition; the ADD runs in L2_NORMALIZATION's epilogue (no
    elementwise dispatch), and the padded lanes it would fill stay out of the SUM."""
    shape = (1, 5, 4, 3)
    model = chain_model(shape, channels)
    x = sample(shape, channels, 1.0)
    with GpuDelegate(precision=precision) as delegate:
        (gpu,) = run_ours(model, [x], experimental_delegates=[delegate])
        summary, templates = delegate.summary(), delegate.partitions[0].plan.templates
    assert (summary["gpu_nodes"], summary["cpu_nodes"], summary["partitions"]) == (4, 0, 1), summary
    assert templates.count("softmax") == 1 and "elementwise" not in templates, templates
    (reference,) = run_ours(model, [x])
    # A sum of `channels` values of magnitude <= 1.5, each to the L2 kernel's precision.
    extra = channels * (2.0 ** -11 if precision != "fp32" else 2.0 ** -20) * 1.5
    assert_gpu_matches(reference, gpu, precision, "L2 chain", extra=extra)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
def test_uint8_through_the_float_view(precision):
    """uint8 (output grid 1/128, zero point 128): the view's fake-quant step snaps to TFLite's
    grid; within one step of LiteRT's integer kernel, a lone channel saturating at 255."""
    rng = np.random.default_rng(7)
    b = ModelBuilder()
    shape = (2, 5, 11)
    x = b.input("x", shape, np.uint8, quantization=(0.04, 131))
    y = b.tensor("y", shape, np.uint8, quantization=(1 / 128, 128))
    b.op(OP, [x], [y])
    b.output(y)
    model = b.build()
    q = rng.integers(0, 256, shape).astype(np.uint8)
    q[0, 0], q[0, 1] = 131, 131
    q[0, 1, 3] = 140
    with GpuDelegate(precision=precision) as delegate:
        (gpu,) = run_ours(model, [q], experimental_delegates=[delegate])
        assert delegate.summary()["cpu_nodes"] == 0
    (theirs,) = run_litert(model, [q], resolver="builtin")
    assert gpu.dtype == np.uint8 and gpu[0, 0].tolist() == [128] * 11 and gpu[0, 1, 3] == 255
    assert_within_one_step(gpu, theirs, 1)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("shape", [(2, 5, 4, 70), (2, 5, 4, 6), (3, 600)])
def test_residual_add_and_relu_run_in_the_epilogue(shape, precision):
    """L2(x) + y, then RELU: both fused into the L2 dispatch, whose epilogue reads y at each
    output's own position in either variant (a workgroup a pixel: (2, 5, 4, 70), (3, 600))."""
    b = ModelBuilder()
    x, y = b.input("x", shape), b.input("y", shape)
    unit, total, out = (b.tensor(name, shape) for name in ("unit", "total", "out"))
    b.op(OP, [x], [unit])
    b.op("ADD", [unit, y], [total])
    b.op("RELU", [total], [out])
    b.output(out)
    model = b.build()
    values = [sample(shape, 1), sample(shape, 2, 0.1)]
    with GpuDelegate(precision=precision) as delegate:
        (gpu,) = run_ours(model, values, experimental_delegates=[delegate])
        templates = delegate.partitions[0].plan.templates
    assert templates == ["convert_in", "convert_in", "softmax"], templates
    stored = values if precision == "fp32" else [v.astype(np.float16).astype(np.float32) for v in values]
    assert_gpu_matches(run_ours(model, stored)[0], gpu, precision, "L2 + y, RELU")
