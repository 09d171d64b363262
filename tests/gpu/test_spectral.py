"""GPU RFFT2D, COMPLEX_ABS, REAL and IMAG (gpu/kernels/spectral.py, on the complex view) against
the numpy reference in every precision (auto included): spectrogram frames (the 1-D transform of
the last axis, fft_length [1, n]) of every length up to the longest the GPU takes, 2-D transforms
(fft_h > 1: the column pass) cropped and zero-padded, ranks 2 to 5; the parts of complex values of
every magnitude, special values included.

RFFT2D's bound (derived, not tuned): the GPU runs the radix-2 FFT of each slice's n = fft_h x
fft_w points in highp, u = 2^-24, with twiddles w-hat, |w-hat - w| <= mu; Higham (Accuracy and
Stability of Numerical Algorithms, Theorem 24.2) bounds the computed transform Y-hat of x by
||Y-hat - Y||_2 <= log2(n) eta / (1 - log2(n) eta) ||Y||_2 with eta = mu + gamma_4 (sqrt(2) + mu),
and ||Y||_2 = sqrt(n) ||x||_2 (Parseval), which bounds each part of each bin. The twiddles are
float32 roundings (fp32 storage), or a half and a half remainder summed in highp (half storage):
mu <= 3 sqrt(2) u either way. The reference runs on the inputs as stored; the rounding of the
output (to float32 or to half) is gpulib.tolerance()'s ulps of max |bin|."""
import warnings

import numpy as np
import pytest

from gles_delegate import GpuDelegate, HalfOverflowWarning
from gles_delegate.gpu.kernels import spectral
from gles_delegate.tflite import ModelBuilder
from tests.gpu.gpulib import PRECISIONS, as_stored, check_gpu, run_gpu
from tests.oplib import In, first_node, run_ours, single_op_model
from tests.ops.test_spectral import SPECIAL_PARTS, complex_values
from tests.tolerance import F16_U, F32_TINY, F32_U, gamma

F32, C64, I32 = np.float32, np.complex64, np.int32
ALL_PRECISIONS = PRECISIONS + ("auto",)
TWIDDLE_ERROR = 3 * np.sqrt(2) * F32_U  # mu above
PART_OPS = ["COMPLEX_ABS", "REAL", "IMAG"]


def fft_bound(x, lengths):
    """Per-slice bound on |GPU - exact| of each part of each bin of RFFT2D(x, lengths) computed in
    highp (the module docstring), broadcast over the output's [..., fft_h, bins, 2]."""
    fft_h, fft_w = lengths
    n = fft_h * fft_w
    stages = np.log2(n)
    eta = TWIDDLE_ERROR + gamma(4, F32_U) * (np.sqrt(2) + TWIDDLE_ERROR)
    cropped = x[..., :fft_h, :fft_w].astype(np.float64)
    norm = np.sqrt((cropped ** 2).sum(axis=(-2, -1)))[..., None, None, None]
    return stages * eta / (1 - stages * eta) * np.sqrt(n) * norm + 2 * F32_TINY


def check_rfft2d(x, lengths, precision):
    inputs = [In(x), In(np.array(lengths, I32), const=True)]
    stored = as_stored(inputs, precision)[0].value
    return check_gpu("RFFT2D", inputs, precision=precision, extra=fft_bound(stored, lengths), output_dtypes=[C64])


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
@pytest.mark.parametrize("n", [1, 2, 4, 32, 256, 512, 1024, spectral.MAX_FFT_LENGTH])
def test_spectrogram_frames(n, precision):
    """[1, frames, 1, frame] -> [1, frames, 1, n / 2 + 1], as the TF converter writes stft's
    rfft: frames shorter than n (zero-padded: 400 samples of a 512-point frame) and longer
    (cropped)."""
    rng = np.random.default_rng(n)
    for frame in {max(1, n * 25 // 32), n, n + 3}:
        check_rfft2d(rng.uniform(-1, 1, (1, 7, 1, frame)).astype(F32), [1, n], precision)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
@pytest.mark.parametrize("shape, lengths", [
    ((5, 7), [8, 4]),             # 2-D: rows and columns zero-padded
    ((9, 20), [4, 16]),           # cropped both ways
    ((2, 3, 6, 5), [2, 64]),      # batch dims, few rows of long lines
    ((2, 1, 3, 16, 16), [16, 16]),  # rank 5: the leading dims merged into the view's batch
    ((3, 4), [2, 1]),             # one-point rows: the column pass only transforms
    ((4, 6), [1, 2]),
])
def test_2d_transforms(shape, lengths, precision):
    x = np.random.default_rng(sum(shape)).uniform(-1, 1, shape).astype(F32)
    check_rfft2d(x, lengths, precision)


def test_the_bound_is_tight_enough_to_catch_a_wrong_twiddle(monkeypatch):
    """A twiddle table off by one float32 ulp in one entry stays inside the bound (it is one of
    the errors the bound covers); one off by 1e-4 does not."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (1, 4, 1, 512)).astype(F32)
    rows = spectral.twiddle_rows

    def nudged(by):
        def twiddles(n, storage_half):
            table = rows(n, storage_half).copy()
            table[n // 8, 0] += by
            return table
        return twiddles
    monkeypatch.setattr(spectral, "twiddle_rows", nudged(F32_U))
    check_rfft2d(x, [1, 512], "fp32")
    monkeypatch.setattr(spectral, "twiddle_rows", nudged(1e-4))
    with pytest.raises(AssertionError, match="max abs error"):
        check_rfft2d(x, [1, 512], "fp32")


@pytest.mark.parametrize("lengths, why", [([1, 2 * spectral.MAX_FFT_LENGTH], "the longest line"),
                                          ([2 * spectral.MAX_FFT_LENGTH, 2], "the longest line")])
def test_longer_transforms_stay_on_the_cpu(lengths, why):
    x = np.zeros((2, 3), F32)
    model = single_op_model("RFFT2D", [In(x), In(np.array(lengths, I32), const=True)], output_dtypes=[C64])
    with GpuDelegate() as delegate:
        run_ours(model, [x], experimental_delegates=[delegate])
        assert delegate.summary()["gpu_nodes"] == 0
        assert why in delegate.unsupported_reason(first_node(model))


def test_small_devices(monkeypatch):
    """Workgroups narrower than the lanes asked (32): the lines are still transformed once each;
    less shared memory than a line needs: the node goes to the CPU, saying why."""
    x = np.random.default_rng(2).uniform(-1, 1, (3, 5, 1024)).astype(F32)
    model = single_op_model("RFFT2D", [In(x), In(np.array([2, 1024], I32), const=True)], output_dtypes=[C64])
    (reference,) = run_ours(model, [x])
    with GpuDelegate() as delegate:
        limits = delegate.context.limits
        monkeypatch.setitem(limits, "max_workgroup_invocations", 32)
        (gpu,) = run_ours(model, [x], experimental_delegates=[delegate])
        assert delegate.summary()["gpu_nodes"] == 1
        np.testing.assert_allclose(gpu, reference, rtol=0, atol=float(fft_bound(x, [2, 1024]).max()))
        monkeypatch.setitem(limits, "max_shared_memory_bytes", 4096)
        run_ours(model, [x], experimental_delegates=[delegate])
        assert "needs 8192 bytes of shared memory" in delegate.summary()["fallbacks"]["#0 (RFFT2D)"]


# -- COMPLEX_ABS, REAL, IMAG ------------------------------------------------------------------------
def check_parts(op, z, precision, judged_as=None):
    """The GPU against the reference on the values as stored: REAL and IMAG exactly, COMPLEX_ABS
    within 8 ulps of the storage's type of each |z| (not of the largest: magnitudes span 60
    orders here): the squares, their sum, the square root and the stored rounding. judged_as:
    check_gpu's."""
    reference, gpu = check_gpu(op, [In(z)], precision=precision, output_dtypes=[F32], judged_as=judged_as)
    precision = judged_as or precision
    reference, gpu = reference[0], gpu[0]
    if op != "COMPLEX_ABS":
        assert np.array_equal(gpu, reference, equal_nan=True)
        return
    finite = np.isfinite(reference) & (precision == "fp32" or np.abs(reference) <= np.finfo(np.float16).max)
    ulp = (F32_U if precision == "fp32" else F16_U) * 2
    limit = 8 * ulp * np.abs(reference[finite]) + 2 * (F32_TINY if precision == "fp32" else 2.0 ** -24)
    assert np.all(np.abs(gpu[finite].astype(np.float64) - reference[finite]) <= limit), (op, precision)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
@pytest.mark.parametrize("op", PART_OPS)
def test_parts(op, precision):
    """Ranks 0 to 5 (a rank-5 value is a rank-6 view); in FP32 magnitudes from 1e-30 to 1e30,
    whose squares over- and underflow float32 unless scaled, in half storage within its range."""
    rng = np.random.default_rng(len(op))
    for rank in range(6):
        shape = tuple(int(d) for d in rng.integers(1, 6, rank))
        exponents = rng.uniform(-30, 30, shape) if precision == "fp32" else rng.uniform(-3, 3, shape)
        scale = 10.0 ** exponents
        check_parts(op, complex_values(rng.normal(0, 1, shape) * scale, rng.normal(0, 1, shape) * scale, C64),
                    precision)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
@pytest.mark.parametrize("op", PART_OPS)
def test_parts_of_special_values(op, precision):
    """|inf + NaN i| = inf, |NaN + 1i| = NaN, |3e19 + 3e19i| finite, |FLT_MAX + FLT_MAX i| = inf
    (half storage: the values past half's range are inf already; 'auto' computes the invoke
    again with float32 storage then, gpu/half_overflow.py)."""
    parts = SPECIAL_PARTS
    z = complex_values(np.repeat(parts, parts.size), np.tile(parts, parts.size), C64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HalfOverflowWarning)
        check_parts(op, z, precision, judged_as="fp32" if precision == "auto" else None)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", PART_OPS)
def test_elementwise_nodes_after_a_part_run_in_its_epilogue(op, precision):
    """part -> MUL -> ADD -> ABS -> LOG (a log-magnitude spectrogram's tail): one dispatch."""
    b = ModelBuilder()
    z = b.input("z", (3, 33), C64)
    value = b.tensor("part", (3, 33), F32)
    b.op(op, [z], [value])
    for k, (name, operand) in enumerate([("MUL", 0.5), ("ADD", 1e-3), ("ABS", None), ("LOG", None)]):
        out = b.tensor(f"t{k}", (3, 33), F32)
        operands = [] if operand is None else [b.const(f"c{k}", np.array(operand, F32))]
        options = {} if operand is None else {"fused_activation_function": 0}
        b.op(name, [value, *operands], [out], **options)
        value = out
    b.output(value)
    model = b.build()
    rng = np.random.default_rng(1)
    z = complex_values(rng.normal(size=(3, 33)), rng.normal(size=(3, 33)), C64)
    (reference,) = run_ours(model, [as_stored([In(z)], precision)[0].value])
    (gpu,), summary = run_gpu(model, [z], precision)
    assert summary["gpu_nodes"] == 5 and summary["dispatches"] == 2, summary  # convert_in, the part + its epilogue
    np.testing.assert_allclose(gpu, reference, rtol=0, atol=1e-5 if precision == "fp32" else 1e-2)
