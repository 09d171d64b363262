"""CONV_3D and CONV_3D_TRANSPOSE (float32), with TFLite's semantics (conv3d.cc, conv3d_transpose.cc,
reference_ops::Conv3D / Conv3DTranspose): video and volume convolutions, as litert-torch and TF's
converter write torch.nn.Conv3d / tf.nn.conv3d and Keras' Conv3DTranspose (a 3D U-Net's decoder).

CONV_3D: input [N, D, H, W, C], filter [KD, KH, KW, C, O], optional bias [O] -> [N, OD, OH, OW, O].
Each spatial dim (depth, height, width) has its stride and dilation and the node's SAME / VALID
padding, computed per dim as CONV_2D's (ComputePadding3DValues: the extra element of an odd
padding after); padded taps read 0. Then the bias and the fused activation (a clamp; TFLite's
CalculateActivationRange). TFLite has no grouped or hybrid CONV_3D.

CONV_3D_TRANSPOSE: output_shape [5] (int32), filter [KD, KH, KW, O, C], input [N, D, H, W, C],
optional bias [O] -> output_shape: input voxel i adds tap k times its channels to output voxel
i * stride - pad + k * dilation (per dim; what falls outside the output is dropped), the padding
being the one a CONV_3D of the output's extents with this filter would have, whose output must
be the input's extents. Then the bias and the clamp. Its int8 / int16 variants are LiteRT's.
"""
import dataclasses

import numpy as np

from .checks import MAX_WINDOW_OVERHANG, Unimplemented, check_activation, float32_reason, node_error, with_arity
from .common import (PADDING_SAME, PADDING_VALID, clamp_to_activation, fused_activation, output_size,
                     padding_before)
from .conv import optional_input

DIMS = ("d", "h", "w")


def strides(node):
    """(stride_d, stride_h, stride_w)."""
    return tuple(node.options.get(f"stride_{d}", 0) for d in DIMS)


def dilations(node):
    """(dilation_d, dilation_h, dilation_w), TFLite's default 1 where absent."""
    return tuple(node.options.get(f"dilation_{d}_factor", 1) for d in DIMS)


def geometry(node, in_dhw, kernel_dhw):
    """(output (OD, OH, OW), padding before (front, top, left)) of the node's convolution over an
    input of spatial extents `in_dhw` with a filter of `kernel_dhw` (for CONV_3D_TRANSPOSE: of the
    forward convolution it inverts, over an input of the output's extents)."""
    padding = node.options["padding"]
    out = tuple(output_size(i, k, s, d, padding) for i, k, s, d in zip(in_dhw, kernel_dhw, strides(node),
                                                                       dilations(node)))
    pads = tuple(padding_before(i, k, s, d, o) for i, k, s, d, o in zip(in_dhw, kernel_dhw, strides(node),
                                                                        dilations(node), out))
    return out, pads


def _taps(kernel, rates, steps, counts):
    """Per tap (kd, kh, kw): its start (k * dilation) per dim and the slices, per dim, of `counts`
    positions `steps` apart from there."""
    for tap in np.ndindex(*kernel):
        starts = [k * r for k, r in zip(tap, rates)]
        yield tap, tuple(slice(b, b + (n - 1) * s + 1, s) for b, n, s in zip(starts, counts, steps))


def conv_3d(node, inputs):
    """CONV_3D (the module docstring). Accumulates tap by tap, each tap a [.., C] @ [C, O]
    product: no im2col (a video clip's would hold taps times the input)."""
    x, w, bias = inputs[0], inputs[1], optional_input(inputs, 2)
    out, pads = geometry(node, x.shape[1:4], w.shape[:3])
    steps, rates = strides(node), dilations(node)
    ends = [pad + (o - 1) * s + (k - 1) * r + 1 - size  # padding after, so every tap is in range
            for pad, o, s, k, r, size in zip(pads, out, steps, w.shape[:3], rates, x.shape[1:4])]
    padded = np.pad(x, [(0, 0)] + [(p, max(e, 0)) for p, e in zip(pads, ends)] + [(0, 0)])
    acc = np.zeros((x.shape[0], *out, w.shape[4]), np.float32)
    for tap, where in _taps(w.shape[:3], rates, steps, out):
        acc += padded[(slice(None), *where)] @ w[tap]
    return [_finish(node, acc, bias)]


def conv_3d_transpose(node, inputs):
    """CONV_3D_TRANSPOSE (the module docstring): tap by tap, x @ the tap's [C, O] scattered into
    an output padded to hold every position, then the output's window of it."""
    out_shape, w, x, bias = [int(v) for v in inputs[0]], inputs[1], inputs[2], optional_input(inputs, 3)
    reason = _transpose_shape_reason(node, out_shape)  # an output_shape computed at run time
    if reason:
        raise node_error(node, reason)
    _, pads = geometry(node, out_shape[1:4], w.shape[:3])
    steps, rates = strides(node), dilations(node)
    spans = [(i - 1) * s + (k - 1) * r + 1 for i, s, k, r in zip(x.shape[1:4], steps, w.shape[:3], rates)]
    full = np.zeros((x.shape[0], *[max(span, p + o) for span, p, o in zip(spans, pads, out_shape[1:4])],
                     w.shape[3]), np.float32)
    for tap, where in _taps(w.shape[:3], rates, steps, x.shape[1:4]):
        full[(slice(None), *where)] += x @ w[tap].T
    window = tuple(slice(p, p + o) for p, o in zip(pads, out_shape[1:4]))
    return [_finish(node, full[(slice(None), *window)], bias)]


def _finish(node, acc, bias):
    if bias is not None:
        acc = acc + bias
    return clamp_to_activation(acc.astype(np.float32, copy=False), fused_activation(node))


def _options_reason(node):
    if node.options.get("padding") not in (PADDING_SAME, PADDING_VALID):
        return f"padding {node.options.get('padding')} is not SAME or VALID"
    if min(strides(node)) < 1:
        return f"strides {list(strides(node))} (d, h, w) must be >= 1"
    if min(dilations(node)) < 1:
        return f"dilations {list(dilations(node))} (d, h, w) must be >= 1"
    return check_activation(node)


def _window_reason(node, in_dhw, kernel_dhw):
    """Why the window is hostile (far larger than its input) or fits nowhere, or None."""
    for size, k, d in zip(in_dhw, kernel_dhw, dilations(node)):
        if (k - 1) * d + 1 > 2 * size + MAX_WINDOW_OVERHANG:
            return (f"window extent {(k - 1) * d + 1} (kernel {k}, dilation {d}) is far larger than the "
                    f"input extent {size}")
    out, _ = geometry(node, in_dhw, kernel_dhw)
    return None if min(out) >= 1 else f"output size {'x'.join(map(str, out))}: the window does not fit the input"


def _ranks_reason(x, w):
    if len(x.shape) != 5 or len(w.shape) != 5:
        return f"input rank {len(x.shape)} and filter rank {len(w.shape)} must be 5"
    return None


def _support(node):
    x, w, bias = node.inputs[0], node.inputs[1], optional_input(node.inputs, 2)
    reason = _ranks_reason(x, w)
    if reason:
        return reason
    if x.shape[4] != w.shape[3]:
        return f"filter input channels {w.shape[3]} differ from the input's {x.shape[4]}"
    if bias is not None and bias.size != w.shape[4]:
        return f"bias has {bias.size} elements, the filter {w.shape[4]} output channels"
    return float32_reason(node) or _options_reason(node) or _window_reason(node, x.shape[1:4], w.shape[:3])


def transpose_output_shape(node):
    """The output shape (a tuple) of a CONV_3D_TRANSPOSE whose output_shape input is constant,
    else None."""
    shape = node.inputs[0]
    return tuple(int(v) for v in np.asarray(shape.data).reshape(-1)) if shape.is_const else None


def _transpose_support(node):
    shape_t, w, x, bias = node.inputs[0], node.inputs[1], node.inputs[2], optional_input(node.inputs, 3)
    reason = _ranks_reason(x, w)
    if reason:
        return reason
    if shape_t.dtype != np.int32 or shape_t.shape != (5,):
        return f"output_shape must be 5 int32 values, got {shape_t.dtype} {list(shape_t.shape)}"
    if x.shape[4] != w.shape[4]:
        return f"filter input channels {w.shape[4]} differ from the input's {x.shape[4]}"
    if bias is not None and bias.size != w.shape[3]:
        return f"bias has {bias.size} elements, the filter {w.shape[3]} output channels"
    values = dataclasses.replace(node, inputs=node.inputs[1:])  # all float32 but output_shape
    reason = float32_reason(values) or _options_reason(node)
    out = transpose_output_shape(node)
    if reason or out is None:
        return reason
    return _transpose_shape_reason(node, out)


def _transpose_shape_reason(node, out):
    """Why output shape `out` does not fit the node (TFLite's ResizeOutputAndTemporaryTensors), or
    None: the input's batch, the filter's output channels (TFLite accepts a multiple of them but
    then indexes the filter past its end: LiteRT's to run), and the input's extents as the
    forward convolution's output."""
    w, x = node.inputs[1], node.inputs[2]
    if min(out) < 1 or out[0] != x.shape[0]:
        return f"output_shape {list(out)} does not keep the input's batch {x.shape[0]}"
    if out[4] != w.shape[3]:
        return Unimplemented(f"output_shape {list(out)} has {out[4]} channels, the filter {w.shape[3]}")
    reason = _window_reason(node, out[1:4], w.shape[:3])
    forward, _ = geometry(node, out[1:4], w.shape[:3])
    if reason is None and forward != tuple(x.shape[1:4]):
        reason = (f"output_shape {list(out)}: its convolution would give extents {list(forward)}, not the "
                  f"input's {list(x.shape[1:4])}")
    return reason


def _output_shape(node, shapes, values):
    x, w = shapes[0], shapes[1]
    out, _ = geometry(node, x[1:4], w[:3])
    return [(x[0], *out, w[4])]


def _transpose_shape(node, shapes, values):
    return None if values[0] is None else [tuple(int(v) for v in np.asarray(values[0]).reshape(-1))]


KERNELS = {"CONV_3D": conv_3d, "CONV_3D_TRANSPOSE": conv_3d_transpose}
SUPPORT = {"CONV_3D": with_arity(2, 1, _support), "CONV_3D_TRANSPOSE": with_arity(3, 1, _transpose_support)}
OUTPUT_SHAPES = {"CONV_3D": _output_shape, "CONV_3D_TRANSPOSE": _transpose_shape}
