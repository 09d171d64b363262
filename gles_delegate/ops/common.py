"""Semantics shared by the reference kernels: padding and windows, fused activations,
quantization arithmetic. (What SUPPORT checks share lives in checks.py.)"""
import numpy as np

from ..errors import ModelError

PADDING_SAME, PADDING_VALID = 0, 1
# ActivationFunctionType in the schema.
ACT_NONE, ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6, ACT_TANH, ACT_SIGN_BIT = range(6)


# -- padding and windows ------------------------------------------------------------------
def output_size(in_size, filter_size, stride, dilation, padding):
    """TFLite's ComputeOutSize: one spatial output extent for SAME or VALID padding."""
    effective = (filter_size - 1) * dilation + 1
    if padding == PADDING_SAME:
        return (in_size + stride - 1) // stride
    if padding == PADDING_VALID:
        return (in_size - effective + stride) // stride
    raise ModelError(f"unknown padding {padding}")


def padding_before(in_size, filter_size, stride, dilation, out_size):
    """TFLite's ComputePaddingWithOffset: the padding before the first element (the extra
    element of an odd total goes after)."""
    effective = (filter_size - 1) * dilation + 1
    total = max((out_size - 1) * stride + effective - in_size, 0)
    return total // 2


def spatial_geometry(in_hw, filter_hw, strides, dilations, padding):
    """(out_h, out_w, pad_top, pad_left) of a windowed op over an [H, W] input."""
    out = [output_size(i, f, s, d, padding) for i, f, s, d in zip(in_hw, filter_hw, strides, dilations)]
    pads = [padding_before(i, f, s, d, o) for i, f, s, d, o in zip(in_hw, filter_hw, strides, dilations, out)]
    return out[0], out[1], pads[0], pads[1]


def strides_of(node):
    """(stride_h, stride_w) from a node's options (0 when absent: SUPPORT rejects it)."""
    return node.options.get("stride_h", 0), node.options.get("stride_w", 0)


def dilations_of(node):
    """(dilation_h, dilation_w) from a node's options (TFLite's default 1 when absent)."""
    return node.options.get("dilation_h_factor", 1), node.options.get("dilation_w_factor", 1)


def window_taps(x, kernel_hw, strides, dilations, out_hw, pads, fill=0, skip_padding=False):
    """Yield (ky, kx, view) for every tap of a windowed op over x [N, H, W, C]: view [N, OH, OW, C]
    holds, at (oy, ox), the input element that tap (ky, kx) of output (oy, ox) reads, or `fill`
    where it falls in the padding. `pads` is (pad_top, pad_left). skip_padding: leave out the
    taps that read nothing but padding (pooling, where padding neither wins nor counts: a window
    far larger than its input then costs what it overlaps, not its size)."""
    padded = _pad_for_windows(x, kernel_hw, strides, dilations, out_hw, pads, fill)
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel_hw, strides, dilations, out_hw
    rows, cols = range(kh), range(kw)
    if skip_padding:
        rows = [ky for ky in rows if _tap_overlaps(ky * dh, oh, sh, pads[0], x.shape[1])]
        cols = [kx for kx in cols if _tap_overlaps(kx * dw, ow, sw, pads[1], x.shape[2])]
    for ky in rows:
        for kx in cols:
            top, left = ky * dh, kx * dw
            yield ky, kx, padded[:, top:top + (oh - 1) * sh + 1:sh, left:left + (ow - 1) * sw + 1:sw, :]


def _tap_overlaps(start, out_size, stride, pad_before, in_size):
    """Whether a tap reading padded positions start, start + stride, ... (out_size of them)
    reaches the input at padded positions [pad_before, pad_before + in_size)."""
    return start + (out_size - 1) * stride >= pad_before and start < pad_before + in_size


def _pad_for_windows(x, kernel_hw, strides, dilations, out_hw, pads, fill):
    """x padded (or cropped: VALID can leave trailing rows unread) to exactly the extent the
    windows cover: (out - 1) * stride + (kernel - 1) * dilation + 1 along H and W."""
    widths, crops = [(0, 0)], [slice(None)]
    for size, k, s, d, o, before in zip(x.shape[1:3], kernel_hw, strides, dilations, out_hw, pads):
        after = (o - 1) * s + (k - 1) * d + 1 - size - before
        widths.append((before, max(after, 0)))
        crops.append(slice(0, size + min(after, 0)))
    return np.pad(x[tuple(crops)], widths + [(0, 0)], constant_values=fill)


# -- fused activations --------------------------------------------------------------------
def fused_activation(node):
    """The node's fused activation (options['fused_activation_function'], NONE when absent)."""
    return node.options.get("fused_activation_function", ACT_NONE)


def activation_range(activation):
    """(low, high) clamp of a fused activation, or None for TANH / SIGN_BIT (not a clamp)."""
    return {ACT_NONE: (-np.inf, np.inf), ACT_RELU: (0.0, np.inf), ACT_RELU_N1_TO_1: (-1.0, 1.0),
            ACT_RELU6: (0.0, 6.0)}.get(activation)


def _clamp_range(activation):
    """TFLite's CalculateActivationRange: the clamp of RELU, RELU_N1_TO_1 and RELU6; any other
    activation (TANH, SIGN_BIT included) falls through to the type's whole range."""
    return activation_range(activation) or activation_range(ACT_NONE)


def clamp_to_activation(x, activation):
    """The fused activation of TFLite's conv / depthwise / transpose conv / FC / pooling and
    arithmetic kernels (CalculateActivationRange + ActivationFunctionWithMinMax) on a float or
    integer array: clamp to the activation's range intersected with the type's finite range, so
    float +-inf become +-FLT_MAX even with no activation, and TANH / SIGN_BIT clamp like NONE
    (LiteRT does exactly that). NaN stays NaN."""
    return np.clip(x, *activation_bounds(activation, x.dtype))


def activation_bounds(activation, dtype):
    """(low, high) of clamp_to_activation for values of `dtype`: the activation's range
    intersected with the type's finite range, as that type's scalars."""
    low, high = _clamp_range(activation)
    dtype = np.dtype(dtype)
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    return dtype.type(max(low, info.min)), dtype.type(min(high, info.max))


def apply_activation(x, activation):
    """A fused activation applied as a function to float x: TANH is tanh, SIGN_BIT signbit, the
    RELU family clamps and leaves infinities (and NaN). That is what TFLite's
    ApplyActivationToVector does but for NaN (activation_to_vector), and what TFLite's GPU
    delegate does after a CONCATENATION; kernels that follow TFLite's output stage use
    clamp_to_activation instead. An unknown activation is a ModelError (ops.run_node adds the
    node)."""
    if activation == ACT_TANH:
        return np.tanh(x)
    if activation == ACT_SIGN_BIT:
        return np.signbit(x).astype(x.dtype)
    bounds = activation_range(activation)
    if bounds is None:
        raise ModelError(f"unknown fused activation {activation}")
    low, high = bounds
    if low == -np.inf and high == np.inf:
        return x
    return np.clip(x, low, high).astype(x.dtype, copy=False)


def activation_to_vector(x, activation):
    """TFLite's tensor_utils::ApplyActivationToVector (the LSTM and RNN cells) on float x:
    apply_activation, except that the RELU family maps NaN to its lower bound, as its
    std::max(low, std::min(x, high)) does (measured against LiteRT 2.3)."""
    out = apply_activation(x, activation)
    low = (activation_range(activation) or (-np.inf,))[0]
    return out if low == -np.inf else np.where(np.isnan(x), x.dtype.type(low), out)


# -- quantization -------------------------------------------------------------------------
def scale_of(tensor):
    """The scale of a per-tensor quantized tensor, as a Python float (exact from float32)."""
    return float(tensor.quantization.scales[0])


def zero_point_of(tensor):
    """The zero point of a per-tensor quantized tensor, as a Python int."""
    return int(tensor.quantization.zero_points[0])


def same_quantization(a, b):
    """True when both tensors carry the same (per-tensor) scale and zero point."""
    qa, qb = a.quantization, b.quantization
    return (qa is not None and qb is not None and np.float32(qa.scales[0]) == np.float32(qb.scales[0])
            and int(qa.zero_points[0]) == int(qb.zero_points[0]))


def is_quantized(tensor):
    """True for an integer tensor (other than int32) that carries quantization parameters."""
    return tensor is not None and tensor.dtype is not None and tensor.dtype.kind in "iu" and \
        tensor.quantization is not None and tensor.dtype != np.int32


def quant_params(tensor, ndim=None):
    """(scales, zero_points) of a quantized tensor as float64 / int64 arrays: 0-d per tensor (so
    a scalar stays a scalar), per channel shaped to broadcast along the quantized dimension of an
    array of `ndim` dimensions. Pass the array's ndim: the declared shape may not be final yet
    (before shape propagation); it is the default only for a tensor's declared-shape values."""
    q = tensor.quantization
    if q is None:
        raise ModelError(f"tensor {tensor.index} ({tensor.name!r}) is {tensor.dtype} but has no quantization")
    scales, zero_points = q.scales.astype(np.float64), q.zero_points.astype(np.int64)
    if scales.size == 1:
        return scales.reshape(()), zero_points.reshape(())
    ndim = len(tensor.shape) if ndim is None else ndim
    if not 0 <= q.quantized_dimension < ndim:
        raise ModelError(f"tensor {tensor.index} ({tensor.name!r}) is quantized along dimension "
                         f"{q.quantized_dimension}, but has {ndim}")
    shape = [1] * ndim
    shape[q.quantized_dimension] = scales.size
    return scales.reshape(shape), zero_points.reshape(shape)


def round_half_away(x):
    """TFLite's rounding (std::round / TfLiteRound): halves go away from zero."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def saturate(values, dtype):
    """Clamp values to `dtype`'s range and convert (TFLite's saturating casts)."""
    info = np.iinfo(dtype)
    return np.asarray(np.clip(values, info.min, info.max)).astype(dtype)


def dequantize(tensor, values):
    """Real values (float32) of a quantized tensor's integer array, per tensor or per channel."""
    values = np.asarray(values)
    scales, zero_points = quant_params(tensor, values.ndim)
    return np.asarray((values.astype(np.int64) - zero_points) * scales, np.float32)


def quantize(tensor, real):
    """Quantize float values to a tensor's integer dtype, per tensor or per channel: round half
    away from zero, add the zero point, saturate. TFLite's C++ leaves NaN and out-of-int32 values
    undefined (x86 LiteRT turns them all into the minimum): we saturate infinities and map NaN
    to the zero point, as ARM builds do."""
    real = np.asarray(real, np.float64)
    scales, zero_points = quant_params(tensor, real.ndim)
    steps = round_half_away(np.where(np.isnan(real), 0.0, real) / scales)
    return saturate(steps + zero_points, tensor.dtype)


def quantized_multiplier(real_multiplier):
    """TFLite's QuantizeMultiplier: (int32 mantissa in Q31, shift) with real = m * 2^(shift-31)."""
    if not np.isfinite(real_multiplier):
        raise ModelError(f"quantization scales give the multiplier {real_multiplier}: scales must be finite "
                         "and nonzero")
    if real_multiplier == 0:
        return 0, 0
    mantissa, shift = np.frexp(real_multiplier)
    q = int(round_half_away(mantissa * (1 << 31)))
    if q == (1 << 31):
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q, int(shift)


def multiply_by_quantized_multiplier(x, multiplier, shift):
    """TFLite's MultiplyByQuantizedMultiplier on an int64 array (gemmlowp rounding):
    round(x * multiplier * 2^(shift - 31)) with the exact integer steps TFLite takes."""
    x = np.asarray(x, np.int64)
    multiplier = np.asarray(multiplier, np.int64)
    shift = np.asarray(shift, np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    x = x * (np.int64(1) << left)
    # SaturatingRoundingDoublingHighMul: (a*b + 2^30) >> 31, with nudge toward zero for negatives.
    ab = x * multiplier
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = (ab + nudge)
    high = np.where(high >= 0, high >> 31, -((-high) >> 31))
    # RoundingDivideByPOT: round half away from zero.
    mask = (np.int64(1) << right) - 1
    remainder = high & mask
    threshold = (mask >> 1) + (high < 0)
    return (high >> right) + (remainder > threshold)


_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def _high_mul(a, b):
    """gemmlowp's SaturatingRoundingDoublingHighMul of two int32 values (never both INT32_MIN
    here): multiply_by_quantized_multiplier with no shift."""
    return int(multiply_by_quantized_multiplier(a, b, 0))


def _saturating_shift_left(x, exponent):
    """gemmlowp's SaturatingRoundingMultiplyByPOT<exponent > 0> on an int32 Python int."""
    threshold = (1 << (31 - exponent)) - 1
    return _INT32_MAX if x > threshold else _INT32_MIN if x < -threshold else x << exponent


def inv_sqrt_quantized_multiplier(value):
    """TFLite's GetInvSqrtQuantizedMultiplierExp(value, reverse_shift=-1) for an int32 value >= 0:
    (Q31 multiplier, left shift) of 1 / sqrt(value), by five Newton-Raphson steps in gemmlowp's
    fixed point with 3 integer bits (F3: raw / 2^28), step for step as the C++ rounds."""
    if value <= 1:
        return _INT32_MAX, 0
    shift = 11
    while value >= 1 << 29:
        value //= 4
        shift += 1
    pairs = ((32 - value.bit_length()) - 1) // 2 - 1  # CountLeadingZeros - 1, in bit pairs, less one
    shift -= pairs
    value <<= 2 * pairs
    half_input = value >> 1
    half_input = (half_input >> 1) + ((half_input & 1) > 0)  # RoundingDivideByPOT(., 1), half_input >= 0
    half_three, x = (1 << 28) + (1 << 27), 1 << 28
    for _ in range(5):
        cube = _saturating_shift_left(_high_mul(_high_mul(x, x), x), 6)  # F9 -> F3
        x = _saturating_shift_left(_high_mul(half_three, x) - _high_mul(half_input, cube), 3)  # F6 -> F3
    x = _high_mul(x, 1518500250)  # times sqrt(2) / 2 in Q31
    if shift < 0:
        x, shift = x << -shift, 0
    return x, -shift


def multiply_by_quantized_multiplier_64(x, multiplier, shift):
    """TFLite's MultiplyByQuantizedMultiplier(int64_t x, ...) (the int16 kernels' accumulators):
    the Q31 multiplier rounded to Q15 (0x7FFF at most), then one rounding shift, halves up."""
    multiplier = np.asarray(multiplier, np.int64)
    reduced = np.where(multiplier < 0x7FFF0000, (multiplier + (1 << 15)) >> 16, 0x7FFF)
    total_shift = 15 - np.asarray(shift, np.int64)
    return (np.asarray(x, np.int64) * reduced + (np.int64(1) << (total_shift - 1))) >> total_shift


def multiply_rounding_once(x, multiplier, shift):
    """round(x * multiplier * 2^(shift - 31)), halves up, in one step: TFLite's FULLY_CONNECTED
    kernels rescale this way, where its convolutions round twice (multiply_by_quantized_multiplier)
    and can land one step higher on a value just under a half."""
    total_shift = 31 - np.asarray(shift, np.int64)
    product = np.asarray(x, np.int64) * np.asarray(multiplier, np.int64)
    return (product + (np.int64(1) << (total_shift - 1))) >> total_shift


def quantize_bound(value, tensor):
    """TFLite's Quantize of one activation bound onto a per-tensor quantized output: float32
    division, rounded half away from zero, plus the zero point (an int)."""
    return zero_point_of(tensor) + int(round_half_away(np.float32(value) / np.float32(scale_of(tensor))))


def quantized_activation_range(activation, tensor):
    """(qmin, qmax) of a quantized output after a fused activation, as TFLite's
    CalculateActivationRangeQuantized computes it: the bounds of RELU, RELU_N1_TO_1 and RELU6
    quantized in float32 and cut to the dtype's range; any other activation (TANH, SIGN_BIT
    included) leaves the dtype's whole range."""
    info = np.iinfo(tensor.dtype)
    low, high = _clamp_range(activation)
    qmin = info.min if low == -np.inf else max(info.min, quantize_bound(low, tensor))
    qmax = info.max if high == np.inf else min(info.max, quantize_bound(high, tensor))
    return qmin, qmax
