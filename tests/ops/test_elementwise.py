"""Unary elementwise reference kernels against LiteRT's builtin kernels: every activation and
math op on random shapes and special values, int8/uint8 activations over every input value,
PRELU alpha broadcasting, CAST between every supported pair of dtypes."""
import math

import numpy as np
import pytest

from gles_delegate import ModelError
from tests.litert import run_litert
from tests.oplib import In, assert_rejected, check_op, compare_elementwise, run_ours, single_op_model
from tests.tolerance import F32_U, F32_ULPS, ulp_bound

FLOAT_OPS = ["RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU", "LOGISTIC", "TANH", "EXP", "LOG",
             "SQRT", "RSQRT", "ABS", "NEG", "SQUARE", "SIGN", "HARD_SWISH", "ELU", "GELU", "SIN", "COS", "FLOOR",
             "CEIL", "ROUND"]
OPTION_VARIANTS = {"LEAKY_RELU": [{"alpha": 0.2}, {"alpha": 0.0}, {"alpha": -2.0}, {"alpha": 3.0}],
                   "GELU": [{"approximate": False}, {"approximate": True}]}
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 1.0, -1.0, 2.9, -3.0, 3.1,
                     6.0, 6.5, -7.0, 20.0, -20.0, 88.0, 89.0, -104.0, 1e30, -1e30, 3e38, -3e38], np.float32)
CAST_DTYPES = [np.float32, np.float16, np.int32, np.int64, np.uint8, np.int8, np.bool_, np.complex64]


def positive_domain(op, x):
    """LOG / SQRT / RSQRT of random values: keep them positive (special values cover the rest)."""
    return np.abs(x) + np.float32(0.01) if op in ("LOG", "SQRT", "RSQRT") else x


# -- float ----------------------------------------------------------------------------------
@pytest.mark.parametrize("op", FLOAT_OPS)
def test_float_ops_on_random_shapes(op):
    rng = np.random.default_rng(sum(map(ord, op)))
    for options in OPTION_VARIANTS.get(op, [{}]):
        for rank in range(0, 6):
            shape = tuple(int(d) for d in rng.integers(1, 6, rank))
            x = positive_domain(op, rng.normal(0, 4, shape).astype(np.float32))
            check_op(op, [In(x)], options, bound=gelu_bound(x, options) if op == "GELU" else None)


def gelu_tolerance(options):
    """(rtol, atol) of GELU against LiteRT element by element. Approximate: 1 + tanh(.) cancels
    in float32 for x << 0, so both sides carry one ulp of tanh (6e-8) times |x| / 2 absolute.
    Exact: LiteRT's float32 erfc is off by up to 1e-5 relative for x < -3 (ours is within 2e-7
    of math.erfc, see test_gelu_matches_math_erfc)."""
    return (2e-6, 1e-6) if options.get("approximate") else (1e-5, 1e-37)


def gelu_bound(x, options):
    """Per-element bound of approximate GELU on random inputs x (None for the exact form: the
    default ulp bound): x (1 + tanh(.)) / 2 cancels for x << 0, so a difference of F32_ULPS
    float32 ulps in tanh (near -1: 2^-24 each) reaches the output as |x| / 2 times that, on top
    of the ulps of the output's magnitude (at most max|x|'s)."""
    return ulp_bound(x) + F32_ULPS * F32_U * np.abs(x) / 2 if options.get("approximate") else None


@pytest.mark.parametrize("op", FLOAT_OPS)
def test_float_ops_on_special_values(op):
    """NaN, +-inf, +-0, activation bounds, overflow thresholds of exp, denormal tails."""
    for options in OPTION_VARIANTS.get(op, [{}]):
        # A few float32 ulps for the transcendental functions, 1e-37 absolute for denormal tails.
        rtol, atol = gelu_tolerance(options) if op == "GELU" else (2e-6, 1e-37)
        compare_elementwise(op, [In(SPECIALS)], options, rtol=rtol, atol=atol)


@pytest.mark.parametrize("op", ["FLOOR", "CEIL", "ROUND"])
def test_rounding_halves_and_zero_signs(op):
    """Every half from -10.5 to 10.5 (ROUND: to even), values either side of them, and the sign
    of zero results: TFLite's ROUND gives +0 for -0.4 (floor -1, plus one), CEIL -0 for -0.4."""
    halves = np.arange(-10.5, 11, 1.0)
    x = np.concatenate([halves, np.nextafter(halves, 0), np.nextafter(halves, 100), [-0.4, 0.4, -0.0, 0.0, -0.5],
                        [2.0 ** 23 + 1, -(2.0 ** 23) - 1, 2.0 ** 22 + 0.5, 8388607.5]]).astype(np.float32)
    model = single_op_model(op, [In(x)])
    ours, theirs = run_ours(model, [x])[0], run_litert(model, [x], resolver="builtin")[0]
    assert np.array_equal(ours, theirs) and np.array_equal(np.signbit(ours), np.signbit(theirs)), op


@pytest.mark.parametrize("op", ["SIN", "COS"])
def test_sin_cos_large_arguments(op):
    """Arguments up to 1e6 and beyond: the float32 result of the exact argument (glibc's sinf
    reduces it exactly), within one float32 ulp of 1 (the rounding of either side)."""
    x = np.concatenate([np.geomspace(1, 3e38, 200), -np.geomspace(1e-3, 1e6, 100)]).astype(np.float32)
    compare_elementwise(op, [In(x)], rtol=0, atol=1.2e-7)


def test_gelu_dense_sweep():
    """GELU across the whole useful range, both forms."""
    x = np.linspace(-12, 12, 4801, dtype=np.float32)
    for options in OPTION_VARIANTS["GELU"]:
        rtol, atol = gelu_tolerance(options)
        compare_elementwise("GELU", [In(x)], options, rtol=rtol, atol=atol)


def test_gelu_matches_math_erfc():
    """Independent check of our vectorized erfc: exact GELU within float32 rounding of
    0.5 x erfc(-x / sqrt 2) computed by math.erfc in double."""
    x = np.linspace(-13, 13, 2601, dtype=np.float32)
    expected = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(float)])
    ours = run_ours(single_op_model("GELU", [In(x)], {"approximate": False}), [x])[0]
    np.testing.assert_allclose(ours, expected, rtol=2e-7, atol=0)


# -- int8 / uint8 ---------------------------------------------------------------------------
QUANTIZED_CASES = [(op, dtype) for op in ("RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU",
                                          "LOGISTIC", "TANH", "HARD_SWISH", "GELU")
                   for dtype in (np.int8, np.uint8)] + [("ELU", np.int8)]  # LiteRT has no uint8 ELU


def output_quant_for(op, dtype, rng):
    """LiteRT's LUT LOGISTIC / TANH insist on their fixed output scales; others take any."""
    info = np.iinfo(dtype)
    if op == "LOGISTIC":
        return 1 / 256, info.min
    if op == "TANH":
        return 1 / 128, (info.min + info.max + 1) // 2
    return float(rng.uniform(0.005, 0.1)), int(rng.integers(info.min, info.max + 1))


@pytest.mark.parametrize("op,dtype", QUANTIZED_CASES)
def test_quantized_activations_over_every_input_value(op, dtype):
    """All 256 input values under random scales / zero points. HARD_SWISH is TFLite fixed-point
    arithmetic and we evaluate it exactly in float, hence quantum=1; the rest are exact."""
    rng = np.random.default_rng(sum(map(ord, op)) + np.dtype(dtype).itemsize)
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype)
    for trial in range(8):
        in_quant = float(rng.uniform(0.005, 0.1)), int(rng.integers(info.min, info.max + 1))
        options = OPTION_VARIANTS.get(op, [{}])[trial % len(OPTION_VARIANTS.get(op, [{}]))]
        if op == "LEAKY_RELU":
            options = {"alpha": float(rng.uniform(-1.5, 2.5))}
        check_op(op, [In(x, quant=in_quant)], options, output_quant=[output_quant_for(op, dtype, rng)],
                 quantum=1 if op == "HARD_SWISH" else None)


def test_quantized_rsqrt_over_every_input_value():
    """RSQRT int8 (a LayerNormalization's 1 / sqrt(variance + eps) in a fully int8 transformer):
    TFLite's fixed-point Newton-Raphson, bit exact over every input at or above the zero point,
    under random scales and zero points (the zero point itself gives 127)."""
    rng = np.random.default_rng(31)
    for _ in range(12):
        zero_point = int(rng.integers(-128, 100))
        x = np.arange(zero_point, 128).astype(np.int8)
        in_quant = float(10 ** rng.uniform(-5, 0)), zero_point
        out_quant = float(10 ** rng.uniform(-3, 0.5)), int(rng.integers(-128, 128))
        check_op("RSQRT", [In(x, quant=in_quant)], {}, output_quant=[out_quant])


def test_quantized_rsqrt_below_the_zero_point_fails_at_invoke():
    model = single_op_model("RSQRT", [In(np.array([3, 4], np.int8), quant=(0.1, -5))], {},
                            output_quant=[(0.1, 0)])
    with pytest.raises(ModelError, match=r"RSQRT.*only defined for positive values: input -6 is below the zero "
                                         r"point -5"):
        run_ours(model, [np.array([3, -6], np.int8)])


# -- PRELU ----------------------------------------------------------------------------------
PRELU_SHAPES = [((1, 4, 5, 3), (3,)), ((1, 4, 5, 3), (1, 1, 3)), ((2, 4, 5, 3), (4, 5, 3)), ((1, 4, 5, 3), (1,)),
                ((4, 5, 3), (1, 3)), ((6, 7), (7,)), ((2, 3, 4, 5, 6), (1, 1, 6)), ((2, 3, 4, 5, 6), (2, 1, 1, 1, 1))]


@pytest.mark.parametrize("x_shape,alpha_shape", PRELU_SHAPES)
def test_prelu_float_alpha_broadcast(x_shape, alpha_shape):
    rng = np.random.default_rng(len(x_shape) * 10 + len(alpha_shape))
    x = rng.normal(0, 3, x_shape).astype(np.float32)
    alpha = rng.uniform(-1, 2, alpha_shape).astype(np.float32)
    for const in (True, False):
        check_op("PRELU", [In(x), In(alpha, const=const)])
    x.flat[:5] = [np.nan, np.inf, -np.inf, -0.0, -3e38]
    compare_elementwise("PRELU", [In(x), In(alpha)])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("x_shape,alpha_shape", PRELU_SHAPES[:5])
def test_prelu_quantized(dtype, x_shape, alpha_shape):
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    for _ in range(4):
        x = rng.integers(info.min, info.max + 1, x_shape).astype(dtype)
        alpha = rng.integers(info.min, info.max + 1, alpha_shape).astype(dtype)
        quants = [(float(rng.uniform(0.005, 0.1)), int(rng.integers(info.min, info.max + 1))) for _ in range(3)]
        check_op("PRELU", [In(x, quant=quants[0]), In(alpha, const=True, quant=quants[1])], output_quant=[quants[2]])


# -- CAST and LOGICAL_NOT -------------------------------------------------------------------
def cast_source(dtype, target):
    """Values that exercise every CAST rule from `dtype` to `target`: fractions of both signs,
    out-of-range values (float -> integer saturates, integer -> integer wraps), NaN and
    infinities; complex values with imaginary parts that a cast drops (to an integer only real
    parts in every integer type's range: LiteRT's static_cast of others is undefined)."""
    if np.dtype(dtype) == np.complex64:
        real = cast_source(np.float32, np.float32)
        if np.dtype(target).kind in "iu":
            real = np.array([0.0, 0.5, 1.7, 99.9, 127.4, 3.0], np.float32)
        return (real + 1j * np.linspace(-3, 3, real.size)).astype(np.complex64)
    if np.dtype(dtype) == np.bool_:
        return np.array([True, False, True], bool)
    if np.dtype(dtype).kind == "f":
        values = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.7, -1.7, 127.9, 128.5, -128.7, -129.0, 255.9,
                  256.5, 65504.0, 1e5, -1e5, 3e9, -3e9, 1e19, -1e19, 1e-8]
        with np.errstate(over="ignore"):
            return np.array(values, np.float32).astype(dtype)
    info = np.iinfo(dtype)
    values = [0, 1, -1, 127, 128, 255, 256, 300, -129, 70000, -70000, 2**31 - 1, -2**31, 2**40, -2**40]
    return np.array([v for v in values if info.min <= v <= info.max], dtype)


@pytest.mark.parametrize("source", CAST_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("target", CAST_DTYPES, ids=lambda d: np.dtype(d).name)
def test_cast_every_pair(source, target):
    x = cast_source(source, target)
    inputs = [In(x)]
    if np.dtype(target).kind in "fc":
        compare_elementwise("CAST", inputs, output_dtypes=[target])
    else:
        check_op("CAST", inputs, output_dtypes=[target])


def test_logical_not():
    rng = np.random.default_rng(0)
    for rank in range(0, 5):
        check_op("LOGICAL_NOT", [In(rng.integers(0, 2, tuple(rng.integers(1, 5, rank))).astype(bool))])


@pytest.mark.parametrize("op,dtype,out_dtype,quant", [
    ("LOGISTIC", np.float32, np.float32, None), ("TANH", np.int8, np.int8, (0.05, 0)),
    ("RELU6", np.uint8, np.uint8, (0.05, 10)), ("CAST", np.float32, np.int8, None),
    ("LOGICAL_NOT", np.bool_, np.bool_, None),
])
def test_constant_scalar_input_folds(op, dtype, out_dtype, quant):
    """A constant scalar input: the node is folded at allocate time into a 0-d constant."""
    output_quant = None if quant is None else [(1 / 128, 0) if op == "TANH" else quant]
    check_op(op, [In(np.asarray(3, dtype), const=True, quant=quant)], output_dtypes=[out_dtype],
             output_quant=output_quant)


@pytest.mark.parametrize("op", ["ABS", "NEG"])
def test_int32_abs_and_neg_wrap_as_litert(op):
    """TFLite's int32 ABS / NEG: |INT_MIN| and -INT_MIN are INT_MIN (two's complement)."""
    x = np.int32([[0, 1, -1, 7, -7], [2 ** 31 - 1, -2 ** 31, -2 ** 31 + 1, 123456789, -99]])
    ours, theirs = check_op(op, [In(x)])
    assert ours[0].dtype == np.int32 and np.array_equal(ours[0], theirs[0])


# -- support ----------------------------------------------------------------------------------
@pytest.mark.parametrize("op,dtypes,out_dtype,quant,shapes,expected", [
    ("EXP", [np.int8], np.int8, (0.1, 0), None, "EXP on int8"),
    ("RELU", [np.int32], np.int32, None, None, "RELU on int32"),
    ("TANH", [np.int8], np.int8, None, None, "needs quantization parameters"),
    ("LOGISTIC", [np.float32], np.float16, None, None, "differ"),
    ("PRELU", [np.float32, np.float32], np.float32, None, [(2, 3), (4,)], "does not broadcast"),
    ("PRELU", [np.float32, np.float32], np.float32, None, [(3,), (2, 3)], "does not broadcast"),
    ("PRELU", [np.float32, np.int8], np.float32, None, None, "dtypes differ"),
    ("CAST", [np.float64], np.float32, None, None, "CAST of"),
    ("CAST", [np.float32], np.uint16, None, None, "CAST of"),
    ("LOGICAL_NOT", [np.int32], np.int32, None, None, "bool"),
    ("SIN", [np.int32], np.int32, None, None, "SIN on int32"),
    ("ROUND", [np.float16], np.float16, None, None, "ROUND on float16"),
    ("FLOOR", [np.int8], np.int8, (0.1, 0), None, "FLOOR on int8"),
    ("RSQRT", [np.uint8], np.uint8, (0.1, 0), None, "RSQRT on uint8"),
])
def test_unsupported_nodes_are_rejected_at_allocate(op, dtypes, out_dtype, quant, shapes, expected):
    shapes = shapes or [(2, 3)] * len(dtypes)
    inputs = [In(np.zeros(shape, dtype), quant=quant) for shape, dtype in zip(shapes, dtypes)]
    assert_rejected(op, inputs, match=expected, outputs=[(shapes[0], out_dtype, quant)])


# -- BUCKETIZE ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_bucketize_matches_litert(dtype):
    """Values on, between and beyond the boundaries (repeated ones included); integers past
    2^24 compare as the float32 they round to; NaN lands past every boundary."""
    rng = np.random.default_rng(51)
    boundaries = np.float32([-1e9, -3.0, -0.5, 0.0, 0.0, 1.5, 2.0, 16777217.0, 3e9])
    for rank in range(0, 4):
        shape = tuple(int(d) for d in rng.integers(1, 5, rank))
        x = rng.choice(np.concatenate([boundaries, rng.normal(0, 3, 20), [16777216, 16777218, -2e9]]), shape)
        if np.dtype(dtype).kind == "i":
            x = np.clip(x, np.iinfo(np.int32).min, np.iinfo(np.int32).max)
        check_op("BUCKETIZE", [In(np.asarray(x).astype(dtype))], {"boundaries": boundaries},
                 output_dtypes=[np.int32])
    specials = np.array([np.nan, np.inf, -np.inf, -0.0], np.float32)
    check_op("BUCKETIZE", [In(specials)], {"boundaries": boundaries}, output_dtypes=[np.int32])


def test_bucketize_refusals():
    x = In(np.zeros(3, np.float32))
    assert_rejected("BUCKETIZE", [x], {"boundaries": np.float32([1, 0])}, match="not sorted",
                    outputs=[((3,), np.int32, None)])
    assert_rejected("BUCKETIZE", [In(np.zeros(3, np.int8))], {"boundaries": np.float32([0])}, match="not supported",
                    outputs=[((3,), np.int32, None)])
