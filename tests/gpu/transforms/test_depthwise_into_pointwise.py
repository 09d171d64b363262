"""depthwise_into_pointwise: a DEPTHWISE_CONV_2D read only by a pointwise CONV_2D becomes part of
that convolution, which computes the depthwise values as it loads them; the depthwise dispatch and
its output go away."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.gpu.kernels import conv
from gles_delegate.gpu.kernels.conv import INPUT_DEPTHWISE
from gles_delegate.gpu.transforms import depthwise_into_pointwise
from tests.gpu.gpulib import NO_BLOCKING, PRECISIONS
from tests.gpu.transforms.rulelib import (SAME, VALID, Chain, check_gpu, check_skipped, ops_of, random, rewrite_through,
                                         statuses)
from tests.oplib import run_ours

RULE = "depthwise_into_pointwise"


def separable(shape=(1, 9, 7, 12), out_channels=8, stride=1, padding=SAME, activation=3, dilation=1,
              consumer=None, extra_output=False, multiplier=1):
    """x -> DEPTHWISE_CONV_2D (stride, padding, activation, dilation, multiplier) -> consumer
    (default a 1x1 CONV_2D of out_channels, ReLU)."""
    c = Chain(shape)
    n, h, w, ch = shape
    weights = c.const(random((1, 3, 3, ch * multiplier), 3, 0.5))
    bias = c.const(random(ch * multiplier, 4))
    span = 2 * dilation + 1
    oh, ow = ((h + stride - 1) // stride, (w + stride - 1) // stride) if padding == SAME else \
        ((h - span) // stride + 1, (w - span) // stride + 1)
    y = c.op("DEPTHWISE_CONV_2D", c.x, weights, bias, shape=(n, oh, ow, ch * multiplier), padding=padding,
             stride_w=stride, stride_h=stride, depth_multiplier=multiplier, fused_activation_function=activation,
             dilation_w_factor=dilation, dilation_h_factor=dilation)
    out = (consumer or (lambda c, v: c.conv(v, out_channels, kernel=1, activation=1, seed=9)))(c, y)
    return c.build(out, *([y] if extra_output else []))


def check_fused(model, shape, precision="fp32", seed=1):
    """The rule fuses the model's one depthwise convolution into its pointwise reader, which
    reads the depthwise input; the GPU matches the reference and the unfused GPU run to
    rounding (the same sums in the same order)."""
    graph, log = rewrite_through(model, RULE)
    assert ops_of(graph) == ["CONV_2D"]
    [(status, _)] = statuses(log, RULE)
    pointwise = graph.nodes[0]
    assert status == "APPLIED" and pointwise.options[INPUT_DEPTHWISE].op == "DEPTHWISE_CONV_2D"
    assert pointwise.inputs[0] is graph.inputs[0]
    values = [random(shape, seed, 3.0)]
    check_gpu(model, values, precision)
    fused, fused_count = run_gpu(model, values, precision)
    unfused, unfused_count = run_gpu(model, values, precision, enabled=False)
    assert fused_count == unfused_count - 1
    scale = np.max(np.abs(unfused))
    np.testing.assert_allclose(fused, unfused, rtol=0, atol=4 * scale * np.finfo(np.float32).eps)


def run_gpu(model, values, precision, enabled=True):
    """(the model's first output on the GPU, dispatches per invoke), the rule on or off."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(depthwise_into_pointwise, "ENABLED", enabled)
        with GpuDelegate(precision=precision) as delegate:
            return run_ours(model, values, experimental_delegates=[delegate])[0], delegate.summary()["dispatches"]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape, options", [
    ((1, 9, 7, 12), {}),                                                  # SAME, RELU6
    ((2, 11, 10, 6), {"stride": 2, "activation": 1, "out_channels": 5}),  # batch 2, padded channels
    ((1, 10, 9, 8), {"padding": VALID, "activation": 0}),                 # no padding read
    ((1, 12, 12, 4), {"dilation": 2, "activation": 2}),                   # dilation, RELU_N1_TO_1
], ids=["same", "stride 2 batch 2", "valid", "dilated"])
def test_the_pointwise_convolution_computes_the_depthwise_one(shape, options, precision):
    check_fused(separable(shape, **options), shape, precision)


@pytest.mark.parametrize("out_channels", [4, 20, 32, 44])
def test_every_block_of_output_slices_computes_its_depthwise_values(out_channels):
    """Blocks of 1, 5 (4 + 1), 8 and 11 (8 + 3) output slices: a block past the last slice reads
    the same depthwise values and stores nothing."""
    check_fused(separable((1, 8, 8, 16), out_channels), (1, 8, 8, 16), seed=2)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_split_k_convolution_computes_each_lane_share(monkeypatch, precision):
    """A deep input on a small plane splits K over a workgroup (conv2d.glsl's K_SPLIT): each lane
    computes the depthwise values of its own input slices."""
    monkeypatch.setattr(conv, "MIN_INVOCATIONS", NO_BLOCKING)
    shape = (1, 5, 4, 64)
    graph, _ = rewrite_through(separable(shape, 8), RULE)
    assert conv.fused_blocking(2, 20, 1, lambda _: 16)[2] > 1
    check_fused(separable(shape, 8), shape, precision, seed=3)


def test_the_blocks_keep_their_slices_on_a_small_plane():
    """fused_blocking keeps 8 output slices a block on a plane too small to fill the GPU (each
    block computes the depthwise values again), where conv_blocking backs off to 1."""
    assert conv.fused_blocking(16, 36, 1, lambda _: 8)[0] == 8
    assert conv.conv_blocking(16, 36, 1, lambda _: 8, 1)[0] == 1


def test_recomputing_past_the_budget_keeps_both_dispatches(monkeypatch):
    """64 output channels are 2 blocks of 8 slices: each depthwise value computed twice, 8x8
    pixels x 4 slices x 9 taps = 2304 tap products more."""
    model, shape = separable((1, 8, 8, 16), 64), (1, 8, 8, 16)
    monkeypatch.setattr(depthwise_into_pointwise, "MAX_RECOMPUTED_TAPS", 2303)
    check_skipped(model, RULE, "DEPTHWISE_CONV_2D", "2304 more tap products than the 2303 allowed", [random(shape, 4)])
    monkeypatch.setattr(depthwise_into_pointwise, "MAX_RECOMPUTED_TAPS", 2304)
    check_fused(model, shape, seed=4)


@pytest.mark.parametrize("options, reason", [
    ({"extra_output": True}, "read by more than one node"),
    ({"multiplier": 2}, "channel multiplier is 2"),
    ({"consumer": lambda c, v: c.conv(v, 8, kernel=3, seed=9)}, "not an ungrouped 1x1 convolution"),
    ({"consumer": lambda c, v: c.conv(v, 8, kernel=1, groups=2, seed=9)}, "not an ungrouped 1x1 convolution"),
    ({"consumer": lambda c, v: c.conv(v, 8, kernel=1, stride=2, seed=9)}, "not an ungrouped 1x1 convolution"),
    ({"consumer": lambda c, v: c.depthwise(v)}, "does not read it as a convolution's input"),
    ({"consumer": lambda c, v: c.op("ADD", c.conv(v, 12, kernel=1, seed=9), v)}, "read by more than one node"),
], ids=["read twice", "multiplier 2", "3x3 reader", "grouped reader", "strided reader", "depthwise reader",
        "residual"])
def test_other_depthwise_convolutions_stay(options, reason):
    shape = (1, 8, 8, 12)
    graph, log = rewrite_through(separable(shape, **options), RULE)
    assert "DEPTHWISE_CONV_2D" in ops_of(graph)
    assert any(s == "SKIPPED" and reason in r.why for r in log if r.rule == RULE for s in [r.status]), list(log)
    check_gpu(separable(shape, **options), [random(shape, 5)])


def test_a_depthwise_convolution_with_epilogue_steps_stays():
    """A residual ADD in the depthwise convolution's epilogue (fuse_residual_add) reads a tensor
    at the position it writes: the pointwise kernel has no such stage for its input."""
    c = Chain((1, 8, 8, 8))
    y = c.op("ADD", c.depthwise(c.x, activation=0), c.x)
    model = c.build(c.conv(y, 8, kernel=1, seed=9))
    check_skipped(model, RULE, "DEPTHWISE_CONV_2D", "epilogue steps", [random((1, 8, 8, 8), 6)])
