"""How far a requantization's other rounding may move a quantized graph's outputs: gles-fuzz-graphs'
bound for int8 / uint8 outputs, propagated element by element through the graph's float view
(gles_delegate/quant.py), as tools/fuzz_half_bounds.py propagates half storage's.

The GPU runs a quantized model through its float view: every op computes in float on real
values and a fake-quant step rounds its result to the output's grid, as LiteRT's GPU delegate
does, where TFLite's integer kernels compute in fixed point (31-bit multipliers, lookup tables).
Where the real result lies within a hair of a rounding boundary (a tie: an int8 MEAN of an even
count), the two roundings may land a step apart (docs/reliability.md: "one step per op"), and
an op after it moves that step by its gain: an int8 TANH of scale 1/128 reading a convolution of
scale 0.0133 turns one step into 1.7 (gles-fuzz-graphs seed 106 case 447). With E(x) the bound
on an input element's difference in real units, a view node's output element differs by at most
- a fake-quant step (QUANTIZE_AND_DEQUANTIZE) of pre-rounding value x on a grid of step s: 0
  where x / s lies farther than E / s + TIE_STEPS from every rounding boundary (k + 1/2: both
  sides round to the same integer; the rounding absorbs the difference), else E + s; one that
  requantizes integers through TFLite's table (quant.REQUANTIZE_FROM): 0 where its input is
  exact, else E + s; a boundary QUANTIZE to integers the same, in steps; a DEQUANTIZE of
  integers: E x s;
- any other node: fuzz_half_bounds.node_bounds' rule for it (a sum: f(|x| + E) - f(|x|), a
  function: its largest move over [x - E, x + E], a move: the moved errors, ...), at a half
  precision with half storage's rounding of inputs, weights and results too, widened by
  SECOND_ORDER for what a first-order rule drops.
An output past a node without a rule has no bound here (NaN): the fuzzer's one step stands.
"""
import dataclasses

import numpy as np

from gles_delegate import Interpreter, quant
from gles_delegate.gpu.kernels.pool import INTEGER_MEAN
from gles_delegate.ops.common import quant_params
from gles_delegate.tools import fuzz_half_bounds as hb

F32 = np.dtype(np.float32)
# How far, in steps, the two sides' results before rounding may lie apart with the same inputs:
# TFLite's 31-bit fixed-point multipliers and float-built lookup tables, against float32 sums
# (16 ulps of a value of 255 steps is 2.4e-4 steps): far above both, far below a step.
TIE_STEPS = 2.0 ** -6
# The float rules are first order (products of differences dropped: fuzz_half_bounds.py); a
# difference here is a step, up to 1/128 of an int8 range, not a half's 2^-11, so what they drop
# is kept as a margin: a SOFTMAX of logits a step apart moved 0.2 % past its first-order bound.
SECOND_ORDER = 1 / 16


def _step(tensor, ndim):
    """One step of `tensor`'s grid, shaped to broadcast over an array of `ndim` dimensions."""
    return quant_params(tensor, ndim)[0]


def _plain(node):
    """`node` for the float rules: the view's integer-mean average pool as a float one (the
    same gain; its integer recovery needs on-grid values, which |x| + E is not)."""
    if INTEGER_MEAN not in node.options:
        return node
    return dataclasses.replace(node, options={k: v for k, v in node.options.items() if k != INTEGER_MEAN})


def rounded(x, e, step, table=False):
    """The bound (real units) after rounding pre-rounding values x, of bound e, to a grid of
    `step`: 0 where no rounding boundary lies within e + TIE_STEPS steps of x, else e + step.
    table: integers requantized by lookup (exact where e is 0)."""
    if table:
        return np.where(e > 0, e + step, 0.0)
    q = np.asarray(x, np.float64) / step
    to_boundary = np.abs(q - np.floor(q) - 0.5)
    return np.where(e / step + TIE_STEPS >= to_boundary, e + step, 0.0)


def view_bounds(view, values, half=False):
    """{view tensor index: per-element bound} of every tensor of `view`: in steps for a boundary
    QUANTIZE's integers, else in real units. values: the view's inputs and
    run_on_reference(view, ..., every_tensor=True). half: half storage (fp16_fp32acc, fp16)."""
    seed = (lambda v: hb.stored_error(v) if np.asarray(v).dtype == F32 else np.zeros(np.shape(v))) if half else \
        (lambda v: np.zeros(np.shape(v)))
    bounds = {t.index: np.zeros(np.shape(values[t.index])) if t.index in view.integer_valued else
              seed(values[t.index]) for t in view.inputs}

    def error_of(t):
        if t is None:
            return None
        if t.index not in bounds:  # a constant: exact, or rounded to half once
            bounds[t.index] = seed(t.data)
        return bounds[t.index]

    for node in view.nodes:
        xs = [None if t is None else t.data if t.is_const else values[t.index] for t in node.inputs]
        es = [error_of(t) for t in node.inputs]
        out = node.outputs[0]
        ndim = np.ndim(values[out.index])
        if node.op == quant.FAKE_QUANT:
            found = [rounded(xs[0], es[0], _step(out, ndim), quant.REQUANTIZE_FROM in node.options)]
        elif node.op == "QUANTIZE" and out.dtype == F32:  # real -> integers: in steps
            step = _step(out, ndim)
            found = [rounded(xs[0], es[0], step) / step]
        elif node.op == "DEQUANTIZE" and node.inputs[0].dtype == F32:  # integers -> real
            found = [es[0] * _step(node.inputs[0], ndim)]
        else:
            with np.errstate(all="ignore"):
                found = [bound * (1 + SECOND_ORDER) for bound in hb.node_bounds(_plain(node), xs, es, stored=half)]
        for t, bound in zip(node.outputs, found):
            bounds[t.index] = np.broadcast_to(np.asarray(bound, np.float64), np.shape(values[t.index]))
    return bounds


def output_steps(data, steps, precision="fp32"):
    """Per invoke of `steps` (tools/fuzz_graphs.case_inputs), in one flat list as
    tools/fuzz_graphs.run_steps returns outputs: for an int8 / uint8 output, the most steps it
    may differ from TFLite's (at least 1); for a float output of a DEQUANTIZE, that bound in real
    units; 0 for any other output and where no bound follows (a node without a rule). None for a
    graph with no quantized tensor or no float view, or steps this does not follow (a reset of
    variables, a resize)."""
    interpreter = Interpreter(model_content=data, cpu_backend="reference")
    interpreter.allocate_tensors()
    graph = interpreter._main.graph
    if not any(quant.touches_quantized(n) for n in graph.nodes) or any(not isinstance(s, list) for s in steps):
        return None
    try:
        view = quant.float_view(graph.nodes, graph.inputs, graph.outputs, next_index=len(graph.tensors))
    except ValueError:
        return None
    found = []
    for inputs in steps:
        values = {t.index: np.asarray(x) for t, x in zip(view.inputs, inputs)}  # run_on_reference casts them
        try:
            values.update(quant.run_on_reference(view, values, every_tensor=True))
        except (ValueError, RuntimeError):
            return None
        bounds = view_bounds(view, values, half=precision in hb.HALF_PRECISIONS)
        for model_out, view_out in zip(graph.outputs, view.outputs):
            bound = float(np.max(bounds.get(view_out.index, np.nan), initial=0.0))
            found.append(_judged(model_out, bound))
    return found


def _judged(model_out, bound):
    """What the fuzzer's judge takes for one output (output_steps)."""
    if not np.isfinite(bound):
        return 0.0
    if model_out.dtype in quant.QUANTIZED_DTYPES:
        return max(1.0, float(np.floor(bound + 1e-9)))  # integers: whole steps
    return bound
