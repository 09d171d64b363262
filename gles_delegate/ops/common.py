"""Semantics shared by the reference kernels: padding, fused activations, quantization."""
import numpy as np

from ..errors import ModelError

PADDING_SAME, PADDING_VALID = 0, 1
# ActivationFunctionType in the schema.
ACT_NONE, ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6, ACT_TANH, ACT_SIGN_BIT = range(6)


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


def activation_range(activation):
    """(low, high) clamp of a fused activation, or None for TANH / SIGN_BIT (not a clamp)."""
    return {ACT_NONE: (-np.inf, np.inf), ACT_RELU: (0.0, np.inf), ACT_RELU_N1_TO_1: (-1.0, 1.0),
            ACT_RELU6: (0.0, 6.0)}.get(activation)


def apply_activation(x, activation, node=None):
    """Apply a fused activation function (options['fused_activation_function']) to float x."""
    if activation == ACT_TANH:
        return np.tanh(x)
    if activation == ACT_SIGN_BIT:
        return np.signbit(x).astype(x.dtype)
    bounds = activation_range(activation)
    if bounds is None:
        where = f" of operator {node.label}" if node is not None else ""
        raise ModelError(f"unknown fused activation {activation}{where}")
    low, high = bounds
    if low == -np.inf and high == np.inf:
        return x
    return np.clip(x, low, high).astype(x.dtype, copy=False)


def fused_activation(node):
    return node.options.get("fused_activation_function", ACT_NONE)


# -- quantization -------------------------------------------------------------------------
def quant_params(tensor, channel_axis_size=None):
    """(scales, zero_points) of a quantized tensor as float64 / int64 arrays shaped to broadcast
    along its quantized dimension."""
    q = tensor.quantization
    if q is None:
        raise ModelError(f"tensor {tensor.index} ({tensor.name!r}) is {tensor.dtype} but has no quantization")
    scales, zero_points = q.scales.astype(np.float64), q.zero_points.astype(np.int64)
    if scales.size > 1:
        shape = [1] * len(tensor.shape)
        shape[q.quantized_dimension] = scales.size
        scales, zero_points = scales.reshape(shape), zero_points.reshape(shape)
    return scales, zero_points


def dequantize(tensor, values):
    """Real values of a quantized tensor's integer array (float32)."""
    scales, zero_points = quant_params(tensor)
    return ((values.astype(np.int64) - zero_points) * scales).astype(np.float32)


def round_half_away(x):
    """TFLite's rounding (std::round / TfLiteRound): halves go away from zero."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def quantize(tensor, real):
    """Quantize float values to a tensor's integer dtype with its scale and zero point."""
    scales, zero_points = quant_params(tensor)
    info = np.iinfo(tensor.dtype)
    q = round_half_away(np.asarray(real, np.float64) / scales) + zero_points
    return np.clip(q, info.min, info.max).astype(tensor.dtype)


def is_quantized(tensor):
    return tensor is not None and tensor.dtype is not None and tensor.dtype.kind in "iu" and \
        tensor.quantization is not None and tensor.dtype != np.int32


def quantized_multiplier(real_multiplier):
    """TFLite's QuantizeMultiplier: (int32 mantissa in Q31, shift) with real = m * 2^(shift-31)."""
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


def quantized_activation_range(activation, tensor):
    """(qmin, qmax) of a quantized output after a fused activation, as TFLite computes it."""
    info = np.iinfo(tensor.dtype)
    scale, zero_point = float(tensor.quantization.scales[0]), int(tensor.quantization.zero_points[0])
    bounds = activation_range(activation)
    if bounds is None:
        raise ModelError(f"fused activation {activation} is not supported on quantized tensor {tensor.index}")
    low, high = bounds

    def q(v):
        return zero_point + int(round_half_away(v / scale))
    qmin = info.min if low == -np.inf else max(info.min, q(low))
    qmax = info.max if high == np.inf else min(info.max, q(high))
    return qmin, qmax
