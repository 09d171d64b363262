"""SOFTMAX (beta, float32 / int8 / uint8) and LOG_SOFTMAX (float32) over the last axis.

8-bit SOFTMAX follows LiteRT's optimized x86 kernel: a float32 table of exp(-scale * beta * d)
for the 256 possible distances d to the row maximum, normalized in float32 and quantized to
TFLite's fixed output quantization (scale 1/256; zero point -128 for int8, 0 for uint8).
"""
import numpy as np

from .checks import Unimplemented, arity_reason
from .common import round_half_away, saturate, scale_of, zero_point_of

_FLOAT = np.dtype(np.float32)
# TFLite's required output zero point per 8-bit type; the scale is 1/256 for both.
_OUTPUT_ZERO_POINT = {np.dtype(np.int8): -128, np.dtype(np.uint8): 0}
_OUTPUT_SCALE = 1.0 / 256


def _beta(node):
    return np.float32(node.options.get("beta", 0.0))


def _shifted(x):
    """x minus its row maximum (float32), so exp never overflows."""
    return x - np.max(x, axis=-1, keepdims=True)


def softmax(node, inputs):
    """SOFTMAX over the last axis: exp(beta * (x - max)) / sum."""
    x = inputs[0]
    if x.dtype != _FLOAT:
        return [_softmax_8bit(node, x)]
    exps = np.exp(_shifted(x) * _beta(node))
    return [(exps / np.sum(exps, axis=-1, keepdims=True, dtype=np.float32)).astype(np.float32)]


def _softmax_8bit(node, x):
    """PopulateSoftmaxLookupTable + optimized_ops::Softmax<In, Out> in their float32 steps."""
    out = node.outputs[0]
    in_scale = np.float32(scale_of(node.inputs[0]))
    distances = np.arange(256, dtype=np.float32)
    table = np.exp(-in_scale * _beta(node) * distances)
    exps = table[np.max(x, axis=-1, keepdims=True).astype(np.int64) - x.astype(np.int64)]
    inverse_sum = np.float32(1) / (np.sum(exps, axis=-1, keepdims=True, dtype=np.float32)
                                   * np.float32(scale_of(out)))
    scaled = exps * inverse_sum
    if x.dtype == np.uint8:
        # The x86 uint8 path adds 0.5 and truncates, and ignores the (zero) zero point.
        quantized = np.trunc(scaled + np.float32(0.5))
    else:
        quantized = round_half_away(scaled) + zero_point_of(out)
    return saturate(quantized, x.dtype)


def log_softmax(node, inputs):
    """LOG_SOFTMAX over the last axis: (x - max) - log(sum(exp(x - max)))."""
    shifted = _shifted(inputs[0])
    return [(shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True, dtype=np.float32)))
            .astype(np.float32)]


def _softmax_support(node):
    reason = arity_reason(node, 1)
    if reason:
        return reason
    x, out = node.inputs[0], node.outputs[0]
    if x.dtype == _FLOAT and out.dtype == _FLOAT:
        return None if x.shape else "needs an input of rank >= 1"
    if x.dtype not in _OUTPUT_ZERO_POINT or out.dtype != x.dtype:
        return Unimplemented(f"input {x.dtype} / output {out.dtype}: only float32, int8 and uint8 in and out")
    if x.quantization is None or out.quantization is None:
        return "8-bit SOFTMAX needs quantized input and output"
    zero_point, scale = zero_point_of(out), scale_of(out)
    # TFLite's Prepare accepts the scale within 0.1% of 1/256.
    if zero_point != _OUTPUT_ZERO_POINT[x.dtype] or abs(scale - _OUTPUT_SCALE) > 0.001 * _OUTPUT_SCALE:
        return (f"{out.dtype} output must have scale 1/256 and zero point {_OUTPUT_ZERO_POINT[x.dtype]}, "
                f"got {scale} and {zero_point}")
    return None


def _log_softmax_support(node):
    reason = arity_reason(node, 1)
    if reason is None and (node.inputs[0].dtype != _FLOAT or node.outputs[0].dtype != _FLOAT):
        reason = Unimplemented("only float32 is supported")
    if reason is None and not node.inputs[0].shape:
        reason = "needs an input of rank >= 1"
    return reason


KERNELS = {"SOFTMAX": softmax, "LOG_SOFTMAX": log_softmax}
SUPPORT = {"SOFTMAX": _softmax_support, "LOG_SOFTMAX": _log_softmax_support}
OUTPUT_SHAPES = {op: lambda node, shapes, values: [shapes[0]] for op in KERNELS}
