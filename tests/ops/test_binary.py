"""Binary op reference kernels against LiteRT's builtin kernels: broadcasting of every kind,
every fused activation, float / integer / quantized dtypes, extreme values."""
import numpy as np
import pytest

from gles_delegate import ModelError
from tests.litert import run_litert
from tests.oplib import (In, assert_rejected, broadcast_shapes, check_op, compare_elementwise, run_ours,
                         single_op_model)

FLOAT_ARITHMETIC = ["ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW"]
WITH_ACTIVATION = {"ADD", "SUB", "MUL", "DIV"}
ACTIVATIONS = range(6)  # NONE, RELU, RELU_N1_TO_1, RELU6, TANH, SIGN_BIT (the last two are no-ops here)
COMPARISONS = ["GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "EQUAL", "NOT_EQUAL"]
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3e38, -3e38, 1e-30, 2.5, -7.0], np.float32)


def broadcast_pair(rng, rank):
    """Two shapes that broadcast to at most `rank` dims (oplib.broadcast_shapes)."""
    return broadcast_shapes(rng, rank, 2)


def float_operands(rng, op, shapes):
    """Random operands in the op's meaningful domain (POW: positive bases, moderate exponents)."""
    a, b = (rng.normal(0, 3, s).astype(np.float32) for s in shapes)
    if op == "POW":
        a = np.abs(a) + np.float32(0.1)
        b = np.clip(b, -4, 4).astype(np.float32)  # numpy 1.x promotes a clip by Python ints
    if op == "DIV":
        b = np.where(np.abs(b) < 0.1, np.float32(0.5), b)  # a huge quotient would swamp the tolerance
    return a, b


def options_for(op, activation):
    return {"fused_activation_function": activation} if op in WITH_ACTIVATION else {}


# -- float ----------------------------------------------------------------------------------
@pytest.mark.parametrize("op", FLOAT_ARITHMETIC)
def test_float_arithmetic_broadcasts_like_litert(op):
    rng = np.random.default_rng(sum(map(ord, op)))
    for rank in range(0, 7):
        for activation in ACTIVATIONS if op in WITH_ACTIVATION else [0]:
            shapes = broadcast_pair(rng, rank)
            a, b = float_operands(rng, op, shapes)
            const_b = bool(rng.integers(0, 2))
            check_op(op, [In(a), In(b, const=const_b)], options_for(op, activation))


@pytest.mark.parametrize("op", FLOAT_ARITHMETIC)
def test_float_arithmetic_special_values(op):
    """NaN, +-inf, +-0, near-FLT_MAX operands against every other: overflow to inf is clamped to
    +-FLT_MAX by the activation (ADD/SUB/MUL/DIV), NaN propagates, MAXIMUM(NaN, x) is x."""
    a = np.repeat(SPECIALS, SPECIALS.size)
    b = np.tile(SPECIALS, SPECIALS.size)
    for activation in ACTIVATIONS if op in WITH_ACTIVATION else [0]:
        compare_elementwise(op, [In(a), In(b)], options_for(op, activation))


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL", "DIV"])
def test_float_activation_clamps(op):
    """Values spread across every activation's bounds."""
    a = np.linspace(-9, 9, 37, dtype=np.float32)
    b = np.float32([1.5])
    for activation in ACTIVATIONS:
        compare_elementwise(op, [In(a), In(b)], {"fused_activation_function": activation})


# -- integer --------------------------------------------------------------------------------
INTEGER_CASES = [(op, np.int32) for op in FLOAT_ARITHMETIC] + \
    [(op, np.int64) for op in ("ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM")] + \
    [(op, dt) for op in ("MAXIMUM", "MINIMUM") for dt in (np.int8, np.uint8)]


@pytest.mark.parametrize("op,dtype", INTEGER_CASES)
def test_integer_arithmetic_matches_litert(op, dtype):
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    for rank in range(0, 6):
        for activation in ACTIVATIONS if op in WITH_ACTIVATION else [0]:
            shapes = broadcast_pair(rng, rank)
            a, b = (rng.integers(max(info.min, -50), min(info.max, 50) + 1, s).astype(dtype) for s in shapes)
            if op == "DIV":
                b[b == 0] = 3
            if op == "POW":
                a, b = np.clip(a, -9, 9).astype(dtype), (np.abs(b) % 9).astype(dtype)  # numpy 1.x promotes both
            check_op(op, [In(a), In(b)], options_for(op, activation))


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL", "DIV", "SQUARED_DIFFERENCE", "POW"])
def test_int32_extremes_wrap_and_truncate(op):
    """Overflow wraps as in C++, division truncates toward zero; POW stays within int32 (beyond
    it TFLite's double -> int conversion is undefined behaviour)."""
    edges = np.array([2**31 - 1, -2**31 + 1, 2**30, -2**30, 7, -7, 2, -2, 1, 0], np.int32)
    a, b = np.repeat(edges, edges.size), np.tile(edges, edges.size)
    if op == "DIV":
        keep = b != 0
        a, b = a[keep], b[keep]
    if op == "POW":
        with np.errstate(all="ignore"):
            keep = (b >= 0) & (np.abs(a.astype(np.float64)) ** b.astype(np.float64) < 2**31)
        a, b = a[keep], b[keep]
    for activation in ACTIVATIONS if op in WITH_ACTIVATION else [0]:
        check_op(op, [In(a), In(b)], options_for(op, activation))


@pytest.mark.parametrize("op,divisor", [("DIV", 0), ("POW", -1)])
def test_integer_domain_errors_raise_at_invoke(op, divisor):
    """LiteRT fails the invoke on int32 x / 0 and x ** -1; so do we, naming the operator."""
    inputs = [In(np.array([4, 5], np.int32)), In(np.array([2, 1], np.int32))]
    model = single_op_model(op, inputs)
    bad = [np.array([4, 5], np.int32), np.array([2, divisor], np.int32)]
    with pytest.raises(ModelError, match=r"#0 \(" + op):
        run_ours(model, bad)
    with pytest.raises(Exception):
        run_litert(model, bad, resolver="builtin")


# -- int8 / uint8 ---------------------------------------------------------------------------
def random_quant(rng, dtype, low=0.002, high=0.2):
    info = np.iinfo(dtype)
    return float(rng.uniform(low, high)), int(rng.integers(info.min, info.max + 1))


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_quantized_arithmetic_is_bit_exact(op, dtype):
    """TFLite's integer pipeline reproduced step by step: LiteRT's x86 kernels give the same
    bits (the 1-quantum allowance of the standard is not needed, so it is not granted)."""
    rng = np.random.default_rng(11)
    info = np.iinfo(dtype)
    for rank in range(0, 6):
        for activation in ACTIVATIONS:
            shapes = broadcast_pair(rng, rank)
            a, b = (rng.integers(info.min, info.max + 1, s).astype(dtype) for s in shapes)
            quants = [random_quant(rng, dtype) for _ in range(3)]
            check_op(op, [In(a, quant=quants[0]), In(b, quant=quants[1], const=rank % 2 == 1)],
                     {"fused_activation_function": activation}, output_quant=[quants[2]])


def test_quantized_activation_bounds_round_in_float32():
    """RELU6 on an output scale of 0.8: 6 / 0.8 is 7.5 in float32 (TFLite's arithmetic), so the
    clamp is zero point + 8, where float64 would give + 7."""
    values = np.array([100, 20, 5, 127], np.int8)
    ours, _ = check_op("ADD", [In(values, quant=(0.5, 0)), In(values, quant=(0.5, 0))],
                       {"fused_activation_function": 3}, output_quant=[(0.8, -128)])
    assert ours[0].max() == -120


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL"])
@pytest.mark.parametrize("qa,qb,qo,resolver", [
    ((1e-4, 0), (0.5, 10), (0.01, -5), "builtin"),
    ((0.05, 3), (0.002, -3), (2.0, 0), "builtin"),
    # Output saturated by ~65000 quanta: LiteRT's optimized int8 ADD keeps the unclamped result in
    # int16 and wraps (-65400 -> 127); reference_ops saturates, and so do we.
    ((0.3, -128), (0.3, 127), (1e-3, 0), "reference"),
])
def test_quantized_arithmetic_extreme_scales(op, qa, qb, qo, resolver):
    """Very unequal input scales, tiny or huge output scale, every int8 value pair."""
    values = np.arange(-128, 128, dtype=np.int8)
    a, b = np.repeat(values, 256), np.tile(values, 256)
    for activation in (0, 1, 3):
        check_op(op, [In(a, quant=qa), In(b, quant=qb)], {"fused_activation_function": activation},
                 output_quant=[qo], resolver=resolver)


@pytest.mark.parametrize("fit_output", [False, True])
def test_quantized_squared_difference_is_bit_exact(fit_output):
    """squared_difference.cc's int8 path (a LayerNormalization's variance in a fully int8
    transformer): random scales and zero points over ranks 0-4, the output scale either random
    (mostly saturated) or fitted to the largest square (every code in use)."""
    rng = np.random.default_rng(12)
    for rank in range(0, 5):
        shapes = broadcast_pair(rng, rank)
        a, b = (rng.integers(-128, 128, s).astype(np.int8) for s in shapes)
        qa, qb = random_quant(rng, np.int8), random_quant(rng, np.int8)
        largest = (255 * max(qa[0], qb[0])) ** 2
        qo = (largest / 255, -128) if fit_output else random_quant(rng, np.int8)
        check_op("SQUARED_DIFFERENCE", [In(a, quant=qa), In(b, quant=qb, const=rank % 2 == 1)], {},
                 output_quant=[qo])


def test_quantized_squared_difference_every_value_pair():
    values = np.arange(-128, 128, dtype=np.int8)
    a, b = np.repeat(values, 256), np.tile(values, 256)
    for qa, qb, qo in (((0.05, 3), (0.002, -3), (0.01, -128)), ((0.1, -128), (0.1, 127), (2.0, -100))):
        check_op("SQUARED_DIFFERENCE", [In(a, quant=qa), In(b, quant=qb)], {}, output_quant=[qo])


# -- comparisons and logical ops ------------------------------------------------------------
@pytest.mark.parametrize("op", COMPARISONS)
def test_comparisons_match_litert(op):
    rng = np.random.default_rng(3)
    for rank in range(0, 6):
        for dtype in (np.float32, np.int32, np.int64):
            shapes = broadcast_pair(rng, rank)
            a, b = (rng.integers(-3, 4, s).astype(dtype) for s in shapes)  # small range: many ties
            check_op(op, [In(a), In(b)], output_dtypes=[np.bool_])
    check_op(op, [In(np.repeat(SPECIALS, SPECIALS.size)), In(np.tile(SPECIALS, SPECIALS.size))],
             output_dtypes=[np.bool_])


@pytest.mark.parametrize("op", COMPARISONS)
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_quantized_comparisons_rescale_both_sides(op, dtype):
    """int8/uint8 inputs with different scales compare their fixed-point real values."""
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    for _ in range(6):
        shapes = broadcast_pair(rng, 4)
        a, b = (rng.integers(info.min, info.max + 1, s).astype(dtype) for s in shapes)
        qa, qb = random_quant(rng, dtype, 0.01, 0.05), random_quant(rng, dtype, 0.01, 0.05)
        check_op(op, [In(a, quant=qa), In(b, quant=qb)], output_dtypes=[np.bool_])
    same = np.arange(info.min, info.max + 1).astype(dtype)
    check_op(op, [In(same, quant=(0.02, 3)), In(same[::-1].copy(), quant=(0.04, 1))], output_dtypes=[np.bool_])


@pytest.mark.parametrize("op", ["EQUAL", "NOT_EQUAL", "LOGICAL_AND", "LOGICAL_OR"])
def test_bool_ops_match_litert(op):
    rng = np.random.default_rng(9)
    for rank in range(0, 6):
        shapes = broadcast_pair(rng, rank)
        a, b = (rng.integers(0, 2, s).astype(bool) for s in shapes)
        check_op(op, [In(a), In(b)], output_dtypes=[np.bool_])


@pytest.mark.parametrize("op,dtype,quant", [("ADD", np.float32, None), ("DIV", np.int32, None),
                                            ("MUL", np.int8, (0.05, 3)), ("LESS", np.float32, None)])
def test_constant_scalar_inputs_fold(op, dtype, quant):
    """All-constant scalar inputs: the node is folded at allocate time into a 0-d constant."""
    inputs = [In(np.asarray(5, dtype), const=True, quant=quant), In(np.asarray(2, dtype), const=True, quant=quant)]
    boolean = op in COMPARISONS
    check_op(op, inputs, output_dtypes=[np.bool_] if boolean else None,
             output_quant=None if boolean or quant is None else [quant])


# -- support ----------------------------------------------------------------------------------
@pytest.mark.parametrize("op,dtypes,out_dtype,quant,options,expected", [
    ("ADD", [np.float32, np.int32], np.float32, None, {}, "differ in dtype"),
    ("ADD", [np.float16, np.float16], np.float16, None, {}, "float16 is not supported"),
    ("DIV", [np.int64, np.int64], np.int64, None, {}, "int64 is not supported"),
    ("POW", [np.int8, np.int8], np.int8, (0.1, 0), {}, "int8 is not supported"),
    ("SQUARED_DIFFERENCE", [np.uint8, np.uint8], np.uint8, (0.1, 0), {}, "uint8 is not supported"),
    ("SQUARED_DIFFERENCE", [np.int8, np.int8], np.int8, None, {}, "needs quantization"),
    ("ADD", [np.int8, np.int8], np.int8, None, {}, "needs quantization"),
    ("MUL", [np.int8, np.int8], np.int8, ((0.1, 0.2, 0.3), 0, 1), {}, "per-tensor"),
    ("SUB", [np.float32, np.float32], np.float32, None, {"fused_activation_function": 9}, "fused activation 9"),
    ("ADD", [np.float32, np.float32], np.int32, None, {}, "output dtype"),
    ("LESS", [np.bool_, np.bool_], np.bool_, None, {}, "bool is not supported"),
    ("EQUAL", [np.float32, np.float32], np.float32, None, {}, "must be bool"),
    ("LOGICAL_OR", [np.int32, np.int32], np.bool_, None, {}, "int32 is not supported"),
])
def test_unsupported_nodes_are_rejected_at_allocate(op, dtypes, out_dtype, quant, options, expected):
    inputs = [In(np.zeros((2, 3), dtype), quant=quant) for dtype in dtypes]
    out_quant = None if out_dtype == np.bool_ else quant
    assert_rejected(op, inputs, options, expected, outputs=[((2, 3), out_dtype, out_quant)])


def test_unbroadcastable_shapes_are_rejected():
    assert_rejected("ADD", [In(np.zeros((2, 3), np.float32)), In(np.zeros(4, np.float32))], match="do not broadcast")


# -- FLOOR_DIV / FLOOR_MOD --------------------------------------------------------------------
FLOOR_CASES = [("FLOOR_DIV", dt) for dt in (np.float32, np.int32, np.int8, np.int16)] + \
    [("FLOOR_MOD", dt) for dt in (np.float32, np.int32, np.int64, np.int8, np.int16)]


def assert_same_zero_signs(op, a, b):
    """Where LiteRT gives a zero, ours has its sign (floor(-0.0 / 3) is -0, -0 mod 3 is -0)."""
    model = single_op_model(op, [In(a), In(b)])
    ours, theirs = run_ours(model, [a, b])[0], run_litert(model, [a, b], resolver="builtin")[0]
    zeros = theirs == 0
    assert np.array_equal(np.signbit(ours[zeros]), np.signbit(theirs[zeros])), op


@pytest.mark.parametrize("op,dtype", FLOOR_CASES)
def test_floor_ops_broadcast_like_litert(op, dtype):
    """Both signs of dividend and divisor (the result takes the divisor's sign for FLOOR_MOD and
    rounds toward -inf for FLOOR_DIV), exact multiples included; divisors are never zero."""
    rng = np.random.default_rng(sum(map(ord, op)) + np.dtype(dtype).itemsize)
    high = 40 if np.dtype(dtype).kind == "i" else 10.0
    for rank in range(0, 6):
        shapes = broadcast_pair(rng, rank)
        if np.dtype(dtype).kind == "i":
            a, b = (rng.integers(-high, high + 1, s).astype(dtype) for s in shapes)
        else:
            a, b = (rng.uniform(-high, high, s).astype(dtype) for s in shapes)
            a = np.where(rng.random(a.shape) < 0.3, np.round(a), a).astype(dtype)  # exact multiples
            b = np.where(rng.random(b.shape) < 0.3, np.round(b), b).astype(dtype)
        b[b == 0] = 3
        check_op(op, [In(a), In(b, const=bool(rank % 2))])


@pytest.mark.parametrize("op", ["FLOOR_DIV", "FLOOR_MOD"])
def test_floor_ops_float_special_values(op):
    """NaN, +-inf, +-0, huge and tiny operands against each other; a zero divisor gives NaN for
    FLOOR_MOD (fmod) and fails for FLOOR_DIV (test_floor_ops_zero_divisor)."""
    a, b = np.repeat(SPECIALS, SPECIALS.size), np.tile(SPECIALS, SPECIALS.size)
    if op == "FLOOR_DIV":
        a, b = a[b != 0], b[b != 0]
    compare_elementwise(op, [In(a), In(b)], rtol=0)
    assert_same_zero_signs(op, a, b)
    # Quotients just below an integer: TFLite divides in double before the floor.
    x = np.float32([0.3, 0.7, 1.1, -0.3, 1e7 + 1, 3.0, -3.0, 1e-8, -1e-8])
    y = np.float32([0.1, 0.1, 0.1, 0.1, 3.0, 0.1, 0.1, 1.0, 1.0])
    compare_elementwise(op, [In(x), In(y)], rtol=0)


@pytest.mark.parametrize("op,dtype", [(op, dt) for op, dt in FLOOR_CASES if np.dtype(dt).kind == "i"])
def test_floor_ops_integer_extremes(op, dtype):
    """The type's extremes against small and extreme divisors (not min / -1, whose quotient or
    remainder C++ leaves undefined)."""
    info = np.iinfo(dtype)
    edges = np.array([info.max, info.min, info.min + 1, info.max - 1, 7, -7, 2, -2, 1, -1, 0], dtype)
    a, b = np.repeat(edges, edges.size), np.tile(edges, edges.size)
    keep = (b != 0) & ~((a == info.min) & (b == -1))
    check_op(op, [In(a[keep]), In(b[keep])])


@pytest.mark.parametrize("op,dtype", [("FLOOR_DIV", np.float32), ("FLOOR_DIV", np.int32), ("FLOOR_MOD", np.int32),
                                      ("FLOOR_MOD", np.int16)])
def test_floor_ops_zero_divisor_fails_at_invoke(op, dtype):
    """LiteRT fails the invoke on a zero divisor (FLOOR_DIV of floats too); so do we, naming the
    operator."""
    inputs = [In(np.array([4, 5], dtype)), In(np.array([2, 1], dtype))]
    model = single_op_model(op, inputs)
    bad = [np.array([4, 5], dtype), np.array([2, 0], dtype)]
    with pytest.raises(ModelError, match=r"#0 \(" + op + r"\).*division by zero"):
        run_ours(model, bad)
    with pytest.raises(RuntimeError, match="Division by 0"):
        run_litert(model, bad, resolver="builtin")


@pytest.mark.parametrize("op,dtype", [("FLOOR_DIV", np.int64), ("FLOOR_DIV", np.uint8), ("FLOOR_MOD", np.uint8),
                                      ("FLOOR_MOD", np.bool_)])
def test_floor_ops_unsupported_dtypes_are_rejected(op, dtype):
    """The dtypes LiteRT's floor_div.cc / floor_mod.cc refuse."""
    assert_rejected(op, [In(np.ones((2, 3), dtype)), In(np.ones((2, 3), dtype))], match="is not supported")


# -- ATAN2, BITWISE_XOR, RIGHT_SHIFT, ADD_N ----------------------------------------------------
def test_atan2_matches_litert():
    rng = np.random.default_rng(21)
    for rank in range(0, 6):
        shape = tuple(int(d) for d in rng.integers(1, 5, rank))
        y, x = (rng.normal(0, 3, shape).astype(np.float32) for _ in range(2))
        check_op("ATAN2", [In(y), In(x, const=rank % 2 == 1)])


def test_atan2_special_values():
    """Every pair of specials: the signed zeros and infinities pick the quadrant, NaN propagates."""
    y, x = (a.reshape(-1) for a in np.meshgrid(SPECIALS, SPECIALS))
    compare_elementwise("ATAN2", [In(y), In(x)], rtol=2e-7)
    ours = run_ours(single_op_model("ATAN2", [In(y), In(x)]), [y, x])[0]
    theirs = run_litert(single_op_model("ATAN2", [In(y), In(x)]), [y, x], resolver="builtin")[0]
    assert np.array_equal(np.signbit(ours), np.signbit(theirs))  # atan2(-0, +0) is -0


BITWISE_DTYPES = [np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32]


@pytest.mark.parametrize("op", ["BITWISE_XOR", "RIGHT_SHIFT"])
@pytest.mark.parametrize("dtype", BITWISE_DTYPES)
def test_bitwise_ops_match_litert(op, dtype):
    """Full-range values (RIGHT_SHIFT: counts from below 0 to past the width, which TFLite
    clamps), broadcast up to rank 4, and rank 5 without broadcasting."""
    rng = np.random.default_rng(22)
    info, bits = np.iinfo(dtype), np.dtype(dtype).itemsize * 8
    for rank in range(0, 6):
        shapes = broadcast_pair(rng, rank) if rank <= 4 else [(2, 1, 3, 2, 2)] * 2
        a = rng.integers(info.min, info.max, shapes[0], endpoint=True).astype(dtype)
        if op == "RIGHT_SHIFT":
            b = rng.integers(max(info.min, -3), bits + 3, shapes[1]).astype(dtype)
        else:
            b = rng.integers(info.min, info.max, shapes[1], endpoint=True).astype(dtype)
        check_op(op, [In(a), In(b, const=rank % 2 == 0)])


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_add_n_matches_litert(dtype):
    rng = np.random.default_rng(23)
    for count, rank in [(2, 0), (3, 1), (4, 3), (7, 5)]:
        shape = tuple(int(d) for d in rng.integers(1, 5, rank))
        if dtype == np.int32:  # wraps like int32_t
            values = [rng.integers(-2 ** 31, 2 ** 31, shape).astype(dtype) for _ in range(count)]
        else:
            values = [rng.normal(0, 100, shape).astype(dtype) for _ in range(count)]
        check_op("ADD_N", [In(v, const=k == 1) for k, v in enumerate(values)])


def test_add_n_special_values():
    a = SPECIALS
    compare_elementwise("ADD_N", [In(a), In(a[::-1].copy()), In(np.roll(a, 3))], rtol=0)
    # A partial sum that overflows is clamped before the next input: inf + 0 - inf is -FLT_MAX,
    # and 3e38 + 3e38 - 3e38 comes back to 3e38 - (3e38 - FLT_MAX), neither NaN nor inf.
    compare_elementwise("ADD_N", [In(np.float32([np.inf, 3e38])), In(np.float32([0, 3e38])),
                                  In(np.float32([-np.inf, -3e38]))], rtol=0)


@pytest.mark.parametrize("op,inputs,out_dtype,expected", [
    ("ATAN2", [np.zeros((2, 3), np.float32), np.zeros((1, 3), np.float32)], np.float32, "does not broadcast"),
    ("ATAN2", [np.zeros(3, np.int32)] * 2, np.int32, "int32 is not supported"),
    ("BITWISE_XOR", [np.zeros(3, np.float32)] * 2, np.float32, "float32 is not supported"),
    ("RIGHT_SHIFT", [np.zeros((1, 1, 1, 1, 2), np.int32), np.zeros(2, np.int32)], np.int32, "rank <= 4"),
    ("ADD_N", [np.zeros(3, np.float32)], np.float32, "two or more inputs"),
    ("ADD_N", [np.zeros(3, np.float32), np.zeros(1, np.float32)], np.float32, "one shape"),
    ("ADD_N", [np.zeros(3, np.float32), np.zeros(3, np.int32)], np.float32, "one dtype"),
    ("ADD_N", [np.zeros(3, np.int8)] * 2, np.int8, "float32 or int32"),
])
def test_more_binary_refusals(op, inputs, out_dtype, expected):
    assert_rejected(op, [In(x) for x in inputs], match=expected, outputs=[(inputs[0].shape, out_dtype, None)])
