"""CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED and MediaPipe's
Convolution2DTransposeBias: the numpy reference against LiteRT, on random single-op models and
on every such node of the MediaPipe models."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gles_delegate import Interpreter, ModelError, ops
from gles_delegate.graph import Graph
from gles_delegate.tflite import read_model
from tests.oplib import (BUILTIN_ONLY_MODELS, CLAMPS, SAME, VALID, In, assert_close, build_model, check_model_nodes,
                         check_op, conv_options, reason_of, run_ours, single_op_model, window_out_size)

QUANT_KINDS = [(np.int8, True), (np.int8, False), (np.uint8, False)]  # (dtype, per-channel weights)
FEW = settings(max_examples=20, deadline=None)


def _uniform(rng, shape, scale=1.0):
    return rng.uniform(-scale, scale, shape).astype(np.float32)


# -- quantized operands -------------------------------------------------------------------
def _quantized(rng, dtype, x_shape, w_shape, channel_axis, per_channel, depth):
    """[input, weights, bias] In specs and the output quantization of a quantized convolution
    whose accumulators sum `depth` products: the output scale spreads them over ~+-60 steps."""
    info = np.iinfo(dtype)
    channels = w_shape[channel_axis]
    in_scale, in_zp = rng.uniform(0.01, 0.05), int(rng.integers(info.min + 60, info.max - 60))
    x = rng.integers(info.min, info.max + 1, x_shape).astype(dtype)
    if dtype == np.int8:  # symmetric weights, as TFLite's int8 kernels assume
        w = rng.integers(-127, 128, w_shape).astype(np.int8)
        w_scale = rng.uniform(0.002, 0.02, channels if per_channel else 1).astype(np.float32)
        w_quant = (w_scale, 0, channel_axis) if per_channel else (w_scale[0], 0)
    else:
        w = rng.integers(0, 256, w_shape).astype(np.uint8)
        w_scale = np.float32([rng.uniform(0.002, 0.02)])
        w_quant = (w_scale[0], int(rng.integers(100, 156)))
    # Centred 8-bit operands have a standard deviation near 75: the accumulators near 75 * 75 * sqrt(depth).
    spread = int(75 * 75 * np.sqrt(depth))
    # TFLite checks bias_scale == input_scale * filter_scale (as a float32 product).
    bias_scale = np.float32(in_scale) * w_scale
    bias = rng.integers(-spread, spread + 1, channels).astype(np.int32)
    out_scale = float(in_scale * w_scale.mean() * spread / 60)
    out_quant = (out_scale, int(rng.integers(info.min + 60, info.max - 60)))
    return ([In(x, quant=(in_scale, in_zp)), In(w, const=True, quant=w_quant),
             In(bias, const=True, quant=(bias_scale, 0, 0) if bias_scale.size > 1 else (bias_scale[0], 0))],
            out_quant)


def _check_quantized(op, inputs, options, out_quant, dtype, **kwargs):
    """Within one step of LiteRT's optimized kernels, and exact against its reference kernels
    (the optimized int8 paths round a few accumulators differently)."""
    common = dict(output_dtypes=[np.dtype(dtype)], output_quant=[out_quant], **kwargs)
    check_op(op, inputs, options, quantum=1, **common)
    check_op(op, inputs, options, resolver="reference", **common)


# -- CONV_2D ------------------------------------------------------------------------------
CONV_CASES = [  # (x shape, (O, KH, KW), strides, dilations)
    ((1, 1, 1, 3), (4, 3, 3), (1, 1), (1, 1)),      # 1x1 input, 3x3 kernel
    ((1, 1, 1, 1), (1, 1, 1), (1, 1), (1, 1)),      # everything 1
    ((2, 7, 9, 3), (5, 3, 2), (2, 3), (1, 1)),      # batch 2, odd sizes, unequal strides
    ((1, 8, 8, 4), (3, 1, 1), (3, 3), (1, 1)),      # stride > kernel
    ((1, 9, 11, 2), (2, 3, 3), (1, 1), (2, 3)),     # dilation
    ((1, 10, 10, 3), (2, 3, 3), (2, 2), (3, 2)),    # dilation and stride
    ((1, 6, 5, 16), (8, 5, 5), (1, 2), (1, 1)),     # kernel as large as the input
]


@pytest.mark.parametrize("padding", [SAME, VALID])
@pytest.mark.parametrize("x_shape,okk,strides,dilations", CONV_CASES)
def test_conv_2d_float_cases(x_shape, okk, strides, dilations, padding):
    rng = np.random.default_rng(sum(x_shape) + padding)
    out_hw = [window_out_size(s, k, st_, padding, d) for s, k, st_, d in zip(x_shape[1:3], okk[1:], strides, dilations)]
    if min(out_hw) < 1:
        pytest.skip("the VALID window does not fit")
    w = _uniform(rng, okk + x_shape[3:])
    for activation in CLAMPS:
        check_op("CONV_2D", [In(_uniform(rng, x_shape, 2)), In(w, const=True), In(_uniform(rng, okk[:1]), const=True)],
                 conv_options(strides, dilations, padding, activation))


@FEW
@given(st.integers(1, 2), st.integers(1, 10), st.integers(1, 10), st.integers(1, 6), st.integers(1, 6),
       st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3),
       st.integers(1, 3), st.sampled_from([SAME, VALID]), st.sampled_from(CLAMPS), st.booleans(),
       st.integers(0, 2 ** 31))
def test_conv_2d_float_random(n, h, w, c, o, kh, kw, sh, sw, dh, dw, padding, activation, const_weights, seed):
    assume(min(window_out_size(h, kh, sh, padding, dh), window_out_size(w, kw, sw, padding, dw)) >= 1)
    rng = np.random.default_rng(seed)
    inputs = [In(_uniform(rng, (n, h, w, c))), In(_uniform(rng, (o, kh, kw, c)), const=const_weights),
              In(_uniform(rng, (o,)), const=const_weights)]
    check_op("CONV_2D", inputs, conv_options((sh, sw), (dh, dw), padding, activation))


@pytest.mark.parametrize("op,w_shape,options", [
    ("CONV_2D", (4, 3, 3, 3), conv_options((2, 1), (1, 1), SAME, 1)),
    ("DEPTHWISE_CONV_2D", (1, 3, 3, 6), dict(conv_options((2, 1), (1, 1), SAME, 1), depth_multiplier=2))])
def test_omitted_bias_is_zero_bias(op, w_shape, options):
    """LiteRT's CONV_2D refuses a missing bias (and its DEPTHWISE_CONV_2D crashes on one): compare
    ours without bias, absent or omitted (-1), against LiteRT with a zero bias."""
    rng = np.random.default_rng(7)
    x, w = _uniform(rng, (1, 6, 7, 3)), _uniform(rng, w_shape)
    out_channels = w_shape[0] if op == "CONV_2D" else w_shape[3]
    _, theirs = check_op(op, [In(x), In(w, const=True), In(np.zeros(out_channels, np.float32), const=True)], options)
    for no_bias in ([In(x), In(w, const=True)], [In(x), In(w, const=True), None]):
        ours = run_ours(single_op_model(op, no_bias, options), [x])
        assert_close(ours[0], theirs[0], what=f"{op} without bias")


@pytest.mark.parametrize("padding", [SAME, VALID])
@pytest.mark.parametrize("activation", [0, 1, 3])
@pytest.mark.parametrize("dtype,per_channel", QUANT_KINDS)
def test_conv_2d_quantized(dtype, per_channel, activation, padding):
    rng = np.random.default_rng(activation * 10 + padding)
    for x_shape, okk, strides, dilations in CONV_CASES[2:6]:
        if min(window_out_size(s, k, st_, padding, d) for s, k, st_, d in
               zip(x_shape[1:3], okk[1:], strides, dilations)) < 1:
            continue
        w_shape = okk + x_shape[3:]
        inputs, out_quant = _quantized(rng, dtype, x_shape, w_shape, 0, per_channel, np.prod(w_shape[1:]))
        _check_quantized("CONV_2D", inputs, conv_options(strides, dilations, padding, activation), out_quant, dtype)


# -- grouped CONV_2D: the filter reads C / G of the input's C channels ---------------------
GROUPED_CASES = [  # (x shape, (O, KH, KW, I)), G = C / I
    ((1, 6, 7, 8), (6, 3, 3, 4)),      # 2 groups of 3 outputs
    ((2, 5, 5, 12), (12, 3, 2, 3)),    # 4 groups, batch 2
    ((1, 4, 6, 6), (6, 1, 1, 1)),      # as many groups as channels: a depthwise 1x1
    ((1, 7, 7, 16), (8, 3, 3, 2)),     # 8 groups of 1 output
    ((1, 1, 1, 4), (4, 3, 3, 2)),      # 1x1 input, padded taps
]


@pytest.mark.parametrize("padding", [SAME, VALID])
@pytest.mark.parametrize("strides,dilations", [((1, 1), (1, 1)), ((2, 1), (1, 2)), ((1, 3), (2, 1))])
@pytest.mark.parametrize("x_shape,w_shape", GROUPED_CASES)
def test_conv_2d_grouped_float(x_shape, w_shape, strides, dilations, padding):
    """Every fused clamp, with and without bias, runtime and constant weights."""
    out_hw = [window_out_size(s, k, st_, padding, d) for s, k, st_, d in zip(x_shape[1:3], w_shape[1:3], strides,
                                                                            dilations)]
    if min(out_hw) < 1:
        pytest.skip("the VALID window does not fit")
    rng = np.random.default_rng(sum(x_shape) + sum(strides) + padding)
    x, w, b = _uniform(rng, x_shape, 2), _uniform(rng, w_shape), _uniform(rng, w_shape[:1])
    for activation in CLAMPS:
        check_op("CONV_2D", [In(x), In(w, const=activation != 1), In(b, const=True)],
                 conv_options(strides, dilations, padding, activation))
    options = conv_options(strides, dilations, padding)
    no_bias = run_ours(single_op_model("CONV_2D", [In(x), In(w, const=True)], options), [x])[0]
    _, theirs = check_op("CONV_2D", [In(x), In(w, const=True), In(np.zeros_like(b), const=True)], options)
    assert_close(no_bias, theirs[0], what="grouped CONV_2D without bias")


@pytest.mark.parametrize("dtype,per_channel", QUANT_KINDS)
def test_conv_2d_grouped_quantized(dtype, per_channel):
    rng = np.random.default_rng(11)
    for (x_shape, w_shape), activation in zip(GROUPED_CASES, [0, 1, 3, 0, 1]):
        inputs, out_quant = _quantized(rng, dtype, x_shape, w_shape, 0, per_channel, np.prod(w_shape[1:]))
        _check_quantized("CONV_2D", inputs, conv_options((1, 2), (1, 1), SAME, activation), out_quant, dtype)


# -- DEPTHWISE_CONV_2D --------------------------------------------------------------------
@FEW
@given(st.integers(1, 2), st.integers(1, 10), st.integers(1, 10), st.integers(1, 5), st.integers(1, 3),
       st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
       st.sampled_from([SAME, VALID]), st.sampled_from(CLAMPS), st.integers(0, 2 ** 31))
def test_depthwise_float_random(n, h, w, c, multiplier, kh, kw, sh, sw, dilation, padding, activation, seed):
    assume(min(window_out_size(h, kh, sh, padding, dilation), window_out_size(w, kw, sw, padding, dilation)) >= 1)
    rng = np.random.default_rng(seed)
    inputs = [In(_uniform(rng, (n, h, w, c))), In(_uniform(rng, (1, kh, kw, c * multiplier)), const=True),
              In(_uniform(rng, (c * multiplier,)), const=True)]
    options = dict(conv_options((sh, sw), (dilation, dilation), padding, activation), depth_multiplier=multiplier)
    check_op("DEPTHWISE_CONV_2D", inputs, options, version=2 if dilation > 1 else 1)


def test_depthwise_ignores_depth_multiplier_option():
    """TFLite derives the multiplier from the shapes; the option may disagree (or be 0)."""
    rng = np.random.default_rng(3)
    inputs = [In(_uniform(rng, (1, 5, 5, 2))), In(_uniform(rng, (1, 3, 3, 6)), const=True),
              In(_uniform(rng, (6,)), const=True)]
    for stated in (0, 1, 5):
        check_op("DEPTHWISE_CONV_2D", inputs, dict(conv_options((1, 1), (1, 1), SAME, 0), depth_multiplier=stated))


@pytest.mark.parametrize("padding", [SAME, VALID])
@pytest.mark.parametrize("activation", [0, 1, 3])
@pytest.mark.parametrize("dtype,per_channel", QUANT_KINDS)
def test_depthwise_quantized(dtype, per_channel, activation, padding):
    rng = np.random.default_rng(activation * 10 + padding + 100)
    for x_shape, multiplier, strides, dilation in [((1, 7, 9, 3), 2, (1, 1), 1), ((2, 6, 5, 4), 1, (2, 2), 1),
                                                    ((1, 9, 9, 2), 3, (1, 2), 2), ((1, 1, 1, 5), 1, (1, 1), 1)]:
        w_shape = (1, 3, 3, x_shape[3] * multiplier)
        if min(window_out_size(s, 3, st_, padding, dilation) for s, st_ in zip(x_shape[1:3], strides)) < 1:
            continue
        inputs, out_quant = _quantized(rng, dtype, x_shape, w_shape, 3, per_channel, 9)
        options = dict(conv_options(strides, (dilation, dilation), padding, activation), depth_multiplier=multiplier)
        _check_quantized("DEPTHWISE_CONV_2D", inputs, options, out_quant, dtype, version=2)


# -- TRANSPOSE_CONV -----------------------------------------------------------------------
def _transpose_out_size(size, k, stride, padding, pick):
    """One of the output sizes whose forward convolution has `size` outputs (`pick` in [0, 1))."""
    low = (size - 1) * stride + (1 if padding == SAME else k)
    return low + int(pick * stride)


@FEW
@given(st.integers(1, 2), st.integers(1, 7), st.integers(1, 7), st.integers(1, 5), st.integers(1, 5),
       st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(1, 4),
       st.sampled_from([SAME, VALID]), st.sampled_from(CLAMPS), st.booleans(), st.floats(0, 0.999),
       st.integers(0, 2 ** 31))
def test_transpose_conv_float_random(n, h, w, c, o, kh, kw, sh, sw, padding, activation, with_bias, pick, seed):
    rng = np.random.default_rng(seed)
    out_shape = [n, _transpose_out_size(h, kh, sh, padding, pick), _transpose_out_size(w, kw, sw, padding, pick), o]
    inputs = [In(np.array(out_shape, np.int32), const=True), In(_uniform(rng, (o, kh, kw, c)), const=True),
              In(_uniform(rng, (n, h, w, c))), In(_uniform(rng, (o,)), const=True) if with_bias else None]
    options = dict(padding=padding, stride_h=sh, stride_w=sw, fused_activation_function=activation)
    check_op("TRANSPOSE_CONV", inputs, options, version=4, output_dtypes=[np.dtype(np.float32)])


@pytest.mark.parametrize("padding", [SAME, VALID])
@pytest.mark.parametrize("activation", [0, 1])
@pytest.mark.parametrize("dtype,per_channel", QUANT_KINDS)
def test_transpose_conv_quantized(dtype, per_channel, activation, padding):
    rng = np.random.default_rng(activation * 10 + padding + 200)
    for x_shape, (o, kh, kw), strides in [((1, 4, 5, 3), (4, 3, 3), (2, 2)), ((2, 3, 3, 2), (3, 2, 4), (1, 3)),
                                          ((1, 1, 1, 4), (2, 3, 3), (2, 2))]:
        w_shape = (o, kh, kw, x_shape[3])
        spec, out_quant = _quantized(rng, dtype, x_shape, w_shape, 0, per_channel, kh * kw * x_shape[3] // 2)
        out_shape = [x_shape[0]] + [_transpose_out_size(s, k, st_, padding, 0.5)
                                    for s, k, st_ in zip(x_shape[1:3], (kh, kw), strides)] + [o]
        inputs = [In(np.array(out_shape, np.int32), const=True), spec[1], spec[0], spec[2]]
        options = dict(padding=padding, stride_h=strides[0], stride_w=strides[1], fused_activation_function=activation)
        _check_quantized("TRANSPOSE_CONV", inputs, options, out_quant, dtype, version=4)


# -- FULLY_CONNECTED ----------------------------------------------------------------------
@FEW
@given(st.lists(st.integers(1, 4), min_size=0, max_size=3), st.integers(1, 40), st.integers(1, 12),
       st.booleans(), st.booleans(), st.sampled_from(CLAMPS), st.integers(0, 2 ** 31))
def test_fully_connected_float_random(leading, depth, units, keep_num_dims, with_bias, activation, seed):
    rng = np.random.default_rng(seed)
    inputs = [In(_uniform(rng, tuple(leading) + (depth,))), In(_uniform(rng, (units, depth)), const=True),
              In(_uniform(rng, (units,)), const=True) if with_bias else None]
    check_op("FULLY_CONNECTED", inputs, dict(keep_num_dims=keep_num_dims, fused_activation_function=activation))


def test_fully_connected_regroups_rows():
    """Without keep_num_dims TFLite reads the input as rows of the weights' depth, whatever its shape."""
    rng = np.random.default_rng(5)
    ours, _ = check_op("FULLY_CONNECTED", [In(_uniform(rng, (2, 6))), In(_uniform(rng, (5, 4)), const=True),
                                           In(_uniform(rng, (5,)), const=True)], dict(keep_num_dims=False))
    assert ours[0].shape == (3, 5)


@pytest.mark.parametrize("activation", [0, 1, 3])
@pytest.mark.parametrize("dtype,per_channel", QUANT_KINDS)
def test_fully_connected_quantized(dtype, per_channel, activation):
    rng = np.random.default_rng(activation + 300)
    for x_shape, units, keep_num_dims in [((3, 20), 5, False), ((2, 3, 16), 7, True), ((1, 1), 1, False)]:
        inputs, out_quant = _quantized(rng, dtype, x_shape, (units, x_shape[-1]), 0, per_channel, x_shape[-1])
        options = dict(keep_num_dims=keep_num_dims, fused_activation_function=activation)
        _check_quantized("FULLY_CONNECTED", inputs, options, out_quant, dtype)


def test_fully_connected_rounds_once():
    """127 * 127 * real = 10.4998: rounding twice (via 10.5, as the convolutions do) would give 11;
    TFLite's FULLY_CONNECTED rounds once, to 10."""
    real = 10.4998 / (127 * 127)
    x, w = np.array([[127]], np.int8), np.array([[127]], np.int8)
    ours, _ = check_op("FULLY_CONNECTED", [In(x, quant=(0.5, 0)), In(w, const=True, quant=(0.5, 0))], {},
                       resolver="reference", output_quant=[(0.25 / real, 0)])
    assert ours[0].item() == 10


# -- non-finite inputs --------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:invalid value encountered")  # inf - inf in a sum: NaN, as in C++
@pytest.mark.parametrize("activation", [0, 1, 3])
def test_infinities_clamp_to_flt_max(activation):
    """TFLite's output stage clamps to the activation's range within +-FLT_MAX, so an infinite
    sum leaves every convolution as +-FLT_MAX (+inf - inf as NaN), with or without activation.
    The two infinities sit in different channels: LiteRT's optimized depthwise kernel turns a NaN
    into the activation's maximum, its reference kernel (and ours) keeps it."""
    rng = np.random.default_rng(activation)
    x, w, b = _uniform(rng, (1, 5, 5, 3)), _uniform(rng, (4, 3, 3, 3)), _uniform(rng, (4,))
    x[0, 2, 2, 1], x[0, 0, 4, 0] = np.inf, -np.inf
    options = conv_options((1, 1), (1, 1), SAME, activation)
    bias = In(b, const=True)
    check_op("CONV_2D", [In(x), In(w, const=True), bias], options)
    check_op("DEPTHWISE_CONV_2D", [In(x), In(w[:1], const=True), In(b[:3], const=True)],
             dict(options, depth_multiplier=1))
    check_op("TRANSPOSE_CONV", [In(np.array([1, 5, 5, 4], np.int32), const=True), In(w, const=True), In(x), bias],
             dict(padding=SAME, stride_h=1, stride_w=1, fused_activation_function=activation), version=4,
             output_dtypes=[np.dtype(np.float32)])
    check_op("FULLY_CONNECTED", [In(x.reshape(-1, 3)), In(w[:, 0, 0], const=True), bias],
             dict(fused_activation_function=activation))


# -- MediaPipe Convolution2DTransposeBias --------------------------------------------------
MP_SAME, MP_VALID = 1, 2  # TfLitePadding, as the custom options hold it


def _mediapipe_options(padding, strides):
    return np.array([padding, strides[1], strides[0]], "<i4").tobytes()


@FEW
@given(st.integers(1, 8), st.integers(1, 8), st.integers(1, 5), st.integers(1, 5), st.integers(1, 4),
       st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.sampled_from([MP_SAME, MP_VALID]),
       st.integers(0, 2 ** 31))
def test_transpose_conv_bias_random(h, w, c, o, kh, kw, sh, sw, padding, seed):
    # LiteRT runs this op only through XNNPACK, which refuses SAME with a stride above the kernel.
    assume(padding == MP_VALID or (sh <= kh and sw <= kw))
    rng = np.random.default_rng(seed)
    inputs = [In(_uniform(rng, (1, h, w, c))), In(_uniform(rng, (o, kh, kw, c)), const=True),
              In(_uniform(rng, (o,)), const=True)]
    check_op("Convolution2DTransposeBias", inputs, custom_options=_mediapipe_options(padding, (sh, sw)),
             resolver="default")


def _constant(graph, tensor):
    """A tensor's constant value, looking through the DEQUANTIZE of fp16 weights."""
    if tensor.is_const:
        return tensor.data
    producer = graph.producers()[id(tensor)]
    assert producer.op == "DEQUANTIZE" and producer.inputs[0].is_const
    return producer.inputs[0].data.astype(np.float32)


@pytest.mark.parametrize("name", ["selfie_segmentation", "selfie_segmentation_landscape"])
def test_transpose_conv_bias_in_selfie_model(mediapipe_models, name):
    graph = Graph.from_model(read_model(str(mediapipe_models[name])))
    node = next(n for n in graph.nodes if n.op == "Convolution2DTransposeBias")
    x_t, w_t, b_t = node.inputs
    rng = np.random.default_rng(11)
    inputs = [In(_uniform(rng, x_t.shape, 4)), In(_constant(graph, w_t), const=True),
              In(_constant(graph, b_t), const=True)]
    ours, _ = check_op(node.op, inputs, custom_options=node.custom_options, resolver="default")
    assert ours[0].shape == node.outputs[0].shape


# -- every node of the real models --------------------------------------------------------
@pytest.mark.parametrize("name", BUILTIN_ONLY_MODELS)
def test_mediapipe_model_convolutions(mediapipe_models, name):
    assert check_model_nodes(str(mediapipe_models[name]), set(ops.conv.KERNELS)) > 0


# -- rejected at allocate time ------------------------------------------------------------
F32 = np.float32
X, W, B = In(np.zeros((1, 5, 5, 3), F32)), In(np.zeros((4, 3, 3, 3), F32), const=True), In(np.zeros(4, F32), const=True)
OUT = [((1, 5, 5, 4), F32, None)]
FC_W, FC_OUT = In(np.zeros((4, 3), F32), const=True), [((2, 4), F32, None)]
CONV = dict(padding=SAME, stride_w=1, stride_h=1, dilation_w_factor=1, dilation_h_factor=1)
Q8 = (0.1, 0)


def _qzeros(shape, dtype=np.int8, quant=Q8, const=False):
    """A quantized input of zeros."""
    return In(np.zeros(shape, dtype), const=const, quant=quant)


REJECTED = [  # (what, model, words the reason must contain)
    ("padding", build_model("CONV_2D", [X, W, B], OUT, dict(CONV, padding=2)), "padding 2"),
    ("stride 0", build_model("CONV_2D", [X, W, B], OUT, dict(CONV, stride_w=0)), "strides"),
    ("dilation 0", build_model("CONV_2D", [X, W, B], OUT, dict(CONV, dilation_h_factor=0)), "dilations"),
    ("tanh", build_model("CONV_2D", [X, W, B], OUT, dict(CONV, fused_activation_function=4)), "activation 4"),
    ("groups", build_model("CONV_2D", [X, In(np.zeros((4, 3, 3, 1), F32), const=True), B], OUT, CONV),
     "4 output channels do not split into 3 groups"),
    ("part of a group", build_model("CONV_2D", [X, In(np.zeros((4, 3, 3, 2), F32), const=True), B], OUT, CONV),
     "not a whole number of groups"),
    # an input of no channels (a fuzzed file): no group at all, not a division by zero
    ("no channels", build_model("CONV_2D", [In(np.zeros((1, 5, 5, 0), F32)), W, B], OUT, CONV),
     "not a whole number of groups"),
    ("no window", build_model("CONV_2D", [In(np.zeros((1, 2, 2, 3), F32)), W, B], [((1, 1, 1, 4), F32, None)],
                              dict(CONV, padding=VALID)), "does not fit"),
    ("rank", build_model("CONV_2D", [In(np.zeros((5, 5, 3), F32)), W, B], OUT, CONV), "rank 3"),
    ("bias length", build_model("CONV_2D", [X, W, In(np.zeros(3, F32), const=True)], OUT, CONV), "bias shape"),
    ("one input", build_model("CONV_2D", [X], OUT, CONV), "takes 2 or 3 inputs"),
    ("hybrid", build_model("CONV_2D", [X, _qzeros((4, 3, 3, 3), np.uint8, const=True), B], OUT, CONV), "hybrid"),
    ("int16", build_model("CONV_2D", [_qzeros((1, 5, 5, 3), np.int16), _qzeros((4, 3, 3, 3), const=True), None],
                          [((1, 5, 5, 4), np.int16, Q8)], CONV), "int16"),
    ("unquantized int8", build_model("CONV_2D", [_qzeros((1, 5, 5, 3), quant=None), _qzeros((4, 3, 3, 3), const=True)],
                                     [((1, 5, 5, 4), np.int8, Q8)], CONV), "no quantization"),
    ("int8 zero point", build_model("CONV_2D", [_qzeros((1, 5, 5, 3)),
                                                _qzeros((4, 3, 3, 3), quant=(0.1, 3), const=True)],
                                    [((1, 5, 5, 4), np.int8, Q8)], CONV), "zero point"),
    ("per-channel uint8", build_model("CONV_2D", [_qzeros((1, 5, 5, 3), np.uint8),
                                                  _qzeros((4, 3, 3, 3), np.uint8, ([0.1] * 4, 0, 0), const=True)],
                                      [((1, 5, 5, 4), np.uint8, Q8)], CONV), "per-channel"),
    ("per-channel axis", build_model("CONV_2D", [_qzeros((1, 5, 5, 3)),
                                                 _qzeros((4, 3, 3, 3), quant=([0.1] * 3, 0, 3), const=True)],
                                     [((1, 5, 5, 4), np.int8, Q8)], CONV), "dimension 3"),
    ("depthwise filter", build_model("DEPTHWISE_CONV_2D", [X, In(np.zeros((1, 3, 3, 4), F32), const=True), B], OUT,
                                     CONV), "multiplier"),
    ("output_shape", build_model("TRANSPOSE_CONV", [In(np.array([1, 12, 12, 4], np.int32), const=True), W, X],
                                 [((1, 12, 12, 4), F32, None)], dict(padding=SAME, stride_w=2, stride_h=2)),
     "does not fit"),
    ("output_shape dtype", build_model("TRANSPOSE_CONV", [In(np.array([1, 10, 10, 4], np.int64), const=True), W, X],
                                       [((1, 10, 10, 4), F32, None)], dict(padding=SAME, stride_w=2, stride_h=2)),
     "int32"),
    ("weights format", build_model("FULLY_CONNECTED", [In(np.zeros((2, 3), F32)), FC_W], FC_OUT,
                                   dict(weights_format=1)), "weights_format"),
    ("fc rows", build_model("FULLY_CONNECTED", [In(np.zeros((2, 5), F32)), FC_W], FC_OUT), "rows of 3"),
    ("keep_num_dims", build_model("FULLY_CONNECTED", [In(np.zeros((2, 6), F32)), FC_W], FC_OUT,
                                  dict(keep_num_dims=True)), "keep_num_dims"),
    ("mediapipe padding", build_model("Convolution2DTransposeBias", [X, W, B], OUT,
                                      custom_options=_mediapipe_options(0, (1, 1))), "custom options"),
    ("mediapipe options", build_model("Convolution2DTransposeBias", [X, W, B], OUT, custom_options=b"\x01"),
     "custom options"),
    ("mediapipe int8", build_model("Convolution2DTransposeBias", [_qzeros((1, 5, 5, 3)), W, B], OUT,
                                   custom_options=_mediapipe_options(1, (1, 1))), "float32"),
]


@pytest.mark.parametrize("what,model,words", REJECTED, ids=[r[0] for r in REJECTED])
def test_unsupported_nodes_give_a_reason(what, model, words):
    reason = reason_of(model)
    assert reason is not None and words in reason, f"{what}: {reason!r}"


def test_unsupported_node_fails_at_allocate():
    interp = Interpreter(model_content=REJECTED[3][1])
    with pytest.raises(ModelError, match="activation 4"):
        interp.allocate_tensors()
