"""A log-magnitude spectrogram built with our writer, as the TF converter writes tf.signal.stft:
the samples cut to whole frames by STRIDED_SLICE, frames by RESHAPE, a window MUL, a PAD to the FFT length, RESHAPE to [1, frames, 1, n], RFFT2D,
RESHAPE and STRIDED_SLICE of the complex64 spectrum (the Nyquist bin dropped), COMPLEX_ABS, MUL,
ADD and LOG, then a FULLY_CONNECTED filterbank. Every node runs on the GPU in one partition (the
complex ones through the complex view), in every precision.

Half storage rounds each node's output once (F16_U relative): the bound allows every rounding at
a gain of 2 through the rest of the model, as tests/models/test_transformer.py does; the log's
gain on the spectrum's absolute error, 1 / (SCALE |Y| + EPSILON), stays within that for this
signal because EPSILON keeps its argument >= 1e-2. In FP32 the GPU and the reference match
LiteRT within 1e-4 x max|LiteRT| (the real stft model of the TF converter: docs/compiler.md)."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.tflite import ModelBuilder
from tests.gpu.gpulib import PRECISIONS
from tests.litert import run_litert
from tests.oplib import run_ours
from tests.tolerance import F16_U

F32, C64, I32 = np.float32, np.complex64, np.int32
SAMPLES, FRAME, N, BANDS = 4000, 128, 256, 20
FRAMES, BINS = SAMPLES // FRAME, N // 2  # the last partial frame and the Nyquist bin dropped
SCALE, EPSILON = 1 / 16, 1e-2


def parameters(seed=0):
    """The window [FRAME] and the filterbank weights [BANDS, BINS] and bias [BANDS]."""
    rng = np.random.default_rng(seed)
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(FRAME) / FRAME)).astype(F32)
    return window, (rng.standard_normal((BANDS, BINS)) / np.sqrt(BINS)).astype(F32), \
        (0.1 * rng.standard_normal(BANDS)).astype(F32)


def spectrogram_model():
    window, weights, bias = parameters()
    b = ModelBuilder()
    count = iter(range(100))

    def op(name, inputs, shape, dtype=F32, **options):
        out = b.tensor(f"t{next(count)}", shape, dtype)
        b.op(name, inputs, [out], **options)
        return out

    def const(value, dtype=I32):
        return b.const(f"c{next(count)}", np.asarray(value, dtype))

    x = b.input("audio", (1, SAMPLES), F32)
    kept = op("STRIDED_SLICE", [x, const([0, 0]), const([1, FRAMES * FRAME]), const([1, 1])], (1, FRAMES * FRAME))
    frames = op("RESHAPE", [kept, const([1, FRAMES, FRAME])], (1, FRAMES, FRAME))
    windowed = op("MUL", [frames, const(window, F32)], (1, FRAMES, FRAME), fused_activation_function=0)
    padded = op("PAD", [windowed, const([[0, 0], [0, 0], [0, N - FRAME]])], (1, FRAMES, N))
    rows = op("RESHAPE", [padded, const([1, FRAMES, 1, N])], (1, FRAMES, 1, N))
    spectrum = op("RFFT2D", [rows, const([1, N])], (1, FRAMES, 1, N // 2 + 1), C64)
    flat = op("RESHAPE", [spectrum, const([1, FRAMES, N // 2 + 1])], (1, FRAMES, N // 2 + 1), C64)
    bins = op("STRIDED_SLICE", [flat, const([0, 0, 0]), const([0, 0, BINS]), const([1, 1, 1])], (1, FRAMES, BINS),
              C64, begin_mask=3, end_mask=3)
    magnitude = op("COMPLEX_ABS", [bins], (1, FRAMES, BINS))
    scaled = op("MUL", [magnitude, const(SCALE, F32)], (1, FRAMES, BINS), fused_activation_function=0)
    shifted = op("ADD", [scaled, const(EPSILON, F32)], (1, FRAMES, BINS), fused_activation_function=0)
    logs = op("LOG", [shifted], (1, FRAMES, BINS))
    out = op("FULLY_CONNECTED", [logs, const(weights, F32), const(bias, F32)], (1, FRAMES, BANDS),
             keep_num_dims=True, fused_activation_function=0, weights_format=0)
    b.output(out)
    return b.build(), len(b.model().subgraphs[0].operators)


def audio(seed=1):
    """A tone and noise, [1, SAMPLES]."""
    t = np.arange(SAMPLES)
    noise = np.random.default_rng(seed).uniform(-0.3, 0.3, SAMPLES)
    return (np.sin(2 * np.pi * 440 * t / 8000) + noise).astype(F32)[None]


def run_gpu(precision, x):
    model, nodes = spectrogram_model()
    with GpuDelegate(precision=precision) as delegate:
        (gpu,) = run_ours(model, [x], experimental_delegates=[delegate])
        summary = delegate.summary()
    assert (summary["gpu_nodes"], summary["cpu_nodes"], summary["partitions"]) == (nodes, 0, 1), summary
    return gpu


@pytest.mark.parametrize("precision", PRECISIONS + ("auto",))
def test_every_node_on_the_gpu_in_one_partition(precision):
    x = audio()
    model, nodes = spectrogram_model()
    (reference,) = run_ours(model, [x])
    gpu = run_gpu(precision, x)
    bound = 1e-4 if precision == "fp32" else nodes * 2 * F16_U
    assert np.max(np.abs(gpu - reference)) <= bound * np.max(np.abs(reference))


def test_fp32_matches_litert():
    x = audio()
    model, _ = spectrogram_model()
    (theirs,) = run_litert(model, [x], resolver="builtin")
    (reference,) = run_ours(model, [x])
    scale = np.max(np.abs(theirs))
    assert np.max(np.abs(run_gpu("fp32", x) - theirs)) <= 1e-4 * scale
    assert np.max(np.abs(reference - theirs)) <= 1e-4 * scale
