"""fuse_layer_norm: a layer normalization written as separate nodes (two MEANs over the last axis,
SQUARED_DIFFERENCE, ADD epsilon, RSQRT, then MUL / ADD / SUB / NEG on x, the mean and the RSQRT)
becomes one LAYER_NORM node, one dispatch, in every arrangement that computes
(x - mean) * rsqrt(variance + epsilon) * gamma + beta; anything else keeps its nodes."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.graph import Node, Tensor
from gles_delegate.gpu import kernels
from gles_delegate.gpu.kernels import layer_norm
from gles_delegate.gpu.transforms import fuse_layer_norm
from tests.gpu.gpulib import PRECISIONS, assert_gpu_matches
from tests.gpu.transforms.rulelib import Chain, check_gpu, check_unfused, ops_of, random, rewrite, statuses
from tests.oplib import run_ours

RULE = "fuse_layer_norm"
FORMS = ("keras", "batch_norm", "no_scale")


def layer_norm_model(shape=(1, 6, 10), form="keras", epsilon=1e-3, tail=None):
    """x -> layer normalization over the last axis as a converter writes it -> output.
    keras: Keras 3's s = r * gamma, y = x * s + (-m) * s, beta 0 (folded away);
    batch_norm: TF's s = r * gamma, y = x * s + (beta - m * s); no_scale: y = (x - m) * r.
    tail(c, x, m, r): another tail (for the cases that must not fuse)."""
    c = Chain(shape)
    channels, rows = shape[-1], tuple(shape[:-1]) + (1,)
    axis = c.const([len(shape) - 1], np.int32)
    m = c.op("MEAN", c.x, axis, shape=rows, keep_dims=True)
    variance = c.op("MEAN", c.op("SQUARED_DIFFERENCE", c.x, m), axis, shape=rows, keep_dims=True)
    r = c.op("RSQRT", c.op("ADD", variance, c.const(np.float32(epsilon))))
    gamma, beta = c.const(random(channels, 11) + 1), c.const(random(channels, 12))
    if tail is not None:
        y = tail(c, c.x, m, r, gamma, beta)
    elif form == "keras":
        s = c.op("MUL", r, gamma, shape=shape)
        y = c.op("ADD", c.op("MUL", c.x, s), c.op("MUL", c.op("NEG", m), s, shape=shape))
    elif form == "batch_norm":
        s = c.op("MUL", r, gamma, shape=shape)
        y = c.op("ADD", c.op("MUL", c.x, s), c.op("SUB", beta, c.op("MUL", m, s, shape=shape), shape=shape))
    else:
        y = c.op("MUL", c.op("SUB", c.x, m), r)
    return c.build(c.op("RELU", y))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("form", FORMS)
def test_a_layer_normalization_takes_one_dispatch(form, precision):
    model = layer_norm_model(form=form)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["LAYER_NORM", "RELU"]
    assert [s for s, _ in statuses(log, RULE)] == ["APPLIED"]
    summary, _ = check_gpu(model, [random((1, 6, 10), 1, 3.0) + 2], precision)
    assert summary["dispatches"] == 2  # convert_in, LAYER_NORM with the RELU storing the output


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_layer_norm_applies_an_epilogue_with_a_runtime_operand(precision):
    """A pre-norm residual as a transformer writes it, y = x + LayerNorm(x) (then a GELU): the ADD
    of a runtime tensor and the GELU join the LAYER_NORM's epilogue (rule fuse_residual_add,
    fuse_elementwise), channels that do not fill their last slice."""
    shape = (1, 5, 7)
    c = Chain(shape)
    axis = c.const([2], np.int32)
    m = c.op("MEAN", c.x, axis, shape=(1, 5, 1), keep_dims=True)
    r = c.op("RSQRT", c.op("ADD", c.op("MEAN", c.op("SQUARED_DIFFERENCE", c.x, m), axis, shape=(1, 5, 1),
                                     keep_dims=True), c.const(np.float32(1e-5))))
    s = c.op("MUL", r, c.const(random(7, 14) + 1), shape=shape)
    normed = c.op("ADD", c.op("MUL", c.x, s), c.op("SUB", c.const(random(7, 15)), c.op("MUL", m, s, shape=shape),
                                                    shape=shape))
    model = c.build(c.op("GELU", c.op("ADD", normed, c.x)))
    summary, log = check_gpu(model, [random(shape, 5, 2.0)], precision)
    assert summary["dispatches"] == 2, [r for r in log if r.status == "SKIPPED"]  # convert_in, LAYER_NORM


def litert_torch_layer_norm(shape):
    """nn.LayerNorm without its affine (folded into the next layer) as litert-torch writes it:
    MEANs over [0, last] that drop the axes, the statistics as row vectors put back into x's
    rank by RESHAPEs, y = x * R(r) + R(0 - r * m)."""
    c = Chain(shape)
    rows, kept = shape[1:-1], (1,) + tuple(shape[1:-1]) + (1,)
    axes = c.const([0, len(shape) - 1], np.int32)

    def unsqueeze(v):
        return c.op("RESHAPE", v, c.const(kept, np.int32), shape=kept)
    m = c.op("MEAN", c.x, axes, shape=rows, keep_dims=False)
    variance = c.op("MEAN", c.op("SQUARED_DIFFERENCE", c.x, unsqueeze(m)), axes, shape=rows, keep_dims=False)
    r = c.op("RSQRT", c.op("ADD", variance, c.const(np.float32(1e-5))))
    shift = c.op("SUB", c.const(np.float32(0)), c.op("MUL", r, m), shape=rows)
    return c.build(c.op("ADD", c.op("MUL", c.x, unsqueeze(r)), unsqueeze(shift)))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_litert_torch_s_layer_norm_takes_one_dispatch(precision):
    model = litert_torch_layer_norm((1, 12, 20))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["LAYER_NORM"]
    assert statuses(log, RULE) == [("APPLIED", "#0 (MEAN)")]
    summary, _ = check_gpu(model, [random((1, 12, 20), 6, 3.0) - 1], precision)
    assert summary["dispatches"] == 2  # convert_in, LAYER_NORM storing the output


@pytest.mark.parametrize("order", ["rows", "swapped"])
def test_reshapes_in_the_tail_are_checked_by_running_them(order):
    """RESHAPEs of the row vector that regroup it ([1, 3, 4, 1] -> [12] -> back) are tail nodes
    (the tail is run, so any reshape is checked by its values): they fuse; a TRANSPOSE between
    them (row i scaled by r of another row) is no tail node: nothing fuses."""
    c = Chain((1, 3, 4, 10))
    axes = c.const([3], np.int32)
    m = c.op("MEAN", c.x, axes, shape=(1, 3, 4, 1), keep_dims=True)
    r = c.op("RSQRT", c.op("ADD", c.op("MEAN", c.op("SQUARED_DIFFERENCE", c.x, m), axes, shape=(1, 3, 4, 1),
                                     keep_dims=True), c.const(np.float32(1e-5))))
    flat = c.op("RESHAPE", r, c.const((12,), np.int32), shape=(12,))
    if order == "swapped":
        flat = c.op("TRANSPOSE", c.op("RESHAPE", flat, c.const((4, 3), np.int32), shape=(4, 3)),
                    c.const((1, 0), np.int32), shape=(3, 4))
    regrouped = c.op("RESHAPE", flat, c.const((1, 3, 4, 1), np.int32), shape=(1, 3, 4, 1))
    model = c.build(c.op("MUL", c.op("SUB", c.x, m), regrouped))
    graph, log = rewrite(model, RULE)
    assert ("LAYER_NORM" in ops_of(graph)) == (order == "rows")
    check_gpu(model, [random((1, 3, 4, 10), 7)])


@pytest.mark.parametrize("shape", [(2, 3, 5, 6), (7, 3), (1, 2, 2, 64)])
def test_other_ranks_and_channel_counts(shape):
    """ConvNeXt's normalization over the channels of a 4-D map, a 2-D input, channels that do not
    fill their last slice (padded channels take no part)."""
    model = layer_norm_model(shape, form="batch_norm", epsilon=1e-6)
    assert ops_of(rewrite(model, RULE)[0]) == ["LAYER_NORM", "RELU"]
    for precision in ("fp32", "fp16"):
        check_gpu(model, [random(shape, 2)], precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape, lanes", [((1, 25, 168), 16), ((3, 5, 70), 8), ((2, 9, 24), 1)])
def test_few_rows_of_many_channels_share_a_workgroup(shape, lanes, precision, monkeypatch):
    """A transformer's few tokens: a workgroup of lanes per row, each taking every lanes-th slice
    (42 slices over 16, 18 over 8, the padded channels of 70 too); the same outputs as one
    invocation per row. 6 slices are too few to share (4 lanes would take fewer than 2 each)."""
    model = layer_norm_model(shape, form="batch_norm", epsilon=1e-5)
    assert layer_norm.lanes_per_pixel(int(np.prod(shape[:-1])), -(-shape[-1] // 4)) == lanes
    values = [random(shape, 3, 2.0) + 1]
    summary, _ = check_gpu(model, values, precision)
    assert summary["dispatches"] == 2
    monkeypatch.setattr(layer_norm, "MAX_LANES", 1)
    check_gpu(model, values, precision)


def test_the_fused_kernel_is_no_less_accurate_than_the_unfused_graph():
    """Rows far from zero (mean 100, spread 1): the fused kernel sums in highp and stores nothing
    between the statistics, so in half storage it is at least as close to the reference (run on
    the half-rounded input the GPU holds) as the eight dispatches it replaces, and within the
    tolerance of the output."""
    x = random((1, 8, 32), 3) + 100
    model = layer_norm_model((1, 8, 32), form="batch_norm")
    exact = run_ours(model, [x.astype(np.float16).astype(np.float32)])[0]
    errors = []
    for enabled in (False, True):
        fuse_layer_norm.ENABLED = enabled
        try:
            with GpuDelegate(precision="fp16") as delegate:
                out = run_ours(model, [x], experimental_delegates=[delegate])[0]
        finally:
            fuse_layer_norm.ENABLED = True
        errors.append(np.abs(out - exact).max())
    assert_gpu_matches(exact, out, "fp16", what="layer norm")
    assert errors[1] <= errors[0], errors


def _wrong_sign(c, x, m, r, gamma, beta):
    s = c.op("MUL", r, gamma, shape=c.shapes[x])
    return c.op("ADD", c.op("MUL", x, s), c.op("MUL", m, s, shape=c.shapes[x]))


def _row_scale(c, x, m, r, gamma, beta):
    """(x - m) * (r * a per-row constant): the per-row factor is inside the normalization."""
    return c.op("MUL", c.op("SUB", x, m), c.op("MUL", r, c.const(random(c.shapes[m], 13))))


def _shares_the_mean(c, x, m, r, gamma, beta):
    c.b.output(m)
    return c.op("MUL", c.op("SUB", x, m), r)


@pytest.mark.parametrize("tail,reason", [
    (_wrong_sign, "do not compute (x - mean)"),
    (_row_scale, "scale or shift rows differently"),
    (_shares_the_mean, "leave 2 values"),
])
def test_what_is_not_a_layer_normalization_keeps_its_nodes(tail, reason):
    check_unfused(layer_norm_model(tail=tail), RULE, "#0 (MEAN)", "LAYER_NORM", reason, [random((1, 6, 10), 4)])


def test_a_mean_over_other_axes_is_not_considered():
    c = Chain((1, 4, 4, 8))
    model = c.build(c.op("MEAN", c.x, c.const([1, 2], np.int32), shape=(1, 1, 1, 8), keep_dims=True))
    assert not statuses(rewrite(model, RULE)[1], RULE)


def test_the_kernel_refuses_runtime_or_misshapen_parameters():
    x = Tensor(0, "x", (1, 3, 8), np.dtype(np.float32))
    gamma = Tensor(1, "gamma", (8,), np.dtype(np.float32), data=np.ones(8, np.float32))
    runtime = Tensor(2, "beta", (8,), np.dtype(np.float32))
    short = Tensor(3, "beta", (4,), np.dtype(np.float32), data=np.zeros(4, np.float32))
    out = Tensor(4, "y", (1, 3, 8), np.dtype(np.float32))

    def node(beta, **options):
        return Node(0, layer_norm.OP, [x, gamma, beta], [out], options={layer_norm.EPSILON: 1e-5, **options})
    assert kernels.unsupported_reason(node(gamma)) is None
    assert "beta must be a constant [8]" in kernels.unsupported_reason(node(runtime))
    assert "beta must be a constant [8]" in kernels.unsupported_reason(node(short))
    assert "not a finite number" in kernels.unsupported_reason(node(gamma, epsilon=float("nan")))


def test_the_switch_turns_the_rule_off(monkeypatch):
    monkeypatch.setattr(fuse_layer_norm, "ENABLED", False)
    graph, log = rewrite(layer_norm_model(), RULE)
    assert "LAYER_NORM" not in ops_of(graph) and not statuses(log, RULE)
