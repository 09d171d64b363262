"""remove_dead: nodes whose outputs nothing reads leave the partition; a node some of whose
outputs are read stays."""
import numpy as np

from tests.gpu.transforms.rulelib import Chain, check_gpu, dispatches, ops_of, random, rewrite, statuses, why

RULE = "remove_dead"


def test_unread_chain_is_removed():
    c = Chain((1, 4, 4, 8))
    out = c.op("ABS", c.x)
    c.op("EXP", c.op("NEG", c.x))  # read by nothing
    model = c.build(out)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["ABS"]
    assert statuses(log, RULE) == [("APPLIED", "#2 (EXP)"), ("APPLIED", "#1 (NEG)")]
    check_gpu(model, [random((1, 4, 4, 8))])
    assert dispatches(model, [random((1, 4, 4, 8))]) == 2
    assert dispatches(model, [random((1, 4, 4, 8))], rewrite_rules=False) == 4


def test_a_node_with_some_outputs_read_stays():
    c = Chain((1, 4, 4, 8))
    first, second = (c.b.tensor(f"half{k}", (1, 4, 4, 4)) for k in range(2))
    c.b.op("SPLIT", [c.const(3, np.int32), c.x], [first, second], num_splits=2)
    c.shapes[first] = (1, 4, 4, 4)
    model = c.build(c.op("ABS", first))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["SPLIT", "ABS"]
    assert "are read" in why(log, RULE, "#0 (SPLIT)")
    check_gpu(model, [random((1, 4, 4, 8))])
