"""fuse_rms_norm: an RMS normalization written as separate nodes (a square, a MEAN over the last
axis, ADD epsilon, RSQRT, then MUL / ADD on x and the RSQRT, with unit RESHAPEs as litert-torch
writes them) becomes one LAYER_NORM node that does not center, one dispatch, wherever the tail
computes x * rsqrt(mean(x^2) + epsilon) * gamma + beta; anything else keeps its nodes."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.gpu.kernels import layer_norm
from tests.gpu.gpulib import PRECISIONS, assert_gpu_matches
from tests.gpu.transforms.rulelib import Chain, check_gpu, check_unfused, ops_of, random, rewrite, statuses
from tests.oplib import run_ours

RULE = "fuse_rms_norm"
SQUARES = ("MUL", "SQUARE", "POW")


def rms_norm_model(shape=(1, 6, 10), square="MUL", litert_torch=False, weight=True, tail=None):
    """x -> x * rsqrt(mean(x^2, last axis) + 1e-6) [* weight] -> output. litert_torch: the MEAN
    drops the axis and a RESHAPE puts it back before the RSQRT (T5's encoder as converted).
    tail(c, x, r): another tail (for the cases that must not fuse)."""
    c = Chain(shape)
    rows = tuple(shape[:-1]) + (1,)
    if square == "MUL":
        squares = c.op("MUL", c.x, c.x)
    elif square == "SQUARE":
        squares = c.op("SQUARE", c.x)
    else:
        squares = c.op("POW", c.x, c.const(np.float32(2.0)))
    axis = c.const([len(shape) - 1], np.int32)
    if litert_torch:
        mean = c.op("MEAN", squares, axis, shape=shape[:-1], keep_dims=False)
        shifted = c.op("ADD", mean, c.const(np.float32(1e-6)))
        r = c.op("RSQRT", c.op("RESHAPE", shifted, c.const(rows, np.int32), shape=rows))
    else:
        r = c.op("RSQRT", c.op("ADD", c.op("MEAN", squares, axis, shape=rows, keep_dims=True),
                               c.const(np.float32(1e-6))))
    if tail is not None:
        return c.build(tail(c, c.x, r))
    y = c.op("MUL", c.x, r)
    if weight:
        y = c.op("MUL", y, c.const(random(shape[-1], 11) + 1))
    return c.build(c.op("RELU", y))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("square", SQUARES)
def test_an_rms_normalization_takes_one_dispatch(square, precision):
    model = rms_norm_model(square=square)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["LAYER_NORM", "RELU"]
    assert graph.nodes[0].options[layer_norm.CENTER] is False
    assert [s for s, _ in statuses(log, RULE)] == ["APPLIED"]
    summary, _ = check_gpu(model, [random((1, 6, 10), 1, 3.0) + 2], precision)
    assert summary["dispatches"] == 2  # convert_in, LAYER_NORM with the RELU storing the output


@pytest.mark.parametrize("precision", PRECISIONS)
def test_litert_torch_s_rms_norm_takes_one_dispatch(precision):
    """T5's normalization as litert-torch converts it (its weight folded into the next layer):
    the MEAN's dropped axis put back by a RESHAPE before the RSQRT."""
    model = rms_norm_model((1, 12, 20), litert_torch=True, weight=False)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["LAYER_NORM", "RELU"]
    summary, _ = check_gpu(model, [random((1, 12, 20), 6, 3.0) - 1], precision)
    assert summary["dispatches"] == 2


@pytest.mark.parametrize("shape", [(2, 3, 5, 6), (7, 3), (1, 2, 2, 64), (1, 25, 168)])
def test_other_ranks_and_channel_counts(shape):
    """Padded channels of the last slice take no part in the mean of squares."""
    model = rms_norm_model(shape)
    assert ops_of(rewrite(model, RULE)[0]) == ["LAYER_NORM", "RELU"]
    for precision in ("fp32", "fp16"):
        check_gpu(model, [random(shape, 2)], precision)


def test_the_fused_kernel_is_no_less_accurate_than_the_unfused_graph():
    """Large rows (1e3): in half storage the unfused graph stores x^2 (beyond half's range past
    256) and the mean; the fused kernel sums in highp and stores nothing between them."""
    x = random((1, 8, 32), 3) * 300
    model = rms_norm_model((1, 8, 32))
    exact = run_ours(model, [x.astype(np.float16).astype(np.float32)])[0]
    errors = []
    for enabled in (False, True):
        from gles_delegate.gpu.transforms import fuse_rms_norm
        fuse_rms_norm.ENABLED = enabled
        try:
            with GpuDelegate(precision="fp16") as delegate:
                out = run_ours(model, [x], experimental_delegates=[delegate])[0]
        finally:
            fuse_rms_norm.ENABLED = True
        errors.append(np.abs(np.nan_to_num(out, nan=np.inf) - exact).max())
    assert_gpu_matches(exact, out, "fp16", what="rms norm")
    assert errors[1] <= errors[0], errors


def _squared_scale(c, x, r):
    """x * r^2: a tail of x and r that is no normalization."""
    return c.op("MUL", x, c.op("MUL", r, r))


def _read_twice(c, x, r):
    c.b.output(r)
    return c.op("MUL", x, r)


@pytest.mark.parametrize("tail,reason", [
    (_squared_scale, "do not compute x * rsqrt"),
    (_read_twice, "leave 2 values"),
])
def test_what_is_not_an_rms_normalization_keeps_its_nodes(tail, reason):
    check_unfused(rms_norm_model(tail=tail), RULE, "#1 (MEAN)", "LAYER_NORM", reason, [random((1, 6, 10), 4)])


def test_a_mean_of_squares_of_two_tensors_is_not_considered():
    c = Chain((1, 4, 8))
    other = c.b.input("y", (1, 4, 8))
    c.shapes[other] = (1, 4, 8)
    product = c.op("MUL", c.x, other)
    model = c.build(c.op("MEAN", product, c.const([2], np.int32), shape=(1, 4, 1), keep_dims=True))
    assert not statuses(rewrite(model, RULE)[1], RULE)
