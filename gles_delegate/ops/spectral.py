"""Spectral ops and complex numbers: RFFT2D, COMPLEX_ABS, REAL, IMAG.

TFLite's RFFT2D (Ooura's rdft2d) transforms each innermost [H, W] slice of a float32 input in
double precision, cropped or zero-padded to fft_length = [fft_h, fft_w] (powers of two), and
stores the fft_w / 2 + 1 non-negative frequencies of each row as complex64. numpy's FFT in
float64 computes the same transform; both round once to complex64 at the end.

COMPLEX_ABS, REAL and IMAG (complex_support.cc) take complex64 to float32 and complex128 to
float64, elementwise. COMPLEX_ABS is std::abs of std::complex, which LiteRT computes correctly
rounded (a float64 hypot rounded once to float32): no overflow for components past sqrt(FLT_MAX),
+inf where a component is infinite (even if the other is NaN), else NaN where one is NaN.
"""
import numpy as np

from .checks import arity_reason, index_input_reason, index_values, node_error

F32, C64 = np.dtype(np.float32), np.dtype(np.complex64)
# The float type of each complex type's parts (what COMPLEX_ABS, REAL and IMAG return).
PART_DTYPES = {C64: F32, np.dtype(np.complex128): np.dtype(np.float64)}


def _fft_lengths(node, values):
    """(fft_h, fft_w) from the fft_length input: two positive powers of two, as TFLite requires."""
    lengths = index_values(node, values, "fft_length", count=2).tolist()
    if any(n < 1 or n & (n - 1) for n in lengths):
        raise node_error(node, f"fft_length {lengths} must be two powers of two")
    return lengths


def _rfft2d_shape(node, shape, values):
    if len(shape) < 2:
        raise node_error(node, f"needs an input of rank >= 2, got shape {list(shape)}")
    height, width = _fft_lengths(node, values)
    return tuple(shape[:-2]) + (height, width // 2 + 1)


def rfft2d(node, inputs):
    """RFFT2D: out[..., u, v] = sum over y < fft_h, x < fft_w of in[..., y, x] e^(-2 pi i (uy / fft_h
    + vx / fft_w)), for v <= fft_w / 2; the input is cropped or zero-padded to fft_length."""
    x, lengths = inputs
    _rfft2d_shape(node, x.shape, lengths)
    height, width = _fft_lengths(node, lengths)
    with np.errstate(over="ignore"):  # beyond float32's range -> inf, as TFLite's cast to float
        return [np.fft.rfft2(x.astype(np.float64), s=(height, width)).astype(C64)]


def _rfft2d_support(node):
    reason = arity_reason(node, 2) or index_input_reason(node, 1, "fft_length", int32_only=True)
    if reason is None and (node.inputs[0].dtype != F32 or node.outputs[0].dtype != C64):
        reason = f"takes float32 to complex64, got {node.inputs[0].dtype} to {node.outputs[0].dtype}"
    return reason


def complex_abs(node, inputs):
    """|z| = hypot(re, im) in float64, rounded once to the parts' type (LiteRT's std::abs)."""
    z = inputs[0]
    with np.errstate(over="ignore"):  # |z| past FLT_MAX -> inf, as the rounding to float gives
        return [np.hypot(z.real.astype(np.float64), z.imag.astype(np.float64)).astype(z.real.dtype)]


def _part_support(node):
    """One complex64 / complex128 input, one output of its parts' type (complex_support.cc)."""
    reason = arity_reason(node, 1)
    if reason is None:
        x, out = node.inputs[0].dtype, node.outputs[0].dtype
        if x not in PART_DTYPES or out != PART_DTYPES[x]:
            reason = f"takes complex64 to float32 or complex128 to float64, got {x} to {out}"
    return reason


PARTS = {"COMPLEX_ABS": complex_abs, "REAL": lambda node, inputs: [inputs[0].real.copy()],
         "IMAG": lambda node, inputs: [inputs[0].imag.copy()]}
KERNELS = {"RFFT2D": rfft2d, **PARTS}
SUPPORT = {"RFFT2D": _rfft2d_support, **{op: _part_support for op in PARTS}}
OUTPUT_SHAPES = {"RFFT2D": lambda node, shapes, values: None if values[1] is None else
                 [_rfft2d_shape(node, shapes[0], values[1])],
                 **{op: lambda node, shapes, values: [shapes[0]] for op in PARTS}}
