"""RFFT2D, COMPLEX_ABS, REAL and IMAG (ops/spectral.py) against LiteRT's builtin kernels on one-op
models: RFFT2D's inputs cropped and zero-padded to fft_length, constant and fed at run time,
complex64 tensors through our reader, writer and interpreter, and the fft_length LiteRT refuses
refused too; the parts of complex64 and complex128 values, special values included, exactly."""
import numpy as np
import pytest

from tests.litert import run_litert
from tests.oplib import (In, assert_close, assert_refused_like_litert, assert_rejected, feeds, run_ours,
                         single_op_model)
from tests.tolerance import F32_TINY, F32_U, gamma

F32, C64, I32 = np.float32, np.complex64, np.int32
PART_OPS = ["COMPLEX_ABS", "REAL", "IMAG"]
PART_TYPES = [(np.complex64, np.float32), (np.complex128, np.float64)]
# Components of every kind: zeros of both signs, subnormals, the smallest normal, values whose
# squares overflow float32 (|z| stays finite), the largest float, infinities and NaN.
SPECIAL_PARTS = np.array([0.0, -0.0, 1e-45, -1e-40, 2.0 ** -126, 1.0, -1.5, 3e19, 2e38, -3.4028235e38,
                          np.inf, -np.inf, np.nan], F32)
F64_U = 2.0 ** -53


def rfft2d_bound(x, lengths, theirs):
    """Per-component bound on |ours - LiteRT's|: both transform in float64 (any FFT of n points
    lands within gamma(2 n) x sum|x| of the exact value in its unit roundoff) and round once to
    float32 (half a float32 step of each component each)."""
    h, w = lengths
    magnitude = np.abs(x[..., :h, :w].astype(np.float64)).sum(axis=(-2, -1))[..., None, None, None]
    rounding = 2 * F32_U * np.abs(theirs.view(F32).reshape(theirs.shape + (2,))) + 2 * F32_TINY
    return (2 * gamma(2 * h * w, F64_U) * magnitude + rounding).reshape(theirs.shape[:-1] + (-1,))


def check_rfft2d(x, lengths, const=True):
    inputs = [In(x), In(np.array(lengths, I32), const=const)]
    model = single_op_model("RFFT2D", inputs, output_dtypes=[C64])
    ours, theirs = run_ours(model, feeds(inputs))[0], run_litert(model, feeds(inputs), resolver="builtin")[0]
    assert ours.dtype == theirs.dtype == C64 and ours.shape == theirs.shape
    assert_close(ours.view(F32), theirs.view(F32), rfft2d_bound(x, lengths, theirs), what=f"RFFT2D {lengths}")
    return ours


@pytest.mark.parametrize("const", [True, False], ids=["const", "runtime"])
def test_rfft2d(const):
    rng = np.random.default_rng(1)
    for rank in range(2, 5):
        x = rng.uniform(-2, 2, [int(d) for d in rng.integers(1, 4, rank - 2)] + [int(d) for d in rng.integers(1, 12, 2)])
        lengths = [int(2 ** rng.integers(0, 5)), int(2 ** rng.integers(1, 5))]  # crops and pads
        check_rfft2d(x.astype(F32), lengths, const)


def test_rfft2d_of_special_values():
    """Zeros, -0, subnormals and magnitudes near float32's maximum (finite in float64)."""
    x = np.array([[0.0, -0.0, 1e-40, -1e-40], [3e38, -3e38, 3e38, 1.0], [0, 0, 0, 0], [-0.0, 2.0, 0, 0]], F32)
    check_rfft2d(x, [4, 4])
    check_rfft2d(x, [8, 2])


@pytest.mark.parametrize("lengths, match", [([3, 4], "powers of two"), ([4, 0], "powers of two")])
def test_rfft2d_refuses_what_litert_refuses(lengths, match):
    inputs = [In(np.zeros((4, 4), F32)), In(np.array(lengths, I32), const=True)]
    assert_refused_like_litert("RFFT2D", inputs, [((4, 3), C64, None)], match=match)


def test_rfft2d_refuses_a_vector_and_rejects_other_types():
    assert_refused_like_litert("RFFT2D", [In(np.zeros(4, F32)), In(np.array([1, 4], I32), const=True)],
                               [((1, 3), C64, None)], match="rank >= 2")
    assert_rejected("RFFT2D", [In(np.zeros((4, 4), F32)), In(np.array([4, 4], np.int64), const=True)],
                    match="fft_length must be an int32", outputs=[((4, 3), C64, None)])
    assert_rejected("RFFT2D", [In(np.zeros((4, 4), np.float64)), In(np.array([4, 4], I32), const=True)],
                    match="float32 to complex64", outputs=[((4, 3), np.complex128, None)])


def complex_values(parts_real, parts_imag, dtype):
    """An array of `dtype` with exactly these real and imaginary parts (no complex arithmetic,
    which would turn inf * 1j into NaN)."""
    z = np.zeros(np.broadcast(parts_real, parts_imag).shape, dtype)
    z.real, z.imag = parts_real, parts_imag
    return z


def check_parts_exactly(op, z, out_dtype):
    """Ours against LiteRT's builtin kernel: bit for bit (NaN where it has NaN)."""
    model = single_op_model(op, [In(z)], output_dtypes=[out_dtype])
    ours, theirs = run_ours(model, [z])[0], run_litert(model, [z], resolver="builtin")[0]
    assert ours.dtype == theirs.dtype == out_dtype and ours.shape == theirs.shape == z.shape
    same = (ours == theirs) & (np.signbit(ours) == np.signbit(theirs)) | np.isnan(ours) & np.isnan(theirs)
    assert same.all(), f"{op} {z.dtype}: {z[~same][:4]} -> ours {ours[~same][:4]}, LiteRT {theirs[~same][:4]}"


@pytest.mark.parametrize("types", PART_TYPES, ids=["complex64", "complex128"])
@pytest.mark.parametrize("op", PART_OPS)
def test_parts_of_random_values(op, types):
    """Random shapes of rank 0 to 5 and magnitudes from 1e-30 to 1e30: COMPLEX_ABS is the
    correctly rounded |z|, as LiteRT's std::abs gives it."""
    rng = np.random.default_rng(len(op))
    for rank in range(6):
        shape = tuple(int(d) for d in rng.integers(1, 5, rank))
        scale = 10.0 ** rng.uniform(-30, 30, shape)
        z = complex_values(rng.normal(0, 1, shape) * scale, rng.normal(0, 1, shape) * scale, types[0])
        check_parts_exactly(op, z, types[1])


@pytest.mark.parametrize("types", PART_TYPES, ids=["complex64", "complex128"])
@pytest.mark.parametrize("op", PART_OPS)
def test_parts_of_special_values(op, types):
    """Every pair of SPECIAL_PARTS: |inf + NaN i| is inf, |NaN + 1i| NaN, |3e19 + 3e19i| finite,
    |FLT_MAX + FLT_MAX i| inf (as float32), signed zeros kept by REAL and IMAG."""
    z = complex_values(np.repeat(SPECIAL_PARTS, SPECIAL_PARTS.size), np.tile(SPECIAL_PARTS, SPECIAL_PARTS.size),
                       types[0])
    check_parts_exactly(op, z, types[1])


@pytest.mark.parametrize("op", PART_OPS)
def test_parts_reject_other_types(op):
    """complex64 gives float32 and complex128 float64, nothing else (complex_support.cc's
    Prepare); a float input is no complex number."""
    assert_rejected(op, [In(np.zeros((2, 3), C64))], match="complex64 to float32",
                    outputs=[((2, 3), np.float64, None)])
    assert_rejected(op, [In(np.zeros((2, 3), F32))], match="complex64 to float32",
                    outputs=[((2, 3), F32, None)])
