"""Pooling: AVERAGE_POOL_2D and MAX_POOL_2D over NHWC (float32, int8, uint8), L2_POOL_2D (float32).

All read only in-bounds elements: the padding neither wins a max nor counts in an average.
Quantized pooling works on the raw integers (TFLite requires the output to share the input's
scale and zero point and never rescales); only the fused activation clamp reads the output's
quantization.
"""
import numpy as np

from .checks import Unimplemented, check_output_size, check_window_options, with_arity
from ..errors import ModelError
from .common import (clamp_to_activation, fused_activation, is_quantized, quantized_activation_range,
                     spatial_geometry, strides_of, window_taps)

_DTYPES = (np.dtype(np.float32), np.dtype(np.int8), np.dtype(np.uint8))


def _filter_hw(node):
    return node.options.get("filter_height", 0), node.options.get("filter_width", 0)


def _windows(node, x, fill):
    """The window taps of a pooling node over x [N, H, W, C] (see common.window_taps).

    A ModelError when no window fits x: SUPPORT refuses such a node as the model declares it, but
    a resized input can shrink below a VALID window. TFLite's pool then outputs an empty tensor
    that the next node refuses (XNNPACK fails to reshape or averages over the padding): it is
    the model's error, said where it arises."""
    filter_hw, strides = _filter_hw(node), strides_of(node)
    reason = check_output_size(node, x.shape[1:3], filter_hw, strides, (1, 1))
    if reason is not None:
        raise ModelError(f"{filter_hw[0]}x{filter_hw[1]} window over a {x.shape[1]}x{x.shape[2]} input: {reason}")
    oh, ow, pad_top, pad_left = spatial_geometry(x.shape[1:3], filter_hw, strides, (1, 1), node.options["padding"])
    return window_taps(x, filter_hw, strides, (1, 1), (oh, ow), (pad_top, pad_left), fill, skip_padding=True)


def _finish(node, result):
    """Apply the fused activation: TFLite's float clamp (+-inf to +-FLT_MAX too), or the quantized
    clamp of the output."""
    output_t = node.outputs[0]
    if not is_quantized(output_t):
        return clamp_to_activation(result.astype(np.float32, copy=False), fused_activation(node))
    qmin, qmax = quantized_activation_range(fused_activation(node), output_t)
    return np.clip(result, qmin, qmax).astype(output_t.dtype)


def max_pool_2d(node, inputs):
    """MAX_POOL_2D: [N, H, W, C] -> [N, OH, OW, C], the max over each window's in-bounds elements."""
    x = inputs[0]
    lowest = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    result = None
    for _, _, view in _windows(node, x, lowest):
        result = view.copy() if result is None else np.fmax(result, view, out=result)
    if x.dtype.kind == "f":
        # TFLite's MaxPool starts at the lowest float and takes std::max(acc, tap): a NaN tap
        # never wins (fmax skips it) and a window of NaNs only gives the lowest float.
        result[np.isnan(result)] = np.finfo(x.dtype).min
    return [_finish(node, result)]


def _window_sums(node, values):
    """(sum, count) of each window's in-bounds elements of values [N, H, W, C]: arrays
    [N, OH, OW, C] (the sums' dtype) and [1, OH, OW, 1] (int64)."""
    in_bounds = np.ones((1,) + values.shape[1:3] + (1,), np.int64)
    return (sum(view for _, _, view in _windows(node, values, 0)),
            sum(view for _, _, view in _windows(node, in_bounds, 0)))


def average_pool_2d(node, inputs):
    """AVERAGE_POOL_2D: [N, H, W, C] -> [N, OH, OW, C], the mean of each window's in-bounds
    elements. Quantized: the integer sum divided by the count, rounded half away from zero."""
    x = inputs[0]
    total, count = _window_sums(node, x.astype(np.float32 if x.dtype.kind == "f" else np.int64))
    if x.dtype.kind == "f":
        return [_finish(node, total / count.astype(np.float32))]
    # TFLite: (sum +- count / 2) / count with C's truncating division.
    rounded = np.sign(total) * ((np.abs(total) + count // 2) // count)
    return [_finish(node, rounded)]


def l2_pool_2d(node, inputs):
    """L2_POOL_2D (float32): [N, H, W, C] -> [N, OH, OW, C], the square root of the mean square
    of each window's in-bounds elements, then the fused activation (TFLite's L2Pool)."""
    x = inputs[0].astype(np.float32, copy=False)
    with np.errstate(over="ignore", invalid="ignore"):
        total, count = _window_sums(node, x * x)
        return [_finish(node, np.sqrt(total / count.astype(np.float32)))]


def support_pool(node):
    """Why a pooling node is unsupported, or None."""
    x_t, output_t = node.inputs[0], node.outputs[0]
    if len(x_t.shape) != 4:
        return f"input has rank {len(x_t.shape)}, expected 4"
    dtypes = _DTYPES[:1] if node.op == "L2_POOL_2D" else _DTYPES  # TFLite's L2 pool is float32 only
    if x_t.dtype not in dtypes or output_t.dtype != x_t.dtype:
        return Unimplemented(f"input {x_t.dtype} -> output {output_t.dtype} (supported: "
                             f"{', '.join(d.name for d in dtypes)}, unchanged)")
    if x_t.dtype != np.float32 and (output_t.quantization is None or output_t.quantization.scales.size != 1):
        return f"output tensor {output_t.index} must be quantized per tensor"
    if min(_filter_hw(node)) < 1:
        return f"filter {list(_filter_hw(node))} must be >= 1"
    return check_window_options(node, with_dilation=False) or \
        check_output_size(node, x_t.shape[1:3], _filter_hw(node), strides_of(node), (1, 1))


KERNELS = {"AVERAGE_POOL_2D": average_pool_2d, "MAX_POOL_2D": max_pool_2d, "L2_POOL_2D": l2_pool_2d}
SUPPORT = {op: with_arity(1, 0, support_pool) for op in KERNELS}


def _pooled_shape(node, shapes, values):
    n, h, w, c = shapes[0]
    oh, ow, _, _ = spatial_geometry((h, w), _filter_hw(node), strides_of(node), (1, 1), node.options["padding"])
    return [(n, oh, ow, c)]


OUTPUT_SHAPES = {op: _pooled_shape for op in KERNELS}
