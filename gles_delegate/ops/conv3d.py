"""CONV_3D (float32), with TFLite's semantics (conv3d.cc, reference_ops::Conv3D): a video or
volume convolution, as litert-torch and TF's converter write torch.nn.Conv3d / tf.nn.conv3d.

input [N, D, H, W, C], filter [KD, KH, KW, C, O], optional bias [O] -> [N, OD, OH, OW, O].
Each spatial dim (depth, height, width) has its stride and dilation and the node's SAME / VALID
padding, computed per dim as CONV_2D's (ComputePadding3DValues: the extra element of an odd
padding after); padded taps read 0. Then the bias and the fused activation (a clamp; TFLite's
CalculateActivationRange). TFLite has no grouped, quantized or hybrid CONV_3D.
"""
import numpy as np

from .checks import MAX_WINDOW_OVERHANG, check_activation, float32_reason, with_arity
from .common import (PADDING_SAME, PADDING_VALID, clamp_to_activation, fused_activation,
                     output_size, padding_before)
from .conv import optional_input

DIMS = ("d", "h", "w")


def strides(node):
    """(stride_d, stride_h, stride_w)."""
    return tuple(node.options.get(f"stride_{d}", 0) for d in DIMS)


def dilations(node):
    """(dilation_d, dilation_h, dilation_w), TFLite's default 1 where absent."""
    return tuple(node.options.get(f"dilation_{d}_factor", 1) for d in DIMS)


def geometry(node, in_dhw, kernel_dhw):
    """(output (OD, OH, OW), padding before (front, top, left)) of the node over an input of
    spatial extents `in_dhw` with a filter of `kernel_dhw`."""
    padding = node.options["padding"]
    out = tuple(output_size(i, k, s, d, padding) for i, k, s, d in zip(in_dhw, kernel_dhw, strides(node),
                                                                       dilations(node)))
    pads = tuple(padding_before(i, k, s, d, o) for i, k, s, d, o in zip(in_dhw, kernel_dhw, strides(node),
                                                                        dilations(node), out))
    return out, pads


def conv_3d(node, inputs):
    """CONV_3D (the module docstring). Accumulates tap by tap, each tap a [.., C] @ [C, O]
    product: no im2col (a video clip's would hold taps times the input)."""
    x, w, bias = inputs[0], inputs[1], optional_input(inputs, 2)
    (od, oh, ow), pads = geometry(node, x.shape[1:4], w.shape[:3])
    steps, rates = strides(node), dilations(node)
    ends = [pad + (out - 1) * s + (k - 1) * r + 1 - size  # padding after, so every tap is in range
            for pad, out, s, k, r, size in zip(pads, (od, oh, ow), steps, w.shape[:3], rates, x.shape[1:4])]
    padded = np.pad(x, [(0, 0)] + [(p, max(e, 0)) for p, e in zip(pads, ends)] + [(0, 0)])
    acc = np.zeros((x.shape[0], od, oh, ow, w.shape[4]), np.float32)
    for kd, kh, kw in np.ndindex(*w.shape[:3]):
        starts = (kd * rates[0], kh * rates[1], kw * rates[2])
        view = padded[:, starts[0]:starts[0] + (od - 1) * steps[0] + 1:steps[0],
                      starts[1]:starts[1] + (oh - 1) * steps[1] + 1:steps[1],
                      starts[2]:starts[2] + (ow - 1) * steps[2] + 1:steps[2]]
        acc += view @ w[kd, kh, kw]
    if bias is not None:
        acc += bias
    return [clamp_to_activation(acc, fused_activation(node))]


def _options_reason(node):
    if node.options.get("padding") not in (PADDING_SAME, PADDING_VALID):
        return f"padding {node.options.get('padding')} is not SAME or VALID"
    if min(strides(node)) < 1:
        return f"strides {list(strides(node))} (d, h, w) must be >= 1"
    if min(dilations(node)) < 1:
        return f"dilations {list(dilations(node))} (d, h, w) must be >= 1"
    return check_activation(node)


def _support(node):
    x, w, bias = node.inputs[0], node.inputs[1], optional_input(node.inputs, 2)
    if len(x.shape) != 5 or len(w.shape) != 5:
        return f"input rank {len(x.shape)} and filter rank {len(w.shape)} must be 5"
    if x.shape[4] != w.shape[3]:
        return f"filter input channels {w.shape[3]} differ from the input's {x.shape[4]}"
    if bias is not None and bias.size != w.shape[4]:
        return f"bias has {bias.size} elements, the filter {w.shape[4]} output channels"
    reason = float32_reason(node) or _options_reason(node)
    if reason:
        return reason
    for size, k, d in zip(x.shape[1:4], w.shape[:3], dilations(node)):
        if (k - 1) * d + 1 > 2 * size + MAX_WINDOW_OVERHANG:
            return (f"window extent {(k - 1) * d + 1} (kernel {k}, dilation {d}) is far larger than the "
                    f"input extent {size}")
    out, _ = geometry(node, x.shape[1:4], w.shape[:3])
    return None if min(out) >= 1 else f"output size {'x'.join(map(str, out))}: the window does not fit the input"


def _output_shape(node, shapes, values):
    x, w = shapes[0], shapes[1]
    out, _ = geometry(node, x[1:4], w[:3])
    return [(x[0], *out, w[4])]


KERNELS = {"CONV_3D": conv_3d}
SUPPORT = {"CONV_3D": with_arity(2, 1, _support)}
OUTPUT_SHAPES = {"CONV_3D": _output_shape}
