"""GPU QUANTIZE, DEQUANTIZE and QUANTIZE_AND_DEQUANTIZE (kernels_glsl/quantize.glsl) on the float
view of quantized tensors, against numpy math, in every precision.

The registry refuses int8 tensors, so these tests compile one-node plans of float-view nodes
(float32 tensors that carry the quantization, as gles_delegate/quant.py makes them) with
compile_plan and run them on a GpuPartition. In half storage an input is rounded to half before
the kernel sees it: the reference then quantizes the half-rounded input, and real outputs are
compared within half precision."""
import numpy as np
import pytest

from gles_delegate import quant
from gles_delegate.gpu import compiler, kernels
from gles_delegate.gpu.compiler import compile_plan
from gles_delegate.gpu.kernels import quantize as gpu_quantize
from gles_delegate.gpu.runtime import GpuPartition
from gles_delegate.graph import Node, Tensor
from gles_delegate.ops.common import round_half_away
from gles_delegate.ops.quantize import fake_quantize
from gles_delegate.tflite.writer import quantize_params
from tests.gpu.gpulib import PRECISIONS
from tests.test_quant import ONE_OP, quantized_model, the_view, two_op_model

F32 = np.dtype(np.float32)
RANGES = {"int8": (-128, 127), "uint8": (0, 255)}
SHAPES = [(1, 5, 6, 7), (2, 3, 4, 1), (3, 8), (13,), (2, 3, 5), ()]


def view_node(op, shape, quant, qrange=None):
    """A float-view node: float32 tensors, the quantization on DEQUANTIZE's input or on the
    output of QUANTIZE / QUANTIZE_AND_DEQUANTIZE, the integer range in the options."""
    x = Tensor(0, "x", tuple(shape), F32, quantization=quant if op == "DEQUANTIZE" else None)
    out = Tensor(1, "y", tuple(shape), F32, quantization=None if op == "DEQUANTIZE" else quant)
    options = {} if qrange is None else {"qmin": qrange[0], "qmax": qrange[1]}
    return Node(0, op, [x], [out], options=options)


def run_node(context, node, x, precision):
    """Compile `node` alone into a plan and run it on the GPU; returns its output."""
    assert kernels.unsupported_reason(node) is None, kernels.unsupported_reason(node)
    x_t, out_t = node.inputs[0], node.outputs[0]
    plan = compile_plan([node], [x_t], [out_t], precision, context.limits)
    partition = GpuPartition(context, plan, [node])
    try:
        storage = {x_t.index: np.asarray(x, np.float32), out_t.index: np.zeros(out_t.shape, np.float32)}
        partition.run(storage)
        return storage[out_t.index]
    finally:
        partition.release()


def stored(x, precision):
    """x as the kernel reads it: rounded to half in half storage."""
    return x if precision == "fp32" else x.astype(np.float16).astype(np.float32)


def numpy_quantize(x, scales, zero_points, qrange):
    steps = round_half_away(np.where(np.isnan(x), 0, x / np.asarray(scales, np.float32)).astype(np.float64))
    return np.clip(steps + zero_points, *qrange).astype(np.float32)


def params(quant, ndim):
    """(scales, zero points) broadcasting along the last axis of an ndim array."""
    scales, zero_points = quant.scales.astype(np.float32), quant.zero_points.astype(np.int64)
    if scales.size == 1:
        return scales[0], zero_points[0]
    return scales.reshape((1,) * (ndim - 1) + (-1,)), zero_points.reshape((1,) * (ndim - 1) + (-1,))


def random_quant(rng, shape, per_channel, qrange):
    channels = shape[-1] if per_channel else 1
    scales = rng.uniform(0.005, 0.1, channels).astype(np.float32)
    low, high = qrange
    zero_points = rng.integers(low + 20, high - 20, channels)
    return quantize_params(scales, zero_points, len(shape) - 1 if per_channel else 0)


def assert_steps(gpu, expected, what, exact_share=0.999):
    """Integer outputs: within one step everywhere (a value within a rounding error of a half can
    round either way) and equal on `exact_share` of the elements."""
    diff = np.abs(gpu.astype(np.float64) - expected)
    assert diff.max(initial=0) <= 1, f"{what}: off by {diff.max()} steps"
    assert np.mean(diff == 0) >= exact_share, f"{what}: only {np.mean(diff == 0):.4f} exact"


def assert_real(gpu, expected, step, precision, what):
    """Real outputs: exact in FP32 (a rare one a step off, as assert_steps); in half storage
    within half precision, or one step."""
    tolerance = 0 if precision == "fp32" else 2.0 ** -10 * np.abs(expected)
    err = np.abs(gpu.astype(np.float64) - expected)
    off_grid = err > tolerance
    assert np.all(err[off_grid] <= np.broadcast_to(step, err.shape)[off_grid] * (1 + 2.0 ** -9)), \
        f"{what}: max error {err.max()}"
    assert np.mean(~off_grid) >= 0.999, f"{what}: {np.mean(off_grid):.4f} off"


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("kind", sorted(RANGES))
def test_quantize(shared_context, kind, per_channel, precision):
    rng = np.random.default_rng(len(kind) * 2 + per_channel)
    qrange = RANGES[kind]
    for shape in SHAPES if not per_channel else [s for s in SHAPES if s]:
        quant = random_quant(rng, shape, per_channel, qrange)
        scales, zero_points = params(quant, len(shape))
        x = (rng.normal(0, 80, shape) * scales).astype(np.float32)  # saturates at both ends too
        gpu = run_node(shared_context, view_node("QUANTIZE", shape, quant, qrange), x, precision)
        expected = numpy_quantize(stored(x, precision), scales, zero_points, qrange)
        assert_steps(gpu, expected, f"QUANTIZE {kind} {shape} {precision}")


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("kind", sorted(RANGES))
def test_dequantize(shared_context, kind, per_channel, precision):
    """Integer values in, real values out: exact in FP32 ((q - zp) * scale is one rounding, in
    numpy's float64-then-float32 as in GLSL's float32)."""
    rng = np.random.default_rng(10 + len(kind) * 2 + per_channel)
    for shape in SHAPES if not per_channel else [s for s in SHAPES if s]:
        quant = random_quant(rng, shape, per_channel, RANGES[kind])
        scales, zero_points = params(quant, len(shape))
        q = rng.integers(RANGES[kind][0], RANGES[kind][1] + 1, shape).astype(np.float32)
        gpu = run_node(shared_context, view_node("DEQUANTIZE", shape, quant), q, precision)
        expected = ((q - zero_points) * scales.astype(np.float64)).astype(np.float32)
        tolerance = 0 if precision == "fp32" else 2.0 ** -11 * np.abs(expected)
        assert np.all(np.abs(gpu - expected) <= tolerance), f"DEQUANTIZE {kind} {shape} {precision}"


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("kind", sorted(RANGES))
def test_quantize_and_dequantize(shared_context, kind, per_channel, precision):
    """Against ops/quantize.py's reference of the pseudo-op."""
    rng = np.random.default_rng(20 + len(kind) * 2 + per_channel)
    qrange = RANGES[kind]
    for shape in SHAPES if not per_channel else [s for s in SHAPES if s]:
        quant = random_quant(rng, shape, per_channel, qrange)
        scales, zero_points = params(quant, len(shape))
        x = (rng.normal(0, 80, shape) * scales).astype(np.float32)
        gpu = run_node(shared_context, view_node("QUANTIZE_AND_DEQUANTIZE", shape, quant, qrange), x, precision)
        expected = fake_quantize(stored(x, precision), scales, zero_points, *qrange)
        assert_real(gpu, expected.astype(np.float64), scales, precision, f"Q&D {kind} {shape} {precision}")


@pytest.mark.parametrize("precision", PRECISIONS)
def test_halves_round_away_from_zero(shared_context, precision):
    """Exact halves (scale 0.25, values exact in half too): away from zero, as TFLite's CPU
    QUANTIZE rounds (TFLite's GPU QuantizeAndDequantize rounds them up)."""
    x = ((np.arange(-40, 40) + 0.5) * 0.25).astype(np.float32).reshape(2, 5, 8)
    quant = quantize_params(0.25, 3)
    gpu = run_node(shared_context, view_node("QUANTIZE", x.shape, quant, (-128, 127)), x, precision)
    np.testing.assert_array_equal(gpu, np.sign(x * 4) * np.floor(np.abs(x * 4) + 0.5) + 3)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_non_finite_values(shared_context, precision):
    """+inf -> qmax, -inf -> qmin, NaN -> the zero point (as ops/common.quantize does)."""
    x = np.array([np.inf, -np.inf, np.nan, 1e30, -1e30, 0.0, 1.0], np.float32)
    quant = quantize_params(0.5, 7)
    gpu = run_node(shared_context, view_node("QUANTIZE", x.shape, quant, (-128, 127)), x, precision)
    np.testing.assert_array_equal(gpu, [127, -128, 7, 127, -128, 7, 9])
    fq = run_node(shared_context, view_node("QUANTIZE_AND_DEQUANTIZE", x.shape, quant, (-128, 127)), x, precision)
    np.testing.assert_array_equal(fq, [60.0, -67.5, 0.0, 60.0, -67.5, 0.0, 1.0])


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("op", sorted(gpu_quantize.OP_CODES))
def test_padded_channels_stay_zero(shared_context, monkeypatch, op, precision):
    """Quantizing or dequantizing 0 does not give 0: the kernel must still leave the padded
    channels of its output at 0 (a following reduction reads them). Read from the arena, where
    the kernel stores the output once fuse_output_stores is off (with it, the output goes to the
    I/O buffer, and the arena there may hold the input, as the output may take its storage)."""
    monkeypatch.setattr(compiler, "FUSE_OUTPUT_STORES", False)
    quant = quantize_params(0.1, 9)
    node = view_node(op, (1, 2, 3, 5), quant, None if op == "DEQUANTIZE" else (-128, 127))
    plan = compile_plan([node], node.inputs, node.outputs, precision, shared_context.limits)
    partition = GpuPartition(shared_context, plan, [node])
    try:
        x = np.random.default_rng(0).normal(0, 1, (1, 2, 3, 5)).astype(np.float32)
        storage = {0: x, 1: np.zeros(x.shape, np.float32)}
        partition.run(storage)
        _, offset, _ = next(w for step in plan.writes for w in step if w[0] == node.outputs[0].index)
        element = np.float16 if precision == "fp16" else np.float32
        with shared_context.current():
            raw = np.frombuffer(partition.arena.read(), element)
        phwc4 = raw[offset * 4:(offset + 2 * 2 * 3) * 4].reshape(1, 2, 2, 3, 4)  # [b, slices, h, w, 4]
        assert np.all(phwc4[:, 1, :, :, 1:] == 0), f"{op}: padded channels {phwc4[:, 1, :, :, 1:].ravel()}"
        assert np.array_equal(phwc4[:, 1, :, :, 0], storage[1][..., 4]), "the arena holds the op's output"
    finally:
        partition.release()


def test_channel_params_pack_exactly():
    """Three integer pieces below 2048 per scale: exact in half storage, and they rebuild it."""
    scales = np.array([0.0123, 1e-8, 3.5, 65504.0, 7e-5], np.float32)
    rows = gpu_quantize.pack_channel_params(scales, [1, -2, 3, 4, 5], 5)
    assert rows.shape == (8, 4) and np.all(rows[[0, 1, 2, 4, 5, 6]] < 2048)
    assert np.array_equal(rows.astype(np.float16).astype(np.float32), rows)
    pieces = rows.reshape(2, 4, 4).astype(np.uint32)
    bits = pieces[:, 0] | (pieces[:, 1] << 11) | (pieces[:, 2] << 22)
    np.testing.assert_array_equal(bits.reshape(-1).view(np.float32)[:5], scales)
    np.testing.assert_array_equal(rows.reshape(2, 4, 4)[:, 3].reshape(-1), [1, -2, 3, 4, 5, 0, 0, 0])


REFUSED = [  # (what, node, words of the reason)
    ("int16 range", view_node("QUANTIZE", (2, 3), quantize_params(0.1, 0), (-32768, 32767)), "2048"),
    ("no range", view_node("QUANTIZE_AND_DEQUANTIZE", (2, 3), quantize_params(0.1, 0)), "qmin"),
    ("no quantization", view_node("DEQUANTIZE", (2, 3), None), "no quantization"),
    ("channel axis", view_node("QUANTIZE", (3, 2), quantize_params([0.1] * 3, 0, 0), (-128, 127)), "last axis"),
    ("zero scale", view_node("QUANTIZE", (2, 3), quantize_params(0.0, 0), (-128, 127)), "non-positive"),
]


@pytest.mark.parametrize("what,node,words", REFUSED, ids=[r[0] for r in REFUSED])
def test_refusals(what, node, words):
    reason = kernels.unsupported_reason(node)
    assert reason is not None and words in reason, f"{what}: {reason}"


def test_model_quantize_nodes_are_refused():
    """A model's own QUANTIZE (int8 output) or DEQUANTIZE (int8 input) never reaches the float-view
    checks: the registry runs float32 tensors only."""
    quant = quantize_params(0.1, 0)
    x = Tensor(0, "x", (2, 3), F32)
    q = Tensor(1, "q", (2, 3), np.dtype(np.int8), quantization=quant)
    assert "int8" in kernels.unsupported_reason(Node(0, "QUANTIZE", [x], [q]))
    assert "int8" in kernels.unsupported_reason(Node(0, "DEQUANTIZE", [q], [Tensor(2, "y", (2, 3), F32)]))


# -- float views of quantized models, on the GPU -------------------------------------------
VIEW_CASES = ["conv per-channel", "conv per-tensor", "depthwise per-channel", "fully connected per-tensor", "add",
              "mul", "average pool", "max pool", "concatenation", "softmax", "resize bilinear", "mean"]


def run_view(context, view, feeds, outputs, precision):
    """A float view compiled as one partition (no rewrite rules: the kernels as they are) and run
    as the runtime runs it: integer inputs uploaded as float32, outputs cast back to their dtype."""
    plan = compile_plan(view.nodes, view.inputs, view.outputs, precision, context.limits)
    partition = GpuPartition(context, plan, view.nodes)
    try:
        storage = {t.index: v for t, v in zip(view.inputs, feeds)}
        storage.update({t.index: np.zeros(t.shape, t.dtype) for t in outputs})
        partition.run(storage)
        return [storage[t.index] for t in outputs]
    finally:
        partition.release()


# A value whose step count x / scale lies this close (relative) to a half-integer is a tie of the
# output's rounding: GPUs need not divide correctly rounded (GLSL ES allows 2.5 ulps; NVIDIA's does
# not, seen on an H200), so such a value may round either way. 8 float32 ulps of the step count.
TIE = 8 * 2.0 ** -23


def rounding_ties(view, values, tensor):
    """Where view output `tensor` was rounded from a value that lies on a tie (TIE) of its grid, by
    the reference's own values (run_on_reference every_tensor: the fake-quant or QUANTIZE node's
    input); all False for an output no rounding node computes."""
    producer = next(n for n in view.nodes if any(t is tensor for t in n.outputs))
    if producer.op not in ("QUANTIZE", "QUANTIZE_AND_DEQUANTIZE"):
        return np.zeros(tensor.shape, bool)
    steps = np.abs(values[producer.inputs[0].index].astype(np.float64) / float(tensor.quantization.scales[0]))
    return np.abs(steps - np.floor(steps) - 0.5) <= TIE * np.maximum(steps, 1.0)


def assert_view_matches(context, model, feeds, precision):
    """The GPU run of the model's float view against the view on the numpy reference: within one
    step everywhere (a float output: one step of the grid its view carries, plus half rounding).
    In FP32 equal everywhere but on ties of the output's rounding (rounding_ties: a value the
    GPU's division may land on either side of); in half storage equal on >= 85% of the elements:
    there real values are rounded to half, which moves those within 2^-11 of a rounding boundary
    across it, and an average of on-grid values (pools, MEAN, bilinear) often lands exactly on
    a boundary."""
    graph, view = the_view(model)
    assert all(kernels.unsupported_reason(n) is None for n in view.nodes)
    expected = quant.run_on_reference(view, {t.index: v for t, v in zip(graph.inputs, feeds)}, every_tensor=True)
    for tensor, view_tensor, got in zip(graph.outputs, view.outputs,
                                        run_view(context, view, feeds, graph.outputs, precision)):
        assert got.dtype == tensor.dtype
        want = expected[view_tensor.index].astype(np.float64)
        diff = np.abs(got.astype(np.float64) - want)
        if tensor.dtype.kind in "iu":
            step, rounding = 1.0, 0.0
        else:
            step = float(view_tensor.quantization.scales[0])
            rounding = 1e-6 if precision == "fp32" else 2.0 ** -10 * np.abs(want)
        assert np.all(diff <= step + rounding), f"{precision}: off by up to {diff.max()} (step {step})"
        equal = diff <= rounding
        if precision == "fp32":
            off = ~equal & ~rounding_ties(view, expected, view_tensor)
            assert not off.any(), f"fp32: {int(off.sum())} of {off.size} values off a step away from a tie"
        else:
            assert np.mean(equal) >= 0.85, f"{precision}: {np.mean(equal):.3f} equal"


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", VIEW_CASES)
def test_one_op_views(shared_context, name, precision):
    rng = np.random.default_rng(0)
    op, inputs, options, *out_quant = ONE_OP[name](rng)
    model = quantized_model(op, inputs, options, out_quant=out_quant[0] if out_quant else None)
    assert_view_matches(shared_context, model, [s.value for s in inputs if s is not None and not s.const], precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("float_io", [False, True], ids=["int8 io", "float io"])
def test_small_model_views(shared_context, float_io, precision):
    for seed in range(2):
        model, feed = two_op_model(np.random.default_rng(seed), float_io)
        assert_view_matches(shared_context, model, [feed], precision)
