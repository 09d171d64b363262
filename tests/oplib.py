"""Build one-op models with our writer and compare our reference interpreter against LiteRT."""
import numpy as np

from gles_delegate import Interpreter
from gles_delegate import ops
from gles_delegate.graph import Graph
from gles_delegate.tflite import ModelBuilder, read_model
from gles_delegate.tflite.writer import quantize_params
from tests.litert import run_litert


class In:
    """One op input: an array, constant or fed at run time, optionally quantized (scale, zp[, dim])."""

    def __init__(self, value, const=False, quant=None):
        self.value = np.asarray(value)
        self.const = const
        self.quant = quant


def _build(op, inputs, outputs, options, version, custom_options):
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
    b.op(op, indices, out_indices, version=version, custom_options=custom_options, **options)
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
    options = options or {}
    dtypes = output_dtypes or [inputs[0].value.dtype] * n_outputs
    quants = output_quant or [None] * n_outputs
    provisional = _build(op, inputs, [((), d, q) for d, q in zip(dtypes, quants)], options, version, custom_options)
    graph = Graph.from_model(read_model(provisional))
    node = graph.nodes[0]
    reason = ops.unsupported_reason(node)
    assert reason is None, reason
    results = ops.run_node(node, [None if s is None else s.value for s in inputs])
    return _build(op, inputs, [(r.shape, d, q) for r, d, q in zip(results, dtypes, quants)],
                  options, version, custom_options)


def feeds(inputs):
    return [s.value for s in inputs if s is not None and not s.const]


def run_ours(model, values, **kwargs):
    """Run a model on our interpreter (reference kernels unless delegates are passed)."""
    interp = Interpreter(model_content=model, **kwargs)
    interp.allocate_tensors()
    for detail, value in zip(interp.get_input_details(), values):
        interp.set_tensor(detail["index"], value)
    interp.invoke()
    return [interp.get_tensor(d["index"]) for d in interp.get_output_details()]


def assert_close(ours, theirs, rel=1e-5, abs_tol=1e-6, quantum=None, what=""):
    """Float outputs: max|ours - theirs| <= rel * max|theirs| + abs_tol. Integer outputs: within
    `quantum` steps (exact when None)."""
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} != {theirs.shape}"
    assert ours.dtype == theirs.dtype, f"{what}: dtype {ours.dtype} != {theirs.dtype}"
    if ours.dtype.kind in "iub":
        diff = np.abs(ours.astype(np.int64) - theirs.astype(np.int64))
        limit = quantum or 0
        assert diff.max(initial=0) <= limit, f"{what}: integer outputs differ by up to {diff.max()} (allowed {limit})"
        return
    scale = float(np.max(np.abs(theirs), initial=0.0))
    err = float(np.max(np.abs(ours.astype(np.float64) - theirs), initial=0.0))
    assert np.array_equal(np.isnan(ours), np.isnan(theirs)), f"{what}: NaN positions differ"
    assert err <= rel * scale + abs_tol, f"{what}: max abs error {err:.3g} > {rel} x {scale:.3g} + {abs_tol}"


def check_op(op, inputs, options=None, rel=1e-5, abs_tol=1e-6, quantum=None, resolver="builtin", **kwargs):
    """Build a one-op model, run it on our reference and on LiteRT, and compare every output."""
    model = single_op_model(op, inputs, options, **kwargs)
    values = feeds(inputs)
    ours = run_ours(model, values)
    theirs = run_litert(model, values, resolver=resolver)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert_close(a, b, rel, abs_tol, quantum, what=f"{op} output {k}")
    return ours, theirs
