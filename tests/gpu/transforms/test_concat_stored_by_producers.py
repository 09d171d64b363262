"""concat_stored_by_producers: a CONCATENATION input that is no block of the output (a row of a
sequence, a box along H) is stored into place by the POINTWISE_DAG computing it, beside its own
store, and the concatenation's copy dispatch goes; results equal the unfused graph's bit for
bit in every precision and the reference's within tolerance."""
import numpy as np
import pytest

from gles_delegate.gpu.kernels import layout, pointwise
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms.rulelib import (Chain, assert_same_as_unfused, check_gpu, dispatches, dispatches_without,
                                          random, rewrite_through, why)
from tests.gpu.transforms.test_fuse_pointwise_dag import H, Cell, cell_values

RULE = "concat_stored_by_producers"
STEPS = 4


def sequence_model(steps=STEPS, boundary=False):
    """`steps` LSTM cells; their h's concatenated along axis 0 into [steps, 1, H] (litert-torch's
    sequence output), then read by a dense layer (or, with `boundary`, the model's output)."""
    cell = Cell()
    h, c, hs = cell.x, cell.c, []
    for step in range(steps):
        h, c = cell.lstm(h, c, seed=10 * step)
        hs.append(h)
    seq = cell.op("CONCATENATION", *hs, shape=(steps, 1, H), axis=0)
    if boundary:
        return cell.build(seq)
    weights, bias = cell.const(random((6, H), 3)), cell.const(random(6, 4))
    return cell.build(cell.op("FULLY_CONNECTED", seq, weights, bias, shape=(steps, 6), keep_num_dims=False))


def pieces_model(shape=(1, 3, 5, 8), axis=1, reader="conv"):
    """Two outputs of one pointwise DAG (a = logistic(x) tanh(x), b = x x + |a|) concatenated
    along `axis`, then a 1x1 convolution (a SOFTMAX below rank 4; a RELU, which fuses into the
    concatenation as its activation)."""
    c = Chain(shape)
    a = c.op("MUL", c.op("TANH", c.x), c.op("LOGISTIC", c.x))
    b = c.op("ADD", c.op("MUL", c.x, c.x), c.op("ABS", a))
    joined_shape = tuple(2 * n if k == axis else n for k, n in enumerate(shape))
    joined = c.op("CONCATENATION", a, b, shape=joined_shape, axis=axis)
    if reader == "relu":
        return c.build(c.op("RELU", joined))
    return c.build(c.conv(joined, 4, kernel=1) if len(shape) == 4 else c.op("SOFTMAX", joined, beta=1.0))


def test_each_step_stores_its_row_and_the_copies_go():
    model = sequence_model()
    graph, log = rewrite_through(model, RULE)
    concat = next(n for n in graph.nodes if n.op == "CONCATENATION")
    assert concat.options[layout.PRODUCER_STORES] == tuple(range(STEPS))
    dags = [n for n in graph.nodes if n.op == pointwise.OP]
    origins = [origin for dag in dags for _, whole, origin in dag.options.get(pointwise.PLACED, ())
               if whole is concat.outputs[0]]
    assert origins == [(0, t, 0, 0) for t in range(STEPS)]  # [steps, 1, H] is 1 x steps x 1 x H
    values = cell_values()
    assert dispatches_without(RULE, model, values) - dispatches(model, values) == STEPS


@pytest.mark.parametrize("precision", [*PRECISIONS, "auto"])
def test_sequences_match_the_reference(precision):
    check_gpu(sequence_model(), cell_values(2), precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape, axis", [((1, 3, 5, 8), 1), ((1, 3, 5, 8), 2), ((2, 3, 5, 8), 3), ((3, 1, 8), 0)])
def test_boxes_along_every_axis_match_the_unfused_graph(shape, axis, precision):
    """Along H, W, the channels of a batch-2 tensor and the first dim of a rank-3 one (its H)
    each piece is a box of the output's view but no block of its storage."""
    model, values = pieces_model(shape, axis), [random(shape, 5, 2.0)]
    graph, _ = rewrite_through(model, RULE)
    concat = next(n for n in graph.nodes if n.op == "CONCATENATION")
    assert concat.options.get(layout.PRODUCER_STORES) == (0, 1)
    assert_same_as_unfused(RULE, model, values, precision)
    check_gpu(model, values, precision)


def test_channels_that_start_or_end_mid_vec4_keep_their_copies():
    """6 + 6 channels of a batch-2 tensor (no lane views): the first ends mid-vec4 before the
    output's last channel, the second starts there."""
    model = pieces_model((2, 3, 5, 6), 3)
    graph, log = rewrite_through(model, RULE)
    concat = next(n for n in graph.nodes if n.op == "CONCATENATION")
    assert layout.PRODUCER_STORES not in concat.options
    assert why(log, RULE, concat.label) == ("input 0: its channels end mid-vec4 before the output's last; "
                                             "input 1: its channels start mid-vec4")
    check_gpu(model, [random((2, 3, 5, 6), 5)])


def test_a_concatenation_with_an_activation_keeps_its_copies():
    """The copy applies the concatenation's activation; the producers' stores would not."""
    model = pieces_model(reader="relu")
    graph, log = rewrite_through(model, RULE)
    concat = next(n for n in graph.nodes if n.op == "CONCATENATION")
    assert layout.PRODUCER_STORES not in concat.options
    assert "applies an activation" in why(log, RULE, concat.label)
    check_gpu(model, [random((1, 3, 5, 8), 4, 2.0)])


def test_a_concatenation_that_leaves_the_partition_keeps_its_copies():
    model = sequence_model(boundary=True)
    graph, log = rewrite_through(model, RULE)
    concat = next(n for n in graph.nodes if n.op == "CONCATENATION")
    assert layout.PRODUCER_STORES not in concat.options
    assert "leaves the partition" in why(log, RULE, concat.label)
    check_gpu(model, cell_values(2))


def test_the_template_s_limit_holds(monkeypatch):
    """A DAG whose output two concatenations read stores into both; past MAX_PLACED, a copy."""
    monkeypatch.setattr(pointwise, "MAX_PLACED", 1)
    c = Chain((1, 3, 5, 8))
    a = c.op("MUL", c.op("TANH", c.x), c.op("LOGISTIC", c.x))
    first = c.op("CONCATENATION", a, c.x, shape=(1, 6, 5, 8), axis=1)
    second = c.op("CONCATENATION", c.x, a, shape=(1, 3, 10, 8), axis=2)
    model = c.build(c.conv(first, 4, kernel=1), c.conv(second, 4, kernel=1, seed=3))
    graph, log = rewrite_through(model, RULE)
    concats = [n for n in graph.nodes if n.op == "CONCATENATION"]
    assert [n.options.get(layout.PRODUCER_STORES, ()) for n in concats] == [(0,), ()]
    assert "stores 1 boxes already" in why(log, RULE, concats[1].label)
    check_gpu(model, [random((1, 3, 5, 8), 9)])
