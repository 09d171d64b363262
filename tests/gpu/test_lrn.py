"""GPU LOCAL_RESPONSE_NORMALIZATION (kernels_glsl/lrn.glsl) against the numpy reference, in every
precision (auto included): every option set the reference tests take against LiteRT (radius 0,
within, across and beyond the channel slices, negative beta), channels that are not a multiple of
4 (padded lanes out of the window, written zero), many slices, magnitudes whose squares overflow
half math, a negative bias to an integer power (C's powf), zeros, NaN and infinities; in a model
between GPU ops it runs in their partition."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.gpu import shader
from gles_delegate.tflite import ModelBuilder
from tests.gpu.gpulib import PRECISIONS, assert_gpu_matches, check_gpu, dispatches
from tests.oplib import In, run_ours
from tests.ops.test_normalization import LRN, LRN_OPTIONS

ALL_PRECISIONS = PRECISIONS + ("auto",)
SHAPES = [(1, 3, 4, 7), (2, 2, 3, 16), (1, 1, 1, 1), (1, 4, 2, 130)]


def option_id(options):
    return "-".join(f"{k}{v}" for k, v in options.items())


def sample(shape, seed, scale=2.0):
    return (np.random.default_rng(seed).normal(0, 1, shape) * scale).astype(np.float32)


def test_template_is_highp_in_every_precision():
    """The window's sum of squares overflows half math above 256: the template is highp."""
    (d,) = dispatches(LRN, [In(np.zeros((1, 2, 2, 8), np.float32))], LRN_OPTIONS[0])
    assert d.template == "lrn" and shader.full_precision("lrn")


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
@pytest.mark.parametrize("options", LRN_OPTIONS, ids=option_id)
def test_lrn(options, precision):
    for k, shape in enumerate(SHAPES):
        check_gpu(LRN, [In(sample(shape, k))], options, precision)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
def test_magnitudes(precision):
    """Pixels scaled from 1e-4 to 6e4 (squares of 3.6e9: the sum must be highp); in FP32 also
    1e19, whose squares overflow float32 (the scale is inf and the output 0 or NaN, as TFLite's)."""
    scales = [1e-4, 1.0, 300.0, 6e4] + ([1e19] if precision == "fp32" else [])
    x = np.concatenate([sample((1, 2, 3, 11), k, 1.0) * s for k, s in enumerate(scales)])
    if precision != "fp32":
        x = np.clip(x, -6e4, 6e4)
    check_gpu(LRN, [In(x.astype(np.float32))], dict(radius=2, bias=1.0, alpha=1e-4, beta=0.75), precision)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
def test_negative_bias_to_integer_powers(precision):
    """bias + alpha W below zero: C's powf gives a (signed) number for an integer -beta and NaN
    for another; GLSL's pow would give NaN for both."""
    x = sample((1, 2, 2, 9), 3, 0.1)
    for beta in (1.0, 2.0, 0.75):
        reference, gpu = check_gpu(LRN, [In(x)], dict(radius=1, bias=-1.0, alpha=0.5, beta=beta), precision)
        assert np.isnan(gpu[0]).all() == (beta == 0.75)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
def test_zeros_nan_and_infinities(precision):
    """A zero pixel stays zero; a NaN or inf spreads over its window and no further."""
    x = np.tile(np.linspace(-2, 3, 13, dtype=np.float32), (1, 3, 1, 1))
    x[0, 0] = 0.0
    x[0, 1, 0, 6] = np.nan
    x[0, 2, 0, 12] = np.inf
    reference, gpu = check_gpu(LRN, [In(x)], dict(radius=2, bias=1.0, alpha=0.5, beta=0.75), precision)
    assert not np.any(gpu[0][0, 0])
    assert np.isnan(gpu[0][0, 1, 0]).tolist() == [abs(c - 6) <= 2 for c in range(13)]


def chain_model(shape, channels, options):
    """x -> CONV_2D (3x3, `channels` out, RELU) -> LRN -> MAX_POOL_2D 2x2: Inception v1's stem."""
    b = ModelBuilder()
    x = b.input("x", shape)
    rng = np.random.default_rng(5)
    w = b.const("w", rng.normal(0, 0.5, (channels, 3, 3, shape[-1])).astype(np.float32))
    bias = b.const("bias", rng.normal(0, 0.1, channels).astype(np.float32))
    conv, normed = b.tensor("conv", shape[:3] + (channels,)), b.tensor("normed", shape[:3] + (channels,))
    b.op("CONV_2D", [x, w, bias], [conv], padding=0, stride_w=1, stride_h=1, dilation_w_factor=1,
         dilation_h_factor=1, fused_activation_function=1)
    b.op(LRN, [conv], [normed], **options)
    pooled = b.tensor("pooled", (shape[0], shape[1] // 2, shape[2] // 2, channels))
    b.op("MAX_POOL_2D", [normed], [pooled], padding=1, stride_w=2, stride_h=2, filter_width=2, filter_height=2,
         fused_activation_function=0)
    b.output(pooled)
    return b.build()


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
def test_between_gpu_ops_in_one_partition(precision):
    shape, options = (1, 8, 6, 3), dict(radius=2, bias=1.0, alpha=1e-2, beta=0.75)
    model = chain_model(shape, 10, options)
    x = sample(shape, 9, 1.0)
    with GpuDelegate(precision=precision) as delegate:
        (gpu,) = run_ours(model, [x], experimental_delegates=[delegate])
        summary = delegate.summary()
    assert (summary["gpu_nodes"], summary["cpu_nodes"], summary["partitions"]) == (3, 0, 1), summary
    stored = x if precision == "fp32" else x.astype(np.float16).astype(np.float32)
    (reference,) = run_ours(model, [stored])
    # The convolution's error (27 products of magnitude ~1.5) passes through the normalization's
    # scale, which stays within [0.5, 1]: the chain's bound is the convolution's at the output's size.
    extra = 27 * 1.5 * (2.0 ** -11 if precision != "fp32" else 2.0 ** -22)
    assert_gpu_matches(reference, gpu, precision, "conv -> LRN -> pool", extra=extra)
