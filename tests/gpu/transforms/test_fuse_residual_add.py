"""fuse_residual_add: a binary op of two runtime tensors joins the epilogue of the node computing
one of them, which reads the other at the position it writes."""
import numpy as np
import pytest

from gles_delegate.gpu.kernels.epilogue import steps_of
from tests.oplib import run_ours
from gles_delegate import GpuDelegate
from tests.gpu.transforms.rulelib import Chain, check_gpu, ops_of, random, rewrite, statuses, why

RULE = "fuse_residual_add"


def residual_block(op="ADD", activation=0, swap=False):
    """x -> conv -> conv, then op(second conv, x) (or op(x, conv) with swap)."""
    c = Chain((1, 8, 8, 8))
    y = c.conv(c.conv(c.x, 8, activation=3, seed=1), 8, seed=5)
    operands = (c.x, y) if swap else (y, c.x)
    options = {"fused_activation_function": activation} if op in ("ADD", "SUB", "MUL") else {}
    return c.build(c.op(op, *operands, **options))


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc", "fp16"])
@pytest.mark.parametrize("op,activation,swap", [("ADD", 0, False), ("ADD", 3, True), ("SUB", 1, True),
                                                ("MUL", 0, False), ("MAXIMUM", 0, True)])
def test_residual_joins_the_conv_epilogue(op, activation, swap, precision):
    model = residual_block(op, activation, swap)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["CONV_2D", "CONV_2D"]
    steps = steps_of(graph.nodes[1])
    assert [s.op for s in steps] == [op] + (["RELU6" if activation == 3 else "RELU"] if activation else [])
    assert steps[0].swap == swap and steps[0].operand is graph.inputs[0]
    assert statuses(log, RULE) == [("APPLIED", f"#2 ({op})")]
    summary, _ = check_gpu(model, [random((1, 8, 8, 8), 2)], precision)
    assert summary["dispatches"] == 3


def test_half_storage_results_equal_the_unfused_graph():
    """In half storage a fused step rounds its input to half, as the store and load of the tensor
    it replaces did, so fusion changes no value: all of them equal on llvmpipe (at least 98%, the
    rest one half ulp apart, where a GPU's compiler contracts the two programs differently).
    Without that rounding about 9% of this block's values differ."""
    model = residual_block("ADD", 3)
    values = [random((1, 8, 8, 8), 3)]
    results = []
    for rules in (False, True):
        with GpuDelegate(precision="fp16_fp32acc", rewrite_rules=rules) as delegate:
            results.append(run_ours(model, values, experimental_delegates=[delegate])[0])
    unfused, fused = results
    assert np.mean(unfused == fused) >= 0.98
    assert np.all(np.abs(unfused - fused) <= 2.0 ** -10 * np.abs(unfused) + 1e-7)


def test_two_convs_fuse_into_the_later_one():
    c = Chain((1, 6, 6, 4))
    a, b = c.conv(c.x, 4, seed=1), c.conv(c.x, 4, seed=7)
    model = c.build(c.op("ADD", a, b))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["CONV_2D", "CONV_2D"] and steps_of(graph.nodes[1])[0].operand is graph.nodes[0].outputs[0]
    check_gpu(model, [random((1, 6, 6, 4))])


def test_left_alone_when_no_producer_can_take_it():
    """One operand is also read elsewhere, the other comes from a SOFTMAX (no epilogue)."""
    c = Chain((1, 6, 6, 4))
    conv = c.conv(c.x, 4)
    mean = c.op("MEAN", c.x, c.const([1, 2], np.int32), shape=(1, 1, 1, 4), keep_dims=True)
    model = c.build(c.op("MUL", conv, c.op("SOFTMAX", mean, beta=1.0)), conv)
    graph, log = rewrite(model, RULE)
    reason = why(log, RULE, "#3 (MUL)")
    assert "read elsewhere" in reason and "applies no epilogue" in reason
    check_gpu(model, [random((1, 6, 6, 4))])


def test_left_alone_when_the_other_operand_is_computed_later():
    """The MEAN reads a convolution that runs after the first one: it cannot move ahead of it."""
    c = Chain((1, 6, 6, 4))
    a = c.conv(c.x, 4, seed=1)
    later = c.op("MEAN", c.conv(c.x, 4, seed=2), c.const([1, 2], np.int32), shape=(1, 1, 1, 4), keep_dims=True)
    model = c.build(c.op("ADD", a, later))
    graph, log = rewrite(model, RULE)
    assert "computed after #0 (CONV_2D)" in why(log, RULE, "#3 (ADD)")
    check_gpu(model, [random((1, 6, 6, 4))])


def test_an_operand_computed_later_from_earlier_tensors_moves_ahead():
    """MediaPipe's blocks: a pool's output, padded with channels, joins a convolution computed
    after the pool but before the PAD; the PAD runs before the convolution, which takes the ADD."""
    c = Chain((1, 8, 8, 4))
    pooled = c.op("MAX_POOL_2D", c.x, shape=(1, 4, 4, 4), padding=1, stride_w=2, stride_h=2, filter_width=2,
                  filter_height=2)
    conv = c.conv(c.depthwise(pooled), 8)
    padded = c.op("PAD", pooled, c.const([[0, 0], [0, 0], [0, 0], [0, 4]], np.int32), shape=(1, 4, 4, 8))
    model = c.build(c.op("ADD", conv, padded))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["MAX_POOL_2D", "DEPTHWISE_CONV_2D", "PAD", "CONV_2D"]
    assert statuses(log, RULE) == [("APPLIED", "#4 (ADD)")]
    summary, _ = check_gpu(model, [random((1, 8, 8, 4))])
    assert summary["dispatches"] == 4  # convert_in, pool, depthwise, conv (pad_into_operand takes the PAD)
