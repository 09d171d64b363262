"""One-op cases fed NaN, +-inf and +-FLT_MAX (issue 17, item 5): the reference must put NaN where
LiteRT's builtin kernels do (tests/ops/test_nonfinite.py), the GPU where the reference does
(tests/gpu/test_nonfinite.py). LiteRT's semantics, measured on ai-edge-litert 2.3.0:
- RELU family, fused clamps (CONV_2D, DEPTHWISE_CONV_2D, ADD, MUL, pools): std::min(std::max(x, lo),
  hi), NaN in, NaN out; +-inf clamp to the bounds (fused RELU / NONE: +-FLT_MAX).
- LEAKY_RELU / PRELU, HARD_SWISH, LOGISTIC, TANH, SOFTMAX, MEAN, AVERAGE_POOL_2D, resizes: plain
  arithmetic, NaN propagates (-inf * 0 in HARD_SWISH and inf - inf in a bilinear blend make NaN).
- L2_NORMALIZATION: x / std::max(sqrt(sum x^2), 1e-6): a NaN anywhere in a row makes the row NaN
  (std::max keeps a NaN norm); +-inf or +-FLT_MAX (its square overflows) make the norm inf, so
  +-inf / inf is NaN and every finite value 0.
- MAXIMUM / MINIMUM: a > b ? a : b and a < b ? a : b: NaN wins as the second operand only.
- MAX_POOL_2D: acc = lowest float, acc = std::max(acc, tap): a NaN tap never wins; a window of
  NaNs gives -FLT_MAX.
- REDUCE_MAX / REDUCE_MIN: acc = lowest (max) float, then acc = x < acc ? acc : x (x > acc) in
  row-major order: a NaN is replaced by the next element, only a NaN last survives.
- POW of two runtime tensors: C's powf (x^0 = 1 and 1^y = 1 even for NaN, 0^-y = +inf, a negative
  base to a non-integer power NaN, to an integer one signed).
"""
import numpy as np

from tests.oplib import VALID, In, conv_options

F32 = np.float32
NAN, INF, BIG = np.nan, np.inf, np.finfo(F32).max
SPECIALS = [NAN, INF, -INF, BIG, -BIG, -4.0, -1.5, -0.0, 0.0, 0.5, 2.0, 7.0]
# Pairs of taps: each output of a 1x2 window (pools) or of a pair (MEAN) sees one.
PAIRS = [(NAN, 1.0), (1.0, NAN), (NAN, NAN), (INF, 1.0), (-INF, 1.0), (INF, -INF), (NAN, -INF), (-INF, NAN),
         (NAN, INF), (BIG, BIG), (-BIG, -BIG), (-2.0, 3.0)]


def specials(shape, values=SPECIALS):
    """An array of `shape` (last dimension a multiple of 4 plus a padded lane) cycling through values."""
    n = int(np.prod(shape))
    return np.resize(np.array(values, F32), n).reshape(shape)


def _x(values=SPECIALS):
    return specials((1, 2, len(values), 1), values)


def _pairs():
    return np.array(PAIRS, F32).reshape(1, 1, 2 * len(PAIRS), 1)


def _pool(act):
    return dict(padding=VALID, filter_height=1, filter_width=2, stride_h=1, stride_w=2, fused_activation_function=act)


def cases():
    """(id, op, inputs, options)."""
    out = []
    for op in ["RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LOGISTIC", "TANH"]:
        out.append((op, op, [In(_x())], None))
    # Without +-FLT_MAX: LiteRT's HARD_SWISH scales by 1/6 before (NEON path) or after (its scalar
    # tail) the product, FLT_MAX becomes FLT_MAX or inf depending on its position.
    out.append(("HARD_SWISH", "HARD_SWISH", [In(_x([v for v in SPECIALS if abs(v) != BIG]))], None))
    out.append(("LEAKY_RELU", "LEAKY_RELU", [In(_x())], dict(alpha=0.2)))
    out.append(("PRELU", "PRELU", [In(_x()), In(np.array([[[0.25]]], F32), const=True)], None))
    x4 = specials((1, 3, 4, 4))
    for act in [1, 2, 3]:
        w = np.eye(4, dtype=F32).reshape(4, 1, 1, 4)
        out.append((f"CONV_2D-act{act}", "CONV_2D", [In(x4), In(w, const=True), In(np.zeros(4, F32), const=True)],
                    conv_options((1, 1), (1, 1), VALID, act)))
        dw = np.ones((1, 1, 1, 4), F32)
        out.append((f"DEPTHWISE-act{act}", "DEPTHWISE_CONV_2D",
                    [In(x4), In(dw, const=True), In(np.zeros(4, F32), const=True)],
                    dict(conv_options((1, 1), (1, 1), VALID, act), depth_multiplier=1)))
        for op in ["ADD", "MUL"]:
            other = np.full((1, 1, 1, 4), 0.0 if op == "ADD" else 1.0, F32)
            out.append((f"{op}-act{act}", op, [In(x4), In(other, const=True)], dict(fused_activation_function=act)))
    for op in ["MAXIMUM", "MINIMUM"]:
        a, b = _x(), _x(SPECIALS[::-1])
        out.append((op, op, [In(a), In(b)], None))
        out.append((f"{op}-const", op, [In(a), In(np.full((1, 1, 1, 1), 1.0, F32), const=True)], None))
        out.append((f"{op}-const-first", op, [In(np.full((1, 1, 1, 1), 1.0, F32), const=True), In(a)], None))
    for act in [0, 1, 3]:
        out.append((f"MAX_POOL_2D-act{act}", "MAX_POOL_2D", [In(_pairs())], _pool(act)))
        out.append((f"AVERAGE_POOL_2D-act{act}", "AVERAGE_POOL_2D", [In(_pairs())], _pool(act)))
    pairs = np.array(PAIRS, F32).reshape(1, len(PAIRS), 2, 1)
    for op in ["MEAN", "REDUCE_MAX", "REDUCE_MIN"]:
        out.append((op, op, [In(pairs), In(np.array([2], np.int32), const=True)], dict(keep_dims=True)))
    out.append(("POW", "POW", [In(_x()), In(_x(SPECIALS[::-1]))], None))
    out.append(("SOFTMAX", "SOFTMAX", [In(np.array(PAIRS, F32).reshape(len(PAIRS), 2))], dict(beta=1.0)))
    out.append(("L2_NORMALIZATION", "L2_NORMALIZATION", [In(np.array(PAIRS, F32).reshape(len(PAIRS), 2))], None))
    out.append(("L2_NORMALIZATION-rows", "L2_NORMALIZATION", [In(specials((3, 5)))], None))
    grid = np.array([[NAN, 1.0, 2.0], [INF, -INF, 3.0], [BIG, -BIG, 0.5]], F32).reshape(1, 3, 3, 1)
    size = In(np.array([6, 6], np.int32), const=True)
    for ac, hp in [(False, False), (True, False), (False, True)]:
        opts = dict(align_corners=ac, half_pixel_centers=hp)
        out.append((f"RESIZE_NEAREST-ac{int(ac)}hp{int(hp)}", "RESIZE_NEAREST_NEIGHBOR", [In(grid), size], opts))
        # Legacy bilinear (neither flag) weighs the far corner by 0 where LiteRT skips it: see
        # docs/reliability.md (left to do).
        if ac or hp:
            out.append((f"RESIZE_BILINEAR-ac{int(ac)}hp{int(hp)}", "RESIZE_BILINEAR", [In(grid), size], opts))
    return out
