"""elementwise_before_concat: the elementwise nodes reading a CONCATENATION move before it, one
copy per input with its part of the constants and of a residual operand, so that each copy folds
or fuses into the node computing that input. Every case runs on the GPU against the reference in
every precision, with the dispatches it saves, and the cases it must leave alone."""
import numpy as np
import pytest

from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms.rulelib import (Chain, check_gpu, check_skipped, dispatches_without, random, rewrite_through,
                                          statuses, why)

RULE = "elementwise_before_concat"


def split_pointwise(c, x, widths, seed=1):
    """MixNet's grouped pointwise convolution as litert-torch writes it: one CONV_2D per group of
    output channels, concatenated."""
    n, h, w, _ = c.shapes[x]
    outs = [c.conv(x, width, kernel=1, seed=seed + k) for k, width in enumerate(widths)]
    return c.op("CONCATENATION", *outs, shape=(n, h, w, sum(widths)), axis=3)


def batch_norm_relu_swish(c, x):
    """A batch norm (SUB, then MUL with a fused RELU: per-channel constants) and a swish."""
    channels = c.shapes[x][3]
    y = c.op("MUL", c.op("SUB", x, c.const(random(channels, 7))), c.const(random(channels, 8)),
             fused_activation_function=1)
    return c.op("MUL", y, c.op("LOGISTIC", y))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_mixnet_block(precision):
    """Split pointwise convolution, batch norm, RELU, swish and a residual ADD of a tensor
    computed before: every node after the concatenation becomes epilogue steps of the two
    convolutions, the residual read through a channel view of its storage."""
    shape = (1, 9, 7, 20)
    c = Chain(shape)
    residual = c.conv(c.x, 20, kernel=1, seed=20)
    y = batch_norm_relu_swish(c, split_pointwise(c, c.x, (8, 12)))
    model = c.build(c.conv(c.op("ADD", y, residual), 4, seed=30))
    graph, log = rewrite_through(model, RULE)
    assert statuses(log, RULE) == [("APPLIED", "#3 (CONCATENATION)")]
    assert [n.op for n in graph.nodes].count("CONCATENATION") == 1
    assert [n.op for n in graph.nodes].count("ADD") == 2  # the residual's copies, one per input
    values = [random(shape, 1)]
    summary, _ = check_gpu(model, values, precision)
    # convert_in and the four convolutions, two of them writing in place; without: the nodes
    # after the concatenation as one dispatch of their own.
    assert (summary["dispatches"], dispatches_without(RULE, model, values)) == (5, 6)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_constant_first_and_other_axis(precision):
    """A constant minus the concatenation (the operand order kept), then a scalar DIV; along the
    rows, a per-channel constant stays whole in each copy."""
    shape = (1, 6, 5, 8)
    c = Chain(shape)
    n, h, w, ch = shape
    rows = c.op("SLICE", c.x, c.const([0, 0, 0, 0], np.int32), c.const([n, 3, w, ch], np.int32), shape=(n, 3, w, ch))
    a, b = c.conv(c.x, ch, seed=1), c.conv(rows, ch, seed=3)
    concat = c.op("CONCATENATION", a, b, shape=(n, h + 3, w, ch), axis=-3)
    y = c.op("DIV", c.op("SUB", c.const(random(ch, 5)), concat), c.const(np.float32(3.0)))
    model = c.build(c.conv(y, 4, seed=9))
    _, log = rewrite_through(model, RULE)
    assert statuses(log, RULE) == [("APPLIED", "#3 (CONCATENATION)")]
    values = [random(shape, 2)]
    summary, _ = check_gpu(model, values, precision)
    assert summary["dispatches"] < dispatches_without(RULE, model, values)


def test_leaves_a_concatenation_a_convolution_also_reads():
    """A node that is not elementwise among the readers: nothing moves."""
    shape = (1, 5, 5, 8)
    c = Chain(shape)
    concat = split_pointwise(c, c.x, (4, 4))
    model = c.build(c.op("RELU", concat), c.conv(concat, 4, seed=9))
    check_skipped(model, RULE, "CONCATENATION", "#4 (CONV_2D): it is not an elementwise op", [random(shape)])


def test_leaves_a_residual_cut_mid_vec4():
    """Channels 0..6 of the residual end inside a vec4: their SLICE would be a copy dispatch of
    its own, so the ADD stays after the concatenation."""
    shape = (1, 5, 5, 16)
    c = Chain(shape)
    residual = c.op("EXP", c.x)
    model = c.build(c.conv(c.op("ADD", split_pointwise(c, c.x, (6, 10)), residual), 4, seed=9))
    check_skipped(model, RULE, "CONCATENATION", "channels 0..6 of tensor 1 are no block of its storage", [random(shape)])


def test_leaves_an_input_no_node_computes():
    """A partition input among the concatenated tensors has no producer to take the copy."""
    shape = (1, 4, 4, 8)
    c = Chain(shape)
    concat = c.op("CONCATENATION", c.x, c.conv(c.x, 4), shape=(1, 4, 4, 12), axis=3)
    model = c.build(c.conv(c.op("RELU6", concat), 4, seed=9))
    check_skipped(model, RULE, "CONCATENATION", "input 0: it is not computed in this partition", [random(shape)])


def test_leaves_a_result_that_leaves_the_partition():
    """Written in place by the copies, a partition output would need a copy out of its own: the
    one dispatch the rule saves."""
    shape = (1, 4, 4, 8)
    c = Chain(shape)
    model = c.build(c.op("RELU", split_pointwise(c, c.x, (4, 4))))
    check_skipped(model, RULE, "CONCATENATION", "result leaves the partition", [random(shape)])


def test_leaves_a_broadcast_operand():
    """A runtime [1, 1, 1, C] gate broadcast over the concatenation: no copy could cut it as a view."""
    shape = (1, 4, 4, 8)
    c = Chain(shape)
    gate = c.op("MEAN", c.x, c.const([1, 2], np.int32), shape=(1, 1, 1, 8), keep_dims=True)
    model = c.build(c.op("MUL", split_pointwise(c, c.x, (4, 4)), gate))
    graph, log = rewrite_through(model, RULE)
    [(status, label)] = statuses(log, RULE)
    assert status == "SKIPPED" and "another shape" in why(log, RULE, label)
    check_gpu(model, [random(shape)])
