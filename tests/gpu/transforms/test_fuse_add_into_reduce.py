"""fuse_add_into_reduce: ADD(a, b) read only by a reduction becomes that reduction's input addend:
it adds b to each element of a as it loads it, and the ADD goes away. Each reduce.glsl variant
(one invocation per output, a workgroup per output, the gather of a reshaping reduction) is run
against the numpy reference."""
import numpy as np
import pytest

from gles_delegate.gpu.kernels.reduce import INPUT_ADDEND
from gles_delegate.gpu.transforms import fuse_add_into_reduce
from gles_delegate.tflite import ModelBuilder
from tests.gpu.gpulib import PRECISIONS, run_gpu
from tests.gpu.transforms.rulelib import (Chain, check_gpu, check_skipped, dispatches, ops_of, random, rewrite_through,
                                         statuses)

RULE = "fuse_add_into_reduce"


def summed(shape=(1, 8, 8, 6), op="MEAN", axes=(1, 2), keep_dims=True, extra_output=False, activation=0,
           other_shape=None, reader=None):
    """y = conv(x), z = depthwise(x) (each also read by a MUL, so no epilogue takes the ADD);
    reader(ADD(y, z)), by default op over axes."""
    c = Chain(shape)
    n, h, w, ch = shape
    y = c.conv(c.x, ch, kernel=1, seed=5)
    z = c.depthwise(c.x) if other_shape is None else c.op("MEAN", c.x, c.const([1, 2], np.int32),
                                                          shape=other_shape, keep_dims=True)
    total = c.op("ADD", y, z, shape=shape, fused_activation_function=activation)
    kept = [1 if a in axes else d for a, d in enumerate(shape)]
    out_shape = kept if keep_dims else [d for a, d in enumerate(shape) if a not in axes]
    reduced = reader(c, total) if reader else c.op(op, total, c.const(list(axes), np.int32), shape=out_shape,
                                                   keep_dims=keep_dims)
    side = c.op("MUL", y, z, shape=shape)
    return c.build(reduced, side, *([total] if extra_output else []))


CASES = {  # name: (shape, op, axes, keep_dims); which reduce.glsl variant each runs in the comment
    "mean of a plane (a workgroup per output)": ((2, 8, 8, 6), "MEAN", (1, 2), True),
    "sum of a small plane (an invocation per output)": ((1, 2, 3, 8), "SUM", (1, 2), True),
    "max over channels (gather)": ((1, 4, 5, 6), "REDUCE_MAX", (3,), False),
    "min over rows": ((1, 6, 4, 5), "REDUCE_MIN", (1,), True),
    "mean of everything but the batch, dims dropped": ((2, 4, 4, 7), "MEAN", (1, 2, 3), False),
}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", CASES)
def test_the_reduction_adds_the_second_operand(case, precision, monkeypatch):
    shape, op, axes, keep_dims = CASES[case]
    model = summed(shape, op, axes, keep_dims)
    graph, log = rewrite_through(model, RULE)
    reduction = next(n for n in graph.nodes if n.op == op)
    assert "ADD" not in ops_of(graph) and reduction.options[INPUT_ADDEND] is not None
    assert [s for s, _ in statuses(log, RULE)] == ["APPLIED"]
    values = [random(shape, 1, 2.0)]
    summary, _ = check_gpu(model, values, precision)
    monkeypatch.setattr(fuse_add_into_reduce, "ENABLED", False)
    assert summary["dispatches"] == dispatches(model, values, precision=precision) - 1  # the ADD's


@pytest.mark.parametrize("options, reason", [
    ({"extra_output": True}, "read by more than one node"),
    ({"activation": 1}, "fused activation"),
    ({"other_shape": (1, 1, 1, 6)}, "it broadcasts"),
    ({"reader": lambda c, v: c.conv(v, 4, seed=7)}, "does not reduce it"),
], ids=["read twice", "activation", "broadcast", "not a reduction"])
def test_other_adds_stay(options, reason):
    check_skipped(summed(**options), RULE, "ADD", reason, [random((1, 8, 8, 6), 4)])


def test_an_int32_add_stays_before_an_int32_sum():
    """ADD -> SUM of int32 (wrapping): the integer reduction adds no addend, so the ADD stays and
    the sum is of the doubled values (gles-fuzz-graphs seed 94 case 31: the GPU summed x, not
    x + x, once int32 sums ran there)."""
    b = ModelBuilder()
    x = b.input("x", (5, 2, 3), np.int32)
    doubled, total = b.tensor("doubled", (5, 2, 3), np.int32), b.tensor("total", (2, 3), np.int32)
    b.op("ADD", [x, x], [doubled], fused_activation_function=0)
    b.op("SUM", [doubled, b.const("axis", np.int32([0]))], [total], keep_dims=False)
    b.output(total)
    model = b.build()
    graph, log = rewrite_through(model, RULE)
    assert "ADD" in ops_of(graph) and [s for s, _ in statuses(log, RULE)] == ["SKIPPED"]
    values = np.random.default_rng(3).integers(-2**31, 2**31, (5, 2, 3), dtype=np.int64).astype(np.int32)
    (gpu,), summary = run_gpu(model, [values])
    assert summary["gpu_nodes"] == 2
    with np.errstate(over="ignore"):
        assert np.array_equal(gpu, (values * np.int32(2)).sum(axis=0, dtype=np.int32))
