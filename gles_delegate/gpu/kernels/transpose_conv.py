"""TRANSPOSE_CONV (constant output_shape, weights [O, KH, KW, I], optional bias, SAME / VALID,
strides, fused clamp activation) and MediaPipe's custom Convolution2DTransposeBias (same
computation, options int32 [padding, stride_w, stride_h]): both run kernels_glsl/transpose_conv.glsl,
specialized by kernel size and output slices per invocation."""
from dataclasses import dataclass

import numpy as np

from ...ops import conv as reference
from ...ops.common import spatial_geometry
from ...registry import OpFacts
from . import epilogue
from .base import Dispatch
from .conv import blocking, gpu_support, optional_input, pack_bias, pack_weights


@dataclass
class Operands:
    """A transposed convolution, whichever op spells it: input [N, H, W, I], filter [O, KH, KW, I],
    bias [O] or None, strides (h, w), padding (PADDING_SAME / PADDING_VALID), output (OH, OW)."""
    x: object
    filt: object
    bias: object
    strides: tuple
    padding: int
    out_hw: tuple


def operands(node):
    """The Operands of a TRANSPOSE_CONV or Convolution2DTransposeBias node (SUPPORT passed)."""
    if node.op == "TRANSPOSE_CONV":
        shape = reference.transpose_conv_output_shape(node, node.inputs[0].data)
        return Operands(node.inputs[2], node.inputs[1], optional_input(node, 3), reference.strides_of(node),
                        node.options["padding"], shape[1:3])
    padding, strides = reference.mediapipe_options(node)
    x, filt, bias = node.inputs
    out_hw, _ = reference.mediapipe_geometry(x.shape[1:3], filt.shape[1:3], strides, padding)
    return Operands(x, filt, bias, strides, padding, out_hw)


def output_shape(node):
    """[N, OH, OW, O] of a TRANSPOSE_CONV or Convolution2DTransposeBias node (see operands)."""
    op = operands(node)
    return (op.x.shape[0],) + tuple(op.out_hw) + (op.filt.shape[0],)


def build(node, env):
    """One transpose_conv.glsl Dispatch over the output [N, OH, OW, O]: a grid of (OW, OH,
    batch x groups of OUT_SLICES output slices) invocations."""
    op, out = operands(node), node.outputs[0]
    in4, out4 = env.shape4(op.x), env.shape4(out)
    kh, kw = op.filt.shape[1:3]
    (sh, sw) = op.strides
    # The padding of the forward convolution this op inverts: the one from an output-sized image
    # (TFLite's ComputePaddingHeightWidth; it equals MediaPipe's total // 2).
    _, _, pad_top, pad_left = spatial_geometry(op.out_hw, (kh, kw), op.strides, (1, 1), op.padding)
    out_slices, _ = blocking(out4.slices, out4.w, out4.h * out4.b, pixel_choices=(1,))
    defines = {"KH": kh, "KW": kw, "OUT_SLICES": out_slices, **env.output_stage(node)}
    params = {"in_size": in4.as_ivec4(), "out_size": out4.as_ivec4(), "out_channels": out4.c,
              "in_offset": env.arena(op.x), "out_offset": env.arena(out),
              "weights_offset": env.constant(pack_weights(np.asarray(op.filt.data, np.float32), out_slices)),
              "bias_offset": env.constant(pack_bias(None if op.bias is None else op.bias.data, out4.c)),
              "stride": (sw, sh), "pad": (pad_left, pad_top)}
    grid = (out4.w, out4.h, out4.b * -(-out4.slices // out_slices))
    reads, inplace = epilogue.apply(node, env, out, defines, params, (op.x,))
    return [Dispatch("transpose_conv", grid, defines, params, reads=reads, writes=(out,), inplace=inplace)]


SUPPORT = {"TRANSPOSE_CONV": gpu_support("TRANSPOSE_CONV", 2, {0: "output_shape", 1: "filter", 3: "bias"},
                                         output_shape),
           "Convolution2DTransposeBias": gpu_support("Convolution2DTransposeBias", 0, {1: "filter", 2: "bias"},
                                                     output_shape)}
BUILD = {"TRANSPOSE_CONV": build, "Convolution2DTransposeBias": build}
EPILOGUE = {"TRANSPOSE_CONV": None, "Convolution2DTransposeBias": None}
FACTS = {"TRANSPOSE_CONV": OpFacts(arity=((3, 4), (3,), 1), fused_activation=True),  # bias optional
         "Convolution2DTransposeBias": OpFacts(arity=((3,), (), 1))}
