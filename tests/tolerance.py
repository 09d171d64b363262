"""How far two evaluations of one op may differ, derived from the numbers rather than tuned on one
machine.

Two kinds of bound:
- Sums (convolutions, fully connected, average pooling, mean / sum, cumulative sums): any order
  of evaluating a sum of K products in a precision of unit roundoff u, FMA or not, lands within
  gamma(K + 1) x sum|terms| of the exact value (Higham, Accuracy and Stability of Numerical
  Algorithms, 3.1), so two such evaluations (ours and LiteRT's, or the GPU's and the reference's)
  differ by at most twice that, element by element. sum|terms| is the op itself run on |inputs|
  without its clamp (which is 1-Lipschitz and can only shrink a difference). A one-float32-step
  difference at an accumulator of 1024 that cancels down to an output of 6 is inside it; a wrong
  tap is not. The normalizations (L2, local response) divide by a function of a sum of squares:
  their K is the count of steps whose relative error reaches the output, and sum|terms| is |output|.
- Everything else: a number of ulps (float32 or half spacing) of the output's largest magnitude:
  different libm / polynomial approximations and orders of a handful of operations.
A floor of a few smallest normals covers hardware that flushes subnormal results to zero.
"""
import dataclasses

import numpy as np

from gles_delegate import ops
from gles_delegate.ops import reduce_window

F32_U, F16_U = 2.0 ** -24, 2.0 ** -11  # unit roundoff: half the spacing at 1.0
F32_TINY, F16_TINY = float(np.finfo(np.float32).tiny), float(np.finfo(np.float16).tiny)
# Elementwise math: 128 float32 ulps of the output's magnitude (0.8e-5 to 1.5e-5 of it); half
# storage 10 half ulps (1e-2 to 2e-2 of it), once for the stored input and once for the output.
F32_ULPS, F16_ULPS = 128, 10


def gamma(terms, u):
    """Higham's gamma_n = n u / (1 - n u): the relative error bound of an n-step float sum (of an
    array of step counts: element by element)."""
    nu = np.asarray(terms, np.float64) * u
    result = np.where(nu < 1, nu / (1 - np.minimum(nu, 0.5)), np.inf)
    return float(result) if result.ndim == 0 else result


def _window_terms(node, inputs):
    options = node.options
    return options["filter_height"] * options["filter_width"]


def _reduced_terms(node, inputs):
    shape = np.shape(inputs[0])
    axes = {int(a) % len(shape) for a in np.asarray(inputs[1]).reshape(-1)} if shape else set()
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


def _contracted_terms(node, inputs):
    """BATCH_MATMUL: the contracted dimension of the left operand (its rows with adj_x)."""
    lhs_shape = np.shape(inputs[0])
    return lhs_shape[-2] if node.options.get("adj_x", False) else lhs_shape[-1]


def _scan_terms(node, inputs):
    """CUMSUM: an element sums up to its whole axis."""
    shape = np.shape(inputs[0])
    return shape[int(np.asarray(inputs[1]).reshape(-1)[0]) % len(shape)]


def _channel_terms(node, inputs):
    """L2_NORMALIZATION: C squares summed, then a square root (which halves the sum's relative
    error) and a division: C + 1 steps cover it."""
    return np.shape(inputs[0])[-1] + 1


def _lrn_terms(node, inputs):
    """LOCAL_RESPONSE_NORMALIZATION, per element: out = x s^-beta with s = bias + alpha W (W the
    window's sum of squares). LiteRT keeps one running window sum per pixel, adding the square
    entering and subtracting the one leaving, so its error in s grows with every square of the
    channel axis it passed (Sigma, up to (4r + 3) alpha Sigma u), not with W; ours sums each
    window (2r + 1) alpha W u. A relative error e in s is beta e in the output, plus a few
    roundings (squares, the product): the step count whose 2 gamma bounds both. And s^-beta, which
    GLSL ES 3.1 computes as exp2(-beta log2 s) (spec 4.7.1: log2 to 3 ulps of log2 s, exp2 to
    3 + 2 |its argument| ulps), off by up to 3 + (2 + 3 ln 2) beta |log2 s| ulps: 74 u at s = 1e34."""
    x = np.asarray(inputs[0], np.float64)
    depth = x.shape[-1]
    radius = min(int(node.options.get("radius", 0)), depth)
    bias, alpha, beta = (abs(float(node.options.get(k, 0.0))) for k in ("bias", "alpha", "beta"))
    squares = x * x
    padded = np.pad(squares, [(0, 0)] * (x.ndim - 1) + [(radius, radius)])
    window = np.lib.stride_tricks.sliding_window_view(padded, 2 * radius + 1, axis=-1).sum(-1)
    column = squares.sum(-1, keepdims=True)
    s = np.abs(float(node.options.get("bias", 0.0)) + float(node.options.get("alpha", 0.0)) * window)
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = ((4 * radius + 3) * alpha * column + (2 * radius + 1) * alpha * window + 2 * (bias + s)) / s
    with np.errstate(divide="ignore", invalid="ignore"):
        pow_ulps = 3 + (2 + 3 * np.log(2)) * beta * np.abs(np.log2(s))
        steps = np.ceil(beta * np.nan_to_num(relative, nan=np.inf) / 2 + pow_ulps) + 3
    # An infinite or NaN s (an inf or NaN square in the window) gives an exact 0 (x * inf^-beta)
    # or NaN, which the comparison takes as NaN: no rounding to bound.
    return np.where(np.isfinite(s), steps, 3)


def _window_reduction_terms(node, inputs):
    """[STABLEHLO_]REDUCE_WINDOW: a sum or a product of its window's taps (a product of n factors
    is within gamma(n) of exact too, relative to |product|); None for max / min, exact."""
    reducer = reduce_window.reducer(node)
    if reducer not in ("add", "mul"):
        return None
    geometry, _ = reduce_window.geometry_reason(node, np.shape(inputs[0]), inputs)
    return geometry.taps


def _filter_terms(axes):
    return lambda node, inputs: int(np.prod([np.shape(inputs[1])[a] for a in axes]))


# op -> (fn(node, inputs) -> how many products or addends each output element sums at most (None:
# this node sums nothing), the
# operands that must be float for the sum to be a float one: a hybrid or quantized node sums
# integers exactly and only rounds its final scaling, which the default ulp bound covers).
SUM_TERMS = {
    "CONV_2D": (_filter_terms((1, 2, 3)), (0, 1)),
    "CONV_3D": (_filter_terms((0, 1, 2, 3)), (0, 1)),
    "CONV_3D_TRANSPOSE": (_filter_terms((0, 1, 2, 4)), (1, 2)),
    "DEPTHWISE_CONV_2D": (_filter_terms((1, 2)), (0, 1)),
    "FULLY_CONNECTED": (_filter_terms((1,)), (0, 1)),
    "TRANSPOSE_CONV": (_filter_terms((1, 2, 3)), (1, 2)),
    "Convolution2DTransposeBias": (_filter_terms((1, 2, 3)), (0, 1)),
    "BATCH_MATMUL": (_contracted_terms, (0, 1)),
    "AVERAGE_POOL_2D": (_window_terms, (0,)),
    "L2_POOL_2D": (_window_terms, (0,)),  # a mean square, then a square root (halves its error)
    "MEAN": (_reduced_terms, (0,)),
    "SUM": (_reduced_terms, (0,)),
    "CUMSUM": (_scan_terms, (0,)),
    "L2_NORMALIZATION": (_channel_terms, (0,)),
    "LOCAL_RESPONSE_NORMALIZATION": (_lrn_terms, (0,)),
    "STABLEHLO_REDUCE_WINDOW": (_window_reduction_terms, (0,)),
    "REDUCE_WINDOW": (_window_reduction_terms, (0,)),
}


def _is_float(value):
    return value is not None and np.asarray(value).dtype.kind == "f"


def sum_magnitudes(node, inputs):
    """sum|terms| of every output element of a float summing node (SUM_TERMS), float64: the
    node's reference kernel on |inputs| (float inputs only) with no fused activation. One array
    per output, or None when the node is not a float sum."""
    if node.op not in SUM_TERMS or not all(_is_float(inputs[k]) for k in SUM_TERMS[node.op][1]) \
            or SUM_TERMS[node.op][0](node, inputs) is None:
        return None
    unclamped = dataclasses.replace(node, options={**node.options, "fused_activation_function": 0})
    absolute = [np.abs(x) if _is_float(x) else x for x in inputs]
    return [np.abs(out.astype(np.float64)) for out in ops.run_node(unclamped, absolute)]


def sum_bound(node, inputs, u=F32_U):
    """Per-element bounds (one float64 array per output) on |a - b| between two evaluations of a
    summing node in unit roundoff u (both accumulate in it), or None when the node is not one."""
    magnitudes = sum_magnitudes(node, inputs)
    if magnitudes is None:
        return None
    terms = SUM_TERMS[node.op][0](node, inputs) + 1  # + the bias, or the division of a mean
    tiny = F32_TINY if u == F32_U else F16_TINY
    return [2 * gamma(terms, u) * m + 2 * terms * tiny for m in magnitudes]


def ulp_bound(reference, ulps=F32_ULPS, dtype=np.float32):
    """`ulps` spacings of `dtype` at max|reference| (finite values), plus two smallest normals
    (a result flushed to zero): the allowed max abs error of a non-summing op."""
    finite = np.abs(reference[np.isfinite(reference)]).astype(np.float64)
    scale = float(np.max(finite, initial=0.0))
    info = np.finfo(dtype)
    top = dtype(min(scale, float(info.max)))
    # The spacing above the largest finite value is infinite (the next value is inf): use the
    # spacing of its binade, the distance down to the value before it.
    spacing = float(top) - float(np.nextafter(top, dtype(0))) if top == info.max else float(np.spacing(top))
    return ulps * spacing + 2 * float(info.tiny)
