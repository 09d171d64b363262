"""remove_noops: nodes that pass their input through unchanged leave the graph; nodes that only
look like it stay, with the reason logged."""
import numpy as np
import pytest

from gles_delegate.graph import Graph, Node, Tensor
from gles_delegate.gpu.transforms import RewriteLog
from gles_delegate.gpu.transforms.remove_noops import apply
from tests.gpu.transforms.rulelib import Chain, check_gpu, ops_of, random, rewrite, statuses, why

RULE = "remove_noops"
SHAPE = (1, 5, 6, 7)


def noop(c, op, x):
    """A node of `op` that leaves x as it is."""
    n, h, w, ch = SHAPE
    if op == "RESHAPE":
        return c.op(op, x, c.const(SHAPE, np.int32))
    if op == "STRIDED_SLICE":
        return c.op(op, x, c.const([0] * 4, np.int32), c.const(SHAPE, np.int32), c.const([1] * 4, np.int32))
    if op == "SLICE":
        return c.op(op, x, c.const([0] * 4, np.int32), c.const([-1] * 4, np.int32))
    if op == "PAD":
        return c.op(op, x, c.const(np.zeros((4, 2)), np.int32))
    if op == "CONCATENATION":
        return c.op(op, x, axis=3)
    if op in ("ADD", "SUB"):
        return c.op(op, x, c.const(np.zeros(ch)))
    if op in ("MUL", "DIV"):
        return c.op(op, c.const(1.0), x) if op == "MUL" else c.op(op, x, c.const(np.ones((1, 1, 1, ch))))
    if op.startswith("RESIZE"):
        return c.op(op, x, c.const([h, w], np.int32), half_pixel_centers=op == "RESIZE_BILINEAR")
    raise ValueError(op)


NOOPS = ["RESHAPE", "STRIDED_SLICE", "SLICE", "PAD", "CONCATENATION", "ADD", "SUB", "MUL", "DIV",
         "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"]


@pytest.mark.parametrize("op", NOOPS)
def test_identity_node_is_removed_and_results_match(op):
    c = Chain(SHAPE)
    model = c.build(c.op("ABS", noop(c, op, c.op("NEG", c.x))))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["NEG", "ABS"]
    assert graph.nodes[1].inputs[0] is graph.nodes[0].outputs[0]
    assert statuses(log, RULE) == [("APPLIED", f"#1 ({op})")]
    summary, _ = check_gpu(model, [random(SHAPE)])
    assert summary["dispatches"] == 2  # NEG and ABS fuse into one dispatch once the no-op is gone


def test_a_noop_writing_a_partition_output_renames_its_producer_output():
    c = Chain(SHAPE)
    model = c.build(noop(c, "RESHAPE", c.op("NEG", c.x)))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["NEG"] and graph.nodes[0].outputs[0] is graph.outputs[0]
    check_gpu(model, [random(SHAPE)])


def test_a_noop_between_partition_input_and_output_stays():
    c = Chain(SHAPE)
    graph, log = rewrite(c.build(noop(c, "RESHAPE", c.x)), RULE)
    assert ops_of(graph) == ["RESHAPE"]
    assert "leaves the partition" in why(log, RULE, "#0 (RESHAPE)")


def test_shape_keeping_rearrangements_stay():
    """A transpose and a reversing strided slice keep the shape but move values; a resize of
    the same size with align_corners and a pad of zero width are no-ops, a constant of 2 is not."""
    c = Chain((1, 4, 4, 4))
    t = c.op("TRANSPOSE", c.x, c.const([0, 2, 1, 3], np.int32))
    r = c.op("STRIDED_SLICE", t, c.const([0, 3, 0, 0], np.int32), c.const([1, -5, 4, 4], np.int32),
             c.const([1, -1, 1, 1], np.int32))
    m = c.op("MUL", r, c.const(np.full(4, 2.0)))
    model = c.build(m)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["TRANSPOSE", "STRIDED_SLICE", "MUL"]
    assert "rearranges" in why(log, RULE, "#0 (TRANSPOSE)")
    assert "rearranges" in why(log, RULE, "#1 (STRIDED_SLICE)")
    assert "constant operand" in why(log, RULE, "#2 (MUL)")
    check_gpu(model, [random((1, 4, 4, 4))])


def test_a_fused_activation_is_not_a_noop():
    c = Chain(SHAPE)
    model = c.build(c.op("ABS", c.op("ADD", c.op("NEG", c.x), c.const(0.0), fused_activation_function=1)))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["NEG", "ADD", "ABS"]
    assert "fused activation" in why(log, RULE, "#1 (ADD)")


