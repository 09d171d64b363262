"""row_op_through_reshapes: a SOFTMAX (LOG_SOFTMAX, L2_NORMALIZATION) between a RESHAPE that regroups the leading dims and the
RESHAPE that undoes it runs on the tensor before both, and both reshapes go; reshapes that
regroup the last axis, or do not undo each other, stay."""
import numpy as np
import pytest

from tests.gpu.transforms.rulelib import Chain, check_gpu, ops_of, random, rewrite, statuses, why

RULE = "row_op_through_reshapes"


def reshape(c, x, shape):
    return c.op("RESHAPE", x, c.const(shape, np.int32), shape=shape)


def attention_scores(c, split, back, op="SOFTMAX"):
    """mobilevit's: scores [6, 5, 8] -> RESHAPE `split` -> SOFTMAX -> RESHAPE `back` -> NEG."""
    scores = c.op("ABS", c.x)
    options = {"beta": 1.0} if op == "SOFTMAX" else {}
    return c.op("NEG", reshape(c, c.op(op, reshape(c, scores, split), **options), back))


@pytest.mark.parametrize("op", ["SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION"])
@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_a_softmax_between_a_reshape_and_its_inverse_loses_both(op, precision):
    c = Chain((6, 5, 8))
    model = c.build(attention_scores(c, (2, 3, 5, 8), (6, 5, 8), op))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["ABS", op, "NEG"]
    assert statuses(log, RULE) == [("APPLIED", f"#2 ({op})")]
    check_gpu(model, [random((6, 5, 8), 1, 3.0)], precision)


def test_reshapes_that_regroup_the_last_axis_stay():
    """[6, 5, 8] -> [6, 40]: the softmax would normalize rows of 40, not of 8."""
    c = Chain((6, 5, 8))
    model = c.build(attention_scores(c, (6, 40), (6, 5, 8)))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph).count("RESHAPE") == 2
    assert "regroup the last axis" in why(log, RULE, "#2 (SOFTMAX)")
    check_gpu(model, [random((6, 5, 8), 2)])


def test_reshapes_that_do_not_undo_each_other_stay():
    c = Chain((6, 5, 8))
    model = c.build(attention_scores(c, (2, 3, 5, 8), (3, 10, 8)))
    graph, log = rewrite(model, RULE)
    assert "does not undo" in why(log, RULE, "#2 (SOFTMAX)")
    check_gpu(model, [random((6, 5, 8), 3)])


def test_a_reshape_read_elsewhere_stays():
    c = Chain((6, 5, 8))
    split = reshape(c, c.op("ABS", c.x), (2, 3, 5, 8))
    model = c.build(reshape(c, c.op("SOFTMAX", split, beta=1.0), (6, 5, 8)), c.op("NEG", split))
    graph, log = rewrite(model, RULE)
    assert "read by it alone" in why(log, RULE, "#2 (SOFTMAX)")
    check_gpu(model, [random((6, 5, 8), 4)])
