"""pad_into_operand: a PAD that only appends zero channels, read by nothing but epilogue steps
(MediaPipe's block shortcut: pooled, padded to the block's width, added to its convolution), goes;
the steps read the unpadded tensor as zero past its channels. Any other PAD stays."""
import numpy as np
import pytest

from gles_delegate.gpu.transforms import pad_into_operand
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms.rulelib import Chain, check_gpu, dispatches, ops_of, random, rewrite_through, statuses, why
from tests.oplib import VALID

RULE = "pad_into_operand"


def blaze_block(channels=6, width=10, pads=None, op="PAD", value=None, also_read=False):
    """x [1, 8, 8, channels] -> depthwise (stride 2) -> 1x1 conv to `width` channels, plus the
    shortcut MAX_POOL (2x2, stride 2) -> PAD to `width` channels, added, RELU."""
    c = Chain((1, 8, 8, channels))
    pooled = c.op("MAX_POOL_2D", c.x, shape=(1, 4, 4, channels), padding=VALID, stride_w=2, stride_h=2,
                  filter_width=2, filter_height=2, fused_activation_function=0)
    pads = pads or [[0, 0], [0, 0], [0, 0], [0, width - channels]]
    inputs = [pooled, c.const(pads, np.int32)] + ([c.const(np.float32(value))] if value is not None else [])
    shortcut = c.op(op, *inputs, shape=(1, 4 + pads[1][0] + pads[1][1], 4 + pads[2][0] + pads[2][1], width))
    branch = c.conv(c.depthwise(c.x, stride=2), width, kernel=1, seed=5)
    out = c.op("ADD", branch, shortcut, fused_activation_function=1)
    return c.build(out, *([c.op("NEG", shortcut)] if also_read else []))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("channels,width", [(6, 10), (8, 16), (24, 28)])
def test_a_channel_pad_folds_into_the_residual_step(channels, width, precision, monkeypatch):
    """Channel counts that end mid-slice (6 -> 10) or on a slice boundary (8 -> 16, 24 -> 28)."""
    model = blaze_block(channels, width)
    graph, log = rewrite_through(model, RULE)
    assert "PAD" not in ops_of(graph) and statuses(log, RULE) == [("APPLIED", "#1 (PAD)")]
    values = [random((1, 8, 8, channels), 1, 2.0)]
    summary, _ = check_gpu(model, values, precision)
    monkeypatch.setattr(pad_into_operand, "ENABLED", False)
    assert summary["dispatches"] + 1 == dispatches(model, values, precision=precision)


@pytest.mark.parametrize("kind,reason", [("value", "not zero"), ("read", "read otherwise")])
def test_other_pads_stay(kind, reason):
    op = "PADV2" if kind == "value" else "PAD"
    model = blaze_block(op=op, value=1.5 if kind == "value" else None, also_read=kind == "read")
    graph, log = rewrite_through(model, RULE)
    assert op in ops_of(graph) and reason in why(log, RULE, f"#1 ({op})")
    check_gpu(model, [random((1, 8, 8, 6), 2)])


def test_a_pad_of_other_axes_stays():
    c = Chain((1, 4, 4, 6))
    padded = c.op("PAD", c.op("ABS", c.x), c.const([[0, 0], [1, 0], [0, 0], [0, 2]], np.int32), shape=(1, 5, 4, 8))
    model = c.build(c.op("NEG", padded))
    graph, log = rewrite_through(model, RULE)
    assert "more than zero channels after the last" in why(log, RULE, "#1 (PAD)")
    check_gpu(model, [random((1, 4, 4, 6), 3)])
