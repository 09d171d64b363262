"""fuse_swish: x * LOGISTIC(x) (two graph nodes) becomes one SWISH step of the epilogue of the
node computing x, and the results still match the reference in every precision."""
import numpy as np
import pytest

from gles_delegate.gpu.kernels.epilogue import steps_of
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms.rulelib import Chain, check_gpu, ops_of, random, rewrite, statuses, why

RULE = "fuse_swish"


def swish_after(producer="conv", swap=False, activation=0, extra_output=None, shape=(1, 6, 6, 3)):
    """producer(x) -> y; y * LOGISTIC(y) (operands swapped when `swap`); `extra_output`: 'y'
    or 'gate' is also a model output."""
    c = Chain(shape)
    y = c.conv(c.x, 8) if producer == "conv" else c.depthwise(c.x) if producer == "depthwise" else c.x
    gate = c.op("LOGISTIC", y)
    out = c.op("MUL", *((gate, y) if swap else (y, gate)), fused_activation_function=activation)
    extra = {"y": [y], "gate": [gate], None: []}[extra_output]
    return c.build(out, *extra)


def values(shape=(1, 6, 6, 3)):
    return [random(shape, 1, 4.0)]  # conv outputs from about -30 to 30: both tails of the sigmoid


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("producer", ["conv", "depthwise"])
@pytest.mark.parametrize("swap", [False, True])
def test_swish_becomes_one_step_of_the_producer(producer, swap, precision):
    model = swish_after(producer, swap)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == [{"conv": "CONV_2D", "depthwise": "DEPTHWISE_CONV_2D"}[producer]]
    assert [s.op for s in steps_of(graph.nodes[0])] == ["SWISH"] and steps_of(graph.nodes[0])[0].stored
    assert statuses(log, RULE) == [("APPLIED", "#2 (MUL)")]
    summary, _ = check_gpu(model, values(), precision)
    assert summary["dispatches"] == 2  # convert in, the layer with its swish (storing the output)


def test_the_products_activation_follows_the_swish():
    model = swish_after(activation=3)  # RELU6 of x * sigmoid(x)
    graph, _ = rewrite(model, RULE)
    assert [s.op for s in steps_of(graph.nodes[0])] == ["SWISH", "RELU6"]
    check_gpu(model, values())


def test_extreme_values_keep_their_tails():
    """sigmoid(x) is 0 and 1 far out (exp overflows in half math): x * sigmoid(x) is then -0 and x
    (inputs up to 300: conv outputs of a few thousand, within half range)."""
    x = np.array([-300.0, -100.0, -20.0, -1.0, 0.0, 1.0, 20.0, 100.0, 300.0, -50.0, 50.0, 5.0], np.float32)
    model = swish_after(producer="conv", shape=(1, 2, 2, 3))
    for precision in PRECISIONS:
        check_gpu(model, [x.reshape(1, 2, 2, 3)], precision)


@pytest.mark.parametrize("extra_output, reason", [("y", "also read elsewhere"), ("gate", None)])
def test_a_tensor_that_leaves_the_partition_keeps_the_nodes(extra_output, reason):
    model = swish_after(extra_output=extra_output)
    graph, log = rewrite(model, RULE)
    assert "LOGISTIC" in ops_of(graph) and "MUL" in ops_of(graph)
    if reason:
        assert reason in why(log, RULE, "#2 (MUL)")
    else:
        assert statuses(log, RULE) == []  # not a swish the rule may take: the gate is an output
    check_gpu(model, values())


def test_a_graph_input_has_no_producer_to_take_it():
    model = swish_after(producer=None)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["LOGISTIC", "MUL"]
    assert "not computed in this partition" in why(log, RULE, "#1 (MUL)")
    check_gpu(model, values())


def test_logistic_times_another_tensor_is_no_swish():
    c = Chain((1, 6, 6, 3))
    y, z = c.conv(c.x, 4), c.conv(c.x, 4, seed=5)
    model = c.build(c.op("MUL", z, c.op("LOGISTIC", y)))
    graph, log = rewrite(model, RULE)
    assert statuses(log, RULE) == [] and ops_of(graph).count("LOGISTIC") == 1
    check_gpu(model, values())


def test_the_switch_turns_the_rule_off(monkeypatch):
    monkeypatch.setattr("gles_delegate.gpu.transforms.fuse_swish.ENABLED", False)
    graph, log = rewrite(swish_after(), RULE)
    assert ops_of(graph) == ["CONV_2D", "LOGISTIC", "MUL"] and statuses(log, RULE) == []
