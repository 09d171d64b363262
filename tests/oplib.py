"""Build one-op models with our writer and compare our reference interpreter against LiteRT."""
import re
from pathlib import Path

import numpy as np
import pytest

from gles_delegate import Interpreter, ModelError
from gles_delegate import ops
from gles_delegate.graph import Graph
from gles_delegate.ops.checks import Unimplemented
from gles_delegate.tflite import ModelBuilder, read_model, write_model
from gles_delegate.tflite.writer import quantize_params
from gles_delegate.tools.common import seeded_inputs
from tests.litert import run_litert
from tests.tolerance import sum_bound, ulp_bound

SAME, VALID = 0, 1  # the schema's Padding
CLAMPS = [0, 1, 2, 3]  # NONE, RELU, RELU_N1_TO_1, RELU6: the fused activations windowed kernels apply
# MediaPipe models whose every op LiteRT's builtin resolver runs (no XNNPACK-only custom op).
BUILTIN_ONLY_MODELS = ["face_detection_full_range_sparse", "face_detection_short_range", "face_landmark",
                       "hand_landmark_full", "hand_landmark_lite", "hand_recrop", "iris_landmark",
                       "palm_detection_full", "palm_detection_lite", "pose_detection", "pose_landmark_full"]


class In:
    """One op input: an array, constant or fed at run time, optionally quantized (scale, zp[, dim])."""

    def __init__(self, value, const=False, quant=None):
        self.value = np.asarray(value)
        self.const = const
        self.quant = quant


# -- models -------------------------------------------------------------------------------
def build_model(op, inputs, outputs, options=None, version=1, custom_options=None):
    """A model of one operator, as stated: inputs are In specs (None for an omitted optional
    input), outputs (shape, dtype, quant) triples, quant a (scale, zero_point[, dim]) tuple or None."""
    b = ModelBuilder()
    indices = []
    for k, spec in enumerate(inputs):
        if spec is None:
            indices.append(-1)
        elif spec.const:
            indices.append(b.const(f"c{k}", spec.value, quantization=_quant(spec.quant)))
        else:
            indices.append(b.input(f"in{k}", spec.value.shape, spec.value.dtype, quantization=_quant(spec.quant)))
    out_indices = [b.tensor(f"out{k}", shape, dtype, quantization=_quant(quant))
                   for k, (shape, dtype, quant) in enumerate(outputs)]
    b.op(op, indices, out_indices, version=version, custom_options=custom_options, **(options or {}))
    for index in out_indices:
        b.output(index)
    return b.build()


def _quant(q):
    return None if q is None else quantize_params(*q)


def single_op_model(op, inputs, options=None, version=1, custom_options=None, output_dtypes=None,
                    output_quant=None, n_outputs=1):
    """A model with one operator. Output shapes come from our reference kernel (LiteRT
    recomputes its own, so a wrong shape shows up as a mismatch, not as a silent pass).

    inputs: list of In (or None for an omitted optional input). output_dtypes: defaults to the
    first input's dtype. output_quant: list of (scale, zero_point) per output, or None.
    """
    dtypes = output_dtypes or [inputs[0].value.dtype] * n_outputs
    quants = output_quant or [None] * n_outputs
    provisional = build_model(op, inputs, [((), d, q) for d, q in zip(dtypes, quants)], options, version,
                              custom_options)
    graph = Graph.from_model(read_model(provisional))
    node = graph.nodes[0]
    reason = ops.unsupported_reason(node)
    assert reason is None, reason
    results = ops.run_node(node, [None if s is None else s.value for s in inputs])
    return build_model(op, inputs, [(r.shape, d, q) for r, d, q in zip(results, dtypes, quants)],
                       options, version, custom_options)


def edit_operator(model, edit):
    """The model with `edit(operator inputs list, options dict)` applied to its first operator
    (to build malformed variants of a valid model)."""
    model_def = read_model(model)
    op = model_def.subgraphs[0].operators[0]
    inputs = list(op.inputs)
    edit(inputs, op.options)
    op.inputs = tuple(inputs)
    return write_model(model_def)


def with_int8_weights(model, positions):
    """The model with the tensors at its first operator's input `positions` made int8 (scale
    0.01, zeros): the hybrid-weight variant of a float model."""
    model_def = read_model(model)
    subgraph = model_def.subgraphs[0]
    for k in positions:
        tensor = subgraph.tensors[subgraph.operators[0].inputs[k]]
        tensor.type_name = "INT8"
        tensor.quantization = quantize_params(0.01, 0)
        model_def.buffers[tensor.buffer] = np.zeros(int(np.prod(tensor.shape)), np.uint8)
    return write_model(model_def)


def first_node(model):
    """The first node of a model's graph (to check support or build kernels without running)."""
    return Graph.from_model(read_model(model)).nodes[0]


def single_op_node(op, inputs, options=None, **kwargs):
    """The node of single_op_model(op, inputs, options, **kwargs)."""
    return first_node(single_op_model(op, inputs, options, **kwargs))


def reason_of(model):
    """Why the reference kernels refuse the first node of a model (None when they take it)."""
    return ops.unsupported_reason(first_node(model))


def conv_options(strides, dilations, padding, activation=0):
    """CONV_2D options (DEPTHWISE_CONV_2D's with depth_multiplier added)."""
    return dict(padding=padding, stride_h=strides[0], stride_w=strides[1], dilation_h_factor=dilations[0],
                dilation_w_factor=dilations[1], fused_activation_function=activation)


def window_out_size(size, k, stride, padding, dilation=1):
    """Output extent of a (dilated) window of k taps over `size` with SAME or VALID padding, worked
    out here rather than taken from ops/common.py."""
    effective = (k - 1) * dilation + 1
    return -(-size // stride) if padding == SAME else (size - effective + stride) // stride


# -- running ------------------------------------------------------------------------------
def feeds(inputs):
    return [s.value for s in inputs if s is not None and not s.const]


def run_ours(model, values, **kwargs):
    """Run a model on our interpreter: its CPU nodes on the reference kernels ('fallback': LiteRT
    only where the reference lacks a kernel) unless kwargs say otherwise, its GPU ones on the
    delegates passed."""
    interp = Interpreter(model_content=model, **{"cpu_backend": "fallback", **kwargs})
    interp.allocate_tensors()
    for detail, value in zip(interp.get_input_details(), values):
        interp.set_tensor(detail["index"], value)
    interp.invoke()
    return [interp.get_tensor(d["index"]) for d in interp.get_output_details()]


# -- comparing ----------------------------------------------------------------------------
def _extreme(values):
    """Where a float array holds NaN, +-inf or +-its type's maximum (what LiteRT clamps inf to):
    values no relative tolerance can be scaled by."""
    return ~np.isfinite(values) | (np.abs(values) == np.finfo(values.dtype).max)


def assert_close(ours, theirs, bound=None, quantum=None, what=""):
    """Float outputs: NaN, +-inf and +-max exactly where theirs has them, the other values within
    `bound` of theirs: an array of per-element bounds (tolerance.sum_bound), or by default
    tolerance.ulp_bound of the other values. Integer outputs: within `quantum` steps (exact
    when None)."""
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} != {theirs.shape}"
    assert ours.dtype == theirs.dtype, f"{what}: dtype {ours.dtype} != {theirs.dtype}"
    if ours.dtype.kind in "iub":
        diff = np.abs(ours.astype(np.int64) - theirs.astype(np.int64))
        limit = quantum or 0
        assert diff.max(initial=0) <= limit, f"{what}: integer outputs differ by up to {diff.max()} (allowed {limit})"
        return
    extreme = _extreme(theirs)
    assert np.array_equal(_extreme(ours), extreme), f"{what}: NaN / inf / max positions differ"
    assert np.array_equal(ours[extreme], theirs[extreme], equal_nan=True), f"{what}: inf / max values differ"
    ours, theirs = ours[~extreme].astype(np.float64), theirs[~extreme].astype(np.float64)
    bound = np.broadcast_to(ulp_bound(theirs) if bound is None else np.broadcast_to(bound, extreme.shape)[~extreme],
                            theirs.shape)
    diff = np.abs(ours - theirs)
    if np.any(diff > bound):
        k = int(np.argmax(diff - bound))
        raise AssertionError(f"{what}: max abs error {diff.max():.3g}; {diff[k]:.3g} > its bound {bound[k]:.3g} "
                             f"at {ours[k]:.9g} vs {theirs[k]:.9g}")


def check_op(op, inputs, options=None, quantum=None, resolver="builtin", bound=None, **kwargs):
    """Build a one-op model, run it on our reference and on LiteRT, and compare every output:
    within `bound` (per element) when given, else summing ops within tolerance.sum_bound, the
    others within tolerance.ulp_bound."""
    model = single_op_model(op, inputs, options, **kwargs)
    values = feeds(inputs)
    ours = run_ours(model, values)
    theirs = run_litert(model, values, resolver=resolver)
    bounds = [bound] * len(ours) if bound is not None else \
        sum_bound(first_node(model), [None if s is None else s.value for s in inputs])
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert_close(a, b, None if bounds is None else bounds[k], quantum, what=f"{op} output {k}")
    return ours, theirs


def compare_elementwise(op, inputs, options=None, output_dtypes=None, rtol=1e-6, atol=0.0):
    """Ours against LiteRT's builtin kernels element by element (relative rtol, absolute atol,
    NaNs in the same places): for special values, where check_op's max-scaled tolerance would
    hide a wrong element."""
    model = single_op_model(op, inputs, options, output_dtypes=output_dtypes)
    values = feeds(inputs)
    ours, theirs = run_ours(model, values)[0], run_litert(model, values, resolver="builtin")[0]
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol, equal_nan=True, err_msg=f"{op} {options}")


# -- refusals -----------------------------------------------------------------------------
def _naming(op, match):
    """The regex of a ModelError that names node #0 of `op` and then matches `match`."""
    return re.escape(f"#0 ({op})") + ".*" + match


def assert_rejected(op, inputs, options=None, match="", outputs=None, **model_kwargs):
    """allocate_tensors must reject the node: a ModelError naming it that matches the regex
    `match`. inputs: In specs; outputs: (shape, dtype, quant) triples, by default one shaped,
    typed and quantized like the first input. model_kwargs (version, custom_options) go to
    build_model."""
    if outputs is None:
        outputs = [(inputs[0].value.shape, inputs[0].value.dtype, inputs[0].quant)]
    model = build_model(op, inputs, outputs, options, **model_kwargs)
    with pytest.raises(ModelError, match=_naming(op, match)):
        Interpreter(model_content=model, cpu_backend="reference").allocate_tensors()
    if isinstance(ops.unsupported_reason(Graph.from_model(read_model(model)).nodes[0]), Unimplemented):
        assert_litert_runs_or_refuses(model, op, feeds(inputs))
    else:  # possibly malformed: no backend but 'litert' hands it to LiteRT
        with pytest.raises(ModelError, match=_naming(op, match)):
            Interpreter(model_content=model).allocate_tensors()


def assert_litert_runs_or_refuses(model, op, values):
    """Under cpu_backend 'auto' a node of a type combination the reference has no kernel for
    (Unimplemented) runs on LiteRT's kernels, or is a ModelError naming it where LiteRT refuses
    it too (at allocate_tensors or invoke): never a crash, never the reference."""
    try:
        interpreter = Interpreter(model_content=model)
        interpreter.allocate_tensors()
        assert interpreter.cpu_summary()["litert_nodes"] == [f"#0 ({op})"]
        for detail, value in zip(interpreter.get_input_details(), values):
            interpreter.set_tensor(detail["index"], value)
        interpreter.invoke()
    except ModelError as exc:
        assert re.search(_naming(op, ""), str(exc)), exc


def assert_kernel_error(op, inputs, options=None, match="", **kwargs):
    """The reference kernel itself must refuse these inputs (as it would at invoke): a ModelError
    naming the node that matches the regex `match`. kwargs go to single_op_model."""
    with pytest.raises(ModelError, match=_naming(op, match)):
        single_op_model(op, inputs, options, **kwargs)


def assert_refused_like_litert(op, inputs, outputs, options=None, match=""):
    """LiteRT's builtin kernels refuse this one-op model (at allocate_tensors or invoke: an index
    out of range, a parameter its kernel checks): ours must refuse it too, with a ModelError
    naming node #0 that matches the regex `match`. outputs: (shape, dtype, quant) triples."""
    model = build_model(op, inputs, outputs, options)
    with pytest.raises(RuntimeError):
        run_litert(model, feeds(inputs), resolver="builtin")
    with pytest.raises(ModelError, match=_naming(op, match)):
        run_ours(model, feeds(inputs))


# -- every node of the real models --------------------------------------------------------
def check_model_nodes(path, op_names, quantum=None, litert_may_fail=False):
    """Run a model on LiteRT's builtin kernels keeping every intermediate, then feed each node
    of `op_names` its LiteRT inputs and compare our outputs with LiteRT's. Returns how many nodes
    were checked: 0 when there are none, or when LiteRT cannot run the model and
    `litert_may_fail` (MediaPipe custom ops it does not resolve)."""
    data = Path(path).read_bytes()
    nodes = [n for n in Graph.from_model(read_model(data)).nodes if n.op in op_names]
    if not nodes:
        return 0
    try:
        _, litert = run_litert(data, seeded_inputs(Interpreter(model_content=data).get_input_details()),
                               resolver="builtin", preserve_all_tensors=True)
    except RuntimeError:
        if litert_may_fail:
            return 0
        raise
    for node in nodes:
        what = f"{Path(path).stem} {node.label}"
        assert ops.unsupported_reason(node) is None, f"{what}: {ops.unsupported_reason(node)}"
        inputs = [None if t is None else t.data if t.is_const else litert.get_tensor(t.index) for t in node.inputs]
        bounds = sum_bound(node, inputs) or [None] * len(node.outputs)
        for tensor, value, bound in zip(node.outputs, ops.run_node(node, inputs), bounds):
            assert_close(value, litert.get_tensor(tensor.index), bound, quantum, what=what)
    return len(nodes)


def check_nodes_on_real_models(models, op_names):
    """check_model_nodes (within one quantum) on every model of {name: path} that LiteRT's
    builtin resolver can run. Returns how many nodes were checked."""
    return sum(check_model_nodes(path, op_names, quantum=1, litert_may_fail=True)
               for _, path in sorted(models.items()))


def broadcast_shapes(rng, rank, count, high=5):
    """`count` shapes that broadcast to at most `rank` dims: each keeps a random number of
    trailing dims (0 = scalar) of one full shape with dims in [1, high), some of them set to 1."""
    full = rng.integers(1, high, rank)

    def side():
        kept = int(rng.integers(0, rank + 1))
        shape = full[rank - kept:].copy()
        shape[rng.random(kept) < 0.35] = 1
        return tuple(int(d) for d in shape)
    return tuple(side() for _ in range(count))


def unknown_custom_op_model():
    """x [2, 2] -> MysteryOp (a custom op no runtime knows) -> y."""
    b = ModelBuilder()
    x = b.input("x", (2, 2))
    y = b.tensor("y", (2, 2))
    b.op("MysteryOp", [x], [y], custom_options=b"")
    b.output(y)
    return b.build()


def node_with_output(op, inputs, out_shape, **options):
    """The node of a one-op model over `inputs` (In: constants or model inputs) whose output is
    declared `out_shape` (float32), whatever the op would compute: for refusal tests."""
    b = ModelBuilder()
    indices = [b.const(f"c{k}", s.value) if s.const else b.input(f"in{k}", s.value.shape, s.value.dtype)
               for k, s in enumerate(inputs)]
    out = b.tensor("out", out_shape, np.float32)
    b.op(op, indices, [out], **options)
    b.output(out)
    return first_node(b.build())


def cpu_node(b, x, out):
    """Add a node `out` = |x| (x, out of one 4-D shape, builder `b`) of an op that has no GPU
    kernel, for tests that need a CPU node between or after GPU nodes: an L2_POOL_2D of a 1x1
    window. (ATAN2 and PACK were these until they got GPU kernels: change it here when this one
    does; tests/test_registry.py checks it still has none.)"""
    b.op("L2_POOL_2D", [x], [out], padding=1, stride_w=1, stride_h=1, filter_width=1, filter_height=1,
         fused_activation_function=0)
