"""fuse_elementwise: unary ops and binary ops with a constant join the epilogue of the node
that computes their input, so a chain of them is one shader."""
import numpy as np
import pytest

from gles_delegate.gpu.kernels.epilogue import steps_of
from gles_delegate.gpu.kernels.epilogue import MAX_STEPS
from tests.gpu.transforms.rulelib import Chain, check_gpu, ops_of, random, rewrite, statuses, why

RULE = "fuse_elementwise"


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc", "fp16"])
def test_a_chain_runs_as_one_dispatch(precision):
    c = Chain((2, 5, 6, 7))
    y = c.op("ABS", c.x)
    y = c.op("SQRT", c.op("MUL", y, c.const(random(7, 2))))
    y = c.op("SUB", c.const(np.float32(0.5)), c.op("EXP", c.op("NEG", y)))
    y = c.op("DIV", y, c.const(np.abs(random((1, 1, 1, 7), 4)) + 1))
    model = c.build(y)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["ABS"]
    assert [s.op for s in steps_of(graph.nodes[0])] == ["MUL", "SQRT", "NEG", "EXP", "SUB", "DIV"]
    assert statuses(log, RULE)[0] == ("SKIPPED", "#0 (ABS)")  # its input comes from outside
    assert all(status == "APPLIED" for status, _ in statuses(log, RULE)[1:])
    summary, _ = check_gpu(model, [random((2, 5, 6, 7), 1)], precision)
    assert summary["dispatches"] == 2


def test_a_constant_after_an_activated_conv_joins_its_epilogue():
    c = Chain((1, 6, 6, 4))
    model = c.build(c.op("ADD", c.conv(c.x, 4, activation=1), c.const(random(4, 3))))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["CONV_2D"]
    check_gpu(model, [random((1, 6, 6, 4))])


def test_a_broadcast_that_grows_the_value_stays():
    c = Chain((1, 1, 1, 4))
    model = c.build(c.op("MUL", c.op("ABS", c.x), c.const(random((1, 3, 3, 4), 2)), shape=(1, 3, 3, 4)))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["ABS", "MUL"]
    assert "larger than its input" in why(log, RULE, "#1 (MUL)")
    check_gpu(model, [random((1, 1, 1, 4))])


def test_an_epilogue_holds_a_bounded_number_of_steps():
    c = Chain((1, 3, 3, 4))
    y = c.op("NEG", c.x)
    for _ in range(MAX_STEPS + 1):
        y = c.op("NEG", y)
    model = c.build(y)
    graph, log = rewrite(model, RULE)
    # The first NEG keeps one of the template's steps for its own op.
    assert len(graph.nodes) == 2 and len(steps_of(graph.nodes[0])) == MAX_STEPS - 1
    assert "is full" in why(log, RULE, graph.nodes[1].label)
    check_gpu(model, [random((1, 3, 3, 4))])


def test_a_cast_no_kernel_of_its_producer_could_write_stays():
    """EQUAL -> CAST to int32: the comparison's kernels write bool, so the CAST stays a node of
    its own (fused, no kernel ran the EQUAL: both GPU paths failed to prepare a model LiteRT
    runs; gles-fuzz-graphs --families int32, seed 21 case 395)."""
    from gles_delegate.tflite import ModelBuilder
    b = ModelBuilder("equal_cast")
    x = b.input("x", (1, 6, 1, 8))
    same = b.tensor("same", (1, 6, 1, 8), np.bool_)
    counted = b.tensor("counted", (1, 6, 1, 8), np.int32)
    b.op("EQUAL", [b.const("c", np.round(random((1, 6, 1, 8), 7))), x], [same])
    b.op("CAST", [same], [counted])
    b.output(counted)
    model = b.build()
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["EQUAL", "CAST"]
    assert "would write int32" in why(log, RULE, "#1 (CAST)")
    check_gpu(model, [np.round(random((1, 6, 1, 8), 8))])
