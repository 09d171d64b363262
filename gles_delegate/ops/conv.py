"""Convolutions: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED and MediaPipe's
custom Convolution2DTransposeBias. Float32, int8 (per-tensor or per-channel weights) and uint8.

Every kernel takes the three steps TFLite's kernels take:
  1. centre the operands: float values as they are; quantized values minus their zero point,
     held as float64 so that BLAS sums the integer products exactly (|product| <= 255 * 255, so
     any sum of fewer than 2^37 of them is an exact float64 integer);
  2. accumulate over the kernel taps (float32 for float models, exact integers otherwise);
  3. the output stage: add the bias, then the fused activation's clamp (float: to the type's
     finite range too, so +-inf become +-FLT_MAX) or TFLite's fixed-point requantization and
     activation clamp (quantized).
"""
import struct

import numpy as np

from ..errors import ModelError
from .checks import (Unimplemented, check_activation, check_output_size, check_window_options, node_error,
                     with_arity)
from .common import (PADDING_SAME, PADDING_VALID, clamp_to_activation, dilations_of, fused_activation,
                     is_quantized, multiply_by_quantized_multiplier, multiply_rounding_once, quant_params,
                     quantized_activation_range, quantized_multiplier, spatial_geometry, strides_of, window_taps,
                     zero_point_of)

_DTYPES = (np.dtype(np.float32), np.dtype(np.int8), np.dtype(np.uint8))
# TfLitePadding, the C enum MediaPipe's custom options hold (not the schema's Padding).
_C_PADDING = {1: PADDING_SAME, 2: PADDING_VALID}


# -- operands and the output stage --------------------------------------------------------
def _centered(tensor, values):
    """Float values unchanged; quantized integers minus their zero points, as exact float64."""
    if not is_quantized(tensor):
        return values
    _, zero_points = quant_params(tensor, values.ndim)
    return values.astype(np.float64) - zero_points


def optional_input(inputs, index):
    """An optional input of a list of inputs (values or tensors): absent (a shorter list) and
    omitted (None) read the same."""
    return inputs[index] if len(inputs) > index else None


def _output_stage(node, acc, bias, input_t, filter_t):
    """acc [..., C_out] (float32, or exact integers as float64) -> the output array."""
    output_t = node.outputs[0]
    if not is_quantized(output_t):
        if bias is not None:
            acc = acc + bias
        return clamp_to_activation(acc.astype(np.float32, copy=False), fused_activation(node))
    acc = acc.astype(np.int64)
    if bias is not None:
        acc += bias.astype(np.int64)
    multipliers, shifts = _output_multipliers(node, input_t, filter_t, output_t)
    rescale = multiply_rounding_once if node.op == "FULLY_CONNECTED" else multiply_by_quantized_multiplier
    out = rescale(acc, multipliers, shifts) + zero_point_of(output_t)
    qmin, qmax = quantized_activation_range(fused_activation(node), output_t)
    return np.clip(out, qmin, qmax).astype(output_t.dtype)


def _output_multipliers(node, input_t, filter_t, output_t):
    """Per output channel (Q31 multiplier, shift) of input_scale * filter_scale / output_scale."""
    input_scale = np.float32(input_t.quantization.scales[0])
    filter_scales = filter_t.quantization.scales.astype(np.float32)
    per_tensor_fc = node.op == "FULLY_CONNECTED" and filter_scales.size == 1
    if filter_t.dtype == np.uint8 or per_tensor_fc:
        # GetQuantizedConvolutionMultipler (uint8 everywhere, per-tensor FC) multiplies the two
        # scales in float32 before widening.
        products = (input_scale * filter_scales).astype(np.float64)
    else:
        # PopulateConvolutionQuantizationParams (int8 conv / depthwise / transpose conv,
        # per-channel FC) multiplies them in double.
        products = np.float64(input_scale) * filter_scales.astype(np.float64)
    reals = products / np.float64(np.float32(output_t.quantization.scales[0]))
    pairs = np.array([quantized_multiplier(r) for r in reals], np.int64)
    return pairs[:, 0], pairs[:, 1]


# -- kernels ------------------------------------------------------------------------------
def _forward_windows(node, xc, kernel_hw):
    """((OH, OW), the window taps) of a CONV_2D / DEPTHWISE_CONV_2D node over its centred input."""
    strides, dilations = strides_of(node), dilations_of(node)
    oh, ow, pad_top, pad_left = spatial_geometry(xc.shape[1:3], kernel_hw, strides, dilations, node.options["padding"])
    return (oh, ow), window_taps(xc, kernel_hw, strides, dilations, (oh, ow), (pad_top, pad_left))


def conv_2d_accumulators(node, xc, wc):
    """CONV_2D's accumulators [N, OH, OW, O] from centred operands (step 2 above; ops/hybrid.py
    shares it): xc [N, H, W, C], wc [O, KH, KW, C / G]. The padding reads as 0 (the zero point).
    G = C / (the filter's input channels) groups: output channel o reads input channels
    (o // (O / G)) * C / G onwards, as TFLite's grouped convolution."""
    (oh, ow), taps = _forward_windows(node, xc, wc.shape[1:3])
    groups = xc.shape[3] // wc.shape[3]
    # im2col per group: tap-major, channel-minor columns, the order of the filter's [KH, KW, C / G].
    columns = np.stack([view for _, _, view in taps], axis=3)  # [N, OH, OW, taps, C]
    columns = columns.reshape(-1, wc.shape[1] * wc.shape[2], groups, wc.shape[3])
    filters = wc.reshape(groups, wc.shape[0] // groups, -1)
    acc = [columns[:, :, g, :].reshape(columns.shape[0], -1) @ filters[g].T for g in range(groups)]
    return np.concatenate(acc, axis=1).reshape(xc.shape[0], oh, ow, -1)


def conv_2d(node, inputs):
    """CONV_2D: input [N, H, W, C], filter [O, KH, KW, C / G], bias [O] -> [N, OH, OW, O] (G groups:
    conv_2d_accumulators)."""
    x, w, bias = inputs[0], inputs[1], optional_input(inputs, 2)
    acc = conv_2d_accumulators(node, _centered(node.inputs[0], x), _centered(node.inputs[1], w))
    return [_output_stage(node, acc, bias, node.inputs[0], node.inputs[1])]


def depthwise_accumulators(node, xc, wc):
    """DEPTHWISE_CONV_2D's accumulators [N, OH, OW, C*M] from centred operands (ops/hybrid.py
    shares it): xc [N, H, W, C], wc [1, KH, KW, C*M]; output channel c*M + m reads input channel c."""
    (oh, ow), taps = _forward_windows(node, xc, wc.shape[1:3])
    n, c = xc.shape[0], xc.shape[3]
    taps_weights = wc[0].reshape(wc.shape[1], wc.shape[2], c, -1)
    acc = np.zeros((n, oh, ow, c, taps_weights.shape[3]), np.result_type(xc, wc))
    for ky, kx, view in taps:
        acc += view[..., None] * taps_weights[ky, kx]
    return acc.reshape(n, oh, ow, -1)


def depthwise_conv_2d(node, inputs):
    """DEPTHWISE_CONV_2D: input [N, H, W, C], filter [1, KH, KW, C*M], bias [C*M] ->
    [N, OH, OW, C*M], output channel c*M + m from input channel c. M comes from the shapes:
    TFLite ignores the depth_multiplier option."""
    x, w, bias = inputs[0], inputs[1], optional_input(inputs, 2)
    acc = depthwise_accumulators(node, _centered(node.inputs[0], x), _centered(node.inputs[1], w))
    return [_output_stage(node, acc, bias, node.inputs[0], node.inputs[1])]


def _transposed(xc, wc, strides, out_hw, pads):
    """The transposed convolution's accumulators: every input pixel scatters x @ w[:, ky, kx].T
    to output (iy * stride + ky - pad_top, ix * stride + kx - pad_left).
    xc [N, H, W, C], wc [O, KH, KW, C] -> [N, OH, OW, O]."""
    (n, h, w, _), (o, kh, kw, _) = xc.shape, wc.shape
    (sh, sw), (oh, ow), (pad_top, pad_left) = strides, out_hw, pads
    # Scatter into an unpadded canvas large enough for every tap and for the output window.
    canvas = np.zeros((n, max((h - 1) * sh + kh, pad_top + oh), max((w - 1) * sw + kw, pad_left + ow), o),
                      xc.dtype)
    pixels = xc.reshape(-1, xc.shape[3])
    for ky in range(kh):
        for kx in range(kw):
            canvas[:, ky:ky + (h - 1) * sh + 1:sh, kx:kx + (w - 1) * sw + 1:sw, :] += \
                (pixels @ wc[:, ky, kx, :].T).reshape(n, h, w, o)
    return canvas[:, pad_top:pad_top + oh, pad_left:pad_left + ow, :]


def transpose_conv_output_shape(node, output_shape):
    """TRANSPOSE_CONV's output shape (a tuple) from its output_shape operand; raises ModelError
    naming the node unless it has the input's batch, the filter's output channels, and H, W that
    the forward convolution maps back onto the input's (TFLite checks the same)."""
    shape = tuple(int(d) for d in np.asarray(output_shape).reshape(-1))
    x_t, w_t = node.inputs[2], node.inputs[1]
    fits = len(shape) == 4 and min(shape) >= 1 and shape[0] == x_t.shape[0] and shape[3] == w_t.shape[0]
    if fits:
        forward = spatial_geometry(shape[1:3], w_t.shape[1:3], strides_of(node), (1, 1), node.options["padding"])
        fits = tuple(forward[:2]) == tuple(x_t.shape[1:3])
    if not fits:
        raise node_error(node, f"output_shape {list(shape)} does not fit input {list(x_t.shape)} and filter "
                               f"{list(w_t.shape)}")
    return shape


def transpose_conv(node, inputs):
    """TRANSPOSE_CONV: output_shape [4] int32, filter [O, KH, KW, C], input [N, H, W, C], optional
    bias [O] -> output_shape. The padding is that of the forward convolution the op inverts: the
    one from an output_shape-sized image (TFLite's ComputePaddingHeightWidth)."""
    output_shape, w, x, bias = inputs[0], inputs[1], inputs[2], optional_input(inputs, 3)
    _, oh, ow, _ = transpose_conv_output_shape(node, output_shape)
    strides = strides_of(node)
    _, _, pad_top, pad_left = spatial_geometry((oh, ow), w.shape[1:3], strides, (1, 1), node.options["padding"])
    acc = _transposed(_centered(node.inputs[2], x), _centered(node.inputs[1], w), strides, (oh, ow),
                      (pad_top, pad_left))
    return [_output_stage(node, acc, bias, node.inputs[2], node.inputs[1])]


def mediapipe_options(node):
    """(padding, (stride_h, stride_w)) of a Convolution2DTransposeBias node; padding is the
    schema's PADDING_SAME / PADDING_VALID, or None when the options do not hold one."""
    data = node.custom_options or b""
    if len(data) < 12:
        return None, (0, 0)
    c_padding, stride_w, stride_h = struct.unpack_from("<3i", data)
    return _C_PADDING.get(c_padding), (stride_h, stride_w)


def mediapipe_geometry(in_hw, kernel_hw, strides, padding):
    """((OH, OW), (pad_top, pad_left)) of a Convolution2DTransposeBias node. MediaPipe derives
    the output size from the input: SAME trims total = max(0, K - (in - 1) % stride - 1) from the
    full (in - 1) * stride + K, total // 2 of it before. Strides must be >= 1."""
    out_hw, pads = [], []
    for size, k, s in zip(in_hw, kernel_hw, strides):
        total = max(0, k - (size - 1) % s - 1) if padding == PADDING_SAME else 0
        out_hw.append((size - 1) * s + k - total)
        pads.append(total // 2)
    return tuple(out_hw), tuple(pads)


def transpose_conv_bias(node, inputs):
    """MediaPipe's Convolution2DTransposeBias: input [N, H, W, C], filter [O, KH, KW, C],
    bias [O] -> [N, OH, OW, O] (mediapipe_geometry). Custom options are int32 [padding, stride_w,
    stride_h] (TfLitePadding: 1 SAME, 2 VALID)."""
    x, w, bias = inputs
    padding, strides = mediapipe_options(node)
    out_hw, pads = mediapipe_geometry(x.shape[1:3], w.shape[1:3], strides, padding)
    acc = _transposed(x, w, strides, out_hw, pads)
    return [(acc + bias).astype(np.float32)]


def fully_connected(node, inputs):
    """FULLY_CONNECTED: input [..., K] read as [size / K, K] rows, weights [U, K], bias [U] ->
    [size / K, U], or input.shape[:-1] + [U] with keep_num_dims."""
    x, w, bias = inputs[0], inputs[1], optional_input(inputs, 2)
    xc, wc = _centered(node.inputs[0], x), _centered(node.inputs[1], w)
    acc = xc.reshape(-1, w.shape[1]) @ wc.T
    out = _output_stage(node, acc, bias, node.inputs[0], node.inputs[1])
    if node.options.get("keep_num_dims", False):
        out = out.reshape(x.shape[:-1] + (w.shape[0],))
    return [out]


KERNELS = {"CONV_2D": conv_2d, "DEPTHWISE_CONV_2D": depthwise_conv_2d, "TRANSPOSE_CONV": transpose_conv,
           "FULLY_CONNECTED": fully_connected, "Convolution2DTransposeBias": transpose_conv_bias}


# -- support checks -----------------------------------------------------------------------
def _check_dtypes(node, input_t, filter_t, bias_t):
    """Why the operand types / quantization are unsupported, or None."""
    output_t = node.outputs[0]
    dtype = input_t.dtype
    if dtype not in _DTYPES:
        return Unimplemented(f"input type {dtype} (supported: float32, int8, uint8)")
    if filter_t.dtype != dtype or output_t.dtype != dtype:
        # Hybrid nodes (float32 input and output, int8 filter) are ops/hybrid.py's: this check
        # stays strict because the GPU kernels reuse it and run float32 weights only.
        return Unimplemented(f"input {dtype}, filter {filter_t.dtype}, output {output_t.dtype}: all must match "
                             "(hybrid kernels are ops/hybrid.py's; 16x8 kernels are not supported)")
    bias_dtype = np.float32 if dtype == np.float32 else np.int32
    if bias_t is not None and bias_t.dtype != bias_dtype:
        return f"bias type {bias_t.dtype}, expected {np.dtype(bias_dtype)}"
    if dtype == np.float32:
        return None
    for role, tensor in (("input", input_t), ("filter", filter_t), ("output", output_t)):
        if tensor.quantization is None or tensor.quantization.scales.size == 0:
            return f"{role} tensor {tensor.index} is {dtype} but has no quantization"
    for role, tensor in (("input", input_t), ("output", output_t)):
        if tensor.quantization.scales.size != 1:
            return f"{role} tensor {tensor.index} must be quantized per tensor"
    return None


def check_filter_quantization(filter_t, channel_axis):
    """Per-channel weights: int8 only, along the output-channel axis; int8 weights symmetric
    (ops/hybrid.py checks hybrid filters with it too)."""
    q = filter_t.quantization
    if q is None or q.scales.size == 1:
        return _check_symmetric(filter_t)
    if filter_t.dtype != np.int8:
        return f"per-channel quantization of {filter_t.dtype} weights (TFLite allows it for int8 only)"
    if q.quantized_dimension != channel_axis or q.scales.size != filter_t.shape[channel_axis]:
        return (f"filter quantized along dimension {q.quantized_dimension} with {q.scales.size} scales; "
                f"expected {filter_t.shape[channel_axis]} along dimension {channel_axis}")
    return _check_symmetric(filter_t)


def _check_symmetric(filter_t):
    # TFLite's int8 kernels take weights as symmetric and never read their zero point.
    q = filter_t.quantization
    if filter_t.dtype == np.int8 and q is not None and np.any(q.zero_points != 0):
        return "int8 filter with a nonzero zero point (TFLite's int8 kernels assume 0)"
    return None


def _check_operands(node, input_t, filter_t, bias_t, out_channels, channel_axis):
    """The checks every convolution shares: types, quantization and the bias length."""
    if filter_t.sparsity is not None:
        return "sparse weights (densify them first)"
    if bias_t is not None and tuple(bias_t.shape) != (out_channels,):
        return f"bias shape {list(bias_t.shape)}, expected [{out_channels}]"
    reason = _check_dtypes(node, input_t, filter_t, bias_t)
    if reason is None and input_t.dtype != np.float32:
        reason = check_filter_quantization(filter_t, channel_axis)
    return reason


def _first(*checks):
    """The first reason among lazily evaluated checks (callables), or None."""
    for check in checks:
        reason = check()
        if reason is not None:
            return reason
    return None


def _check_ranks(*roles_tensors_ranks):
    for role, tensor, rank in roles_tensors_ranks:
        if len(tensor.shape) != rank:
            return f"{role} has rank {len(tensor.shape)}, expected {rank}"
    return None


def _check_in_channels(x_t, w_t):
    """A [O, KH, KW, I] filter must read all of the input's channels (no grouped convolution)."""
    if w_t.shape[3] != x_t.shape[3]:
        return f"filter has {w_t.shape[3]} input channels, input has {x_t.shape[3]} (no grouped convolution)"
    return None


def _check_groups(x_t, w_t):
    """CONV_2D's [O, KH, KW, I] filter reads I of the input's C channels: G = C / I groups of
    O / G output channels each (TFLite requires C % I == 0; O % G == 0 keeps every group whole)."""
    c, i, o = x_t.shape[3], w_t.shape[3], w_t.shape[0]
    if i < 1 or c < i or c % i:
        return f"filter has {i} input channels, input has {c} (not a whole number of groups)"
    if o % (c // i):
        return f"{o} output channels do not split into {c // i} groups"
    return None


def support_conv_2d(node, operands=_check_operands):
    """Why CONV_2D cannot run this node, or None. `operands` checks the types and quantization
    (ops/hybrid.py passes its own: the shape and option checks are the same)."""
    x_t, w_t, b_t = node.inputs[0], node.inputs[1], optional_input(node.inputs, 2)
    return _first(
        lambda: _check_ranks(("input", x_t, 4), ("filter", w_t, 4)),
        lambda: _check_groups(x_t, w_t),
        lambda: check_window_options(node, with_dilation=True),
        lambda: check_output_size(node, x_t.shape[1:3], w_t.shape[1:3], strides_of(node), dilations_of(node)),
        lambda: operands(node, x_t, w_t, b_t, w_t.shape[0], 0))


def support_depthwise_conv_2d(node, operands=_check_operands):
    """Why DEPTHWISE_CONV_2D cannot run this node, or None (`operands`: see support_conv_2d)."""
    x_t, w_t, b_t = node.inputs[0], node.inputs[1], optional_input(node.inputs, 2)
    return _first(
        lambda: _check_ranks(("input", x_t, 4), ("filter", w_t, 4)),
        lambda: None if w_t.shape[0] == 1 and x_t.shape[3] > 0 and w_t.shape[3] % x_t.shape[3] == 0 else
        f"filter shape {list(w_t.shape)} is not [1, KH, KW, {x_t.shape[3]} * multiplier]",
        lambda: check_window_options(node, with_dilation=True),
        lambda: check_output_size(node, x_t.shape[1:3], w_t.shape[1:3], strides_of(node), dilations_of(node)),
        lambda: operands(node, x_t, w_t, b_t, w_t.shape[3], 3))


def _check_output_shape_operand(node):
    shape_t = node.inputs[0]
    if shape_t.dtype != np.int32:
        return f"output_shape is {shape_t.dtype}, expected int32"
    if shape_t.is_const:
        try:
            transpose_conv_output_shape(node, shape_t.data)
        except ModelError as exc:
            return str(exc)
    return None


def support_transpose_conv(node):
    w_t, x_t, b_t = node.inputs[1], node.inputs[2], optional_input(node.inputs, 3)
    return _first(
        lambda: _check_ranks(("input", x_t, 4), ("filter", w_t, 4), ("output_shape", node.inputs[0], 1)),
        lambda: _check_in_channels(x_t, w_t),
        lambda: check_window_options(node, with_dilation=False),
        lambda: _check_output_shape_operand(node),
        lambda: _check_operands(node, x_t, w_t, b_t, w_t.shape[0], 0))


def support_transpose_conv_bias(node):
    x_t, w_t, b_t = node.inputs
    padding, strides = mediapipe_options(node)
    return _first(
        lambda: _check_ranks(("input", x_t, 4), ("filter", w_t, 4)),
        lambda: None if padding is not None and min(strides) >= 1 else
        "custom options are not int32 [padding (1 SAME, 2 VALID), stride_w >= 1, stride_h >= 1]",
        lambda: _check_in_channels(x_t, w_t),
        lambda: None if x_t.dtype == w_t.dtype == b_t.dtype == node.outputs[0].dtype == np.float32 else
        "only float32 is supported (as in MediaPipe)",
        lambda: None if tuple(b_t.shape) == (w_t.shape[0],) else
        f"bias shape {list(b_t.shape)}, expected [{w_t.shape[0]}]")


def support_fully_connected(node, operands=_check_operands):
    """Why FULLY_CONNECTED cannot run this node, or None (`operands`: see support_conv_2d)."""
    x_t, w_t, b_t = node.inputs[0], node.inputs[1], optional_input(node.inputs, 2)
    keep_num_dims = node.options.get("keep_num_dims", False)
    return _first(
        lambda: _check_ranks(("weights", w_t, 2)),
        lambda: None if node.options.get("weights_format", 0) == 0 else
        Unimplemented(f"weights_format {node.options['weights_format']} (only DEFAULT)"),
        lambda: None if len(x_t.shape) >= 1 and w_t.shape[1] > 0 and x_t.size % w_t.shape[1] == 0 else
        f"input shape {list(x_t.shape)} does not split into rows of {w_t.shape[1]}",
        lambda: None if not keep_num_dims or x_t.shape[-1] == w_t.shape[1] else
        f"keep_num_dims needs the input's last dimension ({x_t.shape[-1]}) to equal {w_t.shape[1]}",
        lambda: check_activation(node),
        lambda: operands(node, x_t, w_t, b_t, w_t.shape[0], 0))


SUPPORT = {"CONV_2D": with_arity(2, 1, support_conv_2d),
           "DEPTHWISE_CONV_2D": with_arity(2, 1, support_depthwise_conv_2d),
           "TRANSPOSE_CONV": with_arity(3, 1, support_transpose_conv),
           "FULLY_CONNECTED": with_arity(2, 1, support_fully_connected),
           "Convolution2DTransposeBias": with_arity(3, 0, support_transpose_conv_bias)}


# -- output shapes (checked before a kernel allocates: see ops/__init__.py) -----------------------
def _conv_shape(channels_axis):
    def shape(node, shapes, values):
        (n, h, w, _), filter_shape = shapes[0], shapes[1]
        oh, ow, _, _ = spatial_geometry((h, w), filter_shape[1:3], strides_of(node), dilations_of(node),
                                        node.options["padding"])
        return [(n, oh, ow, filter_shape[channels_axis])]
    return shape


def _transpose_conv_shape(node, shapes, values):
    return None if values[0] is None else [transpose_conv_output_shape(node, values[0])]


def _transpose_conv_bias_shape(node, shapes, values):
    (n, h, w, _), (o, kh, kw, _) = shapes[0], shapes[1]
    padding, strides = mediapipe_options(node)
    if min(strides) < 1:
        return None
    (oh, ow), _ = mediapipe_geometry((h, w), (kh, kw), strides, padding)
    return [(n, oh, ow, o)]


def _fully_connected_shape(node, shapes, values):
    x, (units, depth) = shapes[0], shapes[1]
    if node.options.get("keep_num_dims", False):
        return [x[:-1] + (units,)]
    return [(int(np.prod(x, dtype=np.int64)) // depth, units)] if depth else None


OUTPUT_SHAPES = {"CONV_2D": _conv_shape(0), "DEPTHWISE_CONV_2D": _conv_shape(3),
                 "TRANSPOSE_CONV": _transpose_conv_shape, "Convolution2DTransposeBias": _transpose_conv_bias_shape,
                 "FULLY_CONNECTED": _fully_connected_shape}
