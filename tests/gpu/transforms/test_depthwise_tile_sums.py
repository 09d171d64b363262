"""depthwise_tile_sums: a squeeze-excite gate whose MEAN kept its own dispatch reads the sums the
depthwise convolution before it adds up per workgroup instead; the MEAN's dispatch goes."""
import numpy as np
import pytest

from gles_delegate.gpu import io_loads, kernels
from gles_delegate.gpu.kernels import depthwise, squeeze_excite
from gles_delegate.gpu.transforms import se_gate
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms.rulelib import (SAME, VALID, Chain, check_gpu, dispatches, dispatches_without, ops_of, random, rewrite_through, why)
from tests.gpu.transforms.test_se_gate import layer, pooled_of, se_block

RULE = "depthwise_tile_sums"


@pytest.fixture(autouse=True)
def large_means(monkeypatch):
    """Every mean of these small models keeps its own dispatch, as a 28x28x144 one does."""
    monkeypatch.setattr(se_gate, "MAX_FUSED_MEAN_ELEMENTS", 0)


def gate_chain(shape, stride=1, padding=SAME, form="converter", activation=1):
    """depthwise (stride, RELU) -> mean (form as in test_se_gate) -> FC -> FC, the last layer's
    output the model's: linear in the mean, so a wrong tile sum shows in full."""
    c = Chain(shape)
    x = c.depthwise(c.x, stride=stride, padding=padding, activation=activation)
    z = layer(c, layer(c, pooled_of(c, x, form), 5, seed=11), c.shapes[x][3], seed=13)
    return c.build(z)


def node_of(graph, op):
    return next(n for n in graph.nodes if n.op == op)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape, stride, padding", [
    ((2, 19, 23, 10), 1, SAME),    # blocks cut by the edges, a padded channel, two batch items
    ((1, 37, 30, 8), 2, SAME),     # stride 2
    ((1, 9, 9, 4), 1, VALID),      # one block
    ((1, 131, 129, 32), 1, SAME),  # 2x2-pixel tiles (enough invocations for them)
])
def test_the_gate_reads_the_tile_sums_and_the_mean_goes(shape, stride, padding, precision):
    model = gate_chain(shape, stride, padding)
    graph, log = rewrite_through(model, RULE)
    assert ops_of(graph) == ["DEPTHWISE_CONV_2D", "SE_GATE"]
    conv, gate = graph.nodes
    sums = conv.outputs[1]
    assert gate.inputs[0] is sums and tuple(sums.shape) == depthwise.tile_sums_shape(conv)
    out = conv.outputs[0].shape
    assert gate.options[squeeze_excite.MEAN_COUNT] == out[1] * out[2]
    assert kernels.unsupported_reason(conv) is None and kernels.unsupported_reason(gate) is None
    assert "tile sums" in why(log, RULE, "#1 (MEAN)")
    summary, _ = check_gpu(model, [random(shape, 7, 2.0)], precision)
    # (convert_in,) depthwise, SE_GATE storing the output: the depthwise loads an input of more
    # than io_loads.MIN_IO_BYTES from the I/O buffer itself
    assert summary["dispatches"] == 2 + (np.prod(shape) * 4 <= io_loads.MIN_IO_BYTES)


def test_the_tile_sums_shape_follows_the_tiles_and_the_block():
    """[B, blocks down, blocks across, C], TILE_BLOCK invocations a block: 2x2-pixel tiles where
    there are invocations enough (131x129 -> 66x65 tiles), else one pixel each (19x15 at
    stride 2)."""
    bx, by = depthwise.TILE_BLOCK
    graph, _ = rewrite_through(gate_chain((1, 131, 129, 32)), RULE)
    assert depthwise.tile_sums_shape(graph.nodes[0]) == (1, -(-66 // by), -(-65 // bx), 32)
    graph, _ = rewrite_through(gate_chain((2, 37, 30, 8), stride=2), RULE)
    assert depthwise.tile_sums_shape(graph.nodes[0]) == (2, -(-19 // by), -(-15 // bx), 8)


@pytest.mark.parametrize("form", ["keras", "mediapipe"])
def test_the_mean_of_every_form_goes(form):
    """Keras' MEAN -> RESHAPE (an alias) goes with its reshape; MediaPipe's AVERAGE_POOL_2D is a
    MEAN by then (global_pool_to_mean)."""
    model = se_block(shape=(1, 12, 12, 16), form=form)
    graph, _ = rewrite_through(model, RULE)
    assert "MEAN" not in ops_of(graph) and "RESHAPE" not in ops_of(graph)
    assert node_of(graph, "SE_GATE").inputs[0] is node_of(graph, "DEPTHWISE_CONV_2D").outputs[1]
    for precision in ("fp32", "fp16"):
        check_gpu(model, [random((1, 12, 12, 16), 3)], precision)


def test_it_removes_one_dispatch_a_block():
    model, values = se_block(shape=(1, 12, 12, 16)), [random((1, 12, 12, 16), 4)]
    assert dispatches(model, values) == dispatches_without(RULE, model, values) - 1


def test_a_mean_read_elsewhere_stays():
    model = se_block(shape=(1, 8, 8, 16), form="converter", outputs=("pooled",))
    graph, log = rewrite_through(model, RULE)
    assert "MEAN" in ops_of(graph) and len(node_of(graph, "DEPTHWISE_CONV_2D").outputs) == 1
    assert "also read elsewhere" in why(log, RULE, "#1 (MEAN)")
    check_gpu(model, [random((1, 8, 8, 16), 6)])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_mean_the_gate_also_reads_in_its_epilogue_stays(precision):
    """The pooled vector times the gate's last layer: the MUL joins that layer's epilogue and so
    the SE_GATE's, which reads the MEAN's output twice, as its input and as the MUL's operand; the
    MEAN is its only reader, but without its dispatch the operand was never written (the output
    read 0: gles-fuzz-graphs --seed 3, 1 x max |LiteRT|)."""
    c = Chain((1, 6, 5, 6))
    x = c.depthwise(c.x, activation=1)
    pooled = pooled_of(c, x, "converter")
    model = c.build(c.op("MUL", pooled, layer(c, layer(c, pooled, 3, activation=1, seed=11), 6, seed=13)))
    graph, log = rewrite_through(model, RULE)
    assert "MEAN" in ops_of(graph) and len(node_of(graph, "DEPTHWISE_CONV_2D").outputs) == 1
    assert "also reads the output of #1 (MEAN) as an operand of its epilogue steps" in why(log, RULE, "#1 (MEAN)")
    check_gpu(model, [random((1, 6, 5, 6), 9)], precision)


def test_a_mean_of_another_op_stays():
    """A CONV_2D writes no tile sums."""
    c = Chain((1, 8, 8, 8))
    x = c.conv(c.x, 8, activation=1)
    model = c.build(layer(c, layer(c, pooled_of(c, x, "converter"), 4, seed=11), 8, seed=13))
    graph, log = rewrite_through(model, RULE)
    assert ops_of(graph) == ["CONV_2D", "MEAN", "SE_GATE"]
    assert "not the output of a DEPTHWISE_CONV_2D" in why(log, RULE, "#1 (MEAN)")
    check_gpu(model, [random((1, 8, 8, 8), 8)])


def test_a_depthwise_node_checks_its_outputs():
    """One output without TILE_SUMS (TFLite's op), two with: the second of the sums' shape."""
    graph, _ = rewrite_through(gate_chain((1, 9, 9, 4)), RULE)
    conv = graph.nodes[0]
    sums = conv.outputs[1]
    conv.outputs = conv.outputs[:1]
    assert "takes 2 outputs, got 1" in kernels.unsupported_reason(conv)
    conv.options = {k: v for k, v in conv.options.items() if k != depthwise.TILE_SUMS}
    conv.outputs = conv.outputs + [sums]
    assert "takes 1 output, got 2" in kernels.unsupported_reason(conv)
    conv.options = {**conv.options, depthwise.TILE_SUMS: True}
    assert kernels.unsupported_reason(conv) is None
    right = list(sums.shape)
    sums.shape = (1, right[1] + 1, right[2], 4)
    assert f"is not {right}" in kernels.unsupported_reason(conv)
