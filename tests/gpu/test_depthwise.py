"""DEPTHWISE_CONV_2D (v1 and v2) on the GPU against the numpy reference: output tiles, channel
multipliers, padding, stride, dilation, activation and precision; which variant the kernel picks;
and which nodes it refuses."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate.gpu import kernels
from gles_delegate.gpu.kernels import depthwise
from tests.gpu.gpulib import MOST_BLOCKING, NO_BLOCKING, PRECISIONS, check_gpu, dispatches
from tests.oplib import SAME, VALID, In, conv_options, single_op_node

CASES = [  # kernel (h, w), strides, dilations, padding, in channels, multiplier, input (h, w), batch
    ((3, 3), (1, 1), (1, 1), SAME, 6, 1, (9, 7), 2),      # 2x2 tiles, odd extent, batch 2
    ((5, 5), (1, 1), (1, 1), SAME, 13, 1, (5, 7), 1),     # 5x5 tiles
    ((3, 3), (2, 2), (1, 1), SAME, 8, 1, (9, 9), 1),      # stride 2: no tiles
    ((3, 3), (2, 2), (1, 1), VALID, 8, 2, (9, 9), 2),     # multiplier 2
    ((1, 1), (2, 2), (1, 1), SAME, 3, 3, (5, 6), 1),      # multiplier 3: slices mix input channels
    ((3, 3), (1, 1), (1, 1), SAME, 1, 5, (3, 3), 1),      # one input channel, multiplier 5
    ((2, 2), (3, 3), (1, 1), SAME, 4, 1, (7, 7), 1),      # stride > kernel
    ((3, 3), (1, 1), (2, 3), SAME, 5, 1, (12, 12), 1),    # dilation: no tiles
    ((3, 3), (1, 2), (1, 1), VALID, 4, 1, (6, 9), 1),     # tiles along y only
    ((3, 3), (2, 2), (1, 1), SAME, 1, 1, (1, 1), 3),      # 1x1 spatial, one channel, batch 3
    ((5, 5), (2, 2), (1, 1), SAME, 16, 1, (11, 10), 1),
    ((7, 7), (1, 1), (1, 1), SAME, 6, 1, (9, 8), 1),      # 49 taps: weights loaded per tap (PRELOAD_TAPS_MAX)
    ((9, 9), (2, 2), (1, 1), SAME, 4, 2, (10, 11), 1),    # 81 taps, multiplier 2
]


def depthwise_inputs(rng, kernel, c_in, multiplier, hw, batch, bias=True):
    x = rng.standard_normal((batch,) + tuple(hw) + (c_in,)).astype(np.float32)
    w = (rng.standard_normal((1,) + tuple(kernel) + (c_in * multiplier,)) / np.sqrt(np.prod(kernel))).astype(np.float32)
    b = rng.standard_normal(c_in * multiplier).astype(np.float32)
    return [In(x), In(w, const=True)] + ([In(b, const=True)] if bias else [])


def depthwise_options(strides, dilations, padding, multiplier, activation=0):
    return dict(conv_options(strides, dilations, padding, activation), depth_multiplier=multiplier)


@pytest.mark.parametrize("min_invocations", [NO_BLOCKING, MOST_BLOCKING])
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", CASES)
def test_depthwise(case, precision, min_invocations, monkeypatch):
    monkeypatch.setattr(depthwise, "MIN_INVOCATIONS", min_invocations)
    kernel, strides, dilations, padding, c_in, multiplier, hw, batch = case
    rng = np.random.default_rng(CASES.index(case))
    check_gpu("DEPTHWISE_CONV_2D", depthwise_inputs(rng, kernel, c_in, multiplier, hw, batch),
              depthwise_options(strides, dilations, padding, multiplier, CASES.index(case) % 4), precision,
              version=2 if dilations != (1, 1) else 1)


@pytest.mark.parametrize("activation", [0, 1, 2, 3])
def test_activation_and_no_bias(activation):
    rng = np.random.default_rng(activation)
    check_gpu("DEPTHWISE_CONV_2D", depthwise_inputs(rng, (3, 3), 6, 1, (6, 5), 1, bias=False),
              depthwise_options((1, 1), (1, 1), SAME, 1, activation))


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2),
       st.integers(1, 2), st.sampled_from([SAME, VALID]), st.integers(1, 9), st.sampled_from([1, 1, 2, 3]),
       st.integers(1, 9), st.integers(1, 9), st.integers(1, 2), st.sampled_from(PRECISIONS),
       st.sampled_from([NO_BLOCKING, MOST_BLOCKING]), st.integers(0, 2 ** 31))
def test_depthwise_random(kh, kw, sh, sw, dh, dw, padding, c_in, multiplier, h, w, batch, precision,
                          min_invocations, seed):
    if padding == VALID:
        h, w = max(h, (kh - 1) * dh + 1), max(w, (kw - 1) * dw + 1)
    depthwise.MIN_INVOCATIONS, saved = min_invocations, depthwise.MIN_INVOCATIONS
    try:
        check_gpu("DEPTHWISE_CONV_2D",
                  depthwise_inputs(np.random.default_rng(seed), (kh, kw), c_in, multiplier, (h, w), batch),
                  depthwise_options((sh, sw), (dh, dw), padding, multiplier, seed % 4), precision, version=2)
    finally:
        depthwise.MIN_INVOCATIONS = saved


def built_defines(kernel, strides, dilations, c_in, multiplier, hw):
    [dispatch] = dispatches("DEPTHWISE_CONV_2D",
                            depthwise_inputs(np.random.default_rng(0), kernel, c_in, multiplier, hw, 1),
                            depthwise_options(strides, dilations, SAME, multiplier), version=2)
    return dispatch.defines


def test_variant_choice():
    tiled = built_defines((3, 3), (1, 1), (1, 1), 128, 1, (112, 112))
    assert (tiled["TILE_W"], tiled["TILE_H"], tiled["MULTIPLIER_ONE"], tiled["PADDED"]) == (2, 2, 1, 1)
    strided = built_defines((3, 3), (2, 2), (1, 1), 128, 1, (112, 112))
    assert (strided["TILE_W"], strided["TILE_H"]) == (1, 1)
    dilated = built_defines((3, 3), (1, 1), (2, 1), 128, 1, (112, 112))
    assert (dilated["TILE_W"], dilated["TILE_H"]) == (2, 1)
    assert built_defines((3, 3), (1, 1), (1, 1), 8, 4, (16, 16))["MULTIPLIER_ONE"] == 0
    assert (built_defines((3, 3), (1, 1), (1, 1), 4, 1, (8, 8))["TILE_W"]) == 1  # small grid: no tiles


def test_rejects_runtime_filter():
    inputs = depthwise_inputs(np.random.default_rng(0), (3, 3), 4, 1, (5, 5), 1)
    inputs[1].const = False
    node = single_op_node("DEPTHWISE_CONV_2D", inputs, depthwise_options((1, 1), (1, 1), SAME, 1))
    assert "filter" in kernels.unsupported_reason(node)
