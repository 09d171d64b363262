"""read_through_reshape: layout ops read a value-moving reshape's input in its place (same
row-major order), so the reshape costs no dispatch; anything else keeps it."""
import numpy as np
import pytest

from gles_delegate.graph import Graph
from gles_delegate.gpu.kernels.layout import ROW_MAJOR_SOURCES
from gles_delegate.tflite import ModelBuilder, read_model
from gles_delegate.gpu.transforms import RULES, rewrite_partition
from tests.gpu.transforms.rulelib import Chain, check_gpu, ops_of, random, rewrite, statuses, why

RULE = "read_through_reshape"


def reshape(c, x, shape):
    return c.op("RESHAPE", x, c.const(shape, np.int32), shape=shape)


def detection_heads(c):
    """A detector's heads: two convolutions, each reshaped to [1, anchors, values] (which moves
    values between PHWC4 slices), concatenated along the anchors."""
    small = c.op("AVERAGE_POOL_2D", c.x, shape=(1, 4, 4, 8), padding=1, stride_w=2, stride_h=2, filter_width=2,
                 filter_height=2, fused_activation_function=0)
    a = reshape(c, c.conv(c.x, 12, kernel=1), (1, 8 * 8 * 2, 6))
    b = reshape(c, c.conv(small, 24, kernel=1, seed=5), (1, 4 * 4 * 4, 6))
    return c.op("CONCATENATION", a, b, shape=(1, 8 * 8 * 2 + 4 * 4 * 4, 6), axis=1, fused_activation_function=0)


def rewrite_with_aliases(model):
    """The rule after alias_reshape, as the delegate runs them."""
    graph = Graph.from_model(read_model(model))
    rules = tuple((name, apply) for name, apply in RULES if name in ("alias_reshape", RULE))
    return rewrite_partition(graph.nodes, graph.inputs, graph.outputs, rules)


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_a_concatenation_reads_the_heads_through_their_reshapes(precision):
    c = Chain((1, 8, 8, 8))
    model = c.build(detection_heads(c))
    graph, log = rewrite_with_aliases(model)
    assert ops_of(graph) == ["AVERAGE_POOL_2D", "CONV_2D", "CONV_2D", "CONCATENATION"]
    assert len(graph.nodes[-1].options[ROW_MAJOR_SOURCES]) == 2
    assert [s for s, _ in statuses(log, RULE)] == ["APPLIED", "APPLIED"]
    summary, _ = check_gpu(model, [random((1, 8, 8, 8), 3)], precision)
    # convert in, pool, 2 convs, the concatenation's 2 copies storing the output: no reshape copies
    assert summary["dispatches"] == 6


def test_a_reshape_of_a_reshape_is_read_through_twice():
    c = Chain((1, 6, 6, 8))
    twice = reshape(c, reshape(c, c.op("ABS", c.x), (1, 36, 4, 2)), (1, 12, 24))
    model = c.build(c.op("TRANSPOSE", twice, c.const((0, 2, 1), np.int32), shape=(1, 24, 12)))
    graph, log = rewrite_with_aliases(model)
    assert ops_of(graph) == ["ABS", "TRANSPOSE"]
    [(shown, source)] = graph.nodes[1].options[ROW_MAJOR_SOURCES]
    assert source is graph.nodes[0].outputs[0]  # the ABS output, not the first reshape's
    summary, _ = check_gpu(model, [random((1, 6, 6, 8), 4)])
    assert summary["dispatches"] == 3


def test_a_reshape_read_by_a_computing_op_stays():
    c = Chain((1, 4, 4, 8))
    model = c.build(c.op("NEG", reshape(c, c.op("ABS", c.x), (1, 8, 16))))
    graph, log = rewrite(model, RULE)
    assert "RESHAPE" in ops_of(graph) and "not a layout op" in why(log, RULE, "#1 (RESHAPE)")
    check_gpu(model, [random((1, 4, 4, 8))])


def test_a_reshape_leaving_the_partition_stays():
    c = Chain((1, 4, 4, 8))
    r = reshape(c, c.op("ABS", c.x), (1, 8, 16))
    model = c.build(r, c.op("CONCATENATION", r, r, shape=(1, 16, 16), axis=1, fused_activation_function=0))
    graph, log = rewrite(model, RULE)
    assert "leaves the partition" in why(log, RULE, "#1 (RESHAPE)")
    check_gpu(model, [random((1, 4, 4, 8), 2)])


def test_a_free_reshape_is_left_to_alias_reshape():
    c = Chain((1, 4, 5, 8))
    r = reshape(c, c.op("ABS", c.x), (1, 20, 8))
    model = c.build(c.op("CONCATENATION", r, r, shape=(1, 40, 8), axis=1, fused_activation_function=0))
    graph, log = rewrite_with_aliases(model)
    assert "RESHAPE" in ops_of(graph) and "alias" in why(log, RULE, "#1 (RESHAPE)")
    check_gpu(model, [random((1, 4, 5, 8), 5)])


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_a_reshape_feeding_a_fused_operand_stays(precision):
    """ConvNeXt's LayerNorm2d as litert-torch writes it: MUL(x, a) then ADD(that, RESHAPE(b)).
    fuse_residual_add makes the ADD a step of the MUL's epilogue that reads the reshape's output;
    that read must keep the reshape (once it was removed as unread, and the epilogue read
    storage nothing wrote: errors as large as the outputs)."""
    b = ModelBuilder()
    x, a, bias = b.input("x", (1, 12, 5)), b.input("a", (1, 12, 1)), b.input("b", (12,))
    scaled, shaped, out = b.tensor("scaled", (1, 12, 5)), b.tensor("shaped", (1, 12, 1)), b.tensor("out", (1, 12, 5))
    b.op("MUL", [x, a], [scaled], fused_activation_function=0)
    b.op("RESHAPE", [bias, b.const("shape", np.array([1, 12, 1], np.int32))], [shaped], new_shape=[1, 12, 1])
    b.op("ADD", [scaled, shaped], [out], fused_activation_function=0)
    b.output(out)
    values = [random((1, 12, 5), 1), random((1, 12, 1), 2), random((12,), 3)]
    _, log = check_gpu(b.build(), values, precision)
    assert [r.status for r in log if r.rule == "fuse_residual_add" and "ADD" in r.node] == ["APPLIED"]
    assert [r.status for r in log if r.rule == RULE] == ["SKIPPED"]
