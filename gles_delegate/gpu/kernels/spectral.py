"""RFFT2D, COMPLEX_ABS, REAL and IMAG on the complex view of their partition (gpu/complex_view.py:
a complex64 tensor of shape S is a float32 tensor of shape S + [2], real and imaginary parts).

RFFT2D (kernels_glsl/fft.glsl): a radix-2 FFT of each line in shared memory, one workgroup a
line: the line is loaded in bit-reversed order (cropped or zero-padded to the FFT length), then
log2(N) stages of N / 2 butterflies, a barrier between stages. The rows (the last axis, the
channels of the input's BHWC view) are real; their fft_w / 2 + 1 first bins are kept. Where
fft_h > 1 a second pass transforms the columns of those bins (complex lines of a scratch tensor).
Twiddles e^(-2 pi i k / N) are computed in float64 and stored as two parts, hi = the twiddle in
the storage's type, lo = the rest (hi + lo holds ~22 bits in half storage too); the butterflies
run in highp in every precision (fft.glsl's @highp line). Error: each of the log2(N)
stages rounds each value once or twice (a complex product and a sum, relative error <= ~3 u
of the values' magnitude), so every output bin of one line lies within about
log2(N) * 4 u * sqrt(N) * ||line||_2 of the exact transform (Higham, Accuracy and Stability of
Numerical Algorithms, 24.1: the FFT's norm-wise bound, ||X||_2 = sqrt(N) ||x||_2), plus the
rounding of the stored output: tests/gpu/test_spectral.py holds the GPU to that.

COMPLEX_ABS, REAL, IMAG (kernels_glsl/complex_part.glsl, PART 0 / 1 / 2): one invocation per
output vec4, reading its four pairs, in highp in every precision; COMPLEX_ABS scales each pair by
a power of 2 (exact) before summing the squares, as hypot does, so no component of float range
overflows; an infinite component gives +inf, else a NaN one NaN, as std::abs. Their epilogue
applies the elementwise ops fused after them (a log-magnitude spectrogram's ADD and LOG).
"""
import numpy as np

from ...errors import ModelError
from ...ops import spectral as reference
from ...registry import BINARY, UNARY, OpFacts
from ..phwc4 import bhwc
from . import epilogue
from .base import Dispatch, KernelLimitError, scratch

PARTS = {"REAL": 0, "IMAG": 1, "COMPLEX_ABS": 2}
MAX_FFT_LENGTH = 2048  # 2048 pairs of highp floats: 16 KiB, GLES 3.1's least GL_MAX_COMPUTE_SHARED_MEMORY_SIZE
MAX_LANES = 128        # invocations per line: GLES 3.1's least GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS
MAX_GROUPS_Y = 1024    # lines per row of workgroups (the rest go along z)


# -- RFFT2D -------------------------------------------------------------------------------------
def _lengths(node):
    """(fft_h, fft_w) of a node whose support check passed."""
    return [int(n) for n in node.inputs[1].data.reshape(-1)]


def _rfft2d_support(node):
    """A float32 input of rank >= 2, a constant fft_length (powers of two up to MAX_FFT_LENGTH)
    and the complex view of the output: input.shape[:-2] + [fft_h, fft_w / 2 + 1, 2]."""
    x, lengths, out = node.inputs[0], node.inputs[1], node.outputs[0]
    if not lengths.is_const or lengths.dtype != np.int32:
        return "fft_length must be a constant int32 tensor"
    try:
        shape = reference.OUTPUT_SHAPES["RFFT2D"](node, [tuple(x.shape), tuple(lengths.shape)], [x.data, lengths.data])
    except ModelError as exc:
        return str(exc)
    if max(_lengths(node)) > MAX_FFT_LENGTH:
        return f"fft_length {_lengths(node)} past {MAX_FFT_LENGTH}, the longest line the GPU transforms in shared memory"
    if tuple(out.shape) != tuple(shape[0]) + (2,):
        return f"output {list(out.shape)} is not the complex view of RFFT2D's {list(shape[0])} (a [..., 2] pair axis)"
    return None


def twiddle_rows(n, storage_half):
    """[n / 2, 4] float32 rows (hi.re, hi.im, lo.re, lo.im) of e^(-2 pi i k / n), k < n / 2: hi
    rounded to the storage's type, lo the rest (rounded to it in turn when packed)."""
    w = np.exp(-2j * np.pi * np.arange(n // 2) / n)
    pairs = np.stack([w.real, w.imag], axis=-1)
    hi = pairs.astype(np.float16 if storage_half else np.float32).astype(np.float64)
    return np.concatenate([hi, pairs - hi], axis=-1).astype(np.float32)


def _fft_pass(env, n, real, source, target, lines, count, reads_line, writes_line, bins):
    """One fft.glsl Dispatch: `lines` lines of `count` values (zero-padded to n) of `source`, the
    first `bins` bins of each into `target`. reads_line / writes_line: (div, outer, inner, step):
    line l starts at pixel (l / div) * outer + (l % div) * inner, its values `step` pixels apart
    (a real line's values are the channels of one pixel)."""
    log2n = n.bit_length() - 1
    shared = 8 * n
    if shared > env.limits.get("max_shared_memory_bytes", shared):
        raise KernelLimitError(f"{env.node.label}: a line of {n} needs {shared} bytes of shared memory, past the "
                               f"device's {env.limits['max_shared_memory_bytes']}")
    lanes = max(1, min(n // 2, MAX_LANES))
    rows = min(lines, MAX_GROUPS_Y)
    div, in_outer, in_inner, in_step = reads_line
    _, out_outer, out_inner, out_step = writes_line
    params = {"in_offset": env.arena(source), "in_size": bhwc(source.shape).as_ivec4(), "line_div": div,
              "in_outer": in_outer, "in_inner": in_inner, "in_step": in_step, "in_count": min(count, n),
              "out_offset": env.arena(target), "out_outer": out_outer, "out_inner": out_inner, "out_step": out_step,
              "out_count": bins, "lines": lines, "twiddles": env.constant(twiddle_rows(max(n, 2), env.storage_half))}
    return Dispatch("fft", (lanes, rows, -(-lines // rows)), {"LOG2N": log2n, "REAL_INPUT": int(real)}, params,
                    reads=(source,), writes=(target,), workgroup=(lanes, 1, 1))


def _rfft2d(node, env):
    """The row pass (real lines of the input, fft_w / 2 + 1 bins each) into the output, or where
    fft_h > 1 into a scratch tensor [batch, rows, bins, 2] whose columns a second pass transforms."""
    x, out = node.inputs[0], node.outputs[0]
    fft_h, fft_w = _lengths(node)
    height, width = x.shape[-2], x.shape[-1]
    batch, rows, bins = int(np.prod(x.shape[:-2], dtype=np.int64)), min(height, fft_h), fft_w // 2 + 1
    if fft_h == 1:
        return [_fft_pass(env, fft_w, True, x, out, batch, width, (1, height, 0, 1), (1, bins, 0, 1), bins)]
    rows_t = scratch(node, 0, (batch, rows, bins, 2))
    return [_fft_pass(env, fft_w, True, x, rows_t, batch * rows, width, (rows, height, 1, 1), (rows, rows * bins, bins, 1),
                      bins),
            _fft_pass(env, fft_h, False, rows_t, out, batch * bins, rows, (bins, rows * bins, 1, bins),
                      (bins, fft_h * bins, 1, bins), fft_h)]


# -- COMPLEX_ABS, REAL, IMAG ------------------------------------------------------------------------
def _part_support(node):
    """A float32 pair view [..., 2] in, float32 of its shape but the pair axis out."""
    x, out = node.inputs[0], node.outputs[0]
    if x.shape[-1:] != (2,) or tuple(out.shape) != tuple(x.shape[:-1]):
        return (f"input {list(x.shape)} and output {list(out.shape)} are not a complex view [..., 2] and "
                f"the shape of its values")
    return None


def _part(node, env):
    """One complex_part.glsl dispatch over the output's vec4s, then the node's epilogue."""
    x, out = node.inputs[0], node.outputs[0]
    out4 = bhwc(out.shape)
    defines = {"PART": PARTS[node.op]}
    params = {"in_offset": env.arena(x), "out_size": out4.as_ivec4(), "out_channels": out4.c,
              "out_offset": env.arena(out)}
    reads, inplace = epilogue.apply(node, env, out, defines, params, (x,))
    return [Dispatch("complex_part", (out4.w, out4.h, out4.slices * out4.b), defines, params, reads=reads,
                     writes=(out,), inplace=inplace)]


SUPPORT = {"RFFT2D": _rfft2d_support, **{op: _part_support for op in PARTS}}
BUILD = {"RFFT2D": _rfft2d, **{op: _part for op in PARTS}}
EPILOGUE = {op: None for op in PARTS}
FACTS = {"RFFT2D": OpFacts(arity=BINARY), **{op: OpFacts(arity=UNARY) for op in PARTS}}
# Any rank through the BHWC view: lines are rows of pixels (RFFT2D), values pairs of pixels.
HIGH_RANK = {op: None for op in SUPPORT}
