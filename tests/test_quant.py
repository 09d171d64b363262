"""gles_delegate/quant.py: the float view of quantized partitions, on small models built with our
writer. Its structure (boundary conversions, fake-quant steps, kept indices and quantization,
fresh indices), its constants (dequantized exactly), and its numbers: the view run on the numpy
reference kernels against LiteRT's int8 / uint8 output, within one step on >= 99% of elements,
for one-op models of every op family quantized models use, per tensor and per channel."""
import numpy as np
import pytest

from gles_delegate import ops, quant
from gles_delegate.gpu import kernels
from gles_delegate.graph import Graph, Node, Tensor
from gles_delegate.tflite import ModelBuilder, read_model
from gles_delegate.tflite.writer import quantize_params
from tests.litert import run_litert
from tests.oplib import SAME, VALID, In, build_model, run_ours, single_op_model

I8, U8, F32 = np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.float32)
RANGE = {I8: (-128, 127), U8: (0, 255)}


# -- quantized one-op models ----------------------------------------------------------------
def grid_for(values, dtype):
    """(scale, zero point) that spread `values`' range (0 included) over dtype's integers."""
    low, high = RANGE[np.dtype(dtype)]
    vmin, vmax = min(float(np.min(values)), 0.0), max(float(np.max(values)), 0.0)
    scale = max(vmax - vmin, 1e-3) / (high - low)
    return scale, int(np.clip(round(low - vmin / scale), low, high))


def q_input(x, dtype=I8, const=False):
    """A quantized In spec for real values x, on a grid fitted to them."""
    scale, zero_point = grid_for(x, dtype)
    q = np.clip(np.round(x / scale) + zero_point, *RANGE[np.dtype(dtype)]).astype(dtype)
    return In(q, const=const, quant=(scale, zero_point))


def q_weights(w, axis=None, dtype=I8):
    """Constant weights: int8 symmetric per channel along `axis` (or per tensor); uint8 per
    tensor with a zero point."""
    if dtype == U8:
        return q_input(w, U8, const=True)
    reduce = tuple(d for d in range(w.ndim) if d != axis) if axis is not None else None
    scales = np.maximum(np.max(np.abs(w), axis=reduce), 1e-3) / 127
    shaped = scales if axis is None else scales.reshape([-1 if d == axis else 1 for d in range(w.ndim)])
    q = np.clip(np.round(w / shaped), -127, 127).astype(np.int8)
    quant = (float(scales), 0) if axis is None else (scales.astype(np.float32), 0, axis)
    return In(q, const=True, quant=quant)


def q_bias(b, x_spec, w_spec, channels):
    """int32 bias in units of input_scale * weight_scale."""
    w_scales = np.broadcast_to(np.asarray(w_spec.quant[0], np.float32), (channels,))
    scales = np.float32(x_spec.quant[0]) * w_scales
    quant = (scales, 0, 0) if np.ndim(w_spec.quant[0]) else (float(scales[0]), 0)
    return In(np.round(b / scales).astype(np.int32), const=True, quant=quant)


def real(spec):
    """The real values of a quantized In spec (or the values of a float one)."""
    if spec is None or spec.quant is None:
        return None if spec is None else spec.value
    scale, zero_point = np.asarray(spec.quant[0], np.float64), np.asarray(spec.quant[1], np.int64)
    if scale.ndim and len(spec.quant) > 2:
        shape = [1] * spec.value.ndim
        shape[spec.quant[2]] = -1
        scale, zero_point = scale.reshape(shape), np.broadcast_to(zero_point, scale.shape).reshape(shape)
    return ((spec.value.astype(np.int64) - zero_point) * scale).astype(np.float32)


def quantized_model(op, inputs, options=None, out_dtype=I8, out_quant=None):
    """A one-op quantized model whose output grid fits the op's real result (our float reference
    on the dequantized operands), unless out_quant is given."""
    if out_quant is None:
        twins = [None if s is None or s.quant is None else In(real(s), const=s.const) for s in inputs]
        twins = [s if t is None else t for s, t in zip(inputs, twins)]
        feeds = [s.value for s in twins if s is not None and not s.const]
        result = run_ours(single_op_model(op, twins, options), feeds)
        out_quant = grid_for(result[0], out_dtype)
    return single_op_model(op, inputs, options, output_dtypes=[np.dtype(out_dtype)], output_quant=[out_quant])


def the_view(model):
    """(graph, view) of a whole one-subgraph model as one partition."""
    graph = Graph.from_model(read_model(model))
    return graph, quant.float_view(graph.nodes, graph.inputs, graph.outputs, next_index=len(graph.tensors))


def check_against_litert(model, feeds, share=0.99):
    """The view on the numpy reference against LiteRT's builtin kernels: every output within one
    step on `share` of its elements (and never more than two off)."""
    graph, view = the_view(model)
    ours = quant.run_on_reference(view, {t.index: v for t, v in zip(graph.inputs, feeds)})
    theirs = run_litert(model, feeds, resolver="builtin")
    for tensor, expected in zip(graph.outputs, theirs):
        got = ours[tensor.index]
        if expected.dtype.kind in "iu":
            assert np.array_equal(got, np.round(got)), "quantized outputs are integers"
            diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
            step = 1
        else:
            diff, step = np.abs(got - expected), tensor.quantization.scales[0] if tensor.quantization else 1e-5
        assert diff.max(initial=0) <= 2 * step, f"off by up to {diff.max()}"
        assert np.mean(diff <= step * (1 + 1e-6)) >= share, f"only {np.mean(diff <= step):.4f} within one step"
    return graph, view


# -- numbers: one-op models against LiteRT ---------------------------------------------------
def _conv(rng, op, per_channel, dtype=I8):
    x = rng.normal(0, 1, (1, 9, 8, 6)).astype(np.float32)
    x_spec = q_input(x, dtype)
    if op == "CONV_2D":
        w = rng.normal(0, 0.3, (5, 3, 3, 6)).astype(np.float32)
        w_spec, channels = q_weights(w, 0 if per_channel else None, dtype), 5
        options = dict(padding=SAME, stride_w=2, stride_h=1, dilation_w_factor=1, dilation_h_factor=1,
                       fused_activation_function=3)
    else:
        w = rng.normal(0, 0.5, (1, 3, 3, 12)).astype(np.float32)
        w_spec, channels = q_weights(w, 3 if per_channel else None, dtype), 12
        options = dict(padding=VALID, stride_w=1, stride_h=1, dilation_w_factor=1, dilation_h_factor=1,
                       depth_multiplier=2, fused_activation_function=1)
    bias = q_bias(rng.normal(0, 0.5, channels), x_spec, w_spec, channels)
    return [x_spec, w_spec, bias], options


CASES = {
    "conv per-channel": lambda rng: ("CONV_2D",) + tuple(_conv(rng, "CONV_2D", True)),
    "conv per-tensor": lambda rng: ("CONV_2D",) + tuple(_conv(rng, "CONV_2D", False)),
    "depthwise per-channel": lambda rng: ("DEPTHWISE_CONV_2D",) + tuple(_conv(rng, "DEPTHWISE_CONV_2D", True)),
    "depthwise per-tensor": lambda rng: ("DEPTHWISE_CONV_2D",) + tuple(_conv(rng, "DEPTHWISE_CONV_2D", False)),
}


def _fc(rng, per_channel):
    x_spec = q_input(rng.normal(0, 1, (3, 20)).astype(np.float32))
    w_spec = q_weights(rng.normal(0, 0.3, (7, 20)).astype(np.float32), 0 if per_channel else None)
    return "FULLY_CONNECTED", [x_spec, w_spec, q_bias(rng.normal(0, 1, 7), x_spec, w_spec, 7)], {}


def _binary(rng, op):
    a = q_input(rng.normal(0, 1, (2, 4, 5, 3)).astype(np.float32))
    b = q_input(rng.normal(0, 3, (1, 1, 5, 3)).astype(np.float32))  # broadcast, another grid
    return op, [a, b], {"fused_activation_function": 1 if op == "ADD" else 0}


def _squared_difference(rng):
    """A LayerNormalization's (x - mean)^2 in an int8 transformer: no options, broadcast."""
    op, inputs, _ = _binary(rng, "SQUARED_DIFFERENCE")
    return op, inputs, {}


def _rsqrt(rng):
    """A LayerNormalization's 1 / sqrt(variance + eps): positive inputs (its zero point included)."""
    return "RSQRT", [q_input(rng.uniform(0.0, 4.0, (2, 4, 5, 3)).astype(np.float32))], {}


def _pool(rng, op):
    x_spec = q_input(rng.normal(0, 1, (2, 7, 8, 5)).astype(np.float32))
    options = dict(padding=SAME, stride_w=2, stride_h=2, filter_width=3, filter_height=2, fused_activation_function=0)
    return op, [x_spec], options, x_spec.quant  # TFLite's pools keep the input's grid


def _concat(rng):
    """LiteRT's int8 CONCATENATION wants one grid for all: the view then keeps it (no step)."""
    parts = [rng.normal(0, s, (1, 4, 5, c)).astype(np.float32) for s, c in ((1, 3), (4, 2), (0.5, 6))]
    scale, zero_point = grid_for(np.concatenate([p.ravel() for p in parts]), I8)
    specs = [In(np.clip(np.round(p / scale) + zero_point, -128, 127).astype(np.int8), quant=(scale, zero_point))
             for p in parts]
    return "CONCATENATION", specs, {"axis": 3, "fused_activation_function": 0}, (scale, zero_point)


def _softmax(rng):
    return "SOFTMAX", [q_input(rng.normal(0, 3, (4, 10)).astype(np.float32))], {"beta": 1.0}, (1 / 256, -128)


def _l2_normalization(rng):
    """TFLite's fixed output grid (1/128, 0): the fake-quant step snaps 128 x the normalized value."""
    x = rng.normal(0, 2, (2, 3, 9)).astype(np.float32)
    x[0, 0] = 0.0  # an all-zero row: zeros (TFLite's integer kernel has no epsilon)
    x[0, 1] = np.eye(9)[4] * 3  # a lone channel: 1.0, clamped to 127 / 128
    return "L2_NORMALIZATION", [q_input(x)], {}, (1 / 128, 0)


def _resize(rng, align_corners, half_pixel):
    x_spec = q_input(rng.normal(0, 1, (1, 5, 4, 3)).astype(np.float32))
    return ("RESIZE_BILINEAR", [x_spec, In(np.array([9, 7], np.int32), const=True)],
            {"align_corners": align_corners, "half_pixel_centers": half_pixel}, x_spec.quant)


def _mean(rng):
    x_spec = q_input(rng.normal(0, 1, (2, 6, 5, 4)).astype(np.float32))
    return "MEAN", [x_spec, In(np.array([1, 2], np.int32), const=True)], {"keep_dims": True}


ONE_OP = {
    **CASES,
    "fully connected per-channel": lambda rng: _fc(rng, True),
    "fully connected per-tensor": lambda rng: _fc(rng, False),
    "add": lambda rng: _binary(rng, "ADD"),
    "mul": lambda rng: _binary(rng, "MUL"),
    "average pool": lambda rng: _pool(rng, "AVERAGE_POOL_2D"),
    "max pool": lambda rng: _pool(rng, "MAX_POOL_2D"),
    "concatenation": _concat,
    "softmax": _softmax,
    "l2 normalization": _l2_normalization,
    "resize bilinear": lambda rng: _resize(rng, False, False),
    "resize bilinear half pixel": lambda rng: _resize(rng, False, True),
    "resize bilinear align corners": lambda rng: _resize(rng, True, False),
    "mean": _mean,
    "squared difference": _squared_difference,
    "rsqrt": _rsqrt,
}


@pytest.mark.parametrize("name", sorted(ONE_OP))
def test_view_matches_litert(name):
    for seed in range(3):
        rng = np.random.default_rng(seed)
        op, inputs, options, *out_quant = ONE_OP[name](rng)
        model = quantized_model(op, inputs, options, out_quant=out_quant[0] if out_quant else None)
        check_against_litert(model, [s.value for s in inputs if s is not None and not s.const])


@pytest.mark.parametrize("op", ["CONV_2D", "DEPTHWISE_CONV_2D"])
def test_uint8_view_matches_litert(op):
    rng = np.random.default_rng(4)
    x = rng.normal(0, 1, (1, 6, 7, 4)).astype(np.float32)
    x_spec = q_input(x, U8)
    shape, channels = ((3, 3, 3, 4), 3) if op == "CONV_2D" else ((1, 3, 3, 4), 4)
    w_spec = q_weights(rng.normal(0, 0.3, shape).astype(np.float32), dtype=U8)
    options = dict(padding=SAME, stride_w=1, stride_h=1, dilation_w_factor=1, dilation_h_factor=1,
                   fused_activation_function=0, **({"depth_multiplier": 1} if op != "CONV_2D" else {}))
    inputs = [x_spec, w_spec, q_bias(rng.normal(0, 0.5, channels), x_spec, w_spec, channels)]
    check_against_litert(quantized_model(op, inputs, options, out_dtype=U8), [x_spec.value])


def two_op_model(rng, float_io=False):
    """[QUANTIZE ->] CONV_2D (RELU) -> RESHAPE -> FULLY_CONNECTED [-> DEQUANTIZE], int8 inside."""
    b = ModelBuilder()
    x = rng.normal(0, 1, (1, 5, 5, 3)).astype(np.float32)
    in_q, conv_q, fc_q = grid_for(x, I8), (0.05, -128), (0.08, 3)
    x_idx = b.input("x", x.shape, F32 if float_io else I8, quantization=None if float_io else in_q)
    if float_io:
        q_idx = b.tensor("x_q", x.shape, I8, quantization=in_q)
        b.op("QUANTIZE", [x_idx], [q_idx])
        x_idx = q_idx
    w = q_weights(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), 0)
    w_idx = b.const("w", w.value, quantization=quantize_params(*w.quant))
    bias = q_bias(rng.normal(0, 0.3, 4), In(x, quant=in_q), w, 4)
    b_idx = b.const("b", bias.value, quantization=quantize_params(*bias.quant))
    c_idx = b.tensor("conv", (1, 5, 5, 4), I8, quantization=conv_q)
    b.op("CONV_2D", [x_idx, w_idx, b_idx], [c_idx], padding=SAME, stride_w=1, stride_h=1, dilation_w_factor=1,
         dilation_h_factor=1, fused_activation_function=1)
    r_idx = b.tensor("flat", (1, 100), I8, quantization=conv_q)
    b.op("RESHAPE", [c_idx, b.const("shape", np.array([1, 100], np.int32))], [r_idx])
    fw = q_weights(rng.normal(0, 0.1, (6, 100)).astype(np.float32))
    fw_idx = b.const("fw", fw.value, quantization=quantize_params(*fw.quant))
    f_idx = b.tensor("fc", (1, 6), I8, quantization=fc_q)
    b.op("FULLY_CONNECTED", [r_idx, fw_idx, -1], [f_idx])
    if float_io:
        d_idx = b.tensor("y", (1, 6), F32)
        b.op("DEQUANTIZE", [f_idx], [d_idx])
        f_idx = d_idx
    b.output(f_idx)
    feed = x if float_io else np.clip(np.round(x / in_q[0]) + in_q[1], -128, 127).astype(np.int8)
    return b.build(), feed


@pytest.mark.parametrize("float_io", [False, True], ids=["int8 io", "float io"])
def test_small_model_matches_litert(float_io):
    for seed in range(3):
        model, feed = two_op_model(np.random.default_rng(seed), float_io)
        check_against_litert(model, [feed])


@pytest.mark.parametrize("float_io", [False, True], ids=["int8 io", "float io"])
def test_model_values_of_intermediates(float_io):
    """model_value maps every view tensor back to the model's tensor of its index: the int8
    intermediates within one step of LiteRT's."""
    model, feed = two_op_model(np.random.default_rng(5), float_io)
    graph, view = the_view(model)
    held = quant.run_on_reference(view, {graph.inputs[0].index: feed}, every_tensor=True)
    _, litert = run_litert(model, [feed], resolver="builtin", preserve_all_tensors=True)
    checked = 0
    for index, tensor in view.model_tensors.items():
        if index not in held:  # a partition input: the runtime uploads it, no node writes it
            continue
        ours, theirs = quant.model_value(view, index, held[index]), litert.get_tensor(index)
        assert ours.dtype == theirs.dtype == tensor.dtype
        assert np.abs(ours.astype(np.int64) - theirs.astype(np.int64)).max() <= 1, tensor.name
        checked += 1
    assert checked == (4 if float_io else 3)
    assert set(view.integer_valued) == ({graph.inputs[0].index, graph.outputs[0].index} if not float_io else set())


# -- structure ------------------------------------------------------------------------------
def test_one_op_structure():
    """int8 input -> DEQUANTIZE -> CONV_2D on real values -> QUANTIZE -> int8 output: the boundary
    tensors keep their indices (float32, integer values), the real ones are fresh; the fake-quant
    step before the output's QUANTIZE is dropped."""
    rng = np.random.default_rng(0)
    op, inputs, options = CASES["conv per-channel"](rng)
    graph, view = the_view(quantized_model(op, inputs, options))
    x, w, bias = graph.nodes[0].inputs
    out = graph.nodes[0].outputs[0]
    assert [n.op for n in view.nodes] == ["DEQUANTIZE", "CONV_2D", "QUANTIZE"]
    dequantize, conv, quantize = view.nodes
    assert [t.index for t in view.inputs] == [x.index] and [t.index for t in view.outputs] == [out.index]
    assert all(t.dtype == F32 for n in view.nodes for t in [*n.inputs, *n.outputs])
    assert dequantize.inputs[0] is view.inputs[0] and quantize.outputs[0] is view.outputs[0]
    assert view.inputs[0].quantization is x.quantization and view.outputs[0].quantization is out.quantization
    assert quantize.options == {"qmin": -128, "qmax": 127}
    fresh = [dequantize.outputs[0], conv.outputs[0]]
    assert all(t.index >= len(graph.tensors) for t in fresh) and len({t.index for t in fresh}) == 2
    assert conv.inputs[0] is dequantize.outputs[0] and quantize.inputs[0] is conv.outputs[0]
    assert conv.options == graph.nodes[0].options and conv.index == graph.nodes[0].index
    # The partition itself is untouched.
    assert graph.nodes[0].inputs[0].dtype == I8 and graph.nodes[0].inputs[1].data.dtype == I8


def test_constants_are_dequantized_exactly():
    rng = np.random.default_rng(1)
    op, inputs, options = CASES["depthwise per-channel"](rng)
    graph, view = the_view(quantized_model(op, inputs, options))
    x, w, bias = graph.nodes[0].inputs
    conv = next(n for n in view.nodes if n.op == op)
    w_view, b_view = conv.inputs[1:]
    scales = w.quantization.scales.astype(np.float64)
    np.testing.assert_array_equal(w_view.data, (w.data.astype(np.float64) * scales).astype(np.float32))
    bias_scales = np.float64(np.float32(x.quantization.scales[0])) * scales
    np.testing.assert_array_equal(b_view.data, (bias.data * bias_scales).astype(np.float32))
    assert w_view.dtype == b_view.dtype == F32 and w_view.quantization is None
    assert w_view.index == w.index and not w_view.data.flags.writeable


def test_inner_tensors_get_fake_quant_steps():
    """CONV_2D -> RESHAPE -> FULLY_CONNECTED: the conv writes a fresh tensor and a fake-quant step
    writes the conv output's index; RESHAPE keeps its (shared) grid, no step; the last step goes
    into the boundary QUANTIZE."""
    model, _ = two_op_model(np.random.default_rng(0))
    graph, view = the_view(model)
    assert [n.op for n in view.nodes] == ["DEQUANTIZE", "CONV_2D", "QUANTIZE_AND_DEQUANTIZE", "RESHAPE",
                                          "FULLY_CONNECTED", "QUANTIZE"]
    conv_out = graph.nodes[0].outputs[0]
    step = view.nodes[2]
    assert step.outputs[0].index == conv_out.index and step.outputs[0].quantization is conv_out.quantization
    assert step.inputs[0] is view.nodes[1].outputs[0] and step.options == {"qmin": -128, "qmax": 127}
    assert view.nodes[3].inputs[0] is step.outputs[0]
    assert view.nodes[3].outputs[0].index == graph.nodes[1].outputs[0].index
    assert view.nodes[3].inputs[1] is graph.nodes[1].inputs[1]  # the int32 shape stays as it is
    assert ops.unsupported_reason(step) is None


def test_float_io_model_quantize_and_dequantize_nodes():
    """A model's QUANTIZE and DEQUANTIZE become fake-quant steps: to the QUANTIZE's output grid,
    and to the DEQUANTIZE's input grid (on-grid values unchanged); float boundaries stay."""
    model, _ = two_op_model(np.random.default_rng(0), float_io=True)
    graph, view = the_view(model)
    assert [n.op for n in view.nodes] == ["QUANTIZE_AND_DEQUANTIZE", "CONV_2D", "QUANTIZE_AND_DEQUANTIZE",
                                          "RESHAPE", "FULLY_CONNECTED", "QUANTIZE_AND_DEQUANTIZE",
                                          "QUANTIZE_AND_DEQUANTIZE"]
    assert view.inputs[0] is graph.inputs[0] and view.outputs[0].index == graph.outputs[0].index
    first, last = view.nodes[0], view.nodes[-1]
    assert first.outputs[0].quantization is graph.nodes[0].outputs[0].quantization
    assert last.inputs[0].index == graph.nodes[-1].inputs[0].index
    assert last.outputs[0].quantization is graph.nodes[-1].inputs[0].quantization


def test_hybrid_node_becomes_float():
    x = In(np.random.default_rng(0).normal(0, 1, (1, 4, 4, 3)).astype(np.float32))
    w = q_weights(np.random.default_rng(1).normal(0, 1, (2, 1, 1, 3)).astype(np.float32), 0)
    options = dict(padding=SAME, stride_w=1, stride_h=1, dilation_w_factor=1, dilation_h_factor=1)
    graph, view = the_view(single_op_model("CONV_2D", [x, w, In(np.zeros(2, np.float32), const=True)], options))
    assert [n.op for n in view.nodes] == ["CONV_2D"]
    assert view.nodes[0].inputs[1].dtype == F32 and view.inputs[0] is graph.inputs[0]
    assert quant.unsupported_reason(graph.nodes[0], kernels.unsupported_reason) is None
    assert kernels.unsupported_reason(graph.nodes[0]) is not None


def test_fresh_indices_follow_next_index():
    model, _ = two_op_model(np.random.default_rng(0))
    graph = Graph.from_model(read_model(model))
    view = quant.float_view(graph.nodes, graph.inputs, graph.outputs, next_index=1000)
    original = {t.index for t in graph.tensors}
    fresh = {t.index for t in view.tensors} - original
    assert fresh and min(fresh) >= 1000
    default = quant.float_view(graph.nodes, graph.inputs, graph.outputs)
    assert min({t.index for t in default.tensors} - original) == len(graph.tensors)


def test_output_read_inside_keeps_its_step():
    """A quantized partition output that a later node of the partition reads: the fake-quant step
    stays (the later node reads on-grid values) and the QUANTIZE reads its output."""
    model, _ = two_op_model(np.random.default_rng(0))
    graph = Graph.from_model(read_model(model))
    conv_out = graph.nodes[0].outputs[0]
    view = quant.float_view(graph.nodes, graph.inputs, [conv_out, graph.outputs[0]], len(graph.tensors))
    step = next(n for n in view.nodes if n.op == "QUANTIZE_AND_DEQUANTIZE")
    quantize = next(n for n in view.nodes if n.op == "QUANTIZE" and n.outputs[0].index == conv_out.index)
    assert quantize.inputs[0] is step.outputs[0] and step.outputs[0].index != conv_out.index
    assert view.outputs[0] is quantize.outputs[0]


# -- what has no view ------------------------------------------------------------------------
def _node(model):
    return Graph.from_model(read_model(model)).nodes[0]


def test_support():
    rng = np.random.default_rng(0)
    op, inputs, options = CASES["conv per-channel"](rng)
    assert quant.unsupported_reason(_node(quantized_model(op, inputs, options)), kernels.unsupported_reason) is None
    float_node = _node(single_op_model("RELU", [In(np.zeros((2, 3), np.float32))]))
    assert quant.unsupported_reason(float_node, kernels.unsupported_reason) is None


REFUSED = [  # (what, model, words of the reason)
    ("cast", lambda: single_op_model("CAST", [In(np.zeros((2, 3), np.int8), quant=(0.1, 0))],
                                     output_dtypes=[F32]), "integers"),
    ("int16", lambda: build_model("RELU", [In(np.zeros((2, 3), np.int16), quant=(0.1, 0))],
                                  [((2, 3), np.int16, (0.1, 0))]), "8-bit"),
    ("reshape between grids", lambda: single_op_model("RESHAPE", [In(np.zeros((2, 3), np.int8), quant=(0.1, 0)),
                                                                 In(np.array([6], np.int32), const=True)],
                                                      output_quant=[(0.2, 0)]), "different quantizations"),
]


@pytest.mark.parametrize("what,make,words", REFUSED, ids=[r[0] for r in REFUSED])
def test_refusals(what, make, words):
    node = _node(make())
    reason = quant.unsupported_reason(node, kernels.unsupported_reason)
    assert reason is not None and words in reason, f"{what}: {reason}"
    with pytest.raises(ValueError, match=words):
        quant.float_view([node], [t for t in node.inputs if not t.is_const], node.outputs)


def test_unquantized_int8_is_refused():
    b = ModelBuilder()
    x = b.input("x", (2, 3), I8)
    y = b.tensor("y", (2, 3), I8)
    b.op("RELU", [x], [y])
    b.output(y)
    node = _node(b.build())
    assert "without quantization" in quant.unsupported_reason(node, kernels.unsupported_reason)


def test_float_partition_view_is_the_partition_itself():
    """The delegate builds the view of every partition: one without 8-bit tensors is its own
    nodes over the very same tensors, not a copy of each (what edits nodes copies them first:
    gpu/variables.bind, transforms.rewrite_partition)."""
    x = In(np.random.default_rng(0).normal(0, 1, (1, 4, 4, 3)).astype(np.float32))
    w = In(np.random.default_rng(1).normal(0, 1, (2, 1, 1, 3)).astype(np.float32), const=True)
    options = dict(padding=SAME, stride_w=1, stride_h=1, dilation_w_factor=1, dilation_h_factor=1,
                   fused_activation_function=1)
    graph, view = the_view(single_op_model("CONV_2D", [x, w, In(np.zeros(2, np.float32), const=True)], options))
    (node,), (copy,) = graph.nodes, view.nodes
    assert copy is node
    assert view.inputs == graph.inputs and view.outputs == graph.outputs
    assert view.model_tensors == {} and view.integer_valued == set()


# -- the QUANTIZE_AND_DEQUANTIZE reference (ops/quantize.py) --------------------------------
def _fake_quant_node(shape, quant, qrange):
    x = Tensor(0, "x", shape, F32)
    out = Tensor(1, "y", shape, F32, quantization=quant)
    return Node(0, "QUANTIZE_AND_DEQUANTIZE", [x], [out], options={"qmin": qrange[0], "qmax": qrange[1]})


@pytest.mark.parametrize("dtype,axis", [(I8, None), (U8, None), (I8, 0), (I8, 2)],
                         ids=["int8", "uint8", "int8 axis 0", "int8 axis 2"])
def test_fake_quant_is_litert_quantize_then_dequantize(dtype, axis):
    """QUANTIZE_AND_DEQUANTIZE(x) against LiteRT's QUANTIZE -> DEQUANTIZE of x (per-channel
    quantization: int8 only in LiteRT's QUANTIZE, so uint8 runs per tensor). LiteRT's x86
    QUANTIZE rounds exact halves to even in its vectorised body (tests/ops/test_quantize.py):
    one step apart there."""
    rng = np.random.default_rng(0 if axis is None else axis + 1)
    shape = (3, 4, 5)
    channels = 1 if axis is None else shape[axis]
    scales = rng.uniform(0.01, 0.1, channels).astype(np.float32)
    low, high = RANGE[dtype]
    zero_points = rng.integers(low + 10, high - 10, channels)
    quant = quantize_params(scales, zero_points, axis or 0)
    x = rng.normal(0, 6, shape).astype(np.float32)  # saturates too
    b = ModelBuilder()
    x_idx = b.input("x", shape)
    q_idx = b.tensor("q", shape, dtype, quantization=quant)
    y_idx = b.tensor("y", shape)
    b.op("QUANTIZE", [x_idx], [q_idx])
    b.op("DEQUANTIZE", [q_idx], [y_idx])
    b.output(y_idx)
    theirs = run_litert(b.build(), [x], resolver="builtin")[0]
    node = _fake_quant_node(shape, quant, RANGE[dtype])
    assert ops.unsupported_reason(node) is None
    ours = ops.run_node(node, [x])[0]
    step = np.broadcast_to(scales.reshape([-1 if d == axis else 1 for d in range(3)]) if axis is not None
                           else scales[0], shape)
    diff = np.abs(ours - theirs)
    assert ours.dtype == F32 and np.all(diff <= step * 1.0001)
    # LiteRT's optimized DEQUANTIZE can round its float32 product differently in the last bit.
    assert np.mean(diff <= 1e-6 * np.abs(theirs)) >= 0.99


def test_fake_quant_rounds_halves_away_from_zero_and_saturates():
    x = np.array([-0.375, -0.125, 0.125, 0.375, 1e30, -np.inf, np.nan], np.float32)  # steps of 0.25: halves
    node = _fake_quant_node(x.shape, quantize_params(0.25, 2), (-128, 127))
    np.testing.assert_array_equal(ops.run_node(node, [x])[0], [-0.5, -0.25, 0.25, 0.5, 31.25, -32.5, 0.0])


@pytest.mark.parametrize("what,qrange,quant,words", [
    ("no range", (None, None), quantize_params(0.1, 0), "qmin"),
    ("no quantization", (-128, 127), None, "no quantization"),
    ("axis", (-128, 127), quantize_params([0.1] * 3, 0, 1), "scales along dimension"),
])
def test_fake_quant_support(what, qrange, quant, words):
    node = _fake_quant_node((3, 4), quant, qrange)
    reason = ops.unsupported_reason(node)
    assert reason is not None and words in reason, f"{what}: {reason}"
