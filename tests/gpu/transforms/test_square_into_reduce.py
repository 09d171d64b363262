"""square_into_reduce: the square of a tensor (MUL by itself, SQUARE, POW by 2) that only a
reduction reads becomes the reduction's INPUT_SQUARED, and a reduction applies epilogue steps (the
SQRT after a sum of squares). Every case runs on the GPU against the reference in every precision,
with the dispatches saved, and the cases left alone."""
import numpy as np
import pytest

from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms.rulelib import (Chain, check_gpu, check_skipped, dispatches_without, random, rewrite_through,
                                          rule_off, statuses, why)
from tests.oplib import run_ours

from gles_delegate import GpuDelegate

RULE = "square_into_reduce"


def reduce_(c, op, x, axes, keep_dims=True):
    shape = c.shapes[x]
    out = [1 if a in [d % len(shape) for d in axes] else s for a, s in enumerate(shape)]
    if not keep_dims:
        out = [s for a, s in enumerate(shape) if a not in [d % len(shape) for d in axes]]
    return c.op(op, x, c.const(axes, np.int32), shape=tuple(out), keep_dims=keep_dims)


def global_response_norm(c, x):
    """ConvNeXt-V2's GRN as litert-torch writes it: sqrt of the sum of x * x over H and W, divided
    by its mean over the channels plus epsilon, scaling x, plus x."""
    n, h, w, ch = c.shapes[x]
    gx = c.op("SQRT", reduce_(c, "SUM", c.op("MUL", x, x), [1, 2]))
    nx = c.op("DIV", gx, c.op("ADD", reduce_(c, "MEAN", gx, [-1]), c.const(np.float32(1e-6))), shape=(n, 1, 1, ch))
    return c.op("ADD", c.op("MUL", x, nx, shape=(n, h, w, ch)), x)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_global_response_norm(precision):
    """The square goes into the SUM, the SQRT and the epsilon into the reductions' epilogues."""
    shape = (1, 6, 5, 12)
    c = Chain(shape)
    model = c.build(c.conv(global_response_norm(c, c.conv(c.x, 12, kernel=1, seed=4)), 4, kernel=1, seed=5))
    graph, log = rewrite_through(model, RULE)
    assert statuses(log, RULE) == [("APPLIED", "#1 (MUL)")]
    values = [random(shape, 3)]
    summary, log = check_gpu(model, values, precision)
    fused = [(r.node, r.why) for r in log if r.rule == "fuse_elementwise" and r.status == "APPLIED"]
    assert ("#3 (SQRT)", "into the epilogue of #2 (SUM)") in fused
    assert ("#5 (ADD)", "into the epilogue of #4 (MEAN)") in fused
    # convert_in, 2 convolutions, SUM, MEAN, DIV, MUL (the ADD its epilogue step); without the
    # rule the square is a dispatch of its own.
    assert (summary["dispatches"], dispatches_without(RULE, model, values)) == (7, 8)


@pytest.mark.parametrize("op", ["SQUARE", "POW"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_square_past_half_range(op, precision):
    """One pixel of 300 among values near 1: its square is past half's 65504, the mean of the
    squares over the 16 pixels is not. Squared as loaded (highp), the result is finite in every
    precision; stored as a tensor at fp16, the square was inf."""
    shape = (1, 4, 4, 8)
    c = Chain(shape)
    x = c.op("ABS", c.x)  # a runtime tensor (the rule leaves partition inputs' squares alone)
    square = c.op("SQUARE", x) if op == "SQUARE" else c.op("POW", x, c.const(np.float32(2.0)))
    model = c.build(c.op("SQRT", reduce_(c, "MEAN", square, [1, 2], keep_dims=False)))
    x = random(shape, 5)
    x[0, 1, 2, :] = 300.0
    values = [x]
    summary, _ = check_gpu(model, values, precision)
    assert summary["dispatches"] == 3  # convert_in, ABS, the reduction writing the output
    if precision == "fp16":
        with rule_off(RULE), GpuDelegate(precision=precision) as delegate:
            [stored] = run_ours(model, values, experimental_delegates=[delegate])
        assert np.isinf(stored).any()


def test_leaves_a_square_read_twice():
    shape = (1, 4, 4, 8)
    c = Chain(shape)
    x = c.op("EXP", c.x)
    square = c.op("MUL", x, x)
    model = c.build(reduce_(c, "MEAN", square, [1, 2]), c.op("RELU", square))
    check_skipped(model, RULE, "MUL", "read by more than one node", [random(shape)])


def test_leaves_a_square_no_reduction_reads():
    shape = (1, 4, 4, 8)
    c = Chain(shape)
    x = c.op("EXP", c.x)
    model = c.build(c.op("SOFTMAX", c.op("SQUARE", x), beta=1.0))
    check_skipped(model, RULE, "SQUARE", "#2 (SOFTMAX) does not reduce it", [random(shape)])


@pytest.mark.parametrize("exponent", [3.0, 0.5])
def test_leaves_other_powers(exponent):
    """POW by anything but 2 is no square: not a candidate, nothing logged."""
    shape = (1, 4, 4, 8)
    c = Chain(shape)
    x = c.op("EXP", c.x)
    model = c.build(reduce_(c, "SUM", c.op("POW", x, c.const(np.float32(exponent))), [1, 2]))
    graph, log = rewrite_through(model, RULE)
    assert statuses(log, RULE) == [] and "POW" in [n.op for n in graph.nodes]
    check_gpu(model, [random(shape)])


def test_the_squeeze_excite_gate_leaves_a_squared_mean():
    """A MEAN of squares over H and W before FC -> LOGISTIC -> MUL: se_gate's kernel would average
    x, not its square, so the MEAN stays a reduction of its own."""
    shape = (1, 5, 5, 8)
    c = Chain(shape)
    x = c.op("EXP", c.op("MUL", c.x, c.const(np.float32(0.3))))
    pooled = reduce_(c, "MEAN", c.op("MUL", x, x), [1, 2], keep_dims=False)
    hidden = c.op("FULLY_CONNECTED", pooled, c.const(random((8, 8), 2, 0.3)), c.const(random(8, 3)), shape=(1, 8))
    gate = c.op("RESHAPE", c.op("LOGISTIC", hidden), c.const([1, 1, 1, 8], np.int32), shape=(1, 1, 1, 8))
    model = c.build(c.op("MUL", x, gate))
    graph, log = rewrite_through(model, "se_gate")
    assert "it squares its input" in why(log, "se_gate", "#3 (MEAN)")
    check_gpu(model, [random(shape, 1)])


def test_a_reduction_whose_output_is_gathered_takes_no_epilogue():
    """Channels summed without keep_dims: the output's layout is not the reduced input's (the
    gather variant), whose kernel applies no epilogue: the SQRT stays a dispatch."""
    shape = (1, 4, 4, 8)
    c = Chain(shape)
    x = c.op("EXP", c.x)
    model = c.build(c.op("SQRT", reduce_(c, "SUM", x, [3], keep_dims=False)))
    graph, log = rewrite_through(model, "fuse_elementwise")
    assert "a gather" in why(log, "fuse_elementwise", "#2 (SQRT)")
    check_gpu(model, [random(shape)])


def test_a_reduction_whose_output_has_other_coordinates_takes_no_epilogue():
    """[1, 8, 1, 5] summed over its channels to [1, 8, 1]: the same memory, but the output's
    rows lie along another BHWC axis than the sum's keep-dims position, where an epilogue step
    would read its operand (a constant varying along the rows: gles-fuzz-graphs seed 56 case
    465, 1.3x the output off): the MUL stays a dispatch."""
    shape = (1, 8, 1, 5)
    c = Chain(shape)
    summed = reduce_(c, "SUM", c.op("EXP", c.x), [3], keep_dims=False)
    model = c.build(c.op("MUL", c.const(random((8, 1), 4)), summed, shape=(1, 8, 1)))
    graph, log = rewrite_through(model, "fuse_elementwise")
    assert "coordinates are not the reduced input's" in why(log, "fuse_elementwise", "#2 (MUL)")
    for precision in PRECISIONS:
        check_gpu(model, [random(shape, 1)], precision)
