"""TRANSPOSE_CONV and MediaPipe's Convolution2DTransposeBias (one template) on the GPU against the
numpy reference: strides, padding, kernels smaller and larger than the stride, output shapes with
slack, blocking of output slices, activation and precision; and which nodes they refuse."""
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate.gpu import kernels
from gles_delegate.gpu.kernels import conv, transpose_conv
from tests.gpu.gpulib import MOST_BLOCKING, NO_BLOCKING, PRECISIONS, check_gpu
from tests.oplib import SAME, VALID, In, single_op_node

CASES = [  # kernel (h, w), strides, padding, in channels, out channels, input (h, w), batch
    ((3, 3), (2, 2), SAME, 6, 10, (5, 4), 2),
    ((2, 2), (2, 2), SAME, 16, 1, (8, 8), 1),     # selfie segmentation's upsampling head
    ((4, 4), (2, 2), VALID, 5, 9, (3, 5), 1),
    ((1, 1), (3, 3), VALID, 3, 17, (4, 4), 1),    # stride > kernel: outputs no tap reaches
    ((3, 3), (1, 1), SAME, 8, 32, (5, 5), 1),     # 8 output slices: blocks of 2
    ((5, 3), (2, 3), SAME, 4, 24, (3, 3), 1),     # 6 output slices
    ((3, 3), (2, 2), SAME, 1, 1, (1, 1), 3),      # 1x1 spatial input, batch 3
]
C_SAME, C_VALID = 1, 2  # TfLitePadding in MediaPipe's custom options


def transpose_inputs(rng, kernel, strides, c_in, c_out, hw, batch):
    """(input, filter, bias) arrays; weights scaled by the fan-in of one output."""
    fan_in = max(np.prod(kernel) / np.prod(strides), 1) * c_in
    x = rng.standard_normal((batch,) + tuple(hw) + (c_in,)).astype(np.float32)
    w = (rng.standard_normal((c_out,) + tuple(kernel) + (c_in,)) / np.sqrt(fan_in)).astype(np.float32)
    return x, w, rng.standard_normal(c_out).astype(np.float32)


def output_shape(kernel, strides, padding, hw, batch, c_out, slack=(0, 0)):
    """An output_shape operand TFLite accepts: SAME in * stride, VALID (in - 1) * stride + K,
    plus up to stride - 1 rows / columns of slack for VALID."""
    if padding == SAME:
        out = [size * s for size, s in zip(hw, strides)]
    else:
        out = [(size - 1) * s + k + extra for size, s, k, extra in zip(hw, strides, kernel, slack)]
    return np.array([batch] + out + [c_out], np.int32)


def transpose_conv_case(rng, kernel, strides, padding, c_in, c_out, hw, batch, bias=True, slack=(0, 0)):
    x, w, b = transpose_inputs(rng, kernel, strides, c_in, c_out, hw, batch)
    inputs = [In(output_shape(kernel, strides, padding, hw, batch, c_out, slack), const=True), In(w, const=True), In(x)]
    return inputs + ([In(b, const=True)] if bias else [])


def check_transpose_conv(inputs, strides, padding, activation=0, precision="fp32"):
    options = dict(padding=padding, stride_h=strides[0], stride_w=strides[1], fused_activation_function=activation)
    check_gpu("TRANSPOSE_CONV", inputs, options, precision, version=4, output_dtypes=[np.float32])


def check_mediapipe(rng, kernel, strides, padding, c_in, c_out, hw, batch, precision="fp32"):
    x, w, b = transpose_inputs(rng, kernel, strides, c_in, c_out, hw, batch)
    options = struct.pack("<3i", C_SAME if padding == SAME else C_VALID, strides[1], strides[0])
    check_gpu("Convolution2DTransposeBias", [In(x), In(w, const=True), In(b, const=True)], {}, precision,
              custom_options=options)


@pytest.mark.parametrize("min_invocations", [NO_BLOCKING, MOST_BLOCKING])
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", CASES)
def test_transpose_conv(case, precision, min_invocations, monkeypatch):
    monkeypatch.setattr(conv, "MIN_INVOCATIONS", min_invocations)
    kernel, strides, padding, c_in, c_out, hw, batch = case
    rng = np.random.default_rng(CASES.index(case))
    check_transpose_conv(transpose_conv_case(rng, *case), strides, padding, CASES.index(case) % 4, precision)
    check_mediapipe(rng, *case, precision=precision)


@pytest.mark.parametrize("slack", [(0, 1), (2, 1)])
def test_valid_output_with_slack_and_no_bias(slack):
    """VALID output_shape may exceed (in - 1) * stride + K by up to stride - 1: those columns get
    only the bias (here none)."""
    rng = np.random.default_rng(0)
    inputs = transpose_conv_case(rng, (3, 2), (3, 2), VALID, 5, 6, (4, 3), 1, bias=False, slack=slack)
    check_transpose_conv(inputs, (3, 2), VALID)


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 3), st.integers(1, 3), st.sampled_from([SAME, VALID]),
       st.integers(1, 9), st.integers(1, 9), st.integers(1, 6), st.integers(1, 6), st.integers(1, 2),
       st.sampled_from(PRECISIONS), st.booleans(), st.integers(0, 2 ** 31))
def test_transpose_conv_random(kh, kw, sh, sw, padding, c_in, c_out, h, w, batch, precision, mediapipe, seed):
    rng = np.random.default_rng(seed)
    case = ((kh, kw), (sh, sw), padding, c_in, c_out, (h, w), batch)
    if mediapipe:
        check_mediapipe(rng, *case, precision=precision)
    else:
        check_transpose_conv(transpose_conv_case(rng, *case), (sh, sw), padding, seed % 4, precision)


def test_rejects_runtime_output_shape_and_filter():
    rng = np.random.default_rng(0)
    options = dict(padding=SAME, stride_h=2, stride_w=2)
    for index, role in [(0, "output_shape"), (1, "filter")]:
        inputs = transpose_conv_case(rng, (3, 3), (2, 2), SAME, 4, 4, (3, 3), 1)
        inputs[index].const = False
        node = single_op_node("TRANSPOSE_CONV", inputs, options, version=4, output_dtypes=[np.float32])
        assert role in transpose_conv.SUPPORT["TRANSPOSE_CONV"](node)
        assert kernels.unsupported_reason(node) is not None


def test_rejects_bad_mediapipe_options():
    x, w, b = transpose_inputs(np.random.default_rng(0), (2, 2), (2, 2), 4, 1, (4, 4), 1)
    node = single_op_node("Convolution2DTransposeBias", [In(x), In(w, const=True), In(b, const=True)],
                          custom_options=struct.pack("<3i", C_SAME, 2, 2))
    assert kernels.unsupported_reason(node) is None
    node.custom_options = struct.pack("<3i", 7, 2, 2)
    assert "custom options" in kernels.unsupported_reason(node)
