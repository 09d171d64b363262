"""Normalizations over the channel (last) axis: L2_NORMALIZATION and LOCAL_RESPONSE_NORMALIZATION,
with TFLite's semantics (l2norm.cc, local_response_norm.cc).

Both square the inputs and sum them in float32 as TFLite does, so that a square that overflows
(|x| > 1.8e19) or underflows (|x| < 1e-23) does so here too; the summation order differs
(numpy's pairwise and window sums against TFLite's running ones), which tests/tolerance.py's
sum_bound covers.

L2_NORMALIZATION takes any rank >= 1 (LiteRT's Prepare; TensorFlow's older one took <= 4) and
int8 / uint8 as well, with TFLite's fixed output quantization (scale 1/128, zero point 0 for
int8, 128 for uint8: outputs in [-1, 127/128]) and its integer kernels: the squares of the
inputs' integer distances to their zero point summed exactly, 1 / sqrt of the sum in gemmlowp's
fixed point, no epsilon (an all-zero row gives zeros).
"""
import numpy as np

from .checks import Unimplemented, float32_reason, quantization_reason, with_arity
from .common import (ACT_NONE, fused_activation, inv_sqrt_quantized_multiplier, multiply_by_quantized_multiplier,
                     saturate, scale_of, zero_point_of)

F32 = np.dtype(np.float32)
L2_EPSILON = np.float32(1e-6)  # l2norm.cc: the norm is at least this, so zeros stay zeros
# l2norm.cc's Prepare: the 8-bit output's zero point by type; its scale is exactly 1/128.
L2_OUTPUT_ZERO_POINT = {np.dtype(np.int8): 0, np.dtype(np.uint8): 128}
L2_OUTPUT_SCALE = 1.0 / 128
L2_OUTPUT_SHIFT = 7  # the int8 kernel's output is in Q7 (a scale of 1/128)


def l2_normalization(node, inputs):
    """L2_NORMALIZATION: x [..., C] -> x / max(sqrt(sum over C of x^2), 1e-6)."""
    x = inputs[0]
    if x.dtype != F32:
        return [_l2_normalization_8bit(node, x)]
    with np.errstate(all="ignore"):  # overflowing squares, inf / inf: IEEE results, as in C++
        squares = np.sum(x * x, axis=-1, keepdims=True, dtype=np.float32)
        return [np.asarray(x / np.maximum(np.sqrt(squares), L2_EPSILON), dtype=F32)]


def _l2_normalization_8bit(node, x):
    """reference_integer_ops::L2Normalization (int8) and reference_ops::L2Normalization (uint8),
    step for step: out = 128 diff / sqrt(sum diff^2), diff = q - zero point."""
    diff = x.astype(np.int64) - zero_point_of(node.inputs[0])
    # 1 / sqrt of each row's sum of squares, once per distinct sum (a Python loop of fixed point).
    totals, row_of = np.unique(np.sum(diff * diff, axis=-1, keepdims=True), return_inverse=True)
    pairs = np.array([inv_sqrt_quantized_multiplier(int(t)) for t in totals], np.int64).reshape(-1, 2)
    multiplier, shift = (pairs[:, k][row_of].reshape(diff.shape[:-1] + (1,)) for k in (0, 1))
    if x.dtype == np.int8:
        out = multiply_by_quantized_multiplier(diff, multiplier, shift + L2_OUTPUT_SHIFT)
    else:  # MultiplyByQuantizedMultiplierSmallerThanOneExp(128 diff, ...) + 128 (shift <= 0)
        out = multiply_by_quantized_multiplier(128 * diff, multiplier, shift) + 128
    return saturate(out, x.dtype)


def _l2_support(node):
    x, out = node.inputs[0], node.outputs[0]
    if len(x.shape) == 0:
        return "input must have at least one dimension"
    if fused_activation(node) != ACT_NONE:
        # l2norm.cc applies none (it requires NONE).
        return Unimplemented(f"fused activation {fused_activation(node)} is not supported (only NONE)")
    if x.dtype not in L2_OUTPUT_ZERO_POINT or out.dtype != x.dtype:
        return float32_reason(node)
    reason = quantization_reason(node, [x, out])
    if reason:
        return reason
    if scale_of(out) != L2_OUTPUT_SCALE or zero_point_of(out) != L2_OUTPUT_ZERO_POINT[out.dtype]:
        return (f"{out.dtype} output must have scale 1/128 and zero point {L2_OUTPUT_ZERO_POINT[out.dtype]}, "
                f"got {scale_of(out)} and {zero_point_of(out)}")
    return None


def lrn_options(node):
    """(radius, bias, alpha, beta) of a LOCAL_RESPONSE_NORMALIZATION node."""
    options = node.options
    return (int(options.get("radius", 0)), np.float32(options.get("bias", 0.0)), np.float32(options.get("alpha", 0.0)),
            np.float32(options.get("beta", 0.0)))


def window_sums(values, radius):
    """Sum of values[..., c - radius .. c + radius] (clipped to the axis) for every c, float32."""
    depth = values.shape[-1]
    radius = min(radius, depth)  # a wider window sums the whole axis anyway
    padded = np.pad(values, [(0, 0)] * (values.ndim - 1) + [(radius, radius)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * radius + 1, axis=-1)
    return np.sum(windows, axis=-1, dtype=np.float32)


def local_response_normalization(node, inputs):
    """LOCAL_RESPONSE_NORMALIZATION: x [N, H, W, C] -> x * (bias + alpha * sum of x^2 over
    channels c - radius .. c + radius)^-beta."""
    x = inputs[0]
    radius, bias, alpha, beta = lrn_options(node)
    with np.errstate(all="ignore"):
        scale = bias + alpha * window_sums(x * x, radius)
        return [np.asarray(x * np.power(scale, -beta), dtype=F32)]


def _lrn_support(node):
    if len(node.inputs[0].shape) != 4:
        return f"input must be 4-D, got rank {len(node.inputs[0].shape)}"
    if int(node.options.get("radius", 0)) < 0:
        # LiteRT's kernel corrupts memory with a negative radius.
        return f"radius {node.options.get('radius')} must be >= 0"
    return float32_reason(node)


KERNELS = {"L2_NORMALIZATION": l2_normalization, "LOCAL_RESPONSE_NORMALIZATION": local_response_normalization}
SUPPORT = {"L2_NORMALIZATION": with_arity(1, 0, _l2_support),
           "LOCAL_RESPONSE_NORMALIZATION": with_arity(1, 0, _lrn_support)}
OUTPUT_SHAPES = {op: lambda node, shapes, values: [shapes[0]] for op in KERNELS}
