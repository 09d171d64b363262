"""Hybrid (dynamic-range quantized) CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED: float32 input
and output, int8 weights (per tensor or per output channel, zero point 0), float32 bias.

TFLite quantizes the float input on the fly, accumulates integers, and scales back:
  1. every batch item (an image for the convolutions, a row of K values for FULLY_CONNECTED) is
     quantized to int8 with its own scaling factor (tensor_utils::SymmetricQuantizeFloats, or
     AsymmetricQuantizeFloats with an offset);
  2. (q - offset) * w is summed exactly (int32 in TFLite, exact float64 integers here; the padding
     of a convolution reads as the offset, i.e. as 0);
  3. acc * scaling_factor * filter_scale[channel] in float32, + bias, then the fused activation.
Against LiteRT 2.3's builtin kernels (x86) the results are bit-exact (measured on one-op models
and on every hybrid node of a dynamic-range MobileNet v1).
Which quantization step 1 uses (measured against LiteRT 2.3's builtin kernels, and what TFLite's
sources do): CONV_2D symmetric when its filter has one scale (or several equal ones: TFLite then
takes its per-tensor path), else asymmetric; DEPTHWISE_CONV_2D always asymmetric, and its filter
must be quantized per channel (TFLite refuses one scale for several channels); FULLY_CONNECTED
as its asymmetric_quantize_inputs option says. A missing bias is a zero bias (LiteRT refuses a
hybrid CONV_2D / DEPTHWISE_CONV_2D without one, as it refuses a float one: ops/conv.py accepts
those too).

Its kernels are candidates tried before ops/conv.py's (ops/__init__.py's ORDER): SUPPORT here
refuses every non-hybrid node, which ops/conv.py then runs. ops/conv.py's own SUPPORT
keeps refusing hybrid nodes, and the GPU convolution kernels, which check with it, too: they run
float32 weights only; the delegate runs a hybrid node on the GPU through quant.float_view, which
dequantizes its weights (as TFLite's GPU delegate does).

Non-finite inputs are undefined behaviour in TFLite's quantization; here NaN counts as 0 and
+-inf as +-FLT_MAX, so they never crash.
"""
import functools

import numpy as np

from . import conv
from .checks import Unimplemented, with_arity
from .common import apply_activation, clamp_to_activation, fused_activation, round_half_away

F32, I8 = np.dtype(np.float32), np.dtype(np.int8)
HYBRID_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
_FLT_MAX = float(np.finfo(np.float32).max)


def is_hybrid(node):
    """True for a node of HYBRID_OPS with a float32 input and an integer filter."""
    if node.op not in HYBRID_OPS or len(node.inputs) < 2 or any(t is None for t in node.inputs[:2]):
        return False
    x_t, w_t = node.inputs[:2]
    return x_t.dtype == F32 and w_t.dtype is not None and w_t.dtype.kind in "iu"


# -- step 1: quantizing the input on the fly ------------------------------------------------
def symmetric_quantize(rows):
    """TFLite's SymmetricQuantizeFloats of every row of a float32 array [R, n]: returns
    (q as float64 [R, n] in [-127, 127], scaling factors float32 [R], offsets int64 [R] = 0).
    scale = max|row| / 127 and q = round(x * (127 / max|row|)), all in float32; a row of zeros
    gets scale 1."""
    rows = _finite(rows)
    extent = np.max(np.abs(rows), axis=1, initial=np.float32(0))
    zero = extent == 0
    safe = np.where(zero, np.float32(1), extent)
    factors = np.where(zero, np.float32(1), safe / np.float32(127)).astype(F32)
    inverse = (np.float32(127) / safe).astype(F32)
    q = np.clip(round_half_away((rows * inverse[:, None]).astype(F32)), -127, 127)
    q[zero] = 0
    return q.astype(np.float64), factors, np.zeros(len(rows), np.int64)


def asymmetric_quantize(rows):
    """TFLite's AsymmetricQuantizeFloats of every row of a float32 array [R, n]: returns
    (q - offset as float64 [R, n], scaling factors float32 [R], offsets int64 [R]).
    The range [min(0, row), max(0, row)] maps onto [-128, 127]: scale = (max - min) / 255; the
    offset is the zero point that range implies with the smaller error, rounded half away from
    zero and nudged into [-128, 127]; q = offset + round(x * (1 / scale)), rounded half away from
    zero. A row of zeros gets scale 1 and offset 0. All of it in float32, with q rounded before
    the offset is added: what LiteRT 2.3 computes on x86, bit for bit (measured; TFLite's
    portable kernel works in double and rounds offset + x / scale, which differs in the last bit
    of the scale and where x / scale is an exact half)."""
    rows = _finite(rows)
    rmin = np.minimum(np.float32(0), np.min(rows, axis=1, initial=np.float32(0)))
    rmax = np.maximum(np.float32(0), np.max(rows, axis=1, initial=np.float32(0)))
    flat = rmin == rmax
    scale = np.where(flat, np.float32(1), (rmax - rmin) / np.float32(255)).astype(F32)
    low, high = (rmin / scale).astype(F32), (rmax / scale).astype(F32)
    use_min = np.float32(128) + np.abs(low) < np.float32(127) + np.abs(high)
    zero_point = np.where(use_min, np.float32(-128) - low, np.float32(127) - high).astype(F32)
    offsets = np.where(zero_point <= -128, -128, np.where(zero_point >= 127, 127, round_half_away(zero_point)))
    offsets = np.where(flat, 0, offsets).astype(np.int64)
    inverse = (np.float32(1) / scale).astype(F32)
    q = np.clip(offsets[:, None] + round_half_away((rows * inverse[:, None]).astype(F32)), -128, 127)
    q[flat] = 0
    return q - offsets[:, None], scale, offsets


def _finite(rows):
    return np.nan_to_num(np.asarray(rows, F32), nan=0.0, posinf=_FLT_MAX, neginf=-_FLT_MAX)


def _quantized_batches(x, asymmetric):
    """x [N, ...] quantized per batch item: (centred q, same shape, as float64; factors [N])."""
    rows = x.reshape(x.shape[0], -1)
    q, factors, _ = (asymmetric_quantize if asymmetric else symmetric_quantize)(rows)
    return q.reshape(x.shape), factors


# -- step 3: scaling back --------------------------------------------------------------------
def _scaled(acc, factors, filter_scales, bias, filter_scale_first=False):
    """acc [N, ..., O] exact integers -> float32 acc * factor[n] * filter_scale[o] + bias, in
    the order TFLite's kernels multiply (measured bit-exact against LiteRT 2.3): CONV_2D and
    FULLY_CONNECTED scale by the product factor * filter_scale, DEPTHWISE_CONV_2D by the
    filter scale first (`filter_scale_first`), then by the factor."""
    factors = factors.reshape((-1,) + (1,) * (acc.ndim - 1))
    acc = acc.astype(F32)
    if filter_scale_first:
        out = (acc * filter_scales).astype(F32) * factors
    else:
        out = acc * (factors * filter_scales).astype(F32)
    return out if bias is None else out + np.asarray(bias, F32)


def _filter_scales(filter_t, channels):
    """The filter's scales as float32 [channels] (one scale repeated for every channel)."""
    scales = filter_t.quantization.scales.astype(F32)
    return np.broadcast_to(scales, (channels,)) if scales.size == 1 else scales


def _conv_is_per_channel(filter_t):
    """TFLite's is_hybrid_per_channel: several scales, not all equal."""
    scales = filter_t.quantization.scales.astype(F32)
    return scales.size > 1 and bool(np.any(scales != scales[0]))


# -- kernels ---------------------------------------------------------------------------------
def hybrid_conv_2d(node, inputs):
    """Hybrid CONV_2D: per image, symmetric (one filter scale) or asymmetric (per channel)."""
    x, w, bias = inputs[0], inputs[1], conv.optional_input(inputs, 2)
    xc, factors = _quantized_batches(x, _conv_is_per_channel(node.inputs[1]))
    acc = conv.conv_2d_accumulators(node, xc, np.asarray(w, np.float64))
    out = _scaled(acc, factors, _filter_scales(node.inputs[1], w.shape[0]), bias)
    return [clamp_to_activation(out, fused_activation(node))]


def hybrid_depthwise_conv_2d(node, inputs):
    """Hybrid DEPTHWISE_CONV_2D: per image, asymmetric, per-channel filter scales."""
    x, w, bias = inputs[0], inputs[1], conv.optional_input(inputs, 2)
    xc, factors = _quantized_batches(x, asymmetric=True)
    acc = conv.depthwise_accumulators(node, xc, np.asarray(w, np.float64))
    out = _scaled(acc, factors, _filter_scales(node.inputs[1], w.shape[3]), bias, filter_scale_first=True)
    return [clamp_to_activation(out, fused_activation(node))]


def hybrid_fully_connected(node, inputs):
    """Hybrid FULLY_CONNECTED: per row of K values, asymmetric_quantize_inputs decides. The
    activation is TFLite's ApplyActivationToVector (no clamp to the float range)."""
    x, w, bias = inputs[0], inputs[1], conv.optional_input(inputs, 2)
    rows = np.asarray(x).reshape(-1, w.shape[1])
    q, factors, _ = (asymmetric_quantize if node.options.get("asymmetric_quantize_inputs", False)
                     else symmetric_quantize)(rows)
    acc = q @ np.asarray(w, np.float64).T
    out = apply_activation(_scaled(acc, factors, _filter_scales(node.inputs[1], w.shape[0]), bias),
                           fused_activation(node))
    if node.options.get("keep_num_dims", False):
        out = out.reshape(x.shape[:-1] + (w.shape[0],))
    return [out]


def _kernel(hybrid_kernel):
    """hybrid_kernel with numpy's overflow / invalid warnings off (huge or non-finite inputs give
    non-finite outputs, as in TFLite, and no warning)."""
    def kernel(node, inputs):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return hybrid_kernel(node, inputs)
    return kernel


KERNELS = {"CONV_2D": _kernel(hybrid_conv_2d), "DEPTHWISE_CONV_2D": _kernel(hybrid_depthwise_conv_2d),
           "FULLY_CONNECTED": _kernel(hybrid_fully_connected)}


# -- support checks --------------------------------------------------------------------------
def _hybrid_operands(node, input_t, filter_t, bias_t, out_channels, channel_axis):
    """Why a hybrid node's types and quantization are unsupported, or None (the `operands`
    check of ops/conv.py's support functions)."""
    output_t = node.outputs[0]
    if filter_t.sparsity is not None:
        return "sparse weights (densify them first)"
    if filter_t.dtype != I8:
        return f"hybrid {node.op} with {filter_t.dtype} weights (TFLite's hybrid kernels take int8)"
    if output_t.dtype != F32:
        return f"hybrid {node.op}: input float32, filter int8, output {output_t.dtype} (must be float32)"
    if bias_t is not None and (bias_t.dtype != F32 or tuple(bias_t.shape) != (out_channels,)):
        return f"bias {bias_t.dtype} {list(bias_t.shape)}, expected float32 [{out_channels}]"
    q = filter_t.quantization
    if q is None or q.scales.size == 0:
        return f"filter tensor {filter_t.index} is int8 but has no quantization"
    if not np.all(q.scales > 0) or not np.all(np.isfinite(q.scales)):
        return f"filter tensor {filter_t.index} has a non-positive or non-finite scale"
    if node.op == "CONV_2D" and input_t.shape[3] != filter_t.shape[3]:
        # TFLite quantizes a grouped hybrid convolution's input per pixel and group, not per image.
        return Unimplemented("grouped hybrid CONV_2D is not supported")
    if node.op == "DEPTHWISE_CONV_2D" and q.scales.size != out_channels:
        return (f"hybrid DEPTHWISE_CONV_2D needs one filter scale per output channel ({out_channels}), "
                f"got {q.scales.size}")
    return conv.check_filter_quantization(filter_t, channel_axis)


def _support(check):
    """SUPPORT of a hybrid op: ops/conv.py's shape and option checks with _hybrid_operands; a
    node that is not hybrid is ops/conv.py's."""
    hybrid = with_arity(2, 1, functools.partial(check, operands=_hybrid_operands))

    def support(node):
        return hybrid(node) if is_hybrid(node) else "not hybrid (a float32 input and integer weights)"
    return support


SUPPORT = {"CONV_2D": _support(conv.support_conv_2d),
           "DEPTHWISE_CONV_2D": _support(conv.support_depthwise_conv_2d),
           "FULLY_CONNECTED": _support(conv.support_fully_connected)}
