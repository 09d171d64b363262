"""fold_mul_add: a MUL / ADD / SUB by a per-channel or scalar constant folds into the weights and
bias of the convolution before it (or, where exact, after it)."""
import numpy as np
import pytest

from tests.gpu.transforms.rulelib import SAME, VALID, Chain, check_gpu, ops_of, random, rewrite, statuses, why

RULE = "fold_mul_add"


def producer(c, kind):
    if kind == "CONV_2D":
        return c.conv(c.x, 6)
    if kind == "DEPTHWISE_CONV_2D":
        return c.depthwise(c.x)
    if kind == "FULLY_CONNECTED":
        return c.op(kind, c.x, c.const(random((6, 5), 4)), shape=(1, 6, 6, 6), keep_num_dims=True)
    return c.op("TRANSPOSE_CONV", c.const([1, 12, 12, 6], np.int32), c.const(random((6, 3, 3, 5), 4)), c.x,
                shape=(1, 12, 12, 6), padding=SAME, stride_w=2, stride_h=2)


def affine(c, x, op, const_first=False, scalar=False):
    channels = c.shapes[x][-1]
    const = c.const(np.float32(1.7) if scalar else random(channels, 8))
    return c.op(op, const, x) if const_first else c.op(op, x, const)


@pytest.mark.parametrize("kind", ["CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV"])
@pytest.mark.parametrize("op,const_first,scalar", [("MUL", False, False), ("ADD", True, False),
                                                   ("SUB", False, True), ("SUB", True, False)])
def test_folds_into_the_producer(kind, op, const_first, scalar):
    c = Chain((1, 6, 6, 5))
    model = c.build(affine(c, producer(c, kind), op, const_first, scalar))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == [kind]
    assert statuses(log, RULE) == [("APPLIED", f"#1 ({op})")]
    summary, _ = check_gpu(model, [random((1, 6, 6, 5), 1)])
    assert summary["dispatches"] == 2


@pytest.mark.parametrize("kind,op,padding", [("CONV_2D", "MUL", SAME), ("CONV_2D", "ADD", VALID),
                                             ("DEPTHWISE_CONV_2D", "SUB", VALID), ("FULLY_CONNECTED", "ADD", SAME)])
def test_folds_into_the_consumer_where_exact(kind, op, padding):
    """After an activation the constant cannot move into the producer; it moves into the next
    node's weights instead (a shift only where that node reads no zero padding)."""
    c = Chain((1, 6, 6, 5))
    x = affine(c, c.op("RELU", c.x), op)
    if kind == "CONV_2D":
        y = c.conv(x, 4, padding=padding)
    elif kind == "DEPTHWISE_CONV_2D":
        y = c.depthwise(x, padding=padding)
    else:
        y = c.op(kind, x, c.const(random((3, 5), 6)), c.const(random(3, 7)), shape=(1, 6, 6, 3), keep_num_dims=True)
    model = c.build(y)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["RELU", kind]
    assert why(log, RULE, f"#1 ({op})") == f"into the weights and bias of #2 ({kind})"
    check_gpu(model, [random((1, 6, 6, 5), 1)])


@pytest.mark.parametrize("op,padding", [("MUL", SAME), ("ADD", VALID)])
def test_folds_into_a_grouped_consumer(op, padding):
    """Each output channel of a grouped CONV_2D takes the scale / shift of its own group's input
    channels (8 channels in 4 groups of 2 inputs and 2 outputs)."""
    c = Chain((1, 6, 6, 8))
    x = affine(c, c.op("RELU", c.x), op)
    model = c.build(c.conv(x, 8, padding=padding, groups=4))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["RELU", "CONV_2D"]
    assert why(log, RULE, f"#1 ({op})") == "into the weights and bias of #2 (CONV_2D)"
    check_gpu(model, [random((1, 6, 6, 8), 1)])


@pytest.mark.parametrize("case,reason", [("activation", "activation before it"),
                                         ("padding", "reads zero padding"),
                                         ("spatial", "not a scalar or one value per channel"),
                                         ("read_twice", "read elsewhere")])
def test_left_alone(case, reason):
    c = Chain((1, 6, 6, 5))
    if case == "activation":  # conv+RELU, then MUL, then nothing with weights
        outputs = [c.op("ABS", affine(c, c.conv(c.x, 5, activation=1), "MUL"))]
    elif case == "padding":  # the shift would have to reach the SAME padding of the next conv
        outputs = [c.conv(affine(c, c.op("RELU", c.x), "ADD"), 4, padding=SAME)]
    elif case == "spatial":
        outputs = [c.op("MUL", c.conv(c.x, 5), c.const(random((1, 6, 6, 5), 3)))]
    else:
        conv = c.conv(c.x, 5)
        outputs = [affine(c, conv, "MUL"), c.op("ABS", conv)]
    model = c.build(*outputs)
    graph, log = rewrite(model, RULE)
    node = next(n for n in graph.nodes if n.op in ("MUL", "ADD"))
    assert reason in why(log, RULE, node.label)
    check_gpu(model, [random((1, 6, 6, 5), 1)])
