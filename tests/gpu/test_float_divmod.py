"""Float FLOOR_DIV and FLOOR_MOD on the GPU (gpu/kernels/float_divmod.py) against the reference
kernels (ops/binary.py: floor(double(a) / double(b)), fmodf plus the divisor where the signs
differ), bit for bit in fp32 (but within the smallest normal, where a GPU flushes a subnormal
result or intermediate, as GLSL ES allows and NVIDIA's does): quotients a few ulps from an integer
(where the floor of a GPU division is one off), every sign, exponent gaps up to float's range,
zeros, infinities, NaN and subnormals. In the half precisions the operands are stored as halves and so is the result: the
reference runs on the stored operands and the GPU's result is its result, or that rounded to half
where the output is stored as half."""
import numpy as np
import pytest

from tests.gpu.gpulib import PRECISIONS, as_stored, fails_then_runs, run_gpu
from tests.oplib import In, run_ours, single_op_model

OPS = ["FLOOR_DIV", "FLOOR_MOD"]
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-42, 1.4e-45, 3.4028235e38, -1.1754944e-38,
                     1.0, -1.0, 0.5, 3.0, -7.0], np.float32)


def near_integer_quotients(rng, count):
    """a = n * b moved 0-2 ulps either way: quotients at, just below and just above integers n
    up to 2^30, where a division that is not correctly rounded floors one off."""
    b = (rng.uniform(0.1, 10.0, count) * rng.choice([-1, 1], count) * 10.0 ** rng.integers(-3, 4, count))
    n = rng.integers(-2**30, 2**30, count).astype(np.float64)
    a = (n * b).astype(np.float32)
    for _ in range(2):
        step = rng.choice([-1, 0, 1], count)
        up, down = np.nextafter(a, np.float32(np.inf)), np.nextafter(a, np.float32(-np.inf))
        a = np.where(step > 0, up, np.where(step < 0, down, a))
    return a.astype(np.float32), b.astype(np.float32)


def wide_operands(rng, count):
    """Magnitudes from 1e-30 to 1e30 on both sides, every sign: exponent gaps that the exact
    remainder walks bit by bit and quotients past float's range."""
    def values():
        return (rng.choice([-1, 1], count) * 10.0 ** rng.uniform(-30, 30, count)).astype(np.float32)
    return values(), values()


def cases(rng):
    """(a, b) pairs: near-integer quotients, wide ones, every pair of SPECIALS."""
    near, wide = near_integer_quotients(rng, 600), wide_operands(rng, 600)
    pairs_a, pairs_b = np.repeat(SPECIALS, SPECIALS.size), np.tile(SPECIALS, SPECIALS.size)
    a = np.concatenate([near[0], wide[0], pairs_a]).astype(np.float32)
    b = np.concatenate([near[1], wide[1], pairs_b]).astype(np.float32)
    return a, b


def assert_as_stored(op, gpu, reference, precision):
    """fp32: the same bits (any NaN for a NaN). Half storage: the same bits, or, where the output
    went through half storage, the reference's result rounded to half (within that rounding: a
    GPU's float-to-half conversion may round otherwise at a tie). A partition's output may be
    stored straight into the I/O buffer as float32, unrounded."""
    nan = np.isnan(reference)
    assert np.array_equal(np.isnan(gpu), nan), (op, np.flatnonzero(np.isnan(gpu) != nan)[:8])
    same = (gpu.view(np.uint32) == reference.view(np.uint32)) | nan
    # GLSL ES lets highp flush subnormals to zero (NVIDIA's does: a subnormal remainder came back
    # as 0, and the adjusting addition of one gave the divisor alone): within the smallest normal,
    # what a flushed subnormal result or intermediate moves a value by.
    same |= np.abs(gpu.astype(np.float64) - reference) <= np.finfo(np.float32).tiny
    if precision != "fp32":
        with np.errstate(over="ignore", invalid="ignore"):
            half = reference.astype(np.float16).astype(np.float32)
            step = np.spacing(np.abs(half).astype(np.float16)).astype(np.float32)
            same |= (gpu == half) | (np.isfinite(half) & (np.abs(gpu - half) <= step))
    wrong = np.flatnonzero(~same)
    assert wrong.size == 0, (op, precision, [(i, reference.flat[i], gpu.flat[i]) for i in wrong[:8]])


def run_both(op, inputs, precision):
    """The reference on the inputs as the GPU stores them, and the GPU's output (one GPU node)."""
    stored = as_stored(inputs, precision)
    feeds = [s.value for s in stored if not s.const]
    reference = run_ours(single_op_model(op, stored, {}), feeds)[0]
    (gpu,), summary = run_gpu(single_op_model(op, inputs, {}), [s.value for s in inputs if not s.const], precision)
    assert summary["gpu_nodes"] == 1, summary
    return reference, gpu


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", OPS)
def test_float_floor_div_and_mod_are_tflites_bit_for_bit(op, precision):
    a, b = cases(np.random.default_rng(21))
    if op == "FLOOR_DIV":  # a zero divisor fails the invoke (the test below)
        b = np.where(b == 0, np.float32(1.5), b)
    if precision != "fp32":  # halves: no operand past their range (inf / inf is NaN, not the point)
        a, b = np.clip(a, -6e4, 6e4), np.where(np.abs(b) > 6e4, np.float32(3.0), b)
        b = np.where(np.abs(b.astype(np.float16)) == 0, np.float32(0.25), b)
    a, b = (np.asarray(v, np.float32).reshape(-1, 15) for v in (a, b))
    reference, gpu = run_both(op, [In(a), In(b)], precision)
    assert_as_stored(op, gpu, reference, precision)


@pytest.mark.parametrize("op", OPS)
def test_random_bit_patterns_are_tflites_bit_for_bit(op):
    """20,000 pairs of uniformly random float32 bit patterns: every exponent pair (quotients far
    past float's range and below its subnormals, remainders walked over 250 exponents), every
    sign, subnormals, infinities and NaN as often as the bits make them."""
    rng = np.random.default_rng(23)
    a, b = (rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32) for _ in range(2))
    if op == "FLOOR_DIV":
        b = np.where(b == 0, np.float32(1.0), b)
    reference, gpu = run_both(op, [In(a.reshape(-1, 8)), In(b.reshape(-1, 8))], "fp32")
    assert_as_stored(op, gpu, reference, "fp32")


@pytest.mark.parametrize("op", OPS)
def test_broadcast_and_constant_divisors(op):
    """A constant divisor per channel and a scalar one, a runtime one broadcast over rows."""
    rng = np.random.default_rng(22)
    x = (rng.standard_normal((2, 3, 4, 7)) * 100).astype(np.float32)
    signs = rng.choice(np.float32([-1, 1]), 7)
    for divisor in [In(rng.uniform(0.5, 9, 7).astype(np.float32) * signs, const=True),
                    In(np.float32(-2.5), const=True), In(rng.uniform(1, 3, (1, 3, 1, 7)).astype(np.float32))]:
        reference, gpu = run_both(op, [In(x), divisor], "fp32")
        assert_as_stored(op, gpu, reference, "fp32")


def test_a_zero_divisor_fails_floor_div_naming_the_node():
    """TFLite's floor_div.cc fails on any zero divisor, float ones too (-0.0 included); the next
    invoke with good divisors runs."""
    x = np.array([[1.0, -3.0, 7.5]], np.float32)
    model = single_op_model("FLOOR_DIV", [In(x), In(np.ones((1, 3), np.float32))], {})
    good = np.array([[2.0, 2.0, -2.0]], np.float32)
    out = fails_then_runs(model, [[x, np.array([[2.0, 0.0, 1.0]], np.float32)],
                                  [x, np.array([[-0.0, 1.0, 1.0]], np.float32)]], [x, good],
                          r"#0 \(FLOOR_DIV\).*division by zero")
    assert np.array_equal(out, np.floor(x / good))


def test_floor_mod_of_a_zero_divisor_is_nan():
    """fmodf(a, 0) is NaN, which TFLite's float FLOOR_MOD returns (no failure)."""
    x = np.array([[1.0, -3.0, 0.0]], np.float32)
    reference, gpu = run_both("FLOOR_MOD", [In(x), In(np.zeros((1, 3), np.float32))], "fp32")
    assert np.isnan(reference).all() and np.isnan(gpu).all()
