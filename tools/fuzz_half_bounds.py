"""How far half storage may move a float graph's outputs: gles-fuzz-graphs' bound at --precision
fp16_fp32acc and fp16, a first-order error bound propagated node by node through the model.

A half (binary16) holds a value to a relative error of U = 2^-11 (round to nearest); one below
its smallest normal (2^-14) may be flushed to zero, an error of the value itself. With half
storage (docs/performance.md "Precision 'auto'": fp16_fp32acc keeps every tensor and weight in
half and computes in float32) each model input, constant and stored result is rounded once:
inputs and constants by exactly |half(v) - v| (their values are known), a node's result by at
most rounding(v) (below). Given E(x), a bound on each float input's error, a node's output is off
by at most (first order: products of two errors are dropped)
- a linear, multilinear or affine node (convolutions, FULLY_CONNECTED, BATCH_MATMUL, ADD, SUB,
  MUL, MEAN, SUM, CUMSUM, AVERAGE_POOL_2D, RESIZE_BILINEAR): f(|x| + E) - f(|x|), its reference kernel
  on magnitudes without its fused activation, SUB as an ADD: every term's error reaches the sum
  at most at its own weight's magnitude. A sum that cancels (0.16 - 0.158) keeps the error of its
  terms: relative to the result, many times U. Its fused activation then moves by at most
  max |act(y +- E) - act(y)| of the sum y (0 where RELU clamps the whole interval);
- a node that moves or picks values (the layout ops, GATHER_ND, ONE_HOT, MAX_POOL_2D, REDUCE_MAX,
  MAXIMUM, MINIMUM): the same node on the errors (a maximum moves by at most its operands'
  largest error);
- a one-input function (LOGISTIC, TANH, EXP, ...): max |f(x +- E) - f(x)|, inf where f is not
  finite there (RSQRT of a variance no larger than its own error: nothing bounds the output);
- DIV: (E_a + |a / b| E_b) / |b| (inf where E_b >= |b|); ATAN2: (|x| E_y + |y| E_x) / (x^2 + y^2)
  (inf where the error box reaches the origin, or y's reaches 0 left of it: the branch cut); SQUARED_DIFFERENCE: 2 |a - b| (E_a + E_b); PRELU: E_x where
  x >= 0, else |alpha| E_x + |x| E_alpha; SOFTMAX: beta y (E + sum(y E)) along its axis; LOG_SOFTMAX:
  E + sum(softmax E); POW: its largest move over the corners of the operands' error box;
  L2_NORMALIZATION: (E + |y| sum(|y| E)) / ||x|| along its axis (inf where 0 < ||E|| >= ||x||);
  an input with no bound (NaN) leaves the node's outputs without one, and an unbounded one (inf)
  makes a rule's inf x 0 or inf - inf inf, not NaN;
- a resource variable: READ_VARIABLE gives the bound of the value last assigned to it
  (ASSIGN_VARIABLE), carried from invoke to invoke (reset_all_variables leaves resource
  variables as they are); one never assigned holds its initial value, stored once: rounding(v);
- RFFT2D: a complex tensor's bound is one on |dz|. Every bin is a sum of the window's inputs
  times twiddles of modulus 1: the sum of the inputs' errors, plus the rows' transform stored
  in half between the two passes (U (|re| + |im|) of each, summed down a column), the float32
  butterflies (4 log2(N) 2^-24 sqrt(N) ||window||_2, gpu/kernels/spectral.py) and the stored
  result; COMPLEX_ABS, REAL and IMAG move by at most |dz|, plus their own rounding;
- a comparison: a bool tensor whose "bound" is 1 where it may flip (|a - b| within E_a + E_b),
  carried by LOGICAL_AND / OR / NOT, CAST and REDUCE_ALL / REDUCE_ANY (1 where any element
  reduced may flip); a CAST of a float to bool may flip where [x - E, x + E] reaches 0, one to an
  integer type moves by what truncation moves over that interval; ARG_MAX / ARG_MIN may pick
  another index where a rival lies within the errors of the pick (how far: the farthest such),
  TOPK_V2 the same for each of its picks (its values by the largest error of their row), a CAST of
  exact integers to float moves by their half rounding (inf past its range), DYNAMIC_UPDATE_SLICE
  of exact start indices moves its elements' errors with them, and ONE_HOT,
  GATHER, GATHER_ND and EMBEDDING_LOOKUP may write any value they could pick where their index
  may move (the spread of those values), integers moved by a layout op or an int64 <-> int32 CAST
  carry their bound, integer ADD, SUB, MUL, NEG, ABS, MAXIMUM and MINIMUM propagate it (2^32 where
  the result may wrap), FLOOR_DIV / DIV move by E_a / |b| + 1 (more by a moved divisor), FLOOR_MOD
  anywhere in its range once an operand moved, and any op of exact integers and
  bools (bound 0) is exact; a SELECT / SELECT_V2 of a condition that may flip
  may give either operand (|x - y| + the larger error), else its pick's error,
plus the rounding of its stored result (none for a node that moves or picks half values: they
stay exact). In fp16 (half math too; reductions, SOFTMAX and SE gates stay float32: the templates'
@highp lines, gpu/shader.py) each node also rounds its arithmetic: a sum of K terms by gamma(K) of
sum |terms| (Higham 3.1), anything else once more. A node of an op with no rule here has no bound
(NaN): the outputs it reaches keep the fuzzer's float bound, so no finding is hidden by an op
this cannot bound. A value past half's range (65504) is inf in half storage: its bound is inf.
"""
import dataclasses

import numpy as np

from gles_delegate import Interpreter, ops
from gles_delegate.ops.common import ACT_NONE, apply_activation, fused_activation

U = 2.0 ** -11                                  # half's unit roundoff
TINY = float(np.finfo(np.float16).tiny)         # half's smallest normal, 2^-14
HALF_MAX = float(np.finfo(np.float16).max)      # 65504
F32_MAX = float(np.finfo(np.float32).max)
HALF_PRECISIONS = ("fp16", "fp16_fp32acc")

SUMS = {"CONV_2D", "CONV_3D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL", "ADD", "SUB", "MUL", "MEAN",
        "SUM", "AVERAGE_POOL_2D", "RESIZE_BILINEAR", "ADD_N", "TRANSPOSE_CONV", "CONV_3D_TRANSPOSE",
        "REDUCE_PROD",  # multilinear
        "CUMSUM"}
MOVES = {"RESHAPE", "TRANSPOSE", "SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V", "CONCATENATION", "PAD", "PADV2",
         "GATHER", "TILE", "SQUEEZE", "EXPAND_DIMS", "RESIZE_NEAREST_NEIGHBOR", "MAX_POOL_2D", "REDUCE_MAX",
         "MAXIMUM", "MIRROR_PAD", "REVERSE_V2", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "SPACE_TO_BATCH_ND",
         "BATCH_TO_SPACE_ND", "PACK", "UNPACK", "BROADCAST_TO", "GATHER_ND",
         "ONE_HOT",  # ONE_HOT: its on / off values' own rounding where it writes them
         "DYNAMIC_UPDATE_SLICE"}  # where its start indices are exact (else no bound: node_bounds)
# A minimum moves by at most its operands' largest error too: the matching maximum of the errors.
AS_MAXIMUM = {"MINIMUM": "MAXIMUM", "REDUCE_MIN": "REDUCE_MAX"}
# (the step functions CEIL ... SIGN too: an interval across a step moves them by the step)
UNARY = {"LOGISTIC", "TANH", "HARD_SWISH", "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "ABS", "NEG", "EXP", "ELU",
         "GELU", "LEAKY_RELU", "RSQRT", "SQRT", "SQUARE", "LOG", "SIN", "COS", "CEIL", "FLOOR", "ROUND", "SIGN"}
EXACT_UNARY = {"RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "ABS", "NEG", "CEIL", "FLOOR", "ROUND",
               "SIGN"}   # of a half: a half, no rounding
HIGHP = {"MEAN", "SUM", "CUMSUM", "SOFTMAX", "LOG_SOFTMAX", "REDUCE_PROD",  # computed in float32 in fp16 too (gpu/shader.py)
         "RFFT2D", "COMPLEX_ABS", "REAL", "IMAG"}
COMPLEX_PARTS = {"COMPLEX_ABS", "REAL", "IMAG"}  # a float of a complex input: |dz| bounds its move
COMPARISONS = {"LESS", "GREATER", "LESS_EQUAL", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL"}
# The terms of one output element of a sum that averages them (its reference on ones gives 1).
AVERAGED_TERMS = {
    "AVERAGE_POOL_2D": lambda node: node.options["filter_height"] * node.options["filter_width"],
    "RESIZE_BILINEAR": lambda node: 4,
}


def rounding(v):
    """Per element, the most half storage can move float64 array v: U |v|, or |v| itself below
    half's smallest normal (flushed to zero), inf past its range."""
    a = np.abs(v)
    return np.where(a > HALF_MAX, np.inf, np.where(a < TINY, a, U * a))


def stored_error(v):
    """Per element, what rounding a known value (a model input, a constant) to half moves it:
    exactly, or the value itself where a flush to zero could take it."""
    v = np.asarray(v, np.float64)
    with np.errstate(over="ignore"):
        moved = np.abs(v.astype(np.float16).astype(np.float64) - v)
    return np.where(np.abs(v) < TINY, np.abs(v), moved)


def _is_float(x):
    return x is not None and np.asarray(x).dtype.kind == "f"


def _plain(node, op=None):
    """The node without its fused clamp (and as `op`, where given)."""
    return dataclasses.replace(node, op=op or node.op, options={**node.options, "fused_activation_function": 0})


def _run(node, inputs):
    return [np.asarray(o, np.float64) for o in ops.run_node(node, inputs)]


def _sum_bound(node, xs, es, half_math):
    """f(|x| + E) - f(|x|) of a SUMS node, plus gamma(K) sum|terms| in half math."""
    plain = _plain(node, "ADD" if node.op == "SUB" else None)
    magnitude = [np.abs(x).astype(np.float32) if _is_float(x) else x for x in xs]
    moved = [(np.abs(x) + e).astype(np.float32) if _is_float(x) else x for x, e in zip(xs, es)]
    base = _run(plain, magnitude)
    # a kernel clamps an infinite sum to the largest float (clamp_to_activation): still no bound
    bound = [np.where(m >= F32_MAX, np.inf, m - b) for m, b in zip(_run(plain, moved), base)]
    if half_math and node.op not in HIGHP:
        ones = [np.ones_like(x, np.float32) if _is_float(x) else x for x in xs]
        terms = AVERAGED_TERMS[node.op](node) if node.op in AVERAGED_TERMS else _run(plain, ones)[0]
        k = np.asarray(terms, np.float64) * U
        bound = [e + k / (1 - np.minimum(k, 0.5)) * b for e, b in zip(bound, base)]
    return _clamped(node, _run(_plain(node), xs), bound)


def _clamped(node, ys, bounds):
    """The bounds of pre-activation values ys carried through the node's fused activation
    (monotone: its deviation over [y - E, y + E] is largest at an end; an element clamped with
    its whole interval moves not at all)."""
    activation = fused_activation(node)
    if activation == ACT_NONE:
        return bounds
    f = lambda v: apply_activation(v, activation).astype(np.float64)
    return [np.maximum(np.abs(f(y + e) - f(y)), np.abs(f(y - e) - f(y))) for y, e in zip(ys, bounds)]


def _moved_bound(node, xs, es):
    """The node (a MOVES / AS_MAXIMUM one) run on the errors: exact for a layout op, the
    largest error it picks among for a maximum or minimum."""
    op = AS_MAXIMUM.get(node.op, node.op)
    return _run(_plain(node, op), [e.astype(np.float32) if _is_float(x) else x for x, e in zip(xs, es)])


def _unary_bound(node, x, e):
    """max |f(x +- E) - f(x)| of a one-input function: first order, |f'(x)| E."""
    f = lambda v: _run(node, [v.astype(np.float32)])[0]
    y = f(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        moved = np.maximum(np.abs(f(x + e) - y), np.abs(f(x - e) - y))
    return _unbounded(moved, y)


def _unbounded(moved, y):
    """moved, inf where y is finite but moved is not: the error interval reaches where the
    function is not (RSQRT of a variance no larger than its error, a division by a divisor that
    may be 0). No bound there, as LiteRT's own output past 1e6 is none (fuzz_graphs.degenerate)."""
    return np.where(np.isfinite(y) & ~np.isfinite(moved), np.inf, moved)


def _special_bound(node, xs, es):
    """DIV, SQUARED_DIFFERENCE, PRELU, SOFTMAX, ATAN2 ... (module docstring), or None for another op."""
    if node.op == "DIV":
        a, b = xs
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(es[1] >= np.abs(b), np.inf, (es[0] + np.abs(a / b) * es[1]) / np.abs(b))
    if node.op == "SQUARED_DIFFERENCE":
        with np.errstate(invalid="ignore"):  # 0 x inf: node_bounds makes it inf
            return 2 * np.abs(xs[0] - xs[1]) * (es[0] + es[1])
    if node.op == "PRELU":
        x, alpha = xs
        return np.where(x >= 0, es[0], np.abs(alpha) * es[0] + np.abs(x) * es[1])
    if node.op == "SOFTMAX":
        y = _run(node, [xs[0].astype(np.float32)])[0]
        beta = abs(float(node.options.get("beta", 1.0)))
        return beta * y * (es[0] + np.sum(y * es[0], axis=-1, keepdims=True))
    if node.op == "LOG_SOFTMAX":  # x - log(sum(exp(x))): E, plus the softmax-weighted E
        p = np.exp(_run(node, [xs[0].astype(np.float32)])[0])
        return es[0] + np.sum(p * es[0], axis=-1, keepdims=True)
    if node.op == "L2_NORMALIZATION":  # y = x / ||x|| along the last axis: dy = (dx - y (y . dx)) / ||x||
        x, e = xs[0], es[0]
        norm = np.sqrt(np.sum(x * x, axis=-1, keepdims=True))
        divisor = np.maximum(norm, 1e-6)  # TFLite's floor on the norm (ops/normalization.py)
        y = x / divisor
        moved = (e + np.abs(y) * np.sum(np.abs(y) * e, axis=-1, keepdims=True)) / divisor
        reach = np.sqrt(np.sum(e * e, axis=-1, keepdims=True))
        return np.where((reach > 0) & (reach >= norm), np.inf, moved)
    if node.op == "ATAN2":  # |d atan2(y, x)| = |x dy - y dx| / (x^2 + y^2); no bound where the box reaches 0
        y, x = (np.asarray(v, np.float64) for v in xs)
        with np.errstate(invalid="ignore", divide="ignore"):
            moved = (np.abs(x) * es[0] + np.abs(y) * es[1]) / (x * x + y * y)
        reaches_origin = (es[0] >= np.abs(y)) & (es[1] >= np.abs(x))
        crosses_cut = (es[0] >= np.abs(y)) & (x < 0)
        return np.where(reaches_origin | crosses_cut, np.inf, moved)
    if node.op == "POW":  # monotone in each operand (where defined): the corners of the box
        y = np.power(xs[0], xs[1])
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            corners = [np.abs(np.power(xs[0] + a * es[0], xs[1] + b * es[1]) - y) for a in (-1, 1) for b in (-1, 1)]
        return _unbounded(np.maximum.reduce(corners), y)
    return None


def _parts_rounding(z):
    """What storing complex z (real and imaginary parts) in half moves it, as a bound on |dz|."""
    return rounding(z.real) + rounding(z.imag)


def _rfft2d_bound(node, xs, es):
    """The bound on |dz| of each bin of an RFFT2D (module docstring), its result's rounding
    included; x cropped or zero-padded to the FFT lengths as TFLite's kernel takes it."""
    fft_h, fft_w = (int(v) for v in np.asarray(xs[1]).ravel())

    def window(a):
        a = np.asarray(a, np.float64)[..., :fft_h, :fft_w]
        return np.pad(a, [(0, 0)] * (a.ndim - 2) + [(0, fft_h - a.shape[-2]), (0, fft_w - a.shape[-1])])
    x, e = window(xs[0]), window(es[0])
    rows = np.fft.rfft(x, axis=-1)
    z = np.fft.fft(rows, axis=-2)
    n = fft_h * fft_w
    butterflies = 4 * np.log2(max(n, 2)) * 2.0 ** -24 * np.sqrt(n) * np.sqrt(np.sum(x * x, axis=(-2, -1), keepdims=True))
    between = np.sum(_parts_rounding(rows), axis=-2, keepdims=True) if fft_h > 1 else 0.0
    return np.sum(e, axis=(-2, -1), keepdims=True) + between + butterflies + _parts_rounding(z)


def flip_bound(node, xs, es):
    """A bool-producing or bool-reading node (a comparison, LOGICAL_*, SELECT / SELECT_V2, CAST of
    a bool), or None for another op. A bool tensor's bound is 1 where half storage may flip it
    (its operands' difference within their errors), 0 where not, NaN where unknown; a float
    output of a flipped condition may be either operand: |x - y| plus the larger error."""
    with np.errstate(invalid="ignore"):
        if node.op in COMPARISONS:
            e = es[0] + es[1]
            flips = ((e > 0) & (np.abs(xs[0].astype(np.float64) - xs[1]) <= e)).astype(np.float64)
            return [np.where(np.isnan(e), np.nan, flips)]
        if node.op in ("LOGICAL_AND", "LOGICAL_OR", "LOGICAL_NOT"):
            return [np.broadcast_to(np.maximum(es[0], es[-1]), node.outputs[0].shape)]  # NaN stays NaN
        if node.op in ("SELECT", "SELECT_V2"):
            cond, x, y = xs
            flipped = np.abs(x.astype(np.float64) - y) + np.maximum(es[1], es[2])
            bound = np.where(es[0] > 0, flipped, np.where(cond, es[1], es[2]))
            return [np.broadcast_to(np.where(np.isnan(es[0]), np.nan, bound), node.outputs[0].shape)]
        if node.op == "CAST" and xs[0].dtype == np.bool_:
            return [np.asarray(es[0], np.float64)]
        if node.op in ("REDUCE_ALL", "REDUCE_ANY"):  # may flip where any element it reduces may
            if np.isnan(es[0]).any():
                return [np.full(node.outputs[0].shape, np.nan)]
            return [np.asarray(_run(_plain(node, "REDUCE_MAX"), [es[0].astype(np.float32), xs[1]])[0], np.float64)]
    return None


# Ops reading an index tensor (input k) that picks which values they move: where half storage may
# move an index (an ARG_MAX of values within their errors of each other), what they write there
# may be any value they could pick.
INDEX_INPUT = {"ONE_HOT": 0, "GATHER": 1, "GATHER_ND": 1, "EMBEDDING_LOOKUP": 0}
# The inputs holding the values each writes.
PICKED_INPUTS = {"ONE_HOT": (2, 3), "GATHER": (0,), "GATHER_ND": (0,), "EMBEDDING_LOOKUP": (1,)}


def _arg_extreme_bound(node, xs, es):
    """ARG_MAX / ARG_MIN: where another element lies within the errors of the one picked (half
    storage may pick it instead), how far the index may move (the farthest such rival), else 0;
    NaN where an error is unknown."""
    x, e = np.asarray(xs[0], np.float64), np.broadcast_to(es[0], np.shape(xs[0]))
    axis = int(np.asarray(xs[1]).reshape(-1)[0]) % x.ndim
    picked = np.asarray(ops.run_node(node, xs)[0], np.int64)[..., None]
    x, e = np.moveaxis(x, axis, -1), np.moveaxis(e, axis, -1)
    return [np.where(np.isnan(e).any(axis=-1), np.nan, _farthest_rival(x, e, picked)[..., 0])]


def _farthest_rival(x, e, picked):
    """Per pick (picked [..., k], indices into the last axis of x and its errors e [..., n]): how
    far the farthest element within the two errors of the picked one lies (0: none but itself)."""
    value, error = np.take_along_axis(x, picked, -1), np.take_along_axis(e, picked, -1)
    with np.errstate(invalid="ignore"):
        rivals = np.abs(x[..., None, :] - value[..., :, None]) <= e[..., None, :] + error[..., :, None]
    distance = np.abs(np.arange(x.shape[-1]) - picked[..., :, None])
    return np.where(rivals, distance, 0).max(axis=-1).astype(np.float64)


def _moved_index_mask(node, index_bound):
    """Where an output element of an INDEX_INPUT node reads an index that may move (bool,
    broadcastable to the output)."""
    moved = np.asarray(index_bound) > 0
    out_rank = len(node.outputs[0].shape)
    if node.op == "ONE_HOT":
        return np.expand_dims(moved, ops.generate.one_hot_axis(node, moved.ndim))
    if node.op == "GATHER_ND":
        rows = moved.any(axis=-1)
        return rows.reshape(rows.shape + (1,) * (out_rank - rows.ndim))
    axis = node.options.get("axis", 0) % len(node.inputs[0].shape) if node.op == "GATHER" else 0
    return moved.reshape((1,) * axis + moved.shape + (1,) * (out_rank - axis - moved.ndim))


def _index_reader_bound(node, xs, es):
    """An INDEX_INPUT node: the moved rule where its indices hold, else the spread of the values
    it could pick (max - min, plus their largest error)."""
    k, values = INDEX_INPUT[node.op], PICKED_INPUTS[node.op]
    # the values' errors moved as the values are, by the indices (an int's as float64: a wrap's 2^32
    # passes int32; a float's as float32, the type a float kernel of the reference expects)
    moved = _run(_plain(node), [np.asarray(e, np.float32 if _is_float(x) else np.float64) if j in values else x
                                for j, (x, e) in enumerate(zip(xs, es))])[0]
    if not np.any(es[k] > 0):
        return [moved]
    picked = [(xs[j], es[j]) for j in values if xs[j] is not None]  # floats or ints
    values = np.concatenate([np.asarray(x, np.float64).reshape(-1) for x, _ in picked])
    spread = float(np.ptp(values)) + max(float(np.max(e, initial=0)) for _, e in picked)
    return [np.where(_moved_index_mask(node, es[k]), spread, moved)]


def _topk_bound(node, xs, es):
    """TOPK_V2: each value moves by at most the largest error of its row (an order statistic of
    values each within E of their own); each index may move to any rival of its pick (an element
    of the row within the two errors of it): the farthest such, 0 where none."""
    x, e = np.asarray(xs[0], np.float64), np.broadcast_to(es[0], np.shape(xs[0]))
    values, indices = ops.run_node(node, xs)
    row_error = np.broadcast_to(e.max(axis=-1, keepdims=True), values.shape).astype(np.float64)
    farthest = _farthest_rival(x, e, np.asarray(indices, np.int64))
    unknown = np.isnan(e).any(axis=-1, keepdims=True)
    return [np.where(unknown, np.nan, row_error), np.where(unknown, np.nan, farthest)]


def _unwrapped(moved, reach):
    """A bound `moved` of an int32 result whose exact value could reach `reach` (a magnitude)
    with its inputs moved: where that passes int32, the result may wrap (2^32 apart)."""
    return np.where(reach >= 2.0**31, 2.0**32, moved)


def _integer_sum(xs, es):
    moved = es[0] + es[1]
    return _unwrapped(moved, np.abs(np.asarray(xs[0], np.float64)) + np.abs(np.asarray(xs[1], np.float64)) + moved)


def _integer_product(xs, es):
    a, b = (np.abs(np.asarray(x, np.float64)) for x in xs[:2])
    moved = a * es[1] + b * es[0] + es[0] * es[1]
    return _unwrapped(moved, a * b + moved)


def _integer_quotient(xs, es):
    """FLOOR_DIV / DIV of ints: by an exact divisor b the quotient moves by at most
    floor(E_a / |b|) + 1; by a moved one (never 0: the fuzzer keeps divisors from 0) by as
    much as |a| + E_a (|b| >= 1) plus the quotient itself."""
    a, b = (np.asarray(x, np.float64) for x in xs[:2])
    by_exact = np.where(es[0] > 0, np.floor(es[0] / np.maximum(np.abs(b), 1.0)) + 1, 0.0)
    return np.where(es[1] > 0, 2 * (np.abs(a) + es[0]), by_exact)


def _integer_remainder(xs, es):
    """FLOOR_MOD of ints: a result within (-|b|, |b|), anywhere there once an operand moved."""
    b = np.abs(np.asarray(xs[1], np.float64))
    return np.where((es[0] > 0) | (es[1] > 0), 2 * (b + es[1]), 0.0)


# Integer arithmetic of integers half storage may have moved (a CAST of a rounded float): how far
# its result moves, first order and second; a result that may pass int32 may wrap (2^32).
INTEGER_RULES = {
    "ADD": _integer_sum, "SUB": _integer_sum, "MUL": _integer_product,
    "NEG": lambda xs, es: es[0], "ABS": lambda xs, es: es[0],
    "MAXIMUM": lambda xs, es: np.maximum(es[0], es[1]), "MINIMUM": lambda xs, es: np.maximum(es[0], es[1]),
    "FLOOR_DIV": _integer_quotient, "DIV": _integer_quotient, "FLOOR_MOD": _integer_remainder,
    "CAST": lambda xs, es: es[0],  # int64 <-> int32 of values in range (ARG_MAX's indices): moved alike
}
# Integer reductions: the op run on its input's bounds bounds its output (a sum moves by the sum of
# its terms' moves, a max or min by the largest); a product is not followed.
INTEGER_FOLDS = {"SUM", "REDUCE_MAX", "REDUCE_MIN"}


def _cast_bound(node, x, e):
    """CAST of a float: to float, its own rounding; to an integer type, the most truncation toward
    zero (C++'s static_cast) moves over [x - E, x + E]; to bool, 1 where that interval reaches 0."""
    out = node.outputs[0].dtype
    if _is_float(np.zeros(0, out)):
        return e + rounding(x)
    if out == np.bool_:
        return np.where(np.isnan(e), np.nan, ((e > 0) & (np.abs(x) <= e)).astype(np.float64))
    with np.errstate(invalid="ignore"):
        return np.maximum(np.abs(np.trunc(x + e) - np.trunc(x)), np.abs(np.trunc(x - e) - np.trunc(x)))


def node_bounds(node, xs, es, half_math=False, stored=True):
    """Per output of `node`, the bound on its half-storage error (float64 array of its shape).
    xs: its inputs' float32 values (None where omitted), es: per input the bound on its error
    (zeros for an integer one). NaN where the op has no rule, and for an integer output (an
    ARG_MAX of floats may pick another index: what reads it is not bounded here). stored=False:
    the errors of its inputs carried through it only, its result not rounded to half (what
    tools/fuzz_quant_bounds.py propagates at fp32)."""
    flips = flip_bound(node, xs, es)
    if flips is not None:
        return flips
    if any(e is not None and np.isnan(e).any() for e in es):  # an input no rule bounds: nor this
        return [np.full(t.shape, np.nan) for t in node.outputs]
    if all(x is None or np.asarray(x).dtype.kind in "biu" for x in xs) and not any(np.any(e) for e in es):
        if node.op == "CAST" and _is_float(np.zeros(0, node.outputs[0].dtype)):  # exact ints stored as halves
            with np.errstate(over="ignore"):
                return [stored_error(_run(node, xs)[0])]  # inf past half's range
        return [np.zeros(t.shape) for t in node.outputs]  # integers and bools of exact ones: exact
    if node.op in ("ARG_MAX", "ARG_MIN"):
        return _arg_extreme_bound(node, xs, es)
    if node.op == "TOPK_V2":
        return _topk_bound(node, xs, es)
    if node.op == "DYNAMIC_UPDATE_SLICE" and np.any(es[2] > 0):  # the update may land elsewhere
        return [np.full(node.outputs[0].shape, np.nan)]
    if node.op in INDEX_INPUT and np.asarray(xs[INDEX_INPUT[node.op]]).dtype.kind in "iu":
        return _index_reader_bound(node, xs, es)
    if node.op == "RFFT2D":
        return [_rfft2d_bound(node, xs, es)]
    if node.op in COMPLEX_PARTS:
        return [es[0] + stored * rounding(_run(node, xs)[0])]
    if node.op == "CAST" and _is_float(xs[0]):
        return [_cast_bound(node, np.asarray(xs[0], np.float64), es[0])]
    if not all(_is_float(np.zeros(0, t.dtype)) for t in node.outputs):
        if node.op in INTEGER_RULES and all(np.asarray(x).dtype.kind in "iu" for x in xs[:2] if x is not None):
            return [np.broadcast_to(INTEGER_RULES[node.op](xs, es), node.outputs[0].shape).astype(np.float64)]
        if node.op in MOVES or node.op in INTEGER_FOLDS:  # integers moved (an index that may move, above), or
            # summed or compared: their bounds moved, summed or compared alike
            runtime = [t is not None and not t.is_const for t in node.inputs]
            return _run(_plain(node), [np.asarray(e, np.float32) if r else x for x, e, r in zip(xs, es, runtime)])
        return [np.full(t.shape, np.nan) for t in node.outputs]
    if node.op in SUMS:
        bounds = _sum_bound(node, xs, es, half_math)
    elif node.op in MOVES or node.op in AS_MAXIMUM:
        return _moved_bound(node, xs, es)  # half values moved or picked: no rounding of their own
    elif node.op in UNARY:
        bounds = [_unary_bound(node, xs[0].astype(np.float64), es[0])]
        if node.op in EXACT_UNARY:
            return _unbounded_where_undefined(bounds, es)
    else:
        special = _special_bound(node, [None if x is None else np.asarray(x, np.float64) for x in xs], es)
        if special is None:
            return [np.full(t.shape, np.nan) for t in node.outputs]
        bounds = [special]
    values = _run(node, xs)
    rounds = (2 if half_math and node.op not in HIGHP else 1) * stored  # its arithmetic, then its storage
    return _unbounded_where_undefined([b + rounds * rounding(v) for b, v in zip(bounds, values)], es)


def _unbounded_where_undefined(bounds, es):
    """bounds with inf where a rule's arithmetic met an unbounded input error (inf: any value) and
    gave NaN (inf x 0, inf - inf): NaN says "no rule", which the fuzzer reads as no widening
    (gles-fuzz-graphs --seed 122 --precision fp16 case 731: the SQUARED_DIFFERENCE of an
    L2_NORMALIZATION and its mean, 2 |a - b| (inf + inf) with a = b, where the normalized row is
    0 in LiteRT and may be a unit vector in half storage; its output was judged against the
    float bound)."""
    if not any(e is not None and np.isinf(e).any() for e in es):
        return bounds
    return [np.where(np.isnan(b), np.inf, b) for b in bounds]


def _variable_key(node):
    """(container, shared_name) of the resource variable a READ_VARIABLE / ASSIGN_VARIABLE uses."""
    return node.options["variable"].key


def graph_bounds(graph, value, half_math=False, variables=None):
    """{tensor index: error bound array} of every float tensor of `graph` (its nodes in order),
    value(tensor) giving a tensor's float32 value in the run (a constant's data, else the
    interpreter's). variables: {(container, shared_name): the bound of the value a variable
    holds}, read and updated by the graph's READ_VARIABLE / ASSIGN_VARIABLE nodes (pass the same
    dict to the next invoke's call)."""
    variables = {} if variables is None else variables
    bounds = {}
    for t in graph.inputs:
        bounds[t.index] = stored_error(value(t)) if _is_float(value(t)) else np.zeros(t.shape)

    def error_of(t):
        if t is None:
            return None
        if t.index not in bounds:  # a constant: rounded once when packed
            bounds[t.index] = stored_error(value(t)) if _is_float(value(t)) else np.zeros(np.shape(value(t)))
        return bounds[t.index]

    for node in graph.nodes:
        if node.op == "READ_VARIABLE":
            out = node.outputs[0]
            held = variables.get(_variable_key(node))
            bounds[out.index] = rounding(np.asarray(value(out), np.float64)) if held is None else held
            continue
        xs = [None if t is None else value(t) for t in node.inputs]
        es = [error_of(t) for t in node.inputs]
        if node.op == "ASSIGN_VARIABLE":
            variables[_variable_key(node)] = es[1] if _is_float(xs[1]) else np.full(np.shape(xs[1]), np.nan)
            continue
        for t, bound in zip(node.outputs, node_bounds(node, xs, es, half_math)):
            bounds[t.index] = bound
    return bounds


def tensor_bounds(data, steps, precision):
    """Per invoke of `steps` (tools/fuzz_graphs.case_inputs: inputs, None for a reset of the
    resource variables, a Resize), {model tensor index: the largest half-storage error bound of
    its elements} of every tensor (NaN where some op on its way has no rule or it is an integer;
    inf where half storage may take a function past its domain: any finite value). None at a
    precision without half storage."""
    runs = _bounded_runs(data, steps, precision)
    return None if runs is None else runs[1]


def output_bounds(data, steps, precision):
    """tensor_bounds of the model's outputs, per invoke, in one flat list as
    tools/fuzz_graphs.run_steps returns outputs (0 for NaN: no bound widens the float one)."""
    runs = _bounded_runs(data, steps, precision)
    if runs is None:
        return None
    outputs, per_invoke = runs
    bounds = [b.get(t, 0.0) for b in per_invoke for t in outputs]
    return [0.0 if np.isnan(b) else b for b in bounds]


def _bounded_runs(data, steps, precision):
    """(the model's output tensor indices, tensor_bounds), or None (tensor_bounds says when)."""
    if precision not in HALF_PRECISIONS:
        return None
    interpreter = Interpreter(model_content=data, cpu_backend="reference", experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    per_invoke, variables = [], {}  # variables: graph_bounds'; kept from invoke to invoke
    for inputs in steps:
        if inputs is None:  # reset_all_variables zeroes variable tensors (no rule here): resource
            interpreter.reset_all_variables()  # variables keep their values, in TFLite as here
            continue
        if not isinstance(inputs, list):  # a Resize (tools/fuzz_graphs.py): new shapes, same graph
            for detail, shape in zip(interpreter.get_input_details(), inputs.shapes):
                interpreter.resize_tensor_input(detail["index"], shape)
            interpreter.allocate_tensors()
            continue
        for detail, x in zip(interpreter.get_input_details(), inputs):
            interpreter.set_tensor(detail["index"], x)
        interpreter.invoke()
        value = lambda t: t.data if t.is_const else interpreter.get_tensor(t.index)
        bounds = graph_bounds(interpreter._main.graph, value, precision == "fp16", variables)
        per_invoke.append({k: float(np.max(b, initial=0.0)) for k, b in bounds.items()})
    return [t.index for t in interpreter._main.graph.outputs], per_invoke
