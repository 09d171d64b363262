"""fuse_activation: standalone activations fold into their producer, as its fused activation or
as an epilogue step, and the results still match the reference."""
import numpy as np
import pytest

from gles_delegate.graph import Graph
from gles_delegate.gpu.kernels.epilogue import steps_of
from gles_delegate.tflite import read_model
from gles_delegate.gpu.transforms import rewrite_partition
from tests.gpu.transforms.rulelib import Chain, check_gpu, ops_of, random, rewrite, statuses, why

RULE = "fuse_activation"


def conv_then(activation, producer_activation=0, extra_reader=False, **options):
    c = Chain((1, 6, 6, 3))
    conv = c.conv(c.x, 4, activation=producer_activation)
    inputs = [conv] + ([c.const(random((1, 1, 4), 5, 0.5))] if activation == "PRELU" else [])
    act = c.op(activation, *inputs, **options)
    return c.build(act, *([conv] if extra_reader else []))


def x_values(shape=(1, 6, 6, 3)):
    return [random(shape, 1, 3.0)]


@pytest.mark.parametrize("activation,code", [("RELU", 1), ("RELU6", 3), ("RELU_N1_TO_1", 2)])
def test_clamp_becomes_the_fused_activation(activation, code):
    model = conv_then(activation)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["CONV_2D"]
    assert graph.nodes[0].options["fused_activation_function"] == code
    assert graph.nodes[0].outputs[0].name.endswith(activation.lower())
    assert statuses(log, RULE) == [("APPLIED", f"#1 ({activation})")]
    summary, _ = check_gpu(model, x_values())
    assert summary["dispatches"] == 2  # convert in, conv with the activation (storing the output)


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
@pytest.mark.parametrize("activation,options", [("LEAKY_RELU", {"alpha": 0.2}), ("PRELU", {}), ("HARD_SWISH", {}),
                                                ("LOGISTIC", {}), ("TANH", {}), ("RELU_0_TO_1", {})])
def test_other_activations_become_an_epilogue_step(activation, options, precision):
    model = conv_then(activation, **options)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["CONV_2D"]
    assert [s.op for s in steps_of(graph.nodes[0])] == [activation]
    assert "epilogue" in why(log, RULE, f"#1 ({activation})")
    summary, _ = check_gpu(model, x_values(), precision)
    assert summary["dispatches"] == 2


def test_an_activation_after_one_already_applied_runs_after_it():
    """RELU6 then LEAKY_RELU: the second cannot be a fused activation; it becomes an epilogue
    step, which the kernel applies after the fused one."""
    model = conv_then("LEAKY_RELU", producer_activation=3, alpha=-0.5)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["CONV_2D"] and graph.nodes[0].options["fused_activation_function"] == 3
    check_gpu(model, x_values())


@pytest.mark.parametrize("producer", ["DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "RESIZE_BILINEAR", "ADD", "ABS",
                                      "FULLY_CONNECTED", "TRANSPOSE_CONV"])
def test_every_epilogue_kernel_takes_one(producer):
    c = Chain((1, 6, 6, 4))
    if producer == "DEPTHWISE_CONV_2D":
        y = c.depthwise(c.x)
    elif producer == "AVERAGE_POOL_2D":
        y = c.op(producer, c.x, shape=(1, 3, 3, 4), padding=1, stride_w=2, stride_h=2, filter_width=2,
                 filter_height=2)
    elif producer == "RESIZE_BILINEAR":
        y = c.op(producer, c.x, c.const([9, 11], np.int32), shape=(1, 9, 11, 4))
    elif producer == "ADD":
        y = c.op(producer, c.x, c.const(random(4, 2)))
    elif producer == "FULLY_CONNECTED":
        y = c.op(producer, c.x, c.const(random((5, 4), 2)), c.const(random(5, 3)), shape=(1, 6, 6, 5),
                 keep_num_dims=True)
    elif producer == "TRANSPOSE_CONV":
        y = c.op(producer, c.const([1, 12, 12, 3], np.int32), c.const(random((3, 3, 3, 4), 2)), c.x,
                 shape=(1, 12, 12, 3), padding=0, stride_w=2, stride_h=2)
    else:
        y = c.op(producer, c.x)
    model = c.build(c.op("HARD_SWISH", y))
    graph, log = rewrite(model, RULE)
    assert statuses(log, RULE)[0][0] == "APPLIED", log
    assert len(graph.nodes) == 1
    summary, _ = check_gpu(model, [random((1, 6, 6, 4), 1, 3.0)])
    assert summary["dispatches"] == 2


def test_left_alone_when_the_conv_output_is_also_read():
    graph, log = rewrite(conv_then("RELU", extra_reader=True), RULE)
    assert ops_of(graph) == ["CONV_2D", "RELU"]
    assert "read elsewhere" in why(log, RULE, "#1 (RELU)")


def test_left_alone_when_the_producer_applies_no_epilogue():
    """A SOFTMAX's kernel has neither a fused activation nor an epilogue."""
    c = Chain((1, 6, 6, 4))
    model = c.build(c.op("LOGISTIC", c.op("SOFTMAX", c.x, beta=1.0)))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["SOFTMAX", "LOGISTIC"]
    assert "applies no epilogue" in why(log, RULE, "#1 (LOGISTIC)")
    check_gpu(model, x_values((1, 6, 6, 4)))


def test_left_alone_when_the_prelu_slope_is_computed_at_run_time():
    c = Chain((1, 4, 4, 4))
    slope = c.b.input("slope", (1, 1, 4))
    model = c.build(c.op("PRELU", c.op("ABS", c.x), slope))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["ABS", "PRELU"]
    assert "run time" in why(log, RULE, "#1 (PRELU)")


def test_original_graph_is_not_edited():
    graph = Graph.from_model(read_model(conv_then("HARD_SWISH")))
    rewrite_partition(graph.nodes, graph.inputs, graph.outputs)
    assert [n.op for n in graph.nodes] == ["CONV_2D", "HARD_SWISH"]
    assert "epilogue" not in graph.nodes[0].options
