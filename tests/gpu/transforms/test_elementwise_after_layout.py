"""elementwise_after_layout: an elementwise op with one runtime operand, between a layout op and the
RESHAPE / TRANSPOSE that alone reads it, moves after the latter, so that the two layout ops
compose into one dispatch; anything else stays where it is."""
import numpy as np
import pytest

from gles_delegate.gpu.transforms import elementwise_after_layout
from tests.gpu.transforms.rulelib import Chain, check_gpu, dispatches, ops_of, random, rewrite, statuses, why

RULE = "elementwise_after_layout"


def scaled_heads(c, x, op="MUL", scale=0.25):
    """litert-torch's q: transpose the heads out, scale, merge them into the batch."""
    heads = c.op("TRANSPOSE", x, c.const((1, 0, 2), np.int32), shape=(4, 6, 8))
    if op == "MUL":
        scaled = c.op("MUL", heads, c.const(np.float32(scale)), fused_activation_function=0)
    else:
        scaled = c.op(op, heads)
    return c.op("RESHAPE", scaled, c.const((2, 2, 48), np.int32), shape=(2, 2, 48))


@pytest.mark.parametrize("op", ["MUL", "LOGISTIC"])
@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_the_op_moves_past_the_reshape_and_the_layout_ops_compose(op, precision, monkeypatch):
    c = Chain((6, 4, 8))
    model = c.build(c.op("NEG", scaled_heads(c, c.op("ABS", c.x), op)))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["ABS", "TRANSPOSE", "RESHAPE", op, "NEG"]
    assert statuses(log, RULE) == [("APPLIED", f"#2 ({op})")]
    values = [random((6, 4, 8), 1)]
    summary, _ = check_gpu(model, values, precision)
    monkeypatch.setattr(elementwise_after_layout, "ENABLED", False)
    # the transpose reads through into the reshape, whose gather applies the op and the NEG:
    # convert_in, ABS, the gather; without the rule the op and the NEG join the transpose's
    # gather and the reshape copies its output
    assert summary["dispatches"] == 3
    assert summary["dispatches"] + 1 == dispatches(model, values, precision=precision)


def test_an_op_whose_input_is_read_elsewhere_stays():
    c = Chain((6, 4, 8))
    heads = c.op("TRANSPOSE", c.op("ABS", c.x), c.const((1, 0, 2), np.int32), shape=(4, 6, 8))
    scaled = c.op("MUL", heads, c.const(np.float32(0.5)), fused_activation_function=0)
    model = c.build(c.op("RESHAPE", scaled, c.const((24, 8), np.int32), shape=(24, 8)), c.op("NEG", heads))
    graph, log = rewrite(model, RULE)
    assert "read elsewhere" in why(log, RULE, "#2 (MUL)")
    check_gpu(model, [random((6, 4, 8), 2)])


def test_an_op_whose_one_element_constant_has_a_higher_rank_than_the_reshape_stays():
    """DIV of a [1, 1, 1] slice by a [1, 1, 1] constant, then a RESHAPE to [1, 1]: after the
    reshape the DIV would broadcast to rank 3, which no kernel takes (the partition failed to
    compile, LiteRT's prepare with it: gles-fuzz-graphs --seed 5)."""
    c = Chain((1, 7, 9, 3))
    one = c.op("STRIDED_SLICE", c.x, c.const((0, 6, 2, 1), np.int32), c.const((1, 7, 3, 2), np.int32),
               c.const((1, 1, 1, 3), np.int32), shape=(1, 1, 1), begin_mask=9, shrink_axis_mask=4)
    divided = c.op("DIV", one, c.const(np.full((1, 1, 1), 0.75, np.float32)), fused_activation_function=3)
    model = c.build(c.op("RESHAPE", divided, c.const((1, -1), np.int32), shape=(1, 1)))
    graph, log = rewrite(model, RULE)
    assert "its constant has a higher rank than the output of #2 (RESHAPE)" in why(log, RULE, "#1 (DIV)")
    check_gpu(model, [random((1, 7, 9, 3), 5)])


def test_an_op_of_two_runtime_operands_or_a_broadcast_constant_is_not_considered():
    c = Chain((6, 4, 8))
    heads = c.op("TRANSPOSE", c.op("ABS", c.x), c.const((1, 0, 2), np.int32), shape=(4, 6, 8))
    by_channel = c.op("MUL", heads, c.const(random(8, 3)), fused_activation_function=0)
    both = c.op("ADD", by_channel, heads, fused_activation_function=0)
    model = c.build(c.op("RESHAPE", both, c.const((24, 8), np.int32), shape=(24, 8)))
    graph, log = rewrite(model, RULE)
    assert statuses(log, RULE) == []
    check_gpu(model, [random((6, 4, 8), 4)])


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_the_op_moves_past_a_chain_of_permutations(precision, monkeypatch):
    """ViT's q as litert-torch writes it: SLICE the qkv, scale, RESHAPE the heads out, TRANSPOSE
    them to the front: the MUL ends after both, and the slice, reshape and transpose compose."""
    c = Chain((1, 6, 24))
    q = c.op("SLICE", c.op("ABS", c.x), c.const((0, 0, 0), np.int32), c.const((1, 6, 8), np.int32), shape=(1, 6, 8))
    scaled = c.op("MUL", q, c.const(np.float32(0.5)), fused_activation_function=0)
    heads = c.op("RESHAPE", scaled, c.const((6, 2, 4), np.int32), shape=(6, 2, 4))
    model = c.build(c.op("NEG", c.op("TRANSPOSE", heads, c.const((1, 0, 2), np.int32), shape=(2, 6, 4))))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["ABS", "SLICE", "RESHAPE", "TRANSPOSE", "MUL", "NEG"]
    assert "#3 (RESHAPE), #4 (TRANSPOSE)" in why(log, RULE, "#2 (MUL)")
    values = [random((1, 6, 24), 5)]
    summary, _ = check_gpu(model, values, precision)
    monkeypatch.setattr(elementwise_after_layout, "ENABLED", False)
    # the slice, reshape and transpose are one gather, which applies the MUL and the NEG; without
    # the rule the MUL joins the slice's gather and the reshape and transpose are a second one
    assert summary["dispatches"] == 3
    assert summary["dispatches"] + 1 == dispatches(model, values, precision=precision)
