"""channel_gate: MUL(x, gate[B, 1, 1, C]) read only by a CONV_2D becomes that convolution's input
gate: it multiplies each input vec4 by the gate's as it loads it, and the MUL goes away."""
import numpy as np
import pytest

from gles_delegate.gpu.kernels.conv import INPUT_GATE
from tests.gpu.gpulib import NO_BLOCKING, PRECISIONS
from tests.gpu.transforms.rulelib import (SAME, VALID, Chain, check_gpu, check_skipped, ops_of, random, rewrite_through,
                                         statuses, why)

RULE = "channel_gate"


def gated(shape=(1, 6, 6, 8), consumer=None, gate_shape=None, swap=False, extra_output=False, activation=0):
    """x -> depthwise y; gate = LOGISTIC(MEAN(y)) (the LOGISTIC an epilogue step of the MEAN);
    consumer(MUL(y, gate)). The gate is computed from y, as a squeeze-excite's is: the
    depthwise's epilogue could not read it (a gate of x would be hoisted before the depthwise,
    which would then take the MUL)."""
    c = Chain(shape)
    n, _, _, ch = shape
    y = c.depthwise(c.x)
    gate = c.op("LOGISTIC", c.op("MEAN", y, c.const([1, 2], np.int32), shape=(n, 1, 1, ch), keep_dims=True))
    if gate_shape:
        gate = c.op("RESHAPE", gate, c.const(gate_shape, np.int32), shape=gate_shape)
    product = c.op("MUL", *((gate, y) if swap else (y, gate)), shape=shape, fused_activation_function=activation)
    out = (consumer or (lambda c, v: c.conv(v, 8, kernel=1, seed=9)))(c, product)
    return c.build(out, *([product] if extra_output else []))


CONSUMERS = {
    "pointwise": lambda c, v: c.conv(v, 8, kernel=1, seed=9),
    "3x3 same stride 2": lambda c, v: c.conv(v, 12, kernel=3, padding=SAME, stride=2, seed=9),
    "3x3 valid": lambda c, v: c.conv(v, 4, kernel=3, padding=VALID, seed=9),
    "grouped": lambda c, v: c.conv(v, 8, kernel=3, groups=2, seed=9),
}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("consumer", CONSUMERS)
def test_the_gate_multiplies_the_convolution_input(consumer, precision):
    model = gated(shape=(2, 6, 6, 8), consumer=CONSUMERS[consumer], swap=consumer == "grouped")
    graph, log = rewrite_through(model, RULE)
    conv = graph.nodes[-1]
    assert "MUL" not in ops_of(graph) and conv.options[INPUT_GATE] is graph.nodes[-2].outputs[0]
    assert statuses(log, RULE) == [("APPLIED", "#3 (MUL)")]
    check_gpu(model, [random((2, 6, 6, 8), 1, 3.0)], precision)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_split_k_convolution_gates_every_lane_share(monkeypatch, precision):
    """A deep input on a small plane splits K over a workgroup (conv2d.glsl's K_SPLIT)."""
    monkeypatch.setattr("gles_delegate.gpu.kernels.conv.MIN_INVOCATIONS", NO_BLOCKING)
    model = gated(shape=(1, 4, 4, 64), consumer=lambda c, v: c.conv(v, 8, kernel=3, seed=9))
    check_gpu(model, [random((1, 4, 4, 64), 2)], precision)


def test_a_rank_2_gate_of_one_batch_item_is_a_channel_gate():
    model = gated(gate_shape=(1, 8))
    graph, log = rewrite_through(model, RULE)
    assert [s for s, _ in statuses(log, RULE)] == ["APPLIED"]
    check_gpu(model, [random((1, 6, 6, 8), 3)])


@pytest.mark.parametrize("options, reason", [
    ({"extra_output": True}, "read by more than one node"),
    ({"consumer": lambda c, v: c.depthwise(v)}, "does not read it as a convolution's input"),
    ({"activation": 1}, "fused activation"),
], ids=["read twice", "depthwise reader", "activation"])
def test_other_muls_stay(options, reason):
    check_skipped(gated(**options), RULE, "MUL", reason, [random(options.get("shape", (1, 6, 6, 8)), 4)])


def test_a_gate_that_broadcasts_along_w_is_no_channel_gate():
    """[2, 8] broadcasts against [2, 3, 2, 8] along W, not over the batch (a MUL the GPU's binary
    kernel refuses too: the rule's own check, on the rewrite alone)."""
    graph, log = rewrite_through(gated(shape=(2, 3, 2, 8), gate_shape=(2, 8)), RULE)
    assert "MUL" in ops_of(graph)
    assert "is not a [2, 1, 1, 8] gate" in why(log, RULE, "#4 (MUL)")


def test_a_gate_a_value_moving_reshape_makes_keeps_its_reshape():
    """The convolution reads its gate through an option, not an input: read_through_layout must
    not take the reshape producing it for unread."""
    c = Chain((1, 6, 6, 8))
    pooled = c.op("MEAN", c.x, c.const([1, 2], np.int32), shape=(1, 8), keep_dims=False)
    # [1, 2, 4] is a 1x1x2x4 tensor: both reshapes move values between PHWC4 planes and slices.
    pooled = c.op("RESHAPE", pooled, c.const([1, 2, 4], np.int32), shape=(1, 2, 4))
    gate = c.op("RESHAPE", c.op("LOGISTIC", pooled), c.const([1, 1, 1, 8], np.int32), shape=(1, 1, 1, 8))
    model = c.build(c.conv(c.op("MUL", c.depthwise(c.x), gate, shape=(1, 6, 6, 8)), 8, kernel=1, seed=9))
    graph, log = rewrite_through(model, "read_through_layout")
    assert "MUL" not in ops_of(graph) and "RESHAPE" in ops_of(graph)
    check_gpu(model, [random((1, 6, 6, 8), 5)])
