"""CONV_2D on the GPU against the numpy reference: every variant (pointwise, padded, blocking of
output slices and pixels), padding, stride, dilation, activation and precision; which variant
the kernel picks; and which nodes it refuses."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate.gpu import kernels
from gles_delegate.gpu.kernels import conv
from tests.gpu.gpulib import (MOST_BLOCKING, NO_BLOCKING, PRECISIONS, as_stored, assert_gpu_matches, check_gpu,
                              dispatches, run_gpu)
from tests.oplib import CLAMPS, SAME, VALID, In, conv_options, feeds, run_ours, single_op_model, single_op_node

CASES = [  # kernel (h, w), strides, dilations, padding, in channels, out channels, input (h, w), batch
    ((1, 1), (1, 1), (1, 1), SAME, 13, 17, (5, 7), 1),    # pointwise, channels not a multiple of 4
    ((1, 1), (1, 1), (1, 1), VALID, 8, 32, (4, 4), 2),    # pointwise, batch 2, 8 output slices in blocks
    ((1, 1), (1, 1), (1, 1), SAME, 1, 1, (3, 5), 1),      # one channel in and out
    ((1, 1), (2, 2), (1, 1), SAME, 3, 5, (5, 6), 1),      # 1x1 with a stride: not pointwise
    ((3, 3), (1, 1), (1, 1), SAME, 6, 10, (9, 7), 2),     # padded, batch 2
    ((3, 3), (2, 2), (1, 1), SAME, 4, 24, (8, 8), 1),     # 6 output slices: blocks of 2
    ((3, 3), (2, 1), (1, 2), VALID, 6, 10, (9, 11), 1),   # VALID: no padding read
    ((3, 3), (1, 1), (2, 3), SAME, 5, 9, (12, 12), 1),    # dilation
    ((2, 2), (3, 3), (1, 1), SAME, 4, 8, (7, 7), 1),      # stride > kernel
    ((5, 5), (2, 2), (1, 1), SAME, 3, 16, (11, 10), 1),   # a stem conv
    ((3, 3), (2, 2), (1, 1), SAME, 2, 3, (1, 1), 3),      # 1x1 spatial input, batch 3
    ((2, 3), (1, 2), (1, 1), VALID, 7, 6, (2, 5), 1),     # non-square kernel, 1-row output
    ((1, 1), (1, 1), (1, 1), VALID, 256, 20, (3, 3), 1),  # deep pointwise, small plane: K split 4 ways
    ((3, 3), (1, 1), (1, 1), SAME, 63, 12, (4, 5), 2),    # deep padded 3x3, batch 2: K split 8 ways
    ((3, 3), (2, 2), (1, 1), SAME, 40, 9, (3, 3), 1),     # slices not a multiple of the split
]


def conv_inputs(rng, kernel, c_in, c_out, hw, batch, bias=True):
    """[input, filter, bias] with weights scaled by 1/sqrt(fan-in) so outputs stay near N(0, 1)."""
    x = rng.standard_normal((batch,) + tuple(hw) + (c_in,)).astype(np.float32)
    w = (rng.standard_normal((c_out,) + tuple(kernel) + (c_in,)) / np.sqrt(np.prod(kernel) * c_in)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    return [In(x), In(w, const=True)] + ([In(b, const=True)] if bias else [])


@pytest.mark.parametrize("min_invocations", [NO_BLOCKING, MOST_BLOCKING])
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", CASES)
def test_conv(case, precision, min_invocations, monkeypatch):
    monkeypatch.setattr(conv, "MIN_INVOCATIONS", min_invocations)
    kernel, strides, dilations, padding, c_in, c_out, hw, batch = case
    rng = np.random.default_rng(CASES.index(case))
    check_gpu("CONV_2D", conv_inputs(rng, kernel, c_in, c_out, hw, batch),
              conv_options(strides, dilations, padding, activation=CASES.index(case) % 4), precision)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", [CASES[1], CASES[4], CASES[5], CASES[9]])
def test_wide_blocks(case, precision, monkeypatch):
    """Blocks of 4 slices / 4 pixels: not chosen on the H200, but the template takes any size."""
    monkeypatch.setattr(conv, "MIN_INVOCATIONS", MOST_BLOCKING)
    monkeypatch.setattr(conv, "SLICE_CHOICES", (4, 2, 1))
    monkeypatch.setattr(conv, "PIXEL_CHOICES", (4, 2, 1))
    kernel, strides, dilations, padding, c_in, c_out, hw, batch = case
    check_gpu("CONV_2D", conv_inputs(np.random.default_rng(1), kernel, c_in, c_out, hw, batch),
              conv_options(strides, dilations, padding), precision)


@pytest.mark.parametrize("activation", CLAMPS)
@pytest.mark.parametrize("kernel", [(1, 1), (3, 3)])
def test_activation_and_no_bias(kernel, activation):
    rng = np.random.default_rng(activation)
    check_gpu("CONV_2D", conv_inputs(rng, kernel, 5, 7, (6, 5), 1, bias=False),
              conv_options((1, 1), (1, 1), SAME, activation))


def test_zero_padding_next_to_inf():
    """A padded tap adds exactly zero even where its clamped read lands on an Inf: a 2x2 kernel
    with dilation 2 has output (0, 0) read rows / columns -1 (padding, clamped onto the Inf at
    (0, 0)) and 1. A multiply by a 0/1 mask would make it NaN. Only the outputs whose window
    does not hold the Inf are compared (the reference clamps those to +-FLT_MAX as TFLite does,
    and GLSL ES need not propagate Inf at all)."""
    rng = np.random.default_rng(0)
    inputs = conv_inputs(rng, (2, 2), 4, 4, (5, 5), 1)
    inputs[0].value[0, 0, 0, 0] = np.inf
    model = single_op_model("CONV_2D", inputs, conv_options((1, 1), (2, 2), SAME))
    reference, = run_ours(model, feeds(inputs))
    (gpu,), _ = run_gpu(model, feeds(inputs))
    finite = np.abs(reference) < np.finfo(np.float32).max
    assert finite[0, 0, 0].all() and not finite.all() and np.isfinite(gpu[finite]).all()
    assert_gpu_matches(reference[finite], gpu[finite], "fp32")


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2),
       st.integers(1, 2), st.sampled_from([SAME, VALID]), st.integers(1, 9), st.integers(1, 9),
       st.integers(1, 9), st.integers(1, 9), st.integers(1, 2), st.sampled_from(PRECISIONS),
       st.sampled_from([NO_BLOCKING, MOST_BLOCKING]), st.integers(0, 2 ** 31))
def test_conv_random(kh, kw, sh, sw, dh, dw, padding, c_in, c_out, h, w, batch, precision, min_invocations, seed):
    effective_h, effective_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    h, w = (max(h, effective_h), max(w, effective_w)) if padding == VALID else (h, w)
    conv.MIN_INVOCATIONS, saved = min_invocations, conv.MIN_INVOCATIONS
    try:
        check_gpu("CONV_2D", conv_inputs(np.random.default_rng(seed), (kh, kw), c_in, c_out, (h, w), batch),
                  conv_options((sh, sw), (dh, dw), padding, seed % 4), precision)
    finally:
        conv.MIN_INVOCATIONS = saved


# -- grouped convolution ------------------------------------------------------------------
GROUPED = [  # kernel, strides, dilations, padding, in channels, out channels, groups, input (h, w), batch
    ((3, 3), (1, 1), (1, 1), SAME, 16, 16, 2, (6, 5), 1),    # groups of whole slices
    ((3, 3), (2, 1), (1, 2), SAME, 8, 12, 4, (7, 6), 2),     # 2 inputs, 3 outputs a group: groups share slices
    ((1, 1), (1, 1), (1, 1), VALID, 6, 6, 6, (4, 4), 1),     # pointwise, one channel a group
    ((2, 3), (1, 2), (2, 1), VALID, 24, 8, 8, (7, 9), 1),    # 3 inputs, 1 output a group
    ((3, 3), (1, 1), (1, 1), SAME, 128, 32, 2, (3, 3), 1),   # deep groups on a small plane: K split
    ((3, 3), (2, 2), (1, 1), SAME, 32, 64, 4, (5, 5), 1),    # blocks of 2 output slices inside a group
]


def grouped_inputs(rng, kernel, c_in, c_out, groups, hw, batch):
    inputs = conv_inputs(rng, kernel, c_in // groups, c_out, hw, batch)
    inputs[0] = In(rng.standard_normal((batch,) + tuple(hw) + (c_in,)).astype(np.float32))
    return inputs


@pytest.mark.parametrize("min_invocations", [NO_BLOCKING, MOST_BLOCKING])
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", GROUPED)
def test_grouped(case, precision, min_invocations, monkeypatch):
    monkeypatch.setattr(conv, "MIN_INVOCATIONS", min_invocations)
    kernel, strides, dilations, padding, c_in, c_out, groups, hw, batch = case
    rng = np.random.default_rng(GROUPED.index(case))
    check_gpu("CONV_2D", grouped_inputs(rng, kernel, c_in, c_out, groups, hw, batch),
              conv_options(strides, dilations, padding, activation=GROUPED.index(case) % 4), precision)


def test_grouped_window():
    """A block of output slices reads only the input slices of its groups: 4 groups of 8 -> 16
    channels read 2 slices a block (blocks of 2 output slices inside one group)."""
    [dispatch] = dispatches("CONV_2D", grouped_inputs(np.random.default_rng(0), (3, 3), 32, 64, 4, (64, 64), 1),
                            conv_options((1, 1), (1, 1), SAME))
    assert dispatch.params["window"] == 2 and dispatch.params["group_channels"] == (16, 8)
    first, window = conv.group_window(1, 12, (3, 2))  # 3 outputs, 2 inputs a group: slices shared
    assert list(first) == [0, 0, 1] and window == 2


# -- variant selection --------------------------------------------------------------------
def built_defines(kernel, strides, dilations, padding, c_in, c_out, hw):
    inputs = conv_inputs(np.random.default_rng(0), kernel, c_in, c_out, hw, 1)
    [dispatch] = dispatches("CONV_2D", inputs, conv_options(strides, dilations, padding))
    return dispatch.defines


def test_variant_choice():
    pointwise = built_defines((1, 1), (1, 1), (1, 1), SAME, 64, 128, (112, 112))
    assert (pointwise["POINTWISE"], pointwise["PADDED"], pointwise["OUT_SLICES"], pointwise["PIXELS"]) == (1, 0, 2, 2)
    same3x3 = built_defines((3, 3), (2, 2), (1, 1), SAME, 3, 32, (224, 224))
    assert (same3x3["POINTWISE"], same3x3["PADDED"], same3x3["KH"], same3x3["KW"]) == (0, 1, 3, 3)
    valid = built_defines((3, 3), (1, 1), (1, 1), VALID, 8, 8, (16, 16))
    assert valid["PADDED"] == 0
    # Six slices split into blocks of 2, five into single slices; a small grid backs off.
    assert built_defines((1, 1), (1, 1), (1, 1), SAME, 8, 24, (256, 256))["OUT_SLICES"] == 2
    assert built_defines((1, 1), (1, 1), (1, 1), SAME, 8, 20, (256, 256))["OUT_SLICES"] == 1
    small = built_defines((1, 1), (1, 1), (1, 1), SAME, 8, 64, (4, 4))
    assert (small["OUT_SLICES"], small["PIXELS"], small["K_SPLIT"]) == (1, 1, 1)  # 2 slices: too shallow to split


def test_split_choice():
    """Where a 2 x 2 block's grid is too small, K is split over lanes of that block if that fills
    the GPU (BLOCKED_SPLIT), else once blocking is 1 x 1; only as far as every lane keeps
    CHUNKS_PER_LANE steps."""
    deep = built_defines((1, 1), (1, 1), (1, 1), SAME, 512, 512, (14, 14))
    assert (deep["OUT_SLICES"], deep["PIXELS"], deep["K_SPLIT"]) == (2, 2, 8)
    deeper = built_defines((1, 1), (1, 1), (1, 1), SAME, 1024, 1024, (7, 7))
    assert (deeper["OUT_SLICES"], deeper["PIXELS"], deeper["K_SPLIT"]) == (2, 2, 16)
    assert built_defines((3, 3), (1, 1), (1, 1), SAME, 256, 32, (2, 2))["K_SPLIT"] == 16
    one_lane = 4 * conv.CHUNKS_PER_LANE  # input channels: CHUNKS_PER_LANE vec4 steps, one lane's worth
    assert built_defines((1, 1), (1, 1), (1, 1), SAME, one_lane, 32, (2, 2))["K_SPLIT"] == 1
    assert built_defines((1, 1), (1, 1), (1, 1), SAME, 2 * one_lane, 32, (2, 2))["K_SPLIT"] == 2
    assert built_defines((1, 1), (1, 1), (1, 1), SAME, 512, 512, (112, 112))["K_SPLIT"] == 1  # big grid
    [dispatch] = dispatches("CONV_2D", conv_inputs(np.random.default_rng(0), (3, 3), 256, 32, (2, 2), 1),
                            conv_options((1, 1), (1, 1), SAME))
    assert dispatch.workgroup[1] == 16 and dispatch.grid[1] == 2 * 16
    # Blocked lanes would not fill the GPU there (8 blocks x 16 lanes): 1 x 1 blocks split instead.
    assert (dispatch.defines["OUT_SLICES"], dispatch.defines["PIXELS"]) == (1, 1)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_split_workgroup_fits_opengl_es_s_minimum_invocations(precision, monkeypatch):
    """A device of OpenGL ES 3.1's minimum, 128 invocations per workgroup: a 16-lane split
    keeps its 16 lanes along y and narrows x. It asked (16, 16, 1), the compiler's clamp halved
    y, and conv2d.glsl refused to compile ("split-K needs a workgroup exactly K_SPLIT high"):
    the node, and every other such convolution of a model, went to the CPU (mobilenet_v3_small
    29 of 113 nodes, efficientnet_b0 140 of 244)."""
    from gles_delegate import GpuDelegate
    from gles_delegate.gpu.kernels.base import KernelEnv
    inputs = conv_inputs(np.random.default_rng(3), (1, 1), 512, 16, (7, 7), 1)
    options = conv_options((1, 1), (1, 1), SAME)
    node = single_op_node("CONV_2D", inputs, options)
    wide, = conv.build(node, KernelEnv("fp32", {}))
    narrow, = conv.build(node, KernelEnv("fp32", {"max_workgroup_invocations": 128}))
    assert wide.defines["K_SPLIT"] == narrow.defines["K_SPLIT"] == 16 and np.prod(wide.workgroup) == 256
    assert narrow.workgroup[1] == 16 and np.prod(narrow.workgroup) == 128
    stored = as_stored(inputs, precision)
    reference = run_ours(single_op_model("CONV_2D", stored, options), feeds(stored))
    with GpuDelegate(precision=precision) as delegate:
        monkeypatch.setitem(delegate.context.limits, "max_workgroup_invocations", 128)
        gpu = run_ours(single_op_model("CONV_2D", inputs, options), feeds(inputs), experimental_delegates=[delegate])
        assert delegate.summary()["gpu_nodes"] == 1, delegate.summary()["fallbacks"]
    assert_gpu_matches(reference[0], gpu[0], precision, "CONV_2D", node, [i.value for i in stored])


def test_split_choice_without_blocked_split(monkeypatch):
    monkeypatch.setattr(conv, "BLOCKED_SPLIT", False)
    deep = built_defines((1, 1), (1, 1), (1, 1), SAME, 512, 512, (14, 14))
    assert (deep["OUT_SLICES"], deep["PIXELS"], deep["K_SPLIT"]) == (1, 1, 2)


BLOCKED_SPLIT_CASES = [  # a CASES row, MIN_INVOCATIONS, the (OUT_SLICES, PIXELS, K_SPLIT) it gives
    (((1, 1), (1, 1), (1, 1), VALID, 256, 20, (3, 3), 1), 100, (1, 2, 4)),    # pixel blocks crossing rows
    (((3, 3), (1, 1), (1, 1), SAME, 64, 16, (4, 4), 2), 256, (2, 2, 8)),      # padded 3x3, batch 2
    (((1, 1), (1, 1), (1, 1), SAME, 128, 24, (6, 6), 1), 108, (2, 2, 2)),     # pointwise 2 x 2 blocks
    (((3, 3), (2, 2), (1, 1), SAME, 40, 16, (5, 5), 1), 72, (2, 1, 4)),       # strided, 10 slices over 4 lanes
]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case, min_invocations, expected", BLOCKED_SPLIT_CASES)
def test_blocked_split(case, min_invocations, expected, precision, monkeypatch):
    """Lanes of a blocked output add every entry of their block in shared memory."""
    monkeypatch.setattr(conv, "MIN_INVOCATIONS", min_invocations)
    kernel, strides, dilations, padding, c_in, c_out, hw, batch = case
    inputs = conv_inputs(np.random.default_rng(c_in), kernel, c_in, c_out, hw, batch)
    options = conv_options(strides, dilations, padding, activation=c_in % 4)
    [dispatch] = dispatches("CONV_2D", inputs, options)
    assert (dispatch.defines["OUT_SLICES"], dispatch.defines["PIXELS"], dispatch.defines["K_SPLIT"]) == expected
    check_gpu("CONV_2D", inputs, options, precision)


def test_pack_weights_layout():
    """Row (group, ky, kx, slice, o, r) holds output channels 4 (group * blocks + o) + c of input
    channel 4 slice + r."""
    w = np.arange(9 * 2 * 3 * 6, dtype=np.float32).reshape(9, 2, 3, 6)
    rows = conv.pack_weights(w, 2).reshape(2, 2, 3, 2, 2, 4, 4)  # groups, ky, kx, slices, o, r, c
    for g, ky, kx, s, o, r, c in [(0, 1, 2, 1, 1, 1, 3), (1, 0, 1, 0, 0, 3, 0), (1, 1, 0, 1, 1, 1, 0)]:
        out_c, in_c = 4 * (2 * g + o) + c, 4 * s + r
        expected = w[out_c, ky, kx, in_c] if out_c < 9 and in_c < 6 else 0.0
        assert rows[g, ky, kx, s, o, r, c] == expected


# -- support ------------------------------------------------------------------------------
def test_rejects_runtime_weights_and_bias():
    rng = np.random.default_rng(0)
    inputs = conv_inputs(rng, (3, 3), 4, 4, (5, 5), 1)
    inputs[1].const = False
    assert "filter" in kernels.unsupported_reason(single_op_node("CONV_2D", inputs, conv_options((1, 1), (1, 1), SAME)))
    inputs = conv_inputs(rng, (3, 3), 4, 4, (5, 5), 1)
    inputs[2].const = False
    assert "bias" in kernels.unsupported_reason(single_op_node("CONV_2D", inputs, conv_options((1, 1), (1, 1), SAME)))


def test_rejects_what_the_reference_rejects():
    node = single_op_node("CONV_2D", conv_inputs(np.random.default_rng(0), (3, 3), 4, 4, (5, 5), 1),
                          conv_options((1, 1), (1, 1), SAME))
    node.options["fused_activation_function"] = 4  # TANH: TFLite ignores it, so nobody runs it
    assert "activation" in kernels.unsupported_reason(node)
    node.options["fused_activation_function"] = 0
    node.outputs[0].shape = (1, 4, 4, 4)
    assert "shape" in kernels.unsupported_reason(node)
