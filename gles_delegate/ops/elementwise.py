"""Unary elementwise ops: activations, math functions, CAST, LOGICAL_NOT and BUCKETIZE, with
TFLite's semantics (NaN handling, activation bounds, saturating float -> integer CAST).

Float kernels come from one table of functions. Their int8 / uint8 versions follow the kernel
TFLite runs: the RELU family requantizes then clamps (QuantizedReluX); LOGISTIC / TANH / ELU /
GELU look up a 256-entry table built from the float function (PopulateLookupTable); LEAKY_RELU
and PRELU pick one of two fixed-point multipliers by sign. HARD_SWISH uses the same table: TFLite
evaluates it in 16-bit fixed point, which lands within one quantum of the exact table.
"""
import functools

import numpy as np

from .checks import Unimplemented, node_error, quantization_reason, with_arity
from .common import (inv_sqrt_quantized_multiplier, multiply_by_quantized_multiplier, quantize_bound,
                     quantized_multiplier, round_half_away, saturate, scale_of, zero_point_of)

F32, I8, I32 = np.dtype(np.float32), np.dtype(np.int8), np.dtype(np.int32)
QUANTIZED = {np.dtype(np.int8), np.dtype(np.uint8)}
C64 = np.dtype(np.complex64)
CAST_DTYPES = {np.dtype(t) for t in (np.float32, np.float16, np.int32, np.int64, np.uint8, np.int8, np.bool_, C64)}

# The clamp of each RELU-family op, in real values.
RELU_BOUNDS = {"RELU": (0.0, np.inf), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0), "RELU_0_TO_1": (0.0, 1.0)}

# Coefficients (highest power first) of the Chebyshev-fitted erfc of Press et al., Numerical
# Recipes 6.2: erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), z >= 0; relative error < 1.2e-7
# everywhere, i.e. about one float32 ulp, including far in the tail.
ERFC_COEFFICIENTS = (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
                     0.09678418, 0.37409196, 1.00002368, -1.26551223)
SQRT_2_OVER_PI = np.float32(np.sqrt(2 / np.pi))


def erfc(x):
    """Complementary error function of a float64 array (numpy has none)."""
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    tail = t * np.exp(-z * z + np.polyval(ERFC_COEFFICIENTS, t))
    return np.where(x >= 0, tail, 2.0 - tail)


def gelu(x, approximate):
    """GELU of float32 x. TFLite's exact form is 0.5 x erfc(-x / sqrt 2) (not 1 + erf, which
    cancels catastrophically for large negative x); the approximate one uses tanh."""
    if approximate:
        return np.float32(0.5) * x * (np.float32(1) + np.tanh(SQRT_2_OVER_PI * (x + np.float32(0.044715) * x * x * x)))
    wide = x.astype(np.float64)
    return (0.5 * wide * erfc(-wide / np.sqrt(2.0))).astype(np.float32)


def logistic(x):
    """1 / (1 + e^-x), evaluated in float64 so the tails keep their (denormal) float32 values."""
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)


def hard_swish(x):
    """x * relu6(x + 3) / 6: -inf gives NaN (-inf * 0), as in TFLite."""
    return x * np.clip(x + np.float32(3), 0, 6) / np.float32(6)


def round_half_even(x):
    """TFLite's RoundToNearest: floor, plus one when the rest is above one half or is one half
    on an odd floor. Unlike np.rint, -0.4 gives +0 (floor -1, plus one), as in TFLite; NaN and
    +-inf stay themselves."""
    floor = np.floor(x)
    rest = x - floor
    down = (rest < 0.5) | ((rest == 0.5) & (np.fmod(floor, 2) == 0))
    return np.where(down, floor, floor + np.float32(1))


def in_double(function):
    """The float function of a libm call TFLite makes in float (sinf, cosf): evaluated in
    float64 and rounded once, i.e. the correctly rounded float32 result that glibc's sinf gives."""
    return lambda x, options: function(x.astype(np.float64))


def elu(x):
    return np.where(x < 0, np.expm1(x), x)


def leaky_relu(x, alpha):
    # TFLite: x > 0 ? x : alpha * x (also right for alpha > 1 or < 0, unlike max(x, alpha x)).
    return np.where(x > 0, x, x * np.float32(alpha))


def clamp(low, high):
    """The float function of a RELU-family op: np.clip keeps NaN, as LiteRT does."""
    return lambda x, options: np.clip(x, low, high)


# op: fn(float32 array, builtin options) -> float32 array
FLOAT_FUNCTIONS = {
    **{op: clamp(low, high) for op, (low, high) in RELU_BOUNDS.items()},
    "LEAKY_RELU": lambda x, options: leaky_relu(x, options.get("alpha", 0.0)),
    "LOGISTIC": lambda x, options: logistic(x),
    "TANH": lambda x, options: np.tanh(x),
    "EXP": lambda x, options: np.exp(x),
    "LOG": lambda x, options: np.log(x),
    "SQRT": lambda x, options: np.sqrt(x),
    "RSQRT": lambda x, options: np.float32(1) / np.sqrt(x),
    "ABS": lambda x, options: np.abs(x),
    "NEG": lambda x, options: np.negative(x),
    "SQUARE": lambda x, options: x * x,
    "SIGN": lambda x, options: np.sign(x),  # NaN stays NaN and -0 gives +0, as in LiteRT
    "SIN": in_double(np.sin),
    "COS": in_double(np.cos),
    "FLOOR": lambda x, options: np.floor(x),
    "CEIL": lambda x, options: np.ceil(x),
    "ROUND": lambda x, options: round_half_even(x),
    "HARD_SWISH": lambda x, options: hard_swish(x),
    "ELU": lambda x, options: elu(x),
    "GELU": lambda x, options: gelu(x, options.get("approximate", False)),
}
QUANTIZED_BY_TABLE = {"LOGISTIC", "TANH", "HARD_SWISH", "ELU", "GELU"}
QUANTIZED_OPS = set(RELU_BOUNDS) | QUANTIZED_BY_TABLE | {"LEAKY_RELU", "PRELU", "RSQRT"}
# The ops TFLite also runs on int32 (abs, neg: wrapping, so |INT_MIN| and -INT_MIN are INT_MIN).
INT32_FUNCTIONS = {"ABS": np.abs, "NEG": np.negative}

# The quantized ops TFLite runs on int8 only (elementwise.cc: RSQRT's int8 path is fixed point).
INT8_ONLY = {"RSQRT"}
RSQRT_SHIFT = 20  # elementwise.cc: keeps the intermediate 1 / sqrt an integer


# -- float kernels --------------------------------------------------------------------------
def float_unary(node, inputs):
    """A unary float32 op: [x] -> [f(x)] of the same shape."""
    x = np.asarray(inputs[0])
    with np.errstate(all="ignore"):  # log(0), sqrt(-1), exp overflow: IEEE results, as in C++
        return [np.asarray(FLOAT_FUNCTIONS[node.op](x, node.options), dtype=F32)]


def prelu_float(x, alpha):
    return np.where(x >= 0, x, x * alpha)


# -- int8 / uint8 kernels -------------------------------------------------------------------
def quantized_relu(node, x):
    """QuantizedReluX: requantize by in_scale / out_scale, then clamp to the op's bounds
    quantized on the output scale (float32 arithmetic, roundf, as TFLite computes them)."""
    inp, out = node.inputs[0], node.outputs[0]
    low, high = RELU_BOUNDS[node.op]
    info = np.iinfo(out.dtype)
    qmin = max(info.min, quantize_bound(low, out))
    qmax = info.max if high == np.inf else min(info.max, quantize_bound(high, out))
    multiplier, shift = quantized_multiplier(scale_of(inp) / scale_of(out))
    requantized = multiply_by_quantized_multiplier(x.astype(np.int64) - zero_point_of(inp), multiplier, shift)
    return np.clip(requantized + zero_point_of(out), qmin, qmax).astype(out.dtype)


def lookup_table(node):
    """PopulateLookupTable: every input value dequantized in float32, mapped through the float
    function, requantized with round-half-away and clamped. Indexed by (q - dtype min)."""
    inp, out = node.inputs[0], node.outputs[0]
    info = np.iinfo(inp.dtype)
    real = np.float32(scale_of(inp)) * (np.arange(info.min, info.max + 1) - zero_point_of(inp)).astype(np.float32)
    with np.errstate(all="ignore"):
        transformed = np.asarray(FLOAT_FUNCTIONS[node.op](real, node.options), dtype=F32)
    rescaled = round_half_away(transformed * (np.float32(1) / np.float32(scale_of(out))))
    return saturate(rescaled + zero_point_of(out), out.dtype)


def quantized_by_table(node, x):
    return lookup_table(node)[x.astype(np.int64) - np.iinfo(x.dtype).min]


def _sign_select(node, centered, positive_multiplier, negative_value, negative_multiplier):
    """Output zero point + either centered x rescaled (x >= 0) or `negative_value` rescaled."""
    positive = multiply_by_quantized_multiplier(centered, *positive_multiplier)
    negative = multiply_by_quantized_multiplier(negative_value, *negative_multiplier)
    out = node.outputs[0]
    return saturate(np.where(centered >= 0, positive, negative) + zero_point_of(out), out.dtype)


def quantized_leaky_relu(node, x):
    """QuantizeLeakyRelu: identity multiplier in/out for x >= 0, alpha * in/out below."""
    inp, out = node.inputs[0], node.outputs[0]
    alpha = node.options.get("alpha", 0.0)
    centered = x.astype(np.int64) - zero_point_of(inp)
    return _sign_select(node, centered, quantized_multiplier(scale_of(inp) / scale_of(out)), centered,
                        quantized_multiplier(scale_of(inp) * alpha / scale_of(out)))


def quantized_prelu(node, x, alpha):
    """Quantized PRELU: x >= 0 rescales by in/out; below, the product (x - zp) (alpha - zp_alpha)
    rescales by in * alpha / out."""
    inp, alpha_tensor, out = node.inputs[0], node.inputs[1], node.outputs[0]
    centered = x.astype(np.int64) - zero_point_of(inp)
    product = centered * (alpha.astype(np.int64) - zero_point_of(alpha_tensor))
    return _sign_select(node, np.broadcast_to(centered, product.shape),
                        quantized_multiplier(scale_of(inp) / scale_of(out)), product,
                        quantized_multiplier(scale_of(inp) * scale_of(alpha_tensor) / scale_of(out)))


@functools.lru_cache(maxsize=64)
def rsqrt_table(in_scale, in_zero, out_scale, out_zero):
    """RsqrtEvalQuantizedInt8 for every int8 input q >= the zero point (indexed by q + 128):
    1 / sqrt(q - zp) in fixed point (inv_sqrt_quantized_multiplier), rescaled by
    1 / (sqrt(in_scale) * out_scale); q == zp gives 127. Below the zero point: 0 (invoke refuses).
    Cached by the quantization: the fixed point takes milliseconds, an invoke should not."""
    # 1. / (std::sqrt(float) * float): the product in float32, the quotient in double.
    multiplier, shift = quantized_multiplier(1.0 / float(np.sqrt(np.float32(in_scale)) * np.float32(out_scale)))
    table = np.zeros(256, np.int64)
    for q in range(in_zero, 128):
        value = q - in_zero
        if value == 0:
            table[q + 128] = 127
            continue
        inv_sqrt, inv_shift = inv_sqrt_quantized_multiplier(value)
        scaled = multiply_by_quantized_multiplier(1, inv_sqrt, inv_shift + RSQRT_SHIFT)
        table[q + 128] = multiply_by_quantized_multiplier(scaled, multiplier, shift - RSQRT_SHIFT) + out_zero
    table = np.clip(table, -128, 127).astype(np.int8)
    table.flags.writeable = False
    return table


def quantized_rsqrt(node, x):
    inp, out = node.inputs[0], node.outputs[0]
    if x.size and int(x.min()) < zero_point_of(inp):
        raise node_error(node, f"RSQRT is only defined for positive values: input {int(x.min())} is below "
                               f"the zero point {zero_point_of(inp)}")
    table = rsqrt_table(float(scale_of(inp)), zero_point_of(inp), float(scale_of(out)), zero_point_of(out))
    return table[x.astype(np.int64) + 128]


def quantized_unary(node, x):
    if node.op == "RSQRT":
        return quantized_rsqrt(node, x)
    if node.op in RELU_BOUNDS:
        return quantized_relu(node, x)
    if node.op == "LEAKY_RELU":
        return quantized_leaky_relu(node, x)
    return quantized_by_table(node, x)


# -- kernels --------------------------------------------------------------------------------
def unary(node, inputs):
    """Any unary activation / math op, float32 or (for QUANTIZED_OPS) int8 / uint8."""
    x = np.asarray(inputs[0])
    if x.dtype in QUANTIZED:
        return [np.asarray(quantized_unary(node, x))]
    if x.dtype == I32:
        with np.errstate(over="ignore"):
            return [np.asarray(INT32_FUNCTIONS[node.op](x))]
    return float_unary(node, inputs)


def prelu(node, inputs):
    """PRELU: x [..] and alpha broadcastable to x's shape (usually [1, 1, C] or [C])."""
    x, alpha = (np.asarray(v) for v in inputs)
    if x.dtype in QUANTIZED:
        return [np.asarray(quantized_prelu(node, x, alpha))]
    with np.errstate(over="ignore"):
        return [np.asarray(prelu_float(x, alpha), dtype=F32)]


def float_to_integer(x, dtype):
    """LiteRT's float -> integer CAST: truncate toward zero, saturate at the type's bounds,
    NaN becomes the maximum."""
    info = np.iinfo(dtype)
    wide = x.astype(np.float64)
    high, low = ~(wide < info.max), wide <= info.min
    result = np.asarray(np.trunc(np.where(high | low, 0.0, wide)), dtype=dtype)
    result[high] = info.max
    result[low] = info.min
    return result


def cast(node, inputs):
    """CAST: integer -> integer wraps (static_cast), x -> bool is x != 0, float -> integer
    saturates (float_to_integer), float16 <-> float32 rounds to nearest even. complex64 -> T
    casts the real part (cast.cc: static_cast<T>(std::real(a)); to an integer it saturates here,
    where LiteRT's out-of-range result is undefined), T -> complex64 is (float(x), 0)."""
    x, target = np.asarray(inputs[0]), node.outputs[0].dtype
    if x.dtype == C64:
        x = x.real if target != C64 else x
    elif target == C64:
        x = x.astype(F32)  # one rounding, as C++'s int -> float before std::complex<float>(x)
    if x.dtype.kind == "f" and target.kind in "iu":
        return [float_to_integer(x, target)]
    with np.errstate(over="ignore"):  # beyond 65504 -> float16 gives inf, as Eigen::half does
        return [np.asarray(x.astype(target))]


def logical_not(node, inputs):
    return [np.asarray(np.logical_not(inputs[0]))]


BUCKETIZE_DTYPES = {np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64)}


def bucketize(node, inputs):
    """BUCKETIZE: x (float32 / float64 / int32 / int64) -> int32 of x's shape, the number of
    boundaries (the option, ascending float32) <= each value: std::upper_bound, which compares
    an integer as the float it converts to (a large int32 rounds to its nearest float32) and a
    float64 with the boundaries widened; NaN goes past every boundary."""
    x = np.asarray(inputs[0])
    boundaries = np.asarray(node.options.get("boundaries", ()), np.float32)
    if x.dtype.kind == "f" and x.dtype != F32:
        boundaries = boundaries.astype(x.dtype)
    else:
        x = x.astype(F32)
    return [np.searchsorted(boundaries, x, side="right").astype(np.int32).reshape(np.shape(x))]


# -- support checks (the arity is with_arity's) ---------------------------------------------
def unary_support(node):
    """Why a unary op cannot run this node, or None."""
    inp, out = node.inputs[0], node.outputs[0]
    if inp.dtype != out.dtype:
        return f"{node.op} input {inp.dtype} and output {out.dtype} differ"
    if inp.dtype in QUANTIZED and node.op in QUANTIZED_OPS and (inp.dtype == I8 or node.op not in INT8_ONLY):
        return quantization_reason(node, [inp, out])
    if inp.dtype != F32 and not (inp.dtype == I32 and node.op in INT32_FUNCTIONS):
        return Unimplemented(f"{node.op} on {inp.dtype} is not supported")
    return None


def prelu_support(node):
    """Why PRELU cannot run this node, or None."""
    (inp, alpha), out = node.inputs, node.outputs[0]
    if not inp.dtype == alpha.dtype == out.dtype:
        return f"PRELU input, alpha and output dtypes differ ({inp.dtype}, {alpha.dtype}, {out.dtype})"
    try:
        broadcast = np.broadcast_shapes(inp.shape, alpha.shape)
    except ValueError:
        broadcast = None
    if broadcast != tuple(inp.shape):
        return f"PRELU alpha shape {list(alpha.shape)} does not broadcast to the input's {list(inp.shape)}"
    if inp.dtype in QUANTIZED:
        return quantization_reason(node, [inp, alpha, out])
    return None if inp.dtype == F32 else Unimplemented(f"PRELU on {inp.dtype} is not supported")


def cast_support(node):
    """Why CAST cannot run this node, or None."""
    for t in (node.inputs[0], node.outputs[0]):
        if t.dtype not in CAST_DTYPES:
            return Unimplemented(f"CAST of {t.type_name or t.dtype} (tensor {t.index}) is not supported")
    return None


def logical_not_support(node):
    """Why LOGICAL_NOT cannot run this node, or None."""
    if not node.inputs[0].dtype == node.outputs[0].dtype == np.bool_:
        return "LOGICAL_NOT needs bool input and output"
    return None


def bucketize_support(node):
    """Why BUCKETIZE cannot run this node, or None: TFLite's input types, an int32 output and
    ascending boundaries (bucketize.cc's Prepare fails otherwise)."""
    if node.inputs[0].dtype not in BUCKETIZE_DTYPES or node.outputs[0].dtype != np.int32:
        return (f"BUCKETIZE of {node.inputs[0].dtype} -> {node.outputs[0].dtype} is not supported "
                "(float32, float64, int32 or int64 -> int32)")
    boundaries = np.asarray(node.options.get("boundaries", ()), np.float32)
    if np.any(boundaries[1:] < boundaries[:-1]):
        return "BUCKETIZE boundaries are not sorted in ascending order"
    return None


KERNELS = {**{op: unary for op in FLOAT_FUNCTIONS}, "PRELU": prelu, "CAST": cast, "LOGICAL_NOT": logical_not,
           "BUCKETIZE": bucketize}
SUPPORT = {**{op: with_arity(1, 0, unary_support) for op in FLOAT_FUNCTIONS},
           "PRELU": with_arity(2, 0, prelu_support), "CAST": with_arity(1, 0, cast_support),
           "LOGICAL_NOT": with_arity(1, 0, logical_not_support), "BUCKETIZE": with_arity(1, 0, bucketize_support)}


OUTPUT_SHAPES = {"PRELU": lambda node, shapes, values: [np.broadcast_shapes(shapes[0], shapes[1])],
                 **{op: lambda node, shapes, values: [shapes[0]]
                    for op in (*FLOAT_FUNCTIONS, "CAST", "LOGICAL_NOT", "BUCKETIZE")}}
