"""conv_to_fully_connected: a 1x1 CONV_2D of a 1x1 input runs as FULLY_CONNECTED."""
import pytest

from tests.gpu.transforms.rulelib import Chain, check_gpu, ops_of, random, rewrite, statuses, why

RULE = "conv_to_fully_connected"


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
@pytest.mark.parametrize("batch,activation", [(1, 0), (3, 3)])
def test_pointwise_conv_of_one_pixel_becomes_fully_connected(batch, activation, precision):
    c = Chain((batch, 1, 1, 96))
    model = c.build(c.conv(c.x, 40, kernel=1, activation=activation))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["FULLY_CONNECTED"]
    fc = graph.nodes[0]
    assert fc.inputs[1].shape == (40, 96) and fc.options["keep_num_dims"]
    assert fc.inputs[1].index == 4  # after the model's x, filter, bias and output: no model tensor
    assert fc.options["fused_activation_function"] == activation
    assert statuses(log, RULE) == [("APPLIED", "#0 (CONV_2D)")]
    summary, _ = check_gpu(model, [random((batch, 1, 1, 96), 2, 2.0)], precision)
    assert summary["dispatches"] == 2


def test_a_wider_filter_on_one_pixel_stays_a_convolution():
    c = Chain((1, 1, 1, 8))
    model = c.build(c.conv(c.x, 4, kernel=3))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["CONV_2D"]
    assert "not the input's 1x1" in why(log, RULE, "#0 (CONV_2D)")
    check_gpu(model, [random((1, 1, 1, 8))])


def test_a_pointwise_conv_of_a_larger_input_is_not_considered():
    c = Chain((1, 4, 4, 8))
    graph, log = rewrite(c.build(c.conv(c.x, 4, kernel=1)), RULE)
    assert ops_of(graph) == ["CONV_2D"] and not log


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
@pytest.mark.parametrize("batch", [1, 2])
def test_a_valid_filter_covering_the_input_becomes_fully_connected(batch, precision):
    """pose_landmark_full's heads: a VALID 2x2 conv over a 2x2x288 input to 195 values."""
    c = Chain((batch, 2, 2, 36))
    model = c.build(c.conv(c.x, 21, kernel=2, padding=1, activation=1))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["FULLY_CONNECTED", "RESHAPE"]
    assert graph.nodes[0].inputs[1].shape == (21, 2 * 2 * 36) and not graph.nodes[0].options["keep_num_dims"]
    assert statuses(log, RULE) == [("APPLIED", "#0 (CONV_2D)")]
    summary, _ = check_gpu(model, [random((batch, 2, 2, 36), 3, 2.0)], precision)
    assert summary["dispatches"] == 3  # convert in, FC, convert out: the reshape is free


def test_a_same_padded_filter_covering_the_input_stays_a_convolution():
    c = Chain((1, 3, 3, 8))
    graph, log = rewrite(c.build(c.conv(c.x, 4, kernel=3, stride=3)), RULE)
    assert ops_of(graph) == ["CONV_2D"]
    assert "SAME padding" in why(log, RULE, "#0 (CONV_2D)")


def test_a_grouped_conv_of_one_pixel_stays_a_convolution():
    c = Chain((1, 1, 1, 8))
    model = c.build(c.conv(c.x, 6, kernel=1, groups=2))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["CONV_2D"]
    assert why(log, RULE, "#0 (CONV_2D)") == "it is a grouped convolution"
    check_gpu(model, [random((1, 1, 1, 8))])
