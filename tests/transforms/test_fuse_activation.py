"""fuse_activation: RELU-family nodes fold into their producer's fused activation."""
import numpy as np
import pytest

from gles_delegate.graph import Graph
from gles_delegate.tflite import ModelBuilder, read_model
from gles_delegate.transforms import rewrite_partition
from tests.gpu.gpulib import assert_gpu_matches, run_gpu
from tests.oplib import run_ours


def conv_then(activation, producer_activation=0, extra_reader=False):
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 3))
    w = b.const("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    bias = b.const("bias", rng.standard_normal(4).astype(np.float32))
    conv = b.tensor("conv", (1, 6, 6, 4))
    b.op("CONV_2D", [x, w, bias], [conv], padding=0, stride_w=1, stride_h=1,
         fused_activation_function=producer_activation)
    act = b.tensor("act", (1, 6, 6, 4))
    b.op(activation, [conv], [act])
    b.output(act)
    if extra_reader:
        b.output(conv)
    return b.build()


def rewrite(model):
    graph = Graph.from_model(read_model(model))
    return rewrite_partition(graph.nodes, graph.inputs, graph.outputs)


@pytest.mark.parametrize("activation,code", [("RELU", 1), ("RELU6", 3), ("RELU_N1_TO_1", 2)])
def test_activation_fuses_into_conv_and_results_match(activation, code):
    model = conv_then(activation)
    graph, log = rewrite(model)
    assert [n.op for n in graph.nodes] == ["CONV_2D"]
    assert graph.nodes[0].options["fused_activation_function"] == code
    assert graph.nodes[0].outputs[0].name == "act"
    assert [(r.status, r.node) for r in log] == [("APPLIED", f"#1 ({activation})")]
    x = np.random.default_rng(1).standard_normal((1, 6, 6, 3)).astype(np.float32) * 3
    (gpu,), summary = run_gpu(model, [x])
    assert summary["dispatches"] == 3  # convert in, conv with the activation, convert out
    assert_gpu_matches(run_ours(model, [x])[0], gpu, "fp32")


def test_left_alone_when_the_producer_already_has_an_activation():
    graph, log = rewrite(conv_then("RELU", producer_activation=3))
    assert [n.op for n in graph.nodes] == ["CONV_2D", "RELU"]
    assert log[0].status == "SKIPPED" and "already applies" in log[0].why


def test_left_alone_when_the_conv_output_is_also_read():
    graph, log = rewrite(conv_then("RELU", extra_reader=True))
    assert [n.op for n in graph.nodes] == ["CONV_2D", "RELU"]
    assert "read elsewhere" in log[0].why


def test_original_graph_is_not_edited():
    graph = Graph.from_model(read_model(conv_then("RELU")))
    rewrite_partition(graph.nodes, graph.inputs, graph.outputs)
    assert [n.op for n in graph.nodes] == ["CONV_2D", "RELU"]
    assert graph.nodes[0].options["fused_activation_function"] == 0
